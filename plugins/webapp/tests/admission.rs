//! WebApp admission through the JSON path the component's export uses:
//! `validate` refuses a spec the plugin cannot serve, `defaults` fills
//! `spec.port` and changes nothing else.

use serde_json::{Value, json};
use wasm_operator_sdk::{Context, Operation, Reconciler, defaults_json, validate_json};
use webapp::WebAppPlugin;

fn webapp(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "WebApp",
           "metadata": {"name": "shop", "namespace": "default", "creationTimestamp": null,
                        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
           "spec": spec})
}

fn ctx() -> Context {
    Context::new(env!("CARGO_PKG_VERSION"))
}

#[test]
fn the_manifest_declares_validate_and_defaults() {
    let manifest = WebAppPlugin::manifest();
    assert!(manifest.implements_validate && manifest.implements_defaults);
}

#[test]
fn replicas_outside_the_bounds_are_refused() {
    let object = webapp(json!({"replicas": 0, "image": "nginx"})).to_string();
    let verdict = validate_json::<WebAppPlugin>(&ctx(), Operation::Create, &object, None).unwrap();
    assert!(!verdict.allowed);
    assert_eq!(verdict.message, "spec.replicas must be between 1 and 10, got 0");
    assert_eq!(verdict.fields[0].path, "spec.replicas");
    let fine = webapp(json!({"replicas": 3, "image": "nginx"})).to_string();
    let verdict = validate_json::<WebAppPlugin>(&ctx(), Operation::Update, &fine, Some(&object)).unwrap();
    assert!(verdict.allowed && verdict.warnings.is_empty(), "{verdict:?}");
    // A spec the type cannot read is refused with serde's words.
    let unreadable = webapp(json!({"replicas": "three", "image": "nginx"})).to_string();
    let verdict = validate_json::<WebAppPlugin>(&ctx(), Operation::Create, &unreadable, None).unwrap();
    assert!(!verdict.allowed && verdict.message.starts_with("WebApp default/shop is invalid"), "{verdict:?}");
}

#[test]
fn defaults_fill_the_port_only() {
    let mut object = webapp(json!({"replicas": 2, "image": "nginx", "future": {"x": 1}}));
    let defaulted: Value =
        serde_json::from_str(&defaults_json::<WebAppPlugin>(&ctx(), Operation::Create, &object.to_string()).unwrap())
            .unwrap();
    // No status, metadata as it was, unknown spec fields kept.
    object["spec"]["port"] = json!(80);
    assert_eq!(defaulted, object);
    let with_port = webapp(json!({"replicas": 2, "image": "nginx", "port": 8080}));
    let defaulted: Value = serde_json::from_str(
        &defaults_json::<WebAppPlugin>(&ctx(), Operation::Update, &with_port.to_string()).unwrap(),
    )
    .unwrap();
    assert_eq!(defaulted, with_port);
}
