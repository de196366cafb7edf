//! The WebApp logic, run natively through the same JSON path the component
//! uses, with the SDK's typed fixtures: typed objects in, typed children,
//! status, conditions and events out.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};
use wasm_operator_sdk::testing::{Fixture, Outcome};
use wasm_operator_sdk::{Failure, Finalized, Reconciler, Scope};
use webapp::WebAppPlugin;

/// The status the plugin reports, as a test reads it back.
#[derive(Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    ready_replicas: i32,
    phase: String,
}

fn webapp(spec: Value) -> Fixture<WebAppPlugin> {
    Fixture::new(&json!({"apiVersion": "example.com/v1", "kind": "WebApp",
           "metadata": {"name": "shop", "namespace": "default", "generation": 1}, "spec": spec}))
}

fn deployment_with_ready(ready: i32) -> Deployment {
    Deployment {
        metadata: ObjectMeta { name: Some("shop".into()), namespace: Some("default".into()), ..Default::default() },
        status: Some(DeploymentStatus { replicas: Some(3), ready_replicas: Some(ready), ..Default::default() }),
        ..Default::default()
    }
}

fn status(out: &Outcome) -> Status {
    out.status::<Status>().expect("the plugin sets a status")
}

#[test]
fn new_webapp_gets_deployment_service_and_pending_status() {
    let out = webapp(json!({"replicas": 3, "image": "nginx:1.21", "port": 8080})).reconcile().unwrap();
    assert_eq!(out.raw_children().len(), 2);
    let d = out.child::<Deployment>("shop").unwrap();
    assert_eq!(d.metadata.namespace.as_deref(), Some("default"));
    let spec = d.spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let app = [("app".to_string(), "shop".to_string())].into();
    assert_eq!(spec.selector.match_labels.as_ref(), Some(&app));
    assert_eq!(spec.template.metadata.unwrap().labels.as_ref(), Some(&app));
    let pod = spec.template.spec.unwrap();
    let container = &pod.containers[0];
    assert_eq!(container.name, "web");
    assert_eq!(container.image.as_deref(), Some("nginx:1.21"));
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);
    let s = out.child::<Service>("shop").unwrap().spec.unwrap();
    assert_eq!(s.selector.as_ref(), Some(&app));
    assert_eq!(s.ports.as_ref().unwrap()[0].port, 8080);
    assert_eq!(status(&out), Status { ready_replicas: 0, phase: "Pending".into() });
    let ready = out.condition("Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "ReplicasNotReady"));
    assert_eq!(ready.message, "0/3 replicas ready");
    assert!(out.events().is_empty());
    assert_eq!(out.requeue_after(), None);
}

#[test]
fn port_defaults_to_80() {
    let out = webapp(json!({"replicas": 1, "image": "nginx"})).reconcile().unwrap();
    let services = out.children::<Service>();
    assert_eq!(services.len(), 1);
    assert_eq!(services[0].spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port, 80);
}

#[test]
fn partly_ready_deployment_stays_pending() {
    let out = webapp(json!({"replicas": 3, "image": "nginx"})).child(&deployment_with_ready(2)).reconcile().unwrap();
    assert_eq!(status(&out), Status { ready_replicas: 2, phase: "Pending".into() });
    assert_eq!(out.condition("Ready").unwrap().status, "False");
}

#[test]
fn fully_ready_deployment_is_running_with_an_event() {
    let out = webapp(json!({"replicas": 3, "image": "nginx"})).child(&deployment_with_ready(3)).reconcile().unwrap();
    assert_eq!(status(&out), Status { ready_replicas: 3, phase: "Running".into() });
    let ready = out.condition("Ready").unwrap();
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "AllReplicasReady"));
    let events: Vec<_> = out.events().iter().map(|e| (e.warning, e.reason.as_str())).collect();
    assert_eq!(events, [(false, "Running")]);
}

#[test]
fn invalid_specs_fail_permanently() {
    for spec in [
        json!({"replicas": 0, "image": "nginx"}),
        json!({"replicas": 11, "image": "nginx"}),
        json!({"replicas": 1, "image": "nginx", "port": 70000}),
        json!({"replicas": 1, "image": ""}),
        json!({"image": "nginx"}),
        json!({"replicas": "three", "image": "nginx"}),
    ] {
        let err = webapp(spec.clone()).reconcile().unwrap_err();
        assert!(matches!(&err, Failure::Permanent(m) if m.starts_with("spec is invalid")), "{spec}: {err}");
    }
}

#[test]
fn finalize_is_done() {
    let out = webapp(json!({"replicas": 1, "image": "nginx"})).finalize().unwrap();
    assert_eq!(out, Finalized::Done);
}

#[test]
fn manifest_owns_deployments_and_services_with_a_finalizer() {
    let m = WebAppPlugin::manifest();
    assert_eq!(m.name, "webapp");
    assert_eq!(m.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(m.primary.api_version(), "example.com/v1");
    assert_eq!((m.primary.kind.as_str(), m.primary.plural.as_str()), ("WebApp", "webapps"));
    assert_eq!(m.primary.scope, Scope::Namespaced);
    let owned: Vec<_> = m.owns.iter().map(|k| (k.api_version(), k.plural.clone())).collect();
    assert_eq!(owned, [("apps/v1".to_owned(), "deployments".to_owned()), ("v1".to_owned(), "services".to_owned())]);
    assert!(m.finalizer);
    assert!(m.watches.is_empty() && !m.implements_migration && !m.implements_backup);
}
