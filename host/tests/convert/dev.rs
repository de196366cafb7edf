//! `wasm-operator dev` serves distributedkv beside webapp: the example
//! objects of both API versions are applied through the session's webhook
//! and reconciled, and turn Available on dev's simulated workloads.

use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use kube::api::Api;
use wasm_operator::dev::{DevOptions, DevSession, LoadOutcome};

use crate::support::{self, wait_until};
use crate::{CONVERGE, NS, kvs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_distributedkv_and_its_examples_in_both_versions() {
    crate::install_crypto_provider();
    let wasm_dir = tempfile::tempdir().unwrap();
    for plugin in ["webapp", "distributedkv"] {
        std::fs::copy(
            support::plugin_wasm(plugin),
            wasm_dir.path().join(format!("{plugin}.wasm")),
        )
        .unwrap();
    }
    let mut options = DevOptions::for_workspace(support::workspace());
    options.port = 0;
    options.build = false;
    options.plugins_dir = wasm_dir.path().join("no-crates");
    options.wasm_dir = wasm_dir.path().to_path_buf();
    options.debounce = Duration::from_millis(200);
    let session = DevSession::start(options).await.unwrap();
    let loaded: Vec<String> = session
        .summary()
        .plugins
        .iter()
        .filter_map(|event| match &event.outcome {
            LoadOutcome::Loaded { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    assert!(loaded.contains(&"distributedkv".to_string()), "{loaded:?}");
    assert!(loaded.contains(&"webapp".to_string()), "{loaded:?}");
    let applied = &session.summary().applied;
    assert!(
        applied.iter().any(|a| a.contains("DistributedKV")),
        "{applied:?}"
    );

    let client = session.client();
    // `orders` is written as v1alpha1 in the examples, `sessions` as v1beta1.
    let orders = kvs(&client, "v1beta1").get("orders").await.unwrap();
    assert_eq!(orders.data["spec"]["replicaCount"], 3);
    let sessions = kvs(&client, "v1alpha1").get("sessions").await.unwrap();
    assert_eq!(sessions.data["spec"]["size"], 5);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    for name in ["orders", "sessions"] {
        wait_until(&format!("StatefulSet {name}"), CONVERGE, || {
            let statefulsets = statefulsets.clone();
            async move {
                statefulsets
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "not yet".to_string())
            }
        })
        .await;
    }
    // dev simulates workloads: the StatefulSets' readyReplicas move, and the
    // plugin turns each DistributedKV Available from them.
    for name in ["orders", "sessions"] {
        let client = client.clone();
        wait_until(&format!("DistributedKV {name} Available"), CONVERGE, || {
            let kvs = kvs(&client, "v1beta1");
            async move {
                let kv = kvs.get(name).await.map_err(|e| e.to_string())?;
                let available = kv.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Available" && c["status"] == "True");
                available
                    .then_some(())
                    .ok_or_else(|| format!("status {}", kv.data["status"]))
            }
        })
        .await;
    }
    assert!(session.webhook().is_some());
    session.shutdown().await;
}
