//! `wasm-operator run` against a devcluster started by the test.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use wasm_operator::dev::manifests::install_crds;

use crate::common::{
    eventually, plugin_wasm, run_binary, run_plugin_command, spawn_logged, workspace,
};

fn webapps(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "WebApp"),
        "webapps",
    );
    Api::namespaced_with(client.clone(), namespace, &resource)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reconciles_a_webapp_into_a_deployment() {
    let wasm = plugin_wasm("webapp");
    let cluster = crate::support::start_cluster().await;
    let client = cluster.client();
    install_crds(&client, &workspace().join("examples/webapp/crd.yaml"))
        .await
        .unwrap();

    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("run.log");
    let child = spawn_logged(
        run_plugin_command(&wasm, cluster.kubeconfig_path())
            .args(["--metrics-addr", "127.0.0.1:0"]),
        &log_path,
    );

    let webapp = serde_json::json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": { "name": "shop", "namespace": "default" },
        "spec": { "image": "nginx:1.27", "replicas": 2 },
    });
    let created = webapps(&client, "default")
        .patch(
            "shop",
            &PatchParams::apply("cli-test").force(),
            &Patch::Apply(&webapp),
        )
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment = eventually(Duration::from_secs(180), "the WebApp's Deployment", || {
        let deployments = deployments.clone();
        let uid = uid.clone();
        async move {
            let list = deployments.list(&ListParams::default()).await.ok()?;
            list.items.into_iter().find(|d| {
                d.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|owner| owner.uid == uid && owner.controller == Some(true))
            })
        }
    })
    .await;
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas);
    assert_eq!(replicas, Some(2), "{deployment:?}");
    let labels = deployment.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("wasm-operator.dev/plugin").map(String::as_str),
        Some("webapp")
    );

    let clean = tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();
    assert!(
        clean,
        "run did not exit cleanly on SIGTERM; log:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
}

/// Without --plugin, `run` serves WasmPlugin objects, so it needs the
/// cluster (host/tests/wasmplugin covers the rest of that mode).
#[test]
fn run_without_plugins_connects_to_the_cluster() {
    let output = run_binary(&["run", "--kubeconfig", "/nonexistent/kubeconfig"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/kubeconfig"), "{stderr}");
}

#[test]
fn run_names_an_unreadable_kubeconfig() {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&[
        "run",
        "--plugin",
        wasm.to_str().unwrap(),
        "--kubeconfig",
        "/nonexistent/kubeconfig",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot read kubeconfig /nonexistent/kubeconfig"),
        "{stderr}"
    );
}

#[test]
fn run_rejects_malformed_config_for() {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&[
        "run",
        "--plugin",
        wasm.to_str().unwrap(),
        "--config-for",
        "webapp",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("is not NAME=JSON"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_rejects_config_for_an_unknown_plugin() {
    let wasm = plugin_wasm("webapp");
    let cluster = crate::support::start_cluster().await;
    install_crds(
        &cluster.client(),
        &workspace().join("examples/webapp/crd.yaml"),
    )
    .await
    .unwrap();
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let wasm = wasm.to_str().unwrap().to_string();
    let output = tokio::task::spawn_blocking(move || {
        run_binary(&[
            "run",
            "--plugin",
            &wasm,
            "--kubeconfig",
            &kubeconfig,
            "--metrics-addr",
            "127.0.0.1:0",
            "--config-for",
            "nothere={}",
        ])
    })
    .await
    .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--config-for nothere: no plugin of that name was loaded (loaded: webapp)"),
        "{stderr}"
    );
}
