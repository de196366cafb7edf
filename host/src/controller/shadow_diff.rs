//! Comparing two answers to one reconcile (the stable version's and a
//! shadow candidate's) after normalising them: pure, deterministic.
//!
//! Normal form:
//! - children keyed by `apiVersion/Kind/namespace/name` (a child without a
//!   namespace under a namespaced primary lives in the primary's), compared
//!   field by field; a child in one answer only is one entry;
//! - `status` field by field;
//! - conditions keyed by type, without timestamps (`lastTransitionTime`,
//!   `lastUpdateTime`, `lastHeartbeatTime` are dropped wherever they appear);
//! - events in order, requeue (`requeueAfterMs`).
//!
//! Paths look like `children[apps/v1/Deployment/team-a/web].spec.replicas`,
//! `status.phase`, `conditions[Ready].message`, `events[0].reason`; array
//! elements are `[i]`. The result is sorted by path.
//!
//! The signature of a diff ([`signature`]) is its set of paths with the
//! children's namespace and name abstracted away
//! (`children[apps/v1/Deployment].spec.replicas`), so objects that differ the
//! same way share one kind of difference.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::contract::Desired;
use crate::registry::FieldDiff;

/// Fields dropped before comparing: they change on every call.
const TIMESTAMPS: [&str; 3] = ["lastTransitionTime", "lastUpdateTime", "lastHeartbeatTime"];

/// The normalised answer: every comparable leaf under its path prefix.
fn normalise(answer: &Desired, primary_namespace: Option<&str>) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for child in &answer.children {
        let text = |pointer: &str| {
            child
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let namespace = child
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .or(primary_namespace)
            .unwrap_or_default();
        let key = format!(
            "children[{}/{}/{}/{}]",
            text("/apiVersion"),
            text("/kind"),
            namespace,
            text("/metadata/name")
        );
        out.insert(key, strip_timestamps(child));
    }
    if let Some(status) = &answer.status {
        out.insert("status".into(), strip_timestamps(status));
    }
    for condition in &answer.conditions {
        out.insert(
            format!("conditions[{}]", condition.kind),
            serde_json::json!({
                "status": condition.status,
                "reason": condition.reason,
                "message": condition.message,
            }),
        );
    }
    for (i, event) in answer.events.iter().enumerate() {
        out.insert(
            format!("events[{i}]"),
            serde_json::json!({
                "type": if event.warning { "Warning" } else { "Normal" },
                "reason": event.reason,
                "message": event.message,
            }),
        );
    }
    if let Some(ms) = answer.requeue_after_ms {
        out.insert("requeueAfterMs".into(), Value::from(ms));
    }
    out
}

fn strip_timestamps(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !TIMESTAMPS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), strip_timestamps(v)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_timestamps).collect()),
        other => other.clone(),
    }
}

/// Every field where `stable` and `candidate` differ, sorted by path.
/// `primary_namespace` is the namespace of the primary both answered for
/// (`None` when cluster-scoped).
pub fn diff(
    stable: &Desired,
    candidate: &Desired,
    primary_namespace: Option<&str>,
) -> Vec<FieldDiff> {
    let a = normalise(stable, primary_namespace);
    let b = normalise(candidate, primary_namespace);
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => fields(key, x, y, &mut out),
            (x, y) => out.push(FieldDiff {
                path: key.clone(),
                stable: x.cloned(),
                candidate: y.cloned(),
            }),
        }
    }
    out.sort_by(|x, y| x.path.cmp(&y.path));
    out
}

/// Appends the differences of `x` and `y` below `path`: objects field by
/// field, arrays element by element, anything else as a whole.
fn fields(path: &str, x: &Value, y: &Value, out: &mut Vec<FieldDiff>) {
    if x == y {
        return;
    }
    match (x, y) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let sub = format!("{path}.{key}");
                match (a.get(key), b.get(key)) {
                    (Some(v), Some(w)) => fields(&sub, v, w, out),
                    (v, w) => out.push(FieldDiff {
                        path: sub,
                        stable: v.cloned(),
                        candidate: w.cloned(),
                    }),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for i in 0..a.len().max(b.len()) {
                let sub = format!("{path}[{i}]");
                match (a.get(i), b.get(i)) {
                    (Some(v), Some(w)) => fields(&sub, v, w, out),
                    (v, w) => out.push(FieldDiff {
                        path: sub,
                        stable: v.cloned(),
                        candidate: w.cloned(),
                    }),
                }
            }
        }
        _ => out.push(FieldDiff {
            path: path.to_string(),
            stable: Some(x.clone()),
            candidate: Some(y.clone()),
        }),
    }
}

/// The kind of difference of `fields`: their paths with children's
/// namespace and name dropped (`children[apps/v1/Deployment/ns/web]` →
/// `children[apps/v1/Deployment]`), deduplicated, sorted, joined by `, `.
pub fn signature(fields: &[FieldDiff]) -> String {
    let paths: BTreeSet<String> = fields.iter().map(|f| abstract_path(&f.path)).collect();
    paths.into_iter().collect::<Vec<_>>().join(", ")
}

fn abstract_path(path: &str) -> String {
    let Some(rest) = path.strip_prefix("children[") else {
        return path.to_string();
    };
    let Some(end) = rest.find(']') else {
        return path.to_string();
    };
    let key = &rest[..end];
    // apiVersion may hold one slash (group/version); namespace and name
    // are the last two segments.
    let segments: Vec<&str> = key.split('/').collect();
    let kept = segments.len().saturating_sub(2);
    format!(
        "children[{}]{}",
        segments[..kept].join("/"),
        &rest[end + 1..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Condition, Event};
    use serde_json::json;

    fn answer(replicas: u64, service: bool) -> Desired {
        let mut children = vec![json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "web", "image": "nginx"}]}}},
        })];
        if service {
            children.push(json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "team-a"},
                "spec": {"ports": [{"port": 80}]},
            }));
        }
        Desired {
            children,
            status: Some(json!({"phase": "Pending", "lastUpdateTime": "2026-01-01T00:00:00Z"})),
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: "False".into(),
                reason: "ReplicasNotReady".into(),
                message: format!("0/{replicas} replicas ready"),
            }],
            events: vec![],
            requeue_after_ms: None,
        }
    }

    #[test]
    fn identical_answers_do_not_differ_timestamps_aside() {
        let a = answer(2, true);
        let mut b = answer(2, true);
        b.status = Some(json!({"phase": "Pending", "lastUpdateTime": "2027-05-05T00:00:00Z"}));
        b.children.reverse();
        assert!(diff(&a, &b, Some("team-a")).is_empty());
    }

    #[test]
    fn doubled_replicas_and_a_dropped_service_are_named_field_by_field() {
        let stable = answer(2, true);
        let candidate = answer(4, false);
        let got = diff(&stable, &candidate, Some("team-a"));
        let paths: Vec<&str> = got.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "children[apps/v1/Deployment/team-a/web].spec.replicas",
                "children[v1/Service/team-a/web]",
                "conditions[Ready].message",
            ]
        );
        assert_eq!(got[0].stable, Some(json!(2)));
        assert_eq!(got[0].candidate, Some(json!(4)));
        assert!(got[1].stable.is_some() && got[1].candidate.is_none());
        assert_eq!(
            signature(&got),
            "children[apps/v1/Deployment].spec.replicas, children[v1/Service], conditions[Ready].message"
        );
    }

    #[test]
    fn events_requeue_and_arrays_compare_in_order() {
        let mut a = answer(1, false);
        let mut b = answer(1, false);
        a.events.push(Event {
            warning: false,
            reason: "ScaledUp".into(),
            message: "1".into(),
        });
        b.events.push(Event {
            warning: true,
            reason: "ScaledUp".into(),
            message: "1".into(),
        });
        b.requeue_after_ms = Some(500);
        b.children[0]["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .expect("array")
            .push(json!({"name": "sidecar"}));
        let got = diff(&a, &b, Some("ns"));
        let paths: Vec<&str> = got.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "children[apps/v1/Deployment/ns/web].spec.template.spec.containers[1]",
                "events[0].type",
                "requeueAfterMs",
            ]
        );
        assert_eq!(got[2].stable, None);
        assert_eq!(
            signature(&got),
            "children[apps/v1/Deployment].spec.template.spec.containers[1], events[0].type, requeueAfterMs"
        );
    }
}
