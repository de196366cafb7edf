//! Issue 23: the host's marks cannot be written through `convert`. A
//! plugin whose `convert` forges a fencing token of 2^64−1, a
//! `min-compatible-version` of 99.0.0, strips the managed-by mark and plants
//! a host label is answered with the marks the object came in with: nothing
//! forged reaches storage or a reader, and the object keeps being reconciled.

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Map, Value, json};

use crate::support::wait_until;
use crate::{CONVERGE, Fixture, NS, alpha};

/// The host's marks of an object: its `wasm-operator.dev/*` annotations
/// and labels.
fn host_marks(object: &Value, field: &str) -> Map<String, Value> {
    object
        .pointer(&format!("/metadata/{field}"))
        .and_then(Value::as_object)
        .map(|map| {
            map.iter()
                .filter(|(key, _)| key.starts_with("wasm-operator.dev/"))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_replicas(fx: &Fixture, name: &str, replicas: i32) {
    let statefulsets: Api<StatefulSet> = Api::namespaced(fx.client(), NS);
    wait_until(
        &format!("StatefulSet {name} with {replicas} replicas"),
        CONVERGE,
        || {
            let statefulsets = statefulsets.clone();
            async move {
                let sts = statefulsets
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?;
                match sts {
                    Some(s) if s.spec.as_ref().and_then(|s| s.replicas) == Some(replicas) => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_convert_that_forges_the_host_marks_is_answered_with_the_stored_marks() {
    // Stored as v1alpha1, reconciled as v1beta1: every read and every write
    // of the host goes through the forger's `convert`.
    let fx = Fixture::start_with_storage("v1alpha1").await;
    fx.deploy("distributedkv_forger").await;
    // kube-apiserver converts through the webhook a moment after the CRD
    // says so (until then a v1beta1 read is the v1alpha1 spec relabelled):
    // the object under test is created once a read is really converted.
    fx.create_kv(alpha("probe", 1)).await;
    let probes = fx.kvs("v1beta1");
    wait_until(
        "v1beta1 reads converted by the webhook",
        CONVERGE,
        || async {
            let probe = probes.get("probe").await.map_err(|e| e.to_string())?;
            let probe = serde_json::to_value(probe).map_err(|e| e.to_string())?;
            if probe.pointer("/spec/replicaCount") == Some(&json!(1)) {
                Ok(())
            } else {
                Err(probe.to_string())
            }
        },
    )
    .await;
    fx.create_kv(alpha("orders", 3)).await;

    // Reconciled by 1.3.0: the marks it wrote are stored as the host wrote
    // them (read as v1alpha1, the storage version: no conversion).
    let stored = wait_until("DistributedKV orders marked by 1.3.0", CONVERGE, || async {
        let stored = fx.read_kv("v1alpha1", "orders").await;
        match host_marks(&stored, "annotations").get("wasm-operator.dev/managed-by-version") {
            Some(version) if version == "1.3.0" => Ok(stored),
            _ => Err(stored.to_string()),
        }
    })
    .await;
    let stored_annotations = host_marks(&stored, "annotations");
    assert!(
        !stored_annotations.contains_key("wasm-operator.dev/fencing-token"),
        "{stored}"
    );
    assert!(
        !stored_annotations.contains_key("wasm-operator.dev/min-compatible-version"),
        "{stored}"
    );
    assert!(host_marks(&stored, "labels").is_empty(), "{stored}");
    wait_replicas(&fx, "orders", 3).await;

    // Read through the webhook, the marks are the stored ones, not the forged.
    let served = fx.read_kv("v1beta1", "orders").await;
    assert_eq!(served["spec"]["replicaCount"], 3, "{served}");
    assert_eq!(
        host_marks(&served, "annotations"),
        stored_annotations,
        "{served}"
    );
    assert!(host_marks(&served, "labels").is_empty(), "{served}");

    // The object keeps being reconciled: a forged min-compatible-version
    // would have made it unreconcilable by 1.3.0.
    fx.kvs("v1alpha1")
        .patch(
            "orders",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": 5}})),
        )
        .await
        .unwrap();
    wait_replicas(&fx, "orders", 5).await;
    let stored = fx.read_kv("v1alpha1", "orders").await;
    assert_eq!(
        host_marks(&stored, "annotations"),
        stored_annotations,
        "{stored}"
    );

    // Every attempt was counted.
    let metrics = fx.registry.metrics().encode();
    let restored = metrics
        .lines()
        .find(|line| {
            line.starts_with("wasm_operator_host_marks_restored_total{")
                && line.contains(r#"plugin="distributedkv""#)
                && line.contains(r#"via="convert""#)
        })
        .unwrap_or_else(|| panic!("no restored-marks count in\n{metrics}"));
    let count: f64 = restored.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count >= 1.0, "{restored}");
}
