//! The primary's `.status` as a merge patch: the plugin's status fields,
//! `observedGeneration` and the `Ready` / `Progressing` / `Degraded`
//! conditions, or nothing when the object already shows exactly that.

use kube::api::DynamicObject;
use serde_json::{Map, Value, json};

use crate::contract::Condition;

/// The merge patch body for `.status` and whether it changes anything.
///
/// `desired_status` (the plugin's fields) is merged into the current status;
/// `conditions` are merged by type: `lastTransitionTime` is kept when a
/// condition's status is unchanged and set to `now` otherwise. Returns `None`
/// when the object already has exactly this status.
pub fn build_status(
    current: &DynamicObject,
    desired_status: Option<&Value>,
    conditions: &[Condition],
    now: &str,
) -> Option<Value> {
    let current_status = current
        .data
        .get("status")
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let generation = current.metadata.generation;
    let mut patch = desired_status
        .cloned()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let body = patch.as_object_mut()?;
    without_host_fields(body);
    if let Some(g) = generation {
        body.insert("observedGeneration".into(), json!(g));
    }
    let mut merged: Vec<Value> = current_status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in conditions {
        let existing = merged
            .iter()
            .position(|e| e.get("type").and_then(Value::as_str) == Some(c.kind.as_str()));
        let transition = existing
            .and_then(|i| merged.get(i))
            .filter(|e| e.get("status").and_then(Value::as_str) == Some(c.status.as_str()))
            .and_then(|e| e.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| Value::String(now.to_string()));
        let mut cond = Map::new();
        cond.insert("type".into(), json!(c.kind));
        cond.insert("status".into(), json!(c.status));
        cond.insert("reason".into(), json!(c.reason));
        cond.insert("message".into(), json!(c.message));
        cond.insert("lastTransitionTime".into(), transition);
        if let Some(g) = generation {
            cond.insert("observedGeneration".into(), json!(g));
        }
        match existing {
            Some(i) => merged[i] = Value::Object(cond),
            None => merged.push(Value::Object(cond)),
        }
    }
    body.insert("conditions".into(), Value::Array(merged));
    let mut after = current_status.clone();
    json_patch::merge(&mut after, &patch);
    (after != current_status).then_some(patch)
}

/// The fields of `.status` the host owns: `conditions` (the host merges
/// the answer's conditions by type) and `observedGeneration`.
pub const HOST_STATUS_FIELDS: [&str; 2] = ["conditions", "observedGeneration"];

/// Removes the [`HOST_STATUS_FIELDS`] from a status a plugin returned
/// (`reconcile`'s fields or `upgrade`'s object), and returns the ones it
/// had set.
///
/// # Guarantees
///
/// A plugin can fake neither `observedGeneration` (which says the object's
/// spec was seen) nor the conditions through any answer.
pub fn without_host_fields(status: &mut Map<String, Value>) -> Vec<&'static str> {
    HOST_STATUS_FIELDS
        .into_iter()
        .filter(|field| status.remove(*field).is_some())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a", "namespace": "default", "generation": 3},
            "status": status,
        }))
        .unwrap()
    }

    fn cond(kind: &str, status: &str) -> Condition {
        Condition {
            kind: kind.into(),
            status: status.into(),
            reason: "Because".into(),
            message: "m".into(),
        }
    }

    #[test]
    fn sets_observed_generation_and_conditions() {
        let obj = object(json!({}));
        let patch = build_status(
            &obj,
            Some(&json!({"phase": "Running"})),
            &[cond("Ready", "True")],
            "T1",
        )
        .unwrap();
        assert_eq!(patch["observedGeneration"], 3);
        assert_eq!(patch["phase"], "Running");
        assert_eq!(patch["conditions"][0]["lastTransitionTime"], "T1");
        assert_eq!(patch["conditions"][0]["observedGeneration"], 3);
    }

    #[test]
    fn unchanged_status_writes_nothing() {
        let obj = object(json!({
            "phase": "Running", "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Because", "message": "m",
                            "lastTransitionTime": "T0", "observedGeneration": 3}],
        }));
        assert_eq!(
            build_status(
                &obj,
                Some(&json!({"phase": "Running"})),
                &[cond("Ready", "True")],
                "T1"
            ),
            None
        );
    }

    #[test]
    fn transition_time_changes_only_with_status() {
        let obj = object(json!({
            "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Because", "message": "old",
                            "lastTransitionTime": "T0", "observedGeneration": 3}],
        }));
        let same = build_status(&obj, None, &[cond("Ready", "True")], "T1").unwrap();
        assert_eq!(same["conditions"][0]["lastTransitionTime"], "T0");
        let flipped = build_status(&obj, None, &[cond("Ready", "False")], "T1").unwrap();
        assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "T1");
    }
}
