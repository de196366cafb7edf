//! Version conversion: custom resources are stored at the CRD's storage version
//! and converted on read and write (strategy None rewrites apiVersion; strategy
//! Webhook calls the conversion webhook); events.k8s.io/v1 Events are stored as
//! core v1 Events, with the field mapping kube-apiserver applies
//! (k8s.io/kubernetes pkg/apis/events/v1/conversion.go).

use serde_json::{Value, json};

use super::Shared;
use crate::registry::ResourceType;
use crate::status::ApiError;

/// Converts `objects` to `version` of the resource `rt` (a no-op for built-ins
/// stored in their own group).
pub(super) async fn to_version(
    shared: &Shared,
    rt: &ResourceType,
    objects: Vec<Value>,
    version: &str,
) -> Result<Vec<Value>, ApiError> {
    let Some(crd) = &rt.crd else {
        if !rt.stored_elsewhere() {
            return Ok(objects);
        }
        let target = api_version(&rt.group, version);
        return Ok(objects.into_iter().map(|o| event_as(o, &target)).collect());
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

/// Converts one object to the form it is stored in: the storage version of a
/// custom resource, core v1 for an events.k8s.io Event.
pub(super) async fn to_storage(
    shared: &Shared,
    rt: &ResourceType,
    obj: Value,
) -> Result<Value, ApiError> {
    if rt.stored_elsewhere() {
        return Ok(event_as(obj, &api_version(&rt.storage_group, &rt.version)));
    }
    one(shared, rt, obj, rt.storage_version()).await
}

/// `group/version`, or `version` for the core group.
fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Fields with one meaning and two names: (core v1 Event, events.k8s.io/v1 Event).
const EVENT_RENAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("count", "deprecatedCount"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("source", "deprecatedSource"),
    ("reportingComponent", "reportingController"),
];

/// An Event as `target` (`v1` or `events.k8s.io/v1`) presents it; the fields
/// both APIs share (reason, type, action, eventTime, series, related,
/// reportingInstance, metadata) are kept as they are.
fn event_as(mut obj: Value, target: &str) -> Value {
    let to_core = match target {
        "v1" => true,
        "events.k8s.io/v1" => false,
        _ => return obj,
    };
    if obj["apiVersion"].as_str() == Some(target) {
        return obj;
    }
    if let Some(fields) = obj.as_object_mut() {
        for (core, events) in EVENT_RENAMES {
            let (from, to) = if to_core {
                (events, core)
            } else {
                (core, events)
            };
            match fields.remove(from) {
                // Zero values are omitted, as Go's `omitempty` omits them.
                Some(v) if !is_zero(&v) => {
                    fields.insert(to.to_string(), v);
                }
                _ => {}
            }
        }
        if to_core && !fields.contains_key("involvedObject") {
            // A core Event always has an involvedObject (not a pointer in Go).
            fields.insert("involvedObject".into(), json!({}));
        }
        fields.insert("apiVersion".into(), json!(target));
        fields.insert("kind".into(), json!("Event"));
    }
    obj
}

/// Whether a field holds the zero value Go leaves out (`0`, `{}`, `null`, `""`).
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Object(o) => o.values().all(is_zero),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_reads_the_same_through_both_apis() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "apps"},
            "involvedObject": {"kind": "WebApp", "name": "web", "namespace": "apps", "uid": "u1", "apiVersion": "example.com/v1"},
            "reason": "Reconciled", "message": "3 replicas", "type": "Normal", "action": "Reconcile",
            "count": 2, "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:01:00Z",
            "source": {"component": "wasm-operator"},
            "reportingComponent": "wasm-operator", "reportingInstance": "host-0",
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
            "related": {"kind": "Deployment", "name": "web"},
        });
        let events = event_as(core.clone(), "events.k8s.io/v1");
        assert_eq!(
            events,
            json!({
                "apiVersion": "events.k8s.io/v1", "kind": "Event",
                "metadata": {"name": "web.1", "namespace": "apps"},
                "regarding": {"kind": "WebApp", "name": "web", "namespace": "apps", "uid": "u1", "apiVersion": "example.com/v1"},
                "reason": "Reconciled", "note": "3 replicas", "type": "Normal", "action": "Reconcile",
                "deprecatedCount": 2, "deprecatedFirstTimestamp": "2026-01-01T00:00:00Z",
                "deprecatedLastTimestamp": "2026-01-01T00:01:00Z",
                "deprecatedSource": {"component": "wasm-operator"},
                "reportingController": "wasm-operator", "reportingInstance": "host-0",
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "series": {"count": 2, "lastObservedTime": "2026-01-01T00:01:00.000000Z"},
                "related": {"kind": "Deployment", "name": "web"},
            })
        );
        assert_eq!(event_as(events, "v1"), core);
    }

    #[test]
    fn zero_values_are_omitted_and_a_core_event_always_has_an_involved_object() {
        let events = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "reason": "R", "deprecatedCount": 0, "deprecatedSource": {}, "note": ""});
        assert_eq!(
            event_as(events, "v1"),
            json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}, "reason": "R", "involvedObject": {}})
        );
        let other = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        assert_eq!(event_as(other.clone(), "apps/v2"), other);
    }
}
