//! Metrics, health and readiness over HTTP while plugins reconcile.

use std::net::SocketAddr;

use kube::api::PostParams;
use serde_json::json;

use crate::support::{dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, webapp_kind};

async fn http_get(url: &str) -> Result<(u16, String), String> {
    let response = reqwest::get(url).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    Ok((status, response.text().await.map_err(|e| e.to_string())?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_health_and_readiness() {
    let host = Host::start().await;
    let manager = host.manager.clone();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (bound, server) =
        wasm_operator::telemetry::serve(addr, host.metrics.clone(), move || manager.ready())
            .await
            .unwrap();
    let base = format!("http://{bound}");
    assert_eq!(http_get(&format!("{base}/healthz")).await.unwrap().0, 200);

    host.load("webapp").await;
    let webapps = dynamic_api(&host.client(), &webapp_kind(), Some("default"));
    let app = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "metrics"}, "spec": {"replicas": 1, "image": "nginx"},
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &app).await.unwrap();
    wait_until("/readyz to answer 200", CONVERGE, || async {
        match http_get(&format!("{base}/readyz")).await? {
            (200, _) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_until("WebApp metrics to be reconciled", CONVERGE, || async {
        let app = get_json(&webapps, "metrics").await.ok_or("gone")?;
        if app.pointer("/status/observedGeneration") == Some(&json!(1)) {
            Ok(())
        } else {
            Err(app.to_string())
        }
    })
    .await;

    // The status is visible before the reconcile that wrote it has returned
    // and been counted: wait for the count.
    let text = wait_until("the reconcile to be counted", CONVERGE, || async {
        match http_get(&format!("{base}/metrics")).await? {
            (200, text)
                if text.contains(
                    "controller_runtime_reconcile_total{controller=\"webapp\",result=\"success\"}",
                ) =>
            {
                Ok(text)
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    for needle in [
        "controller_runtime_reconcile_total{controller=\"webapp\",result=\"success\"}",
        "controller_runtime_reconcile_time_seconds_count{controller=\"webapp\"}",
        "controller_runtime_reconcile_errors_total{controller=\"webapp\"} 0",
        "workqueue_adds_total{name=\"webapp\"}",
        "workqueue_depth{name=\"webapp\"}",
        "wasm_operator_plugin_call_duration_seconds_count{plugin=\"webapp\",version=\"",
        "function=\"reconcile\"}",
        "wasm_operator_plugin_traps_total{plugin=\"webapp\",version=\"",
        "wasm_operator_plugin_timeouts_total{plugin=\"webapp\",version=\"",
    ] {
        assert!(text.contains(needle), "/metrics lacks {needle}:\n{text}");
    }
    // The fresh object's finalizer and version marks went in one metadata
    // patch: one finalizer write, no annotation write of its own.
    assert!(
        text.contains("wasm_operator_writes_total{plugin=\"webapp\",write=\"finalizer\"} 1\n"),
        "{text}"
    );
    assert!(
        !text.contains("write=\"annotations\""),
        "the marks were written apart from the finalizer:\n{text}"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_flips_when_ready() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let ready = Arc::new(AtomicBool::new(false));
    let flag = ready.clone();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (bound, server) = wasm_operator::telemetry::serve(
        addr,
        wasm_operator::telemetry::Metrics::new(),
        move || flag.load(Ordering::SeqCst),
    )
    .await
    .unwrap();
    let base = format!("http://{bound}");
    assert_eq!(http_get(&format!("{base}/readyz")).await.unwrap().0, 503);
    assert_eq!(http_get(&format!("{base}/healthz")).await.unwrap().0, 200);
    ready.store(true, Ordering::SeqCst);
    assert_eq!(http_get(&format!("{base}/readyz")).await.unwrap().0, 200);
    server.abort();
}
