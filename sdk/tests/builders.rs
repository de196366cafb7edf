//! The typed builders: kinds, manifest, context, children, desired.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::json;
use wasm_operator_sdk::{
    Children, Condition, Context, Desired, Event, Failure, Finalized, Kind, Manifest, Scope,
};

#[test]
fn kind_of_k8s_types_fills_group_plural_and_scope() {
    let d = Kind::of::<Deployment>();
    assert_eq!(
        (d.group.as_str(), d.version.as_str(), d.kind.as_str()),
        ("apps", "v1", "Deployment")
    );
    assert_eq!(d.plural, "deployments");
    assert_eq!(d.scope, Scope::Namespaced);
    assert_eq!(d.api_version(), "apps/v1");
    let ns = Kind::of::<Namespace>();
    assert_eq!(ns.scope, Scope::Cluster);
    assert_eq!(ns.api_version(), "v1");
    assert_eq!(Kind::of::<Service>().to_string(), "v1/Service");
}

#[test]
fn manifest_builder_records_every_declaration() {
    let m = Manifest::new("webapp", "1.2.3")
        .description("d")
        .primary(Kind::namespaced("example.com", "v1", "WebApp", "webapps"))
        .owns::<Deployment>()
        .owns_kind(Kind::namespaced("example.com", "v1", "Other", "others"))
        .watches::<ConfigMap>()
        .finalizer(true)
        .implements_migration()
        .min_compatible_version("1.0.0");
    assert_eq!(m.primary.api_version(), "example.com/v1");
    assert_eq!(
        m.owns.iter().map(|k| k.kind.as_str()).collect::<Vec<_>>(),
        ["Deployment", "Other"]
    );
    assert_eq!(m.watches[0].plural, "configmaps");
    assert!(m.finalizer && m.implements_migration && !m.implements_backup);
    assert_eq!(m.min_compatible_version.as_deref(), Some("1.0.0"));
}

#[derive(Deserialize, Debug, PartialEq)]
struct Cfg {
    level: u8,
}

#[test]
fn context_config_parses_or_fails_permanently() {
    let ctx = Context::new("1.0.0")
        .with_config_json(r#"{"level": 3}"#)
        .with_attempt(4);
    assert_eq!(ctx.config::<Cfg>().unwrap(), Cfg { level: 3 });
    assert_eq!(ctx.attempt(), 4);
    let bad = Context::new("1.0.0").with_config_json(r#"{"level": "high"}"#);
    let err = bad.config::<Cfg>().unwrap_err();
    assert!(
        matches!(&err, Failure::Permanent(m) if m.contains("plugin config is invalid")),
        "{err}"
    );
    let empty = Context::new("1.0.0").with_config_json("");
    assert_eq!(empty.config::<serde_json::Value>().unwrap(), json!({}));
    assert_eq!(
        Context::new("2.0.0")
            .with_managed_by_version("1.0.0")
            .managed_by_version(),
        Some("1.0.0")
    );
}

fn deployment_json(name: &str, ready: i32) -> String {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
           "spec": {"selector": {}, "template": {}}, "status": {"readyReplicas": ready}})
    .to_string()
}

#[test]
fn children_typed_lookup_matches_kind_and_name() {
    let svc =
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}).to_string();
    let children =
        Children::from_json(&[deployment_json("web", 2), deployment_json("other", 0), svc])
            .unwrap();
    assert_eq!(children.len(), 3);
    let d = children.get::<Deployment>("web").unwrap().unwrap();
    assert_eq!(d.status.unwrap().ready_replicas, Some(2));
    assert!(children.get::<Deployment>("missing").unwrap().is_none());
    // Same name, other kind: not a Deployment.
    assert!(children.get::<ConfigMap>("web").unwrap().is_none());
    assert_eq!(children.all::<Deployment>().unwrap().len(), 2);
    assert_eq!(children.all::<Service>().unwrap().len(), 1);
    assert!(children.get_json("v1", "Service", "web").is_some());
}

#[test]
fn children_that_are_not_json_or_mistyped_fail_transiently() {
    let err = Children::from_json(&["{not json"]).unwrap_err();
    assert!(
        matches!(&err, Failure::Transient(m) if m.contains("child #0")),
        "{err}"
    );
    let wrong = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": 5});
    let children = Children::new(vec![wrong]);
    let err = children.get::<Deployment>("web").unwrap_err();
    assert!(
        matches!(&err, Failure::Transient(m) if m.contains("does not parse")),
        "{err}"
    );
}

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    ready_replicas: i32,
}

#[test]
fn desired_builder_serializes_children_status_and_metadata() {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some("c".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let desired = Desired::new()
        .child(&cm)
        .unwrap()
        .child_json(
            json!({"apiVersion": "example.com/v1", "kind": "Other", "metadata": {"name": "o"}}),
        )
        .status_of(&Status { ready_replicas: 2 })
        .unwrap()
        .condition(Condition::ready(false, "Waiting", "not yet"))
        .condition(Condition::new("Progressing", "Unknown", "Starting", ""))
        .event(Event::normal("Created", "made it"))
        .event(Event::warning("Slow", "took long"))
        .requeue_after(Duration::from_millis(1500));
    let out = desired.into_json();
    let child: serde_json::Value = serde_json::from_str(&out.children[0]).unwrap();
    assert_eq!(
        child,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
    );
    assert_eq!(out.children.len(), 2);
    assert_eq!(out.status.as_deref(), Some(r#"{"readyReplicas":2}"#));
    assert_eq!(
        out.conditions[0],
        Condition::new("Ready", "False", "Waiting", "not yet")
    );
    assert_eq!(out.conditions[1].status, "Unknown");
    assert!(!out.events[0].warning && out.events[1].warning);
    assert_eq!(out.requeue_after_ms, Some(1500));
    assert_eq!(
        Desired::new()
            .status(json!({"a": 1}))
            .into_json()
            .status
            .as_deref(),
        Some(r#"{"a":1}"#)
    );
}

#[test]
fn finalized_and_failure_helpers() {
    assert_eq!(Finalized::Done.wait_ms(), None);
    assert_eq!(
        Finalized::Wait(Duration::from_secs(2)).wait_ms(),
        Some(2000)
    );
    assert_eq!(Failure::transient("t"), Failure::Transient("t".into()));
    assert_eq!(Failure::permanent("p").message(), "p");
    assert_eq!(Failure::transient("x").to_string(), "transient failure: x");
}
