//! Version conversion of custom resources: objects are stored at the CRD's storage
//! version and converted on read and write (strategy None rewrites apiVersion;
//! strategy Webhook calls the conversion webhook).

use serde_json::{Value, json};

use super::Shared;
use crate::registry::ResourceType;
use crate::status::ApiError;

/// Converts `objects` to `version` of the resource `rt` (a no-op for built-ins).
pub(super) async fn to_version(
    shared: &Shared,
    rt: &ResourceType,
    objects: Vec<Value>,
    version: &str,
) -> Result<Vec<Value>, ApiError> {
    let Some(crd) = &rt.crd else {
        return Ok(objects);
    };
    let target = format!("{}/{}", rt.group, version);
    if objects
        .iter()
        .all(|o| o["apiVersion"].as_str() == Some(target.as_str()))
    {
        return Ok(objects);
    }
    if crd.conversion["strategy"].as_str() == Some("Webhook") {
        let (same, other): (Vec<_>, Vec<_>) = objects
            .into_iter()
            .enumerate()
            .partition(|(_, o)| o["apiVersion"].as_str() == Some(target.as_str()));
        let idx: Vec<usize> = other.iter().map(|(i, _)| *i).collect();
        let converted = shared
            .webhooks
            .convert(
                &crd.conversion["webhook"],
                other.into_iter().map(|(_, o)| o).collect(),
                &target,
            )
            .await
            // The webhook error already names the kind and the webhook URL.
            .map_err(|e| ApiError::internal(e.to_string()))?;
        if converted.len() != idx.len() {
            return Err(ApiError::internal(format!(
                "conversion webhook for {} returned {} objects for {} requested",
                crd.crd_name,
                converted.len(),
                idx.len()
            )));
        }
        let mut all: Vec<(usize, Value)> = same;
        all.extend(idx.into_iter().zip(converted));
        all.sort_by_key(|(i, _)| *i);
        return Ok(all.into_iter().map(|(_, o)| o).collect());
    }
    Ok(objects
        .into_iter()
        .map(|mut o| {
            o["apiVersion"] = json!(target);
            o
        })
        .collect())
}

/// Converts one object.
pub(super) async fn one(
    shared: &Shared,
    rt: &ResourceType,
    obj: Value,
    version: &str,
) -> Result<Value, ApiError> {
    let mut v = to_version(shared, rt, vec![obj], version).await?;
    v.pop()
        .ok_or_else(|| ApiError::internal("conversion returned no object"))
}
