//! The WebApp logic, run natively through the same JSON path the component uses.

use serde_json::{Value, json};
use wasm_operator_sdk::{Context, DesiredJson, Failure, Finalized, Reconciler, Scope, finalize_json, reconcile_json};
use webapp::WebAppPlugin;

fn webapp(spec: Value) -> String {
    json!({"apiVersion": "example.com/v1", "kind": "WebApp",
           "metadata": {"name": "shop", "namespace": "default", "generation": 1}, "spec": spec})
    .to_string()
}

fn deployment_with_ready(ready: i32) -> String {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "shop", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "shop"}}, "template": {}},
           "status": {"replicas": 3, "readyReplicas": ready}})
    .to_string()
}

fn run(spec: Value, children: &[String]) -> Result<DesiredJson, Failure> {
    reconcile_json::<WebAppPlugin>(&Context::new("1.0.0"), &webapp(spec), children)
}

fn child(out: &DesiredJson, kind: &str) -> Value {
    out.children
        .iter()
        .map(|c| serde_json::from_str::<Value>(c).unwrap())
        .find(|c| c["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} among {:?}", out.children))
}

#[test]
fn new_webapp_gets_deployment_service_and_pending_status() {
    let out = run(json!({"replicas": 3, "image": "nginx:1.21", "port": 8080}), &[]).unwrap();
    assert_eq!(out.children.len(), 2);
    let d = child(&out, "Deployment");
    assert_eq!(d["apiVersion"], "apps/v1");
    assert_eq!(d["metadata"]["name"], "shop");
    assert_eq!(d["metadata"]["namespace"], "default");
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["spec"]["selector"]["matchLabels"], json!({"app": "shop"}));
    assert_eq!(d["spec"]["template"]["metadata"]["labels"], json!({"app": "shop"}));
    let container = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["name"], "web");
    assert_eq!(container["image"], "nginx:1.21");
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    let s = child(&out, "Service");
    assert_eq!(s["apiVersion"], "v1");
    assert_eq!(s["spec"]["selector"], json!({"app": "shop"}));
    assert_eq!(s["spec"]["ports"][0]["port"], 8080);
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 8080);
    let status: Value = serde_json::from_str(out.status.as_deref().unwrap()).unwrap();
    assert_eq!(status, json!({"readyReplicas": 0, "phase": "Pending"}));
    let ready = &out.conditions[0];
    assert_eq!(
        (ready.kind.as_str(), ready.status.as_str(), ready.reason.as_str()),
        ("Ready", "False", "ReplicasNotReady")
    );
    assert_eq!(ready.message, "0/3 replicas ready");
}

#[test]
fn port_defaults_to_80() {
    let out = run(json!({"replicas": 1, "image": "nginx"}), &[]).unwrap();
    assert_eq!(child(&out, "Service")["spec"]["ports"][0]["port"], 80);
}

#[test]
fn partly_ready_deployment_stays_pending() {
    let out = run(json!({"replicas": 3, "image": "nginx"}), &[deployment_with_ready(2)]).unwrap();
    let status: Value = serde_json::from_str(out.status.as_deref().unwrap()).unwrap();
    assert_eq!(status, json!({"readyReplicas": 2, "phase": "Pending"}));
    assert_eq!(out.conditions[0].status, "False");
}

#[test]
fn fully_ready_deployment_is_running() {
    let out = run(json!({"replicas": 3, "image": "nginx"}), &[deployment_with_ready(3)]).unwrap();
    let status: Value = serde_json::from_str(out.status.as_deref().unwrap()).unwrap();
    assert_eq!(status, json!({"readyReplicas": 3, "phase": "Running"}));
    let ready = &out.conditions[0];
    assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("True", "AllReplicasReady"));
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
        let err = run(spec.clone(), &[]).unwrap_err();
        assert!(matches!(&err, Failure::Permanent(m) if m.starts_with("spec is invalid")), "{spec}: {err}");
    }
}

#[test]
fn finalize_is_done() {
    let spec = json!({"replicas": 1, "image": "nginx"});
    let out = finalize_json::<WebAppPlugin>(&Context::new("1.0.0"), &webapp(spec), &[]).unwrap();
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
