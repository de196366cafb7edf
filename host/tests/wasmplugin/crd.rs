//! The CRD itself: it is generated from the Rust types (the deploy/ and
//! examples/ copies agree with them), the schema enforces exactly one source
//! and the other validations, `kubectl get wp` shows the printer columns, and
//! the controller refuses to start without the CRD.

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::wasmplugin::{
    self, Source, WasmPlugin, WasmPluginController, WasmPluginError, WasmPluginSpec,
    WasmPluginStatus,
};

use crate::support;
use crate::{Fixture, condition_is, file_spec};

#[test]
fn deploy_and_example_crds_are_identical() {
    let root = support::workspace();
    let deploy = std::fs::read_to_string(root.join("deploy/crds/wasmplugin.yaml")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/wasmplugin/crd.yaml")).unwrap();
    assert_eq!(
        deploy, example,
        "keep deploy/crds/wasmplugin.yaml and examples/wasmplugin/crd.yaml identical"
    );
}

#[test]
fn deploy_crd_is_generated_from_the_types() {
    let path = support::workspace().join("deploy/crds/wasmplugin.yaml");
    let on_disk = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let generated = wasmplugin::crd_yaml().unwrap();
    assert!(
        on_disk == generated,
        "deploy/crds/wasmplugin.yaml does not match the types in host/src/wasmplugin/spec/; \
         regenerate it with `cargo run -p wasm-operator -- crd print > deploy/crds/wasmplugin.yaml` \
         and copy it to examples/wasmplugin/crd.yaml"
    );
}

#[test]
fn the_charts_crd_is_the_generated_crd_kept_on_uninstall() {
    let path = support::workspace().join("deploy/helm/wasm-operator/crds/wasmplugin.yaml");
    let on_disk = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let fix = "deploy/helm/wasm-operator/crds/wasmplugin.yaml does not match the types in host/src/wasmplugin/spec/; regenerate it with `bash scripts/render-deploy.sh`";
    let mut chart: Value = serde_yaml::from_str(&on_disk).unwrap_or_else(|e| panic!("{fix}: {e}"));
    assert_eq!(
        chart["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
        "the chart's CRD must survive `helm uninstall` (and with it every WasmPlugin)"
    );
    // The one difference with the generated CRD is that annotation.
    chart["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let generated: Value = serde_yaml::from_str(&wasmplugin::crd_yaml().unwrap()).unwrap();
    assert!(chart == generated, "{fix}");
}

#[test]
fn crd_print_prints_the_generated_crd() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(["crd", "print"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        wasmplugin::crd_yaml().unwrap()
    );
}

/// A devcluster with only the WasmPlugin CRD (examples/, the copy the other
/// tests install): the schema's verdicts without a controller writing status.
async fn cluster_with_the_crd() -> (devcluster::TestCluster, Api<WasmPlugin>) {
    crate::install_crypto_provider();
    let cluster = support::start_cluster().await;
    support::install_crd(&cluster.client(), &support::example_crd("wasmplugin")).await;
    let api = Api::all(cluster.client());
    (cluster, api)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_rejects_what_the_host_cannot_use() {
    let (cluster, _) = cluster_with_the_crd().await;
    let api: Api<DynamicObject> = Api::all_with(cluster.client(), &wasmplugin::api_resource());
    let oci = |extra: Value| {
        let mut oci = json!({"reference": "registry.example.com/plugins/webapp:1.0"});
        oci.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"source": {"oci": oci}})
    };
    let file = |extra: Value| {
        let mut spec = json!({"source": {"file": {"path": "/plugins/webapp.wasm"}}});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    for (name, spec) in [
        ("no-spec", Value::Null),
        ("empty-path", json!({"source": {"file": {"path": ""}}})),
        (
            "configmap-without-key",
            json!({"source": {"configMap": {"namespace": "a", "name": "b"}}}),
        ),
        ("oci-without-reference", json!({"source": {"oci": {}}})),
        ("bad-digest", oci(json!({"digest": "sha256:XYZ"}))),
        (
            "bad-poll-interval",
            oci(json!({"pollInterval": "5 minutes"})),
        ),
        (
            "pull-secret-without-name",
            oci(json!({"pullSecret": {"namespace": "a"}})),
        ),
        (
            "call-timeout-in-hours",
            file(json!({"limits": {"callTimeout": "1h"}})),
        ),
        ("bad-memory", file(json!({"limits": {"memory": "256MB"}}))),
        (
            "bad-output-size",
            file(json!({"limits": {"outputSize": "-1"}})),
        ),
        ("zero-concurrency", file(json!({"concurrency": 0}))),
        ("too-much-concurrency", file(json!({"concurrency": 257}))),
        ("config-not-an-object", file(json!({"config": "x"}))),
    ] {
        let mut object = json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name},
        });
        if !spec.is_null() {
            object["spec"] = spec;
        }
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        match api.create(&PostParams::default(), &object).await {
            Err(kube::Error::Api(e)) => assert_eq!(e.code, 422, "{name}: {e:?}"),
            Err(other) => panic!("{name}: {other}"),
            Ok(_) => panic!("{name}: the schema accepted it"),
        }
    }

    // Optional fields are not nullable: as kube-apiserver does, a `null`
    // is dropped on write rather than stored.
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "null-limits"}, "spec": file(json!({"limits": null})),
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &object).await.unwrap();
    assert_eq!(
        created.data["spec"].get("limits"),
        None,
        "{:?}",
        created.data
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_objects_round_trip_and_show_the_printer_columns() {
    let (cluster, api) = cluster_with_the_crd().await;
    let spec: WasmPluginSpec = serde_json::from_value(json!({
        "source": {"oci": {
            "reference": "registry.example.com/plugins/webapp:1.0",
            "digest": format!("sha256:{}", "a".repeat(64)),
            "pullSecret": {"namespace": "wasm-operator", "name": "registry"},
            "pollInterval": "90s",
        }},
        "config": {"nested": {"list": [1, {"deep": true}]}, "n": 1.5},
        "limits": {"callTimeout": "250ms", "memory": "64Mi", "outputSize": "1024"},
        "concurrency": 256,
    }))
    .unwrap();
    let created = api
        .create(
            &PostParams::default(),
            &WasmPlugin::new("webapp", spec.clone()),
        )
        .await
        .unwrap();
    // Nothing pruned: the free-form config and every field come back as sent.
    assert_eq!(created.spec, spec);
    let object = serde_json::to_value(&created).unwrap();
    assert_eq!(WasmPluginSpec::from_object(&object).unwrap(), spec);
    assert!(matches!(spec.source, Source::Oci(_)));

    // A status as the controller writes it is accepted and reads back typed.
    let status: WasmPluginStatus = serde_json::from_value(json!({
        "plugin": "webapp", "version": "0.1.0", "digest": "sha256:ab",
        "source": "oci:registry.example.com/plugins/webapp:1.0", "sourceKind": "oci",
        "loadedAt": "2026-01-01T00:00:00Z", "observedGeneration": 1,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Loaded", "message": "serves",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
            {"type": "Degraded", "status": "False", "reason": "Loaded", "message": "",
             "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1},
        ],
        "versions": [{"version": "0.1.0", "digest": "sha256:ab", "reconciles": 3, "failures": 0}],
    }))
    .unwrap();
    let patched = api
        .patch_status(
            "webapp",
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.as_ref(), Some(&status));

    // `kubectl get wp`: a Table with the columns of the hand-written CRD.
    let request = http::Request::get("/apis/wasm-operator.dev/v1alpha1/wasmplugins")
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: Value = cluster.client().request(request).await.unwrap();
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        columns,
        [
            "Name", "Plugin", "Version", "Source", "Stable", "Canary", "Mode", "Weight", "Phase",
            "Ready", "Age"
        ],
        "{table}"
    );
    let cells = table["rows"][0]["cells"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let shown: Vec<Value> = ["webapp", "webapp", "0.1.0", "oci"]
        .into_iter()
        .map(Value::from)
        .collect();
    assert_eq!(cells.get(..4), Some(&shown[..]), "{table}");
    // No canary: its columns are empty, Ready follows them.
    assert_eq!(cells.get(9), Some(&Value::from("True")), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_requires_exactly_one_source() {
    let fx = Fixture::start().await;
    let api = fx.wasmplugins();
    for (name, source) in [
        (
            "two-sources",
            json!({"file": {"path": "/x.wasm"}, "configMap": {"namespace": "a", "name": "b", "key": "c"}}),
        ),
        ("no-source", json!({})),
    ] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name}, "spec": {"source": source},
        }))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &object)
            .await
            .unwrap_err();
        match err {
            kube::Error::Api(e) => assert_eq!(e.code, 422, "{name}: {e:?}"),
            other => panic!("{name}: {other}"),
        }
    }

    // A valid one is accepted and gets a status (here: the file is missing).
    fx.create("missing-file", file_spec(&fx.dir.path().join("nope.wasm")))
        .await;
    let o = fx
        .wait_for("missing-file", "Ready False (SourceNotFound)", |o| {
            condition_is(o, "Ready", "False")
                && crate::support::condition(o, "Ready").and_then(|c| c.get("reason"))
                    == Some(&json!("SourceNotFound"))
        })
        .await;
    let message = crate::support::condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("nope.wasm"), "{message}");
    let (kind, _) = fx.wait_event("missing-file", "SourceNotFound").await;
    assert_eq!(kind, "Warning");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_requires_the_crd() {
    crate::install_crypto_provider();
    let cluster = support::start_cluster().await;
    let registry = wasm_operator::registry::Registry::new(Default::default()).unwrap();
    let err = WasmPluginController::start(cluster.client(), registry)
        .await
        .unwrap_err();
    assert!(matches!(err, WasmPluginError::CrdNotInstalled), "{err:?}");
    assert!(
        err.to_string().contains("deploy/crds/wasmplugin.yaml"),
        "{err}"
    );
}
