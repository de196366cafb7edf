//! One test per source kind: create → load, source change → swap, spec edit
//! → reload, delete → unload.

use std::io::Write;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{self, condition, wait_until};
use crate::{CONVERGE, Fixture, NS, digest, file_spec, with_custom_section, write_atomically};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_source_loads_swaps_reloads_and_unloads() {
    let fx = Fixture::start().await;
    let v1 = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &v1);
    fx.create("webapp", file_spec(&path)).await;
    let o = fx.wait_serving("webapp", &digest(&v1)).await;
    assert_eq!(o.pointer("/status/plugin"), Some(&json!("webapp")));
    assert_eq!(o.pointer("/status/sourceKind"), Some(&json!("file")));
    assert!(o.pointer("/status/loadedAt").is_some());
    assert!(
        o.pointer("/metadata/finalizers")
            .unwrap()
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "wasm-operator.dev/unload-plugin")
    );
    let (kind, note) = fx.wait_event("webapp", "Loaded").await;
    assert_eq!(kind, "Normal");
    assert!(note.contains("webapp"), "{note}");
    fx.assert_reconciles("first").await;

    // A changed build replaces the file: swapped without a restart.
    let v2 = with_custom_section(&v1, "wasm-operator-test", b"build 2");
    write_atomically(&path, &v2);
    fx.wait_serving("webapp", &digest(&v2)).await;
    let (kind, note) = fx.wait_event("webapp", "Swapped").await;
    assert_eq!(kind, "Normal");
    assert!(note.contains(&digest(&v2)), "{note}");
    fx.assert_reconciles("second").await;

    // Per-version counts: the first digest reconciled something.
    let o = fx
        .wait_for("webapp", "per-version counts", |o| {
            o.pointer("/status/versions")
                .and_then(|v| v.as_array())
                .is_some_and(|v| {
                    v.iter().any(|e| {
                        e["digest"] == json!(digest(&v1)) && e["reconciles"].as_u64() > Some(0)
                    })
                })
        })
        .await;
    assert!(
        o.pointer("/status/versions")
            .unwrap()
            .as_array()
            .unwrap()
            .len()
            >= 2,
        "{o}"
    );

    // Editing config and limits reloads the same component.
    fx.patch_spec(
        "webapp",
        json!({"config": {"team": "shop"}, "limits": {"callTimeout": "2s"}}),
    )
    .await;
    let (kind, _) = fx.wait_event("webapp", "Reloaded").await;
    assert_eq!(kind, "Normal");
    fx.wait_serving("webapp", &digest(&v2)).await;
    fx.assert_reconciles("third").await;

    // Deleting the WasmPlugin stops its controller, then the object goes.
    fx.wasmplugins()
        .delete("webapp", &DeleteParams::default())
        .await
        .unwrap();
    let api = fx.wasmplugins();
    wait_until("WasmPlugin webapp to disappear", CONVERGE, || async {
        match support::get_json(&api, "webapp").await {
            None => Ok(()),
            Some(o) => Err(format!("{o}")),
        }
    })
    .await;
    assert!(
        fx.registry.loaded().is_empty(),
        "{:?}",
        fx.registry.loaded()
    );
    fx.wait_event("webapp", "Unloaded").await;
    fx.create_webapp("after-delete").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let deployments: Api<Deployment> = Api::namespaced(fx.client(), NS);
    assert!(
        deployments.get_opt("after-delete").await.unwrap().is_none(),
        "a WebApp created after the WasmPlugin was deleted was reconciled"
    );
}

/// `bytes` gzip'd.
pub(crate) fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Creates or replaces ConfigMap `name` holding `bytes` under `key`.
pub(crate) async fn put_config_map(fx: &Fixture, name: &str, key: &str, bytes: Vec<u8>) {
    let api: Api<ConfigMap> = Api::namespaced(fx.client(), NS);
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
    }))
    .unwrap();
    let mut cm = cm;
    cm.binary_data = Some([(key.to_string(), ByteString(bytes))].into_iter().collect());
    match api.get_opt(name).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &cm).await.unwrap();
        }
        Some(_) => {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&cm))
                .await
                .unwrap();
        }
    }
}

/// The webapp component (1.4 MB) only fits a ConfigMap gzip'd: the API
/// server refuses more than 1 MiB of data (plain components are unit-tested
/// in `wasmplugin::source`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_map_source_gzip_and_missing_key_or_map() {
    let fx = Fixture::start().await;
    let v1 = support::plugin_bytes("webapp");
    put_config_map(&fx, "webapp-plugin", "webapp.wasm", gzip(&v1)).await;
    fx.create(
        "webapp",
        json!({"source": {"configMap": {"namespace": NS, "name": "webapp-plugin", "key": "webapp.wasm"}}}),
    )
    .await;
    let o = fx.wait_serving("webapp", &digest(&v1)).await;
    assert_eq!(
        o.pointer("/status/source"),
        Some(&json!("configMap:default/webapp-plugin#webapp.wasm"))
    );
    fx.assert_reconciles("first").await;

    // A new build in the watched ConfigMap is picked up; the digest is the
    // component's, not the archive's.
    let v2 = with_custom_section(&v1, "wasm-operator-test", b"gzip build");
    put_config_map(&fx, "webapp-plugin", "webapp.wasm", gzip(&v2)).await;
    fx.wait_serving("webapp", &digest(&v2)).await;
    fx.wait_event("webapp", "Swapped").await;
    fx.assert_reconciles("gzipped").await;

    // Missing key: a clear condition, the last good version keeps serving.
    fx.patch_spec(
        "webapp",
        json!({"source": {"configMap": {"key": "other.wasm"}}}),
    )
    .await;
    let o = fx
        .wait_degraded("webapp", "SourceNotFound", &digest(&v2))
        .await;
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("other.wasm") && message.contains("webapp.wasm"),
        "{message}"
    );
    let (kind, note) = fx.wait_event("webapp", "SourceNotFound").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("keeps serving"), "{note}");
    fx.assert_reconciles("after-missing-key").await;

    // Missing ConfigMap: same.
    fx.patch_spec(
        "webapp",
        json!({"source": {"configMap": {"name": "gone", "key": "webapp.wasm"}}}),
    )
    .await;
    let o = fx
        .wait_for("webapp", "Degraded naming the missing ConfigMap", |o| {
            condition(o, "Degraded")
                .and_then(|c| c["message"].as_str())
                .is_some_and(|m| m.contains("default/gone does not exist"))
        })
        .await;
    assert_eq!(o.pointer("/status/digest"), Some(&json!(digest(&v2))));
    assert!(crate::condition_is(&o, "Ready", "True"));
    fx.assert_reconciles("after-missing-map").await;

    // Creating the ConfigMap heals it (the watch follows the new name).
    put_config_map(&fx, "gone", "webapp.wasm", gzip(&v1)).await;
    let o = fx.wait_serving("webapp", &digest(&v1)).await;
    assert!(crate::condition_is(&o, "Degraded", "False"), "{o}");
}
