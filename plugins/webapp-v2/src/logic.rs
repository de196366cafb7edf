//! The WebApp logic of webapp 2.x: webapp 1.0.0's Deployment and Service
//! (from the shared `webapp-logic` crate), plus the label
//! `example.com/tier: web` on every child, and an `upgrade` step for objects
//! written by older versions. webapp-v3 includes this file with `#[path]`.

use serde_json::{Value, json};
use wasm_operator_sdk::{Children, Desired, Failure, Manifest};

pub use webapp_logic::{WebApp, WebAppSpec};

/// Label this version puts on every child (v1 does not).
pub const TIER_LABEL: &str = "example.com/tier";
/// Value of [`TIER_LABEL`].
pub const TIER_VALUE: &str = "web";
/// Annotation `upgrade` leaves on an object: the version it upgraded from.
pub const UPGRADED_FROM_ANNOTATION: &str = "example.com/upgraded-from";
/// Annotation that makes `upgrade` fail (to exercise the host's retry path).
pub const FAIL_UPGRADE_ANNOTATION: &str = "example.com/fail-upgrade";
/// `spec.port` written by `upgrade` when an old object has none.
pub const DEFAULT_PORT: i32 = 80;

/// The manifest of webapp `version`: v1's, plus the migration interface.
pub fn manifest(version: &str) -> Manifest {
    webapp_logic::manifest(version)
        .description("Runs a web application as a Deployment and a Service (tier-labelled, with upgrades)")
        .implements_migration()
}

/// The desired Deployment and Service of `app`, tier-labelled.
pub fn reconcile(app: WebApp, children: &Children) -> Result<Desired, Failure> {
    webapp_logic::desired_state(app, children, &[(TIER_LABEL, TIER_VALUE)])
}

/// Upgrades an object written by an older version: fills `spec.port` and
/// records `example.com/upgraded-from`. Objects annotated
/// `example.com/fail-upgrade` are refused (test hook for the host's retries).
pub fn upgrade(mut object: Value, from: &str) -> Result<Value, String> {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("?").to_string();
    if let Some(reason) = object.pointer("/metadata/annotations").and_then(|a| a.get(FAIL_UPGRADE_ANNOTATION)) {
        return Err(format!(
            "WebApp {name} carries {FAIL_UPGRADE_ANNOTATION} ({reason}); remove the annotation to let the upgrade from {from} proceed"
        ));
    }
    let Some(root) = object.as_object_mut() else {
        return Err(format!("WebApp {name} is not a JSON object"));
    };
    let spec = root.entry("spec").or_insert_with(|| json!({}));
    if let Some(spec) = spec.as_object_mut() {
        spec.entry("port").or_insert(json!(DEFAULT_PORT));
    }
    let metadata = root.entry("metadata").or_insert_with(|| json!({}));
    let Some(metadata) = metadata.as_object_mut() else {
        return Err(format!("WebApp {name} has non-object metadata"));
    };
    let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(UPGRADED_FROM_ANNOTATION.to_string(), json!(from));
    }
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn upgrade_fills_port_and_records_origin() {
        let out = upgrade(json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "image": "x"}}), "1.0.0").unwrap();
        assert_eq!(out["spec"]["port"], 80);
        assert_eq!(out["metadata"]["annotations"][UPGRADED_FROM_ANNOTATION], "1.0.0");
    }

    #[test]
    fn upgrade_keeps_a_set_port() {
        let out =
            upgrade(json!({"metadata": {"name": "a"}, "spec": {"replicas": 1, "image": "x", "port": 8080}}), "1.0.0")
                .unwrap();
        assert_eq!(out["spec"]["port"], 8080);
    }

    #[test]
    fn upgrade_refuses_marked_objects() {
        let err = upgrade(json!({"metadata": {"name": "a", "annotations": {FAIL_UPGRADE_ANNOTATION: "yes"}}}), "1.0.0")
            .unwrap_err();
        assert!(err.contains("remove the annotation"), "{err}");
    }

    #[test]
    fn children_carry_the_tier_label_but_keep_the_selector() {
        let meta = ObjectMeta { name: Some("a".into()), namespace: Some("ns".into()), ..Default::default() };
        let spec = WebAppSpec { replicas: 2, image: "nginx".into(), port: 80 };
        let (d, s) = webapp_logic::children_of(&meta, &spec, &[(TIER_LABEL, TIER_VALUE)]);
        assert_eq!(d.metadata.labels.unwrap()[TIER_LABEL], TIER_VALUE);
        let sel = d.spec.unwrap().selector.match_labels.unwrap();
        assert!(!sel.contains_key(TIER_LABEL));
        assert!(!s.spec.unwrap().selector.unwrap().contains_key(TIER_LABEL));
    }
}
