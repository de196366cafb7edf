//! `wasm-operator plugin crd`: the CRD the webapp plugin carries (derived by
//! the SDK from its spec and status types) says what examples/webapp/crd.yaml
//! says, is accepted by a cluster, and keeps the conditions the host writes; a plugin
//! that carries none is told apart.

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::common::{plugin_wasm, run_binary, workspace};
use crate::support::{self, dynamic_api, get_json};

fn generated_crd(format: &str) -> Value {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&["plugin", "crd", wasm.to_str().unwrap(), "-o", format]);
    assert!(
        output.status.success(),
        "plugin crd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    match format {
        "json" => serde_json::from_str(&text).unwrap(),
        _ => serde_yaml::from_str(&text).unwrap(),
    }
}

/// What the plugin derives from its types says what the hand-written
/// examples/webapp/crd.yaml says: names, columns, required fields, bounds,
/// the default port and the host's status fields.
#[test]
fn the_webapp_plugin_carries_the_example_crd() {
    let generated = generated_crd("yaml");
    assert_eq!(generated, generated_crd("json"));
    let path = workspace().join("examples/webapp/crd.yaml");
    let example: Value = serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for pointer in [
        "/metadata/name",
        "/spec/group",
        "/spec/scope",
        "/spec/names",
        "/spec/versions/0/name",
        "/spec/versions/0/subresources",
        "/spec/versions/0/additionalPrinterColumns",
        "/spec/versions/0/schema/openAPIV3Schema/required",
    ] {
        assert_eq!(
            generated.pointer(pointer),
            example.pointer(pointer),
            "{pointer}"
        );
    }
    let schema = |crd: &Value, part: &str| {
        crd.pointer(&format!(
            "/spec/versions/0/schema/openAPIV3Schema/properties/{part}"
        ))
        .cloned()
        .unwrap()
    };
    let (spec, example_spec) = (schema(&generated, "spec"), schema(&example, "spec"));
    assert_eq!(spec["required"], example_spec["required"], "{spec}");
    for (field, keyword) in [
        ("replicas", "minimum"),
        ("replicas", "maximum"),
        ("image", "minLength"),
        ("port", "minimum"),
        ("port", "maximum"),
        ("port", "default"),
        ("replicas", "description"),
    ] {
        assert_eq!(
            spec["properties"][field][keyword], example_spec["properties"][field][keyword],
            "spec.{field} {keyword}"
        );
    }
    let (status, example_status) = (schema(&generated, "status"), schema(&example, "status"));
    for keyword in [
        "items",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
    ] {
        assert_eq!(
            status["properties"]["conditions"][keyword],
            example_status["properties"]["conditions"][keyword],
            "status.conditions {keyword}"
        );
    }
    for field in ["readyReplicas", "phase", "observedGeneration"] {
        assert_eq!(
            status["properties"][field]["type"], example_status["properties"][field]["type"],
            "status.{field}"
        );
    }
}

#[test]
fn a_plugin_without_a_crd_says_so() {
    let wasm = plugin_wasm("faulty");
    let output = run_binary(&["plugin", "crd", wasm.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("carries no CRD") && stderr.contains("Crd::of"),
        "{stderr}"
    );
}

/// The generated CRD is structural (the API server accepts it) and a
/// status write with conditions and observedGeneration keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_crd_is_accepted_and_keeps_the_host_status() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crd.yaml");
    std::fs::write(
        &file,
        serde_yaml::to_string(&generated_crd("yaml")).unwrap(),
    )
    .unwrap();
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    support::install_crd(&client, &file).await;
    let kind = support::api_resource("example.com", "v1", "WebApp", "webapps");
    let webapps = dynamic_api(&client, &kind, Some("default"));
    let app = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "typed", "namespace": "default"},
        "spec": {"replicas": 2, "image": "nginx"},
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &app).await.unwrap();
    let status = json!({
        "readyReplicas": 1, "phase": "Pending", "observedGeneration": 1,
        "conditions": [{
            "type": "Ready", "status": "False", "reason": "ReplicasNotReady",
            "message": "1/2 replicas ready", "lastTransitionTime": "2026-01-01T00:00:00Z",
            "observedGeneration": 1,
        }],
    });
    webapps
        .patch_status(
            "typed",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .unwrap();
    let stored = get_json(&webapps, "typed").await.unwrap();
    assert_eq!(stored["status"], status, "{stored}");
    // The schema's defaults and validation are the types'.
    assert_eq!(stored["spec"]["port"], 80, "{stored}");
    let invalid = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "too-many", "namespace": "default"},
        "spec": {"replicas": 11, "image": "nginx"},
    }))
    .unwrap();
    let refused = webapps.create(&PostParams::default(), &invalid).await;
    assert!(refused.is_err(), "replicas 11 accepted: {refused:?}");
}
