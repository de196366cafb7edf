//! Admission: structural-schema admission of custom resources and the
//! mutating/validating webhook chain.

use serde_json::Value;

use super::Shared;
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::webhook::{AdmissionAttributes, WebhookError};

const MUTATING: &str = "admissionregistration.k8s.io/mutatingwebhookconfigurations";
const VALIDATING: &str = "admissionregistration.k8s.io/validatingwebhookconfigurations";

const CRDS: &str = "apiextensions.k8s.io/customresourcedefinitions";

/// Defaults, prunes and validates a custom resource against its version's
/// schema; a CustomResourceDefinition itself must carry structural schemas.
pub(super) fn schema(rt: &ResourceType, obj: &mut Value) -> Result<(), ApiError> {
    if let Some(field) = over_size_limit(&rt.key(), obj) {
        let name = obj["metadata"]["name"].as_str().unwrap_or_default();
        let message = format!("Too long: may not be more than {MAX_DATA_BYTES} bytes");
        return Err(ApiError::invalid(
            rt,
            name,
            &[("FieldValueTooLong".to_string(), field.to_string(), message)],
        ));
    }
    if rt.key() == CRDS {
        return crd_schemas_are_structural(rt, obj);
    }
    let Some(schema) = rt.crd.as_ref().and_then(|c| c.schema.as_ref()) else {
        return Ok(());
    };
    crate::schema::admit(schema, obj).map_err(|causes| {
        let name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let causes: Vec<(String, String, String)> = causes
            .into_iter()
            .map(|c| (c.reason, c.field, c.message))
            .collect();
        ApiError::invalid(rt, &name, &causes)
    })
}

/// kube-apiserver's limit on a ConfigMap's or Secret's data (`MaxConfigMapSize`,
/// `MaxSecretSize`: 1 MiB; etcd's request limit is not much larger).
pub const MAX_DATA_BYTES: usize = 1 << 20;

/// The field kube-apiserver names when the ConfigMap or Secret `obj` (of
/// resource `key`) holds more than [`MAX_DATA_BYTES`] of data, counted as it
/// counts: every key plus its value (`binaryData` values decoded from
/// base64); `None` when within the limit or another kind.
pub fn over_size_limit(key: &str, obj: &Value) -> Option<&'static str> {
    let (fields, reported): (&[&str], &'static str) = match key {
        "/configmaps" => (&["data", "binaryData"], "[]"),
        "/secrets" => (&["data", "stringData"], "data"),
        _ => return None,
    };
    let mut total = 0usize;
    for field in fields {
        let Some(map) = obj.get(*field).and_then(Value::as_object) else {
            continue;
        };
        for (k, v) in map {
            let text = v.as_str().unwrap_or_default();
            let binary = *field == "binaryData" || (key == "/secrets" && *field == "data");
            // base64 of n bytes is 4*ceil(n/3) characters, minus padding.
            let len = if binary {
                let pad = text.bytes().rev().take_while(|b| *b == b'=').count();
                (text.len() / 4) * 3 - pad.min(2)
            } else {
                text.len()
            };
            total += k.len() + len;
        }
    }
    (total > MAX_DATA_BYTES).then_some(reported)
}

/// Rejects a CRD whose versions' `openAPIV3Schema` is not structural, as
/// kube-apiserver does (422 with one cause per version).
fn crd_schemas_are_structural(rt: &ResourceType, crd: &Value) -> Result<(), ApiError> {
    let versions = crd["spec"]["versions"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let causes: Vec<(String, String, String)> = versions
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let schema = v.pointer("/schema/openAPIV3Schema")?;
            let problem = crate::schema::check_structural(schema).err()?;
            // `problem` starts with `openAPIV3Schema.…`, so the path reads as kube's.
            Some((
                "FieldValueInvalid".to_string(),
                String::new(),
                format!("spec.versions[{i}].schema.{problem}"),
            ))
        })
        .collect();
    if causes.is_empty() {
        return Ok(());
    }
    let name = crd["metadata"]["name"].as_str().unwrap_or_default();
    Err(ApiError::invalid(rt, name, &causes))
}

fn webhook_error(e: WebhookError) -> ApiError {
    match e {
        WebhookError::Denied {
            webhook,
            code,
            message,
        } => {
            let reason = match code {
                400 => "BadRequest",
                401 => "Unauthorized",
                404 => "NotFound",
                409 => "Conflict",
                422 => "Invalid",
                _ => "Forbidden",
            };
            ApiError::new(
                code,
                reason,
                format!("admission webhook \"{webhook}\" denied the request: {message}"),
            )
        }
        WebhookError::Failed { webhook, message } => ApiError::internal(format!(
            "Internal error occurred: failed calling webhook \"{webhook}\": {message}"
        )),
    }
}

/// What is being admitted.
pub(super) struct Admit<'a> {
    pub rt: &'a ResourceType,
    pub operation: &'a str,
    pub subresource: Option<&'a str>,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    pub old: Option<Value>,
    pub dry_run: bool,
}

/// Runs mutating then validating webhooks; returns the (possibly mutated) object.
pub(super) async fn webhooks(
    shared: &Shared,
    a: Admit<'_>,
    object: Option<Value>,
) -> Result<Option<Value>, ApiError> {
    let (mutating, validating, ns_labels) = {
        let st = shared.store.lock();
        let m: Vec<Value> = st
            .list(MUTATING, None)
            .into_iter()
            .map(|v| (*v).clone())
            .collect();
        let v: Vec<Value> = st
            .list(VALIDATING, None)
            .into_iter()
            .map(|v| (*v).clone())
            .collect();
        let labels = a
            .namespace
            .and_then(|ns| st.get("/namespaces", "", ns))
            .and_then(|n| n["metadata"]["labels"].as_object().cloned())
            .map(|m| {
                m.into_iter()
                    .filter_map(|(k, v)| v.as_str().map(|s| (k, s.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        (m, v, labels)
    };
    if mutating.is_empty() && validating.is_empty() {
        return Ok(object);
    }
    let mut attrs = AdmissionAttributes {
        group: a.rt.group.clone(),
        version: a.rt.version.clone(),
        kind: a.rt.kind.clone(),
        resource: a.rt.plural.clone(),
        sub_resource: a.subresource.unwrap_or_default().to_string(),
        operation: a.operation.to_string(),
        namespace: a.namespace.map(String::from),
        name: a.name.to_string(),
        object,
        old_object: a.old,
        dry_run: a.dry_run,
        namespace_labels: ns_labels,
    };
    if !mutating.is_empty() && a.operation != "DELETE" {
        attrs.object = shared
            .webhooks
            .mutate(&mutating, &attrs)
            .await
            .map_err(webhook_error)?;
    }
    if !validating.is_empty() {
        shared
            .webhooks
            .validate(&validating, &attrs)
            .await
            .map_err(webhook_error)?;
    }
    Ok(attrs.object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn configmaps_and_secrets_hold_at_most_one_mebibyte() {
        let big = "a".repeat(MAX_DATA_BYTES);
        let cm = json!({"data": {"k": big}});
        assert_eq!(over_size_limit("/configmaps", &cm), Some("[]"));
        let fits = json!({"data": {"k": "a".repeat(MAX_DATA_BYTES - 1)}});
        assert_eq!(over_size_limit("/configmaps", &fits), None);
        // binaryData counts decoded bytes: 4 base64 characters are 3 bytes.
        let b64 = "QUFB".repeat(MAX_DATA_BYTES / 3 + 1);
        assert_eq!(
            over_size_limit("/configmaps", &json!({"binaryData": {"k": b64}})),
            Some("[]")
        );
        let b64 = "QUFB".repeat(MAX_DATA_BYTES / 4);
        assert_eq!(
            over_size_limit("/configmaps", &json!({"binaryData": {"k": b64}})),
            None
        );
        assert_eq!(
            over_size_limit("/secrets", &json!({"stringData": {"k": big}})),
            Some("data")
        );
        assert_eq!(over_size_limit("apps/deployments", &cm), None);
    }
}
