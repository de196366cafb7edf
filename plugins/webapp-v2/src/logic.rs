//! The WebApp logic shared by webapp 2.x and 3.x (webapp-v3 includes this
//! file with `#[path]`; it cannot depend on this crate as a library because
//! both crates export the plugin world and the exports would collide).
//!
//! Behaviour: webapp 1.0.0's Deployment and Service (code copied from
//! plugins/webapp, which exports the plugin world from its library too), plus
//! the label `example.com/tier: web` on every child, and an `upgrade` step
//! for objects written by older versions.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;
use serde_json::{Value, json};
use wasm_operator_sdk::{Children, Condition, Desired, Failure, Kind, Manifest};

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

/// A `WebApp` object.
#[derive(Debug, Clone, Deserialize)]
pub struct WebApp {
    /// Name and namespace name the children.
    pub metadata: ObjectMeta,
    /// What the user asks for.
    pub spec: WebAppSpec,
}

/// What the user asks for.
#[derive(Debug, Clone, Deserialize)]
pub struct WebAppSpec {
    /// Pods to run, 1..=10.
    pub replicas: i32,
    /// Container image.
    pub image: String,
    /// Container port, also exposed by the Service; 80 when unset.
    #[serde(default = "default_port")]
    pub port: i32,
}

fn default_port() -> i32 {
    DEFAULT_PORT
}

/// The manifest of webapp `version`; both versions reconcile the same kind.
pub fn manifest(version: &str) -> Manifest {
    Manifest::new("webapp", version)
        .description("Runs a web application as a Deployment and a Service (tier-labelled, with upgrades)")
        .primary(Kind::namespaced("example.com", "v1", "WebApp", "webapps"))
        .owns::<Deployment>()
        .owns::<Service>()
        .finalizer(true)
        .implements_migration()
}

/// The desired Deployment and Service of `app`.
pub fn reconcile(app: WebApp, children: &Children) -> Result<Desired, Failure> {
    let spec = &app.spec;
    if !(1..=10).contains(&spec.replicas) || !(1..=65535).contains(&spec.port) || spec.image.is_empty() {
        return Err(Failure::permanent(format!(
            "spec is invalid: replicas must be 1..10 (got {}), port 1..65535 (got {}), image non-empty",
            spec.replicas, spec.port
        )));
    }
    let name = app.metadata.name.clone().unwrap_or_default();
    let ready = children.get::<Deployment>(&name)?.and_then(|d| d.status).and_then(|s| s.ready_replicas).unwrap_or(0);
    let running = ready >= spec.replicas;
    let message = format!("{ready}/{} replicas ready", spec.replicas);
    let phase = if running { "Running" } else { "Pending" };
    let reason = if running { "AllReplicasReady" } else { "ReplicasNotReady" };
    let (deployment, service) = children_of(&app.metadata, spec);
    Ok(Desired::new()
        .child(&deployment)?
        .child(&service)?
        .status(json!({ "readyReplicas": ready, "phase": phase }))
        .condition(Condition::ready(running, reason, message)))
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

/// The Deployment and Service a WebApp stands for, labelled with the tier.
pub fn children_of(meta: &ObjectMeta, spec: &WebAppSpec) -> (Deployment, Service) {
    let name = meta.name.clone().unwrap_or_default();
    let selector = BTreeMap::from([("app".to_owned(), name.clone())]);
    let mut labels = selector.clone();
    labels.insert(TIER_LABEL.to_owned(), TIER_VALUE.to_owned());
    let metadata = ObjectMeta {
        name: Some(name),
        namespace: meta.namespace.clone(),
        labels: Some(labels.clone()),
        ..Default::default()
    };
    let container = Container {
        name: "web".to_owned(),
        image: Some(spec.image.clone()),
        ports: Some(vec![ContainerPort { container_port: spec.port, ..Default::default() }]),
        ..Default::default()
    };
    let deployment = Deployment {
        metadata: metadata.clone(),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            // The selector stays v1's: it is immutable on a Deployment.
            selector: LabelSelector { match_labels: Some(selector.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec { containers: vec![container], ..Default::default() }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    let port = ServicePort { port: spec.port, target_port: Some(IntOrString::Int(spec.port)), ..Default::default() };
    let service = Service {
        metadata,
        spec: Some(ServiceSpec { selector: Some(selector), ports: Some(vec![port]), ..Default::default() }),
        ..Default::default()
    };
    (deployment, service)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (d, s) = children_of(&meta, &spec);
        assert_eq!(d.metadata.labels.unwrap()[TIER_LABEL], TIER_VALUE);
        let sel = d.spec.unwrap().selector.match_labels.unwrap();
        assert!(!sel.contains_key(TIER_LABEL));
        assert!(!s.spec.unwrap().selector.unwrap().contains_key(TIER_LABEL));
    }
}
