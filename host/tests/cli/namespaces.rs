//! `wasm-operator run -n NAMESPACE`: the host serves only the namespaces
//! named, within each plugin's grant; `-A` and `-n` together are refused.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
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

async fn create_webapp(client: &kube::Client, namespace: &str) {
    let webapp = serde_json::json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": { "name": "shop", "namespace": namespace },
        "spec": { "image": "nginx:1.27", "replicas": 1 },
    });
    webapps(client, namespace)
        .patch(
            "shop",
            &PatchParams::apply("cli-test").force(),
            &Patch::Apply(&webapp),
        )
        .await
        .unwrap();
}

async fn deployments_in(client: &kube::Client, namespace: &str) -> Vec<Deployment> {
    Api::<Deployment>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_only_the_namespaces_named_with_n() {
    let wasm = plugin_wasm("webapp");
    let cluster = crate::support::start_cluster().await;
    let client = cluster.client();
    install_crds(&client, &workspace().join("examples/webapp/crd.yaml"))
        .await
        .unwrap();
    for name in ["team-a", "team-b"] {
        let namespace: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .unwrap();
    }
    // team-b's WebApp exists first: had the host served team-b, its
    // Deployment would be written before (or with) team-a's.
    create_webapp(&client, "team-b").await;

    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("run.log");
    let child = spawn_logged(
        run_plugin_command(&wasm, cluster.kubeconfig_path())
            .args(["-n", "team-a", "--metrics-addr", "127.0.0.1:0"])
            .env_remove("RUST_LOG"),
        &log_path,
    );
    create_webapp(&client, "team-a").await;

    eventually(Duration::from_secs(180), "team-a's Deployment", || {
        let client = client.clone();
        async move {
            let found = deployments_in(&client, "team-a").await;
            (!found.is_empty()).then_some(())
        }
    })
    .await;
    // A change to team-b's WebApp after team-a is served is not served either.
    create_webapp(&client, "team-b").await;
    create_webapp(&client, "team-a").await;
    assert!(
        deployments_in(&client, "team-b").await.is_empty(),
        "team-b is outside -n team-a and must not be reconciled"
    );

    let clean = tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    assert!(clean, "run did not exit cleanly on SIGTERM; log:\n{log}");
    assert!(
        log.contains("namespaces [team-a]"),
        "the log says which namespaces are served:\n{log}"
    );
}

#[test]
fn run_refuses_n_with_a() {
    let output = run_binary(&["run", "-n", "team-a", "-A"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cannot be used with"), "{stderr}");
}

#[test]
fn verbosity_is_accepted_like_kubectl() {
    for flags in [&["-v=4"][..], &["--v=6"], &["-v", "2"], &["-v9"]] {
        let args: Vec<&str> = flags.iter().copied().chain(["crd", "print"]).collect();
        let output = run_binary(&args);
        assert!(
            output.status.success()
                && String::from_utf8_lossy(&output.stdout)
                    .contains("kind: CustomResourceDefinition"),
            "{flags:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let output = run_binary(&["-v=loud", "crd", "print"]);
    assert!(!output.status.success(), "a level is a number");
}
