//! Readiness is per plugin: a plugin whose caches never sync is reported on
//! `/readyz?verbose` and in `wasm_operator_plugin_ready`, and does not hold
//! the host's `/readyz` at 503.

use std::net::SocketAddr;

use kube::api::PostParams;
use serde_json::json;

use crate::support::{dynamic_api, wait_until};
use crate::{CONVERGE, Host, deployment_kind, webapp_kind};

async fn http_get(url: &str) -> Result<(u16, String), String> {
    let response = reqwest::get(url).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.map_err(|e| e.to_string())?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_a_plugin_whose_caches_never_sync_does_not_make_the_host_unready() {
    if !crate::support::devcluster_only(
        "devcluster_only_a_plugin_whose_caches_never_sync_does_not_make_the_host_unready",
        "fault injection (lists failing with 503)",
    ) {
        return;
    }
    let host = Host::start().await;
    // Every list and watch of Deployments fails: the webapp plugin's
    // Deployment cache cannot sync until the fault is lifted.
    let faults = host
        .cluster
        .faults()
        .expect("the devcluster injects faults");
    faults.fail_next("/apis/apps/v1/deployments", 1_000_000, 503);
    host.load("webapp").await;
    let manager = host.manager.clone();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (bound, server) =
        wasm_operator::telemetry::serve_checks(addr, host.metrics.clone(), move || {
            manager.readiness()
        })
        .await
        .unwrap();
    let base = format!("http://{bound}");

    let (status, body) = http_get(&format!("{base}/readyz")).await.unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, verbose) = http_get(&format!("{base}/readyz?verbose")).await.unwrap();
    assert_eq!(status, 200, "{verbose}");
    assert!(verbose.contains("[+]host"), "{verbose}");
    assert!(
        verbose
            .contains("[-]plugin webapp caches not synced yet: apps/v1 Deployment (deployments)"),
        "{verbose}"
    );
    let (_, metrics) = http_get(&format!("{base}/metrics")).await.unwrap();
    assert!(
        metrics.contains("wasm_operator_plugin_ready{plugin=\"webapp\"} 0"),
        "{metrics}"
    );

    // Its reconciles wait for its caches: a WebApp created now is not
    // reconciled against a Deployment cache that has not loaded.
    let webapps = dynamic_api(&host.client(), &webapp_kind(), Some("default"));
    let app = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "waiting"}, "spec": {"replicas": 1, "image": "nginx"},
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &app).await.unwrap();
    let deployments = dynamic_api(&host.client(), &deployment_kind(), Some("default"));
    let (_, verbose) = http_get(&format!("{base}/readyz?verbose")).await.unwrap();
    assert!(verbose.contains("[-]plugin webapp"), "{verbose}");
    assert!(
        deployments.get_opt("waiting").await.unwrap().is_none(),
        "reconciled before the Deployment cache synced"
    );

    // Once Deployments can be listed the plugin is ready too, and serves.
    faults.fail_next("/apis/apps/v1/deployments", 0, 503);
    wait_until("the webapp plugin to be ready", CONVERGE, || async {
        let (_, verbose) = http_get(&format!("{base}/readyz?verbose")).await?;
        if verbose.contains("[+]plugin webapp ok") {
            Ok(())
        } else {
            Err(verbose)
        }
    })
    .await;
    let (_, metrics) = http_get(&format!("{base}/metrics")).await.unwrap();
    assert!(
        metrics.contains("wasm_operator_plugin_ready{plugin=\"webapp\"} 1"),
        "{metrics}"
    );
    wait_until("the waiting WebApp's Deployment", CONVERGE, || async {
        deployments
            .get_opt("waiting")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "no Deployment yet".to_string())
    })
    .await;
    server.abort();
}
