//! The upgrade walk's decisions, apart from its writes: which migration-state
//! marks to write before the plugin's `upgrade` runs, what to write back
//! after it, and what a failure leaves. Pure: [`super::walk`] performs them.
//!
//! The walk of one object's `wasm-operator.dev/migration-state`:
//!
//! ```text
//! (none | completed) ──► pending ──► in-progress ──► completed   (plugin upgraded it)
//!                           ▲            │
//!                           └────────────┘                       (upgrade failed: retried)
//! ```

use kube::ResourceExt;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use super::{merge_upgraded, upgrade_from};
use crate::contract::{Manifest, ReconcileLimits};
use crate::plan::{
    MANAGED_BY_VERSION_ANNOTATION, MIGRATION_STATE_ANNOTATION, MIN_COMPATIBLE_VERSION_ANNOTATION,
    MigrationState,
};
use crate::plan::{status_size, without_host_fields};

/// The mark a failed upgrade leaves, so the next attempt walks again.
pub const ON_FAILURE: MigrationState = MigrationState::Pending;

/// How the walk starts on the stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkStart {
    /// The stored object is already managed by the serving version or a newer
    /// one (the cache lagged behind an upgrade just written): nothing to do.
    Current,
    /// Write these marks, in order, then call the plugin's `upgrade`. Always
    /// ends with [`MigrationState::InProgress`]; starts with `pending` unless
    /// an earlier attempt left the object pending or in progress.
    Mark(Vec<MigrationState>),
}

/// Where the walk starts for `stored` and the serving version `to`.
pub fn start(stored: &DynamicObject, to: &str) -> WalkStart {
    let annotations = stored.annotations();
    let managed_by = annotations.get(MANAGED_BY_VERSION_ANNOTATION);
    if upgrade_from(managed_by.map(String::as_str), to).is_none() {
        return WalkStart::Current;
    }
    let state = annotations
        .get(MIGRATION_STATE_ANNOTATION)
        .and_then(|s| MigrationState::parse(s));
    let mut marks = Vec::with_capacity(2);
    if !matches!(
        state,
        Some(MigrationState::Pending | MigrationState::InProgress)
    ) {
        marks.push(MigrationState::Pending);
    }
    marks.push(MigrationState::InProgress);
    WalkStart::Mark(marks)
}

/// The merge patch that writes one migration-state mark.
pub fn mark_patch(state: MigrationState) -> Value {
    json!({ "metadata": { "annotations": { MIGRATION_STATE_ANNOTATION: state.as_str() } } })
}

/// What a successful upgrade writes back.
#[derive(Debug, Clone, PartialEq)]
pub struct UpgradeWrite {
    /// The stored object (with its resourceVersion, so a concurrent change
    /// fails the write) carrying the upgraded spec, labels and annotations
    /// and the marks: managed by the serving version, migration `completed`,
    /// its min-compatible version (or none).
    pub object: DynamicObject,
    /// The upgraded status, written through the status subresource when the
    /// plugin changed it (without the host's `conditions` and
    /// `observedGeneration`).
    pub status: Option<Value>,
    /// What the plugin's answer changed that the host owns and put back or
    /// dropped (field paths, for the log).
    pub restored: Vec<String>,
}

/// The writes that complete an upgrade of `stored` (as marked in progress)
/// to `manifest`'s version, from the plugin's answer `upgraded`.
///
/// The answer goes through the checks reconcile's answer gets: the host's
/// labels and annotations come from `stored` ([`merge_upgraded`]), the
/// status loses `conditions` and `observedGeneration` (the host's,
/// [`without_host_fields`]) and must fit `limits.max_status_bytes`
/// ([`status_size`]).
///
/// # Errors
///
/// What is wrong with the answer (an identity or forbidden field changed, a
/// status above the limit, not a Kubernetes object), for the
/// `UpgradeFailed` message.
pub fn finish(
    stored: &Value,
    upgraded: &Value,
    manifest: &Manifest,
    limits: &ReconcileLimits,
) -> Result<UpgradeWrite, String> {
    let merged = merge_upgraded(stored, upgraded)?;
    let mut restored = merged.restored;
    let status = match merged.status {
        Some(Value::Object(mut status)) => {
            restored.extend(
                without_host_fields(&mut status)
                    .into_iter()
                    .map(|field| format!("status.{field}")),
            );
            let mut before = stored
                .get("status")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            without_host_fields(&mut before);
            (before != status).then_some(Value::Object(status))
        }
        other => other,
    };
    status_size(status.as_ref(), manifest, limits).map_err(|e| e.to_string())?;
    let mut object = merged.object;
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(
            MANAGED_BY_VERSION_ANNOTATION.into(),
            json!(manifest.version),
        );
        annotations.insert(
            MIGRATION_STATE_ANNOTATION.into(),
            json!(MigrationState::Completed.as_str()),
        );
        match &manifest.min_compatible_version {
            Some(min) => annotations.insert(MIN_COMPATIBLE_VERSION_ANNOTATION.into(), json!(min)),
            None => annotations.remove(MIN_COMPATIBLE_VERSION_ANNOTATION),
        };
    }
    let object = serde_json::from_value(object)
        .map_err(|e| format!("the upgraded object is not a Kubernetes object: {e}"))?;
    Ok(UpgradeWrite {
        object,
        status,
        restored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{OptionalInterfaces, ResourceKind, Scope};

    fn manifest(version: &str, min_compatible: Option<&str>) -> Manifest {
        let kind = ResourceKind {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "WebApp".into(),
            plural: "webapps".into(),
            scope: Scope::Namespaced,
        };
        Manifest {
            name: "webapp".into(),
            version: version.into(),
            description: String::new(),
            primary: kind,
            owns: vec![],
            watches: vec![],
            finalizer: true,
            implements: OptionalInterfaces {
                migration: true,
                convert: true,
                upgrade: true,
                backup: false,
            },
            min_compatible_version: min_compatible.map(str::to_string),
        }
    }

    fn limits() -> ReconcileLimits {
        ReconcileLimits::default()
    }

    fn stored(annotations: Value) -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1",
                         "resourceVersion": "7", "annotations": annotations},
            "spec": {"replicas": 1},
            "status": {"phase": "Running"},
        })
    }

    fn object(annotations: Value) -> DynamicObject {
        serde_json::from_value(stored(annotations)).unwrap()
    }

    #[test]
    fn walk_starts_pending_then_in_progress() {
        let fresh = object(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0",
                                  MIGRATION_STATE_ANNOTATION: "completed"}));
        assert_eq!(
            start(&fresh, "2.0.0"),
            WalkStart::Mark(vec![MigrationState::Pending, MigrationState::InProgress])
        );
        let unmarked = object(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0"}));
        assert_eq!(
            start(&unmarked, "2.0.0"),
            WalkStart::Mark(vec![MigrationState::Pending, MigrationState::InProgress])
        );
    }

    #[test]
    fn a_failed_walk_resumes_from_pending_or_in_progress() {
        for state in [MigrationState::Pending, MigrationState::InProgress] {
            let retried = object(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0",
                                        MIGRATION_STATE_ANNOTATION: state.as_str()}));
            assert_eq!(
                start(&retried, "2.0.0"),
                WalkStart::Mark(vec![MigrationState::InProgress]),
                "{state:?}"
            );
        }
        assert_eq!(ON_FAILURE, MigrationState::Pending);
        assert_eq!(
            mark_patch(ON_FAILURE),
            json!({"metadata": {"annotations": {MIGRATION_STATE_ANNOTATION: "pending"}}})
        );
    }

    #[test]
    fn current_or_newer_objects_are_not_walked() {
        for managed_by in ["2.0.0", "3.0.0"] {
            let obj = object(json!({MANAGED_BY_VERSION_ANNOTATION: managed_by}));
            assert_eq!(start(&obj, "2.0.0"), WalkStart::Current, "{managed_by}");
        }
        assert_eq!(start(&object(json!({})), "2.0.0"), WalkStart::Current);
    }

    #[test]
    fn finish_marks_completed_by_the_serving_version() {
        let before = stored(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0",
                                   MIGRATION_STATE_ANNOTATION: "in-progress",
                                   MIN_COMPATIBLE_VERSION_ANNOTATION: "0.9.0"}));
        let mut upgraded = before.clone();
        upgraded["spec"]["port"] = json!(8080);
        upgraded["status"]["phase"] = json!("Upgraded");

        let write = finish(&before, &upgraded, &manifest("2.0.0", None), &limits()).unwrap();
        let annotations = write.object.annotations();
        assert_eq!(annotations[MANAGED_BY_VERSION_ANNOTATION], "2.0.0");
        assert_eq!(annotations[MIGRATION_STATE_ANNOTATION], "completed");
        assert!(!annotations.contains_key(MIN_COMPATIBLE_VERSION_ANNOTATION));
        assert_eq!(write.object.data["spec"]["port"], 8080);
        assert_eq!(write.object.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(write.status, Some(json!({"phase": "Upgraded"})));

        let declares = finish(
            &before,
            &before,
            &manifest("3.0.0", Some("3.0.0")),
            &limits(),
        )
        .unwrap();
        assert_eq!(
            declares.object.annotations()[MIN_COMPATIBLE_VERSION_ANNOTATION],
            "3.0.0"
        );
        assert_eq!(declares.status, None);
    }

    #[test]
    fn finish_refuses_a_renamed_object() {
        let before = stored(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0"}));
        let mut upgraded = before.clone();
        upgraded["metadata"]["name"] = json!("other");
        let problem = finish(&before, &upgraded, &manifest("2.0.0", None), &limits()).unwrap_err();
        assert!(problem.contains("metadata.name"), "{problem}");
    }

    #[test]
    fn upgrade_cannot_fake_observed_generation_or_conditions() {
        let mut before = stored(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0"}));
        before["status"]["conditions"] = json!([{"type": "Ready", "status": "False"}]);
        let mut upgraded = before.clone();
        upgraded["status"]["observedGeneration"] = json!(99);
        upgraded["status"]["conditions"] = json!([{"type": "Ready", "status": "True"}]);
        let write = finish(&before, &upgraded, &manifest("2.0.0", None), &limits()).unwrap();
        // Only host fields changed: nothing of the status is written.
        assert_eq!(write.status, None);
        assert_eq!(
            write.restored,
            ["status.conditions", "status.observedGeneration"]
        );
        upgraded["status"]["phase"] = json!("Upgraded");
        let write = finish(&before, &upgraded, &manifest("2.0.0", None), &limits()).unwrap();
        assert_eq!(write.status, Some(json!({"phase": "Upgraded"})));
        // The object written keeps the stored status (the status goes
        // through the subresource).
        assert_eq!(write.object.data["status"], before["status"]);
    }

    #[test]
    fn upgrade_status_above_the_limit_is_refused_naming_size_and_limit() {
        let before = stored(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0"}));
        let mut upgraded = before.clone();
        upgraded["status"]["blob"] = json!("x".repeat(300));
        let small = ReconcileLimits {
            max_status_bytes: 256,
            ..ReconcileLimits::default()
        };
        let problem = finish(&before, &upgraded, &manifest("2.0.0", None), &small).unwrap_err();
        assert!(
            problem.contains("plugin webapp 2.0.0 answered a status of")
                && problem.contains("more than its limit of 256"),
            "{problem}"
        );
        finish(&before, &upgraded, &manifest("2.0.0", None), &limits()).unwrap();
    }

    #[test]
    fn upgrade_cannot_change_host_labels_or_marks() {
        let mut before = stored(json!({MANAGED_BY_VERSION_ANNOTATION: "1.0.0",
                                       "wasm-operator.dev/fencing-token": "4"}));
        before["metadata"]["labels"] = json!({"wasm-operator.dev/plugin": "webapp"});
        let mut upgraded = before.clone();
        upgraded["metadata"]["labels"] =
            json!({"wasm-operator.dev/plugin": "other", "tier": "web"});
        upgraded["metadata"]["annotations"] =
            json!({"wasm-operator.dev/fencing-token": "18446744073709551615"});
        let write = finish(&before, &upgraded, &manifest("2.0.0", None), &limits()).unwrap();
        let labels = write.object.labels();
        assert_eq!(labels["wasm-operator.dev/plugin"], "webapp");
        assert_eq!(labels["tier"], "web");
        let annotations = write.object.annotations();
        assert_eq!(annotations["wasm-operator.dev/fencing-token"], "4");
        assert_eq!(annotations[MANAGED_BY_VERSION_ANNOTATION], "2.0.0");
        assert!(
            write
                .restored
                .contains(&r#"metadata.labels["wasm-operator.dev/plugin"]"#.to_string()),
            "{:?}",
            write.restored
        );
    }
}
