//! Plugins in Python, TypeScript and Go (plugins/webapp-py, webapp-ts,
//! webapp-go) are sources like any other: pulled from an OCI registry,
//! swapped by pushing a new build to the tag, serving WebApps. Only Go's
//! fits a ConfigMap: the API server keeps an object's data under 1 MiB, and
//! gzip leaves the Python component at ~6.5 MB, the TypeScript one at
//! ~4.1 MB and the Go one at ~0.95 MB (docs/languages.md).

use serde_json::json;

use crate::oci::push;
use crate::sources::{gzip, put_config_map};
use crate::support::{self, registry::Registry};
use crate::{Fixture, digest};

/// The most data a ConfigMap holds (the API server's limit on an object).
const CONFIG_MAP_LIMIT: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_typescript_plugins_load_from_oci_and_swap_by_tag() {
    let registry = Registry::start();
    let fx = Fixture::start().await;
    let reference = registry.reference("plugins/webapp:stable");

    let python = support::plugin_bytes("webapp_py");
    push(&python, &reference).await;
    fx.create(
        "webapp",
        json!({"source": {"oci": {"reference": reference, "pollInterval": "1s"}}}),
    )
    .await;
    let o = fx.wait_serving("webapp", &digest(&python)).await;
    assert_eq!(o.pointer("/status/sourceKind"), Some(&json!("oci")));
    fx.assert_reconciles("python").await;

    // The TypeScript build pushed to the same tag replaces it in place.
    let typescript = support::plugin_bytes("webapp_ts");
    push(&typescript, &reference).await;
    fx.wait_serving("webapp", &digest(&typescript)).await;
    let (kind, note) = fx.wait_event("webapp", "Swapped").await;
    assert_eq!(kind, "Normal");
    assert!(note.contains(&digest(&typescript)), "{note}");
    fx.assert_reconciles("typescript").await;

    // What docs/languages.md says about ConfigMaps holds for these builds.
    for (language, bytes) in [("Python", &python), ("TypeScript", &typescript)] {
        let gzipped = gzip(bytes).len();
        assert!(
            gzipped > CONFIG_MAP_LIMIT,
            "the {language} webapp gzips to {gzipped} bytes: it fits a ConfigMap now, say so in docs/languages.md"
        );
    }
}

/// The Go webapp gzip'd fits a ConfigMap, and serves from one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_plugin_loads_from_a_config_map() {
    let fx = Fixture::start().await;
    let go = support::plugin_bytes("webapp_go");
    let gzipped = gzip(&go);
    assert!(
        gzipped.len() < CONFIG_MAP_LIMIT,
        "the Go webapp gzips to {} bytes: it no longer fits a ConfigMap, say so in docs/languages.md",
        gzipped.len()
    );
    put_config_map(&fx, "webapp-go", "webapp.wasm", gzipped).await;
    fx.create(
        "webapp",
        json!({"source": {"configMap": {"namespace": "default", "name": "webapp-go", "key": "webapp.wasm"}}}),
    )
    .await;
    fx.wait_serving("webapp", &digest(&go)).await;
    fx.assert_reconciles("go").await;
}
