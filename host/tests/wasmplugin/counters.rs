//! The WasmPlugin status's per-version counters follow the host's own
//! counts (the figures `/metrics` exports), and no metric series carries a
//! placeholder plugin name or version.

use serde_json::json;

use crate::support;
use crate::{Fixture, digest, file_spec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counters_follow_the_metrics_and_no_series_has_a_placeholder() {
    let fx = Fixture::start().await;
    let v1 = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    std::fs::write(&path, &v1).unwrap();
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&v1)).await;
    for app in ["one", "two", "three"] {
        fx.assert_reconciles(app).await;
    }
    let serving = digest(&v1);
    let o = fx
        .wait_for("webapp", "status counts equal to the host's", |o| {
            let live = fx
                .registry
                .stats("webapp")
                .into_iter()
                .find(|s| s.digest == serving)
                .map(|s| s.reconciles);
            let shown = o
                .pointer("/status/versions")
                .and_then(|v| v.as_array())
                .and_then(|v| v.iter().find(|e| e["digest"] == json!(serving)))
                .and_then(|e| e["reconciles"].as_u64());
            live.is_some_and(|n| n >= 3) && shown == live
        })
        .await;
    assert_eq!(o.pointer("/status/version"), Some(&json!("1.0.0")), "{o}");

    let metrics = fx.manager.metrics().encode();
    // The `manifest` call made while loading is reported under the name
    // and version the manifest gave, never under placeholders.
    assert!(
        metrics.contains(
            "wasm_operator_plugin_call_duration_seconds_count{plugin=\"webapp\",version=\"1.0.0\",function=\"manifest\"}"
        ),
        "{metrics}"
    );
    let placeholders: Vec<&str> = metrics
        .lines()
        .filter(|l| l.contains("version=\"unknown\"") || l.contains("plugin=\"<"))
        .collect();
    assert!(placeholders.is_empty(), "{placeholders:#?}");
}
