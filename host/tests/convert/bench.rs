//! Benchmark (not a test; `#[ignore]`d): conversions per second through the
//! host's webhook, and the per-object cost of the storage migration, on
//! `CONVERT_BENCH_OBJECTS` objects (default 10,000). Run with
//!
//! ```console
//! cargo test -p wasm-operator --test convert -- --ignored bench --nocapture
//! ```
//!
//! It runs in the test profile (the host's own code unoptimised, its
//! dependencies and the plugin optimised), against the devcluster on
//! loopback: figures are a floor, not a real cluster's.

use std::time::Instant;

use kube::api::{DynamicObject, ListParams, PostParams};
use wasm_operator::registry::{Registry, RegistryOptions};
use wasm_operator::webhook::ConversionWebhook;
use wasm_operator::webhook::storage::{self, StorageOptions};

use crate::{CRD, alpha, install_kv_crd, kvs, support, wait_crd_points_at, webhook_options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: run with --ignored bench --nocapture"]
async fn bench_conversions_and_storage_migration() {
    crate::install_crypto_provider();
    let objects: usize = std::env::var("CONVERT_BENCH_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_kv_crd(&client, "v1alpha1").await;
    // The plugin in a registry of its own: no controller reconciles the
    // objects while they are measured.
    let registry = Registry::new(RegistryOptions::default()).unwrap();
    registry
        .load(
            "file:distributedkv.wasm",
            &support::plugin_bytes("distributedkv"),
            serde_json::json!({}),
        )
        .await
        .unwrap();
    let webhook = ConversionWebhook::start(client.clone(), registry.clone(), webhook_options())
        .await
        .unwrap();
    webhook.sync_crds().await.unwrap();
    wait_crd_points_at(&client, &webhook).await;

    // Objects stored as v1alpha1, 8 creates in flight.
    let started = Instant::now();
    let api = kvs(&client, "v1alpha1");
    let chunks: Vec<Vec<usize>> = (0..objects)
        .collect::<Vec<_>>()
        .chunks(objects.div_ceil(8).max(1))
        .map(<[usize]>::to_vec)
        .collect();
    let creates = chunks.into_iter().map(|chunk| {
        let api = api.clone();
        async move {
            for i in chunk {
                let object: DynamicObject =
                    serde_json::from_value(alpha(&format!("kv-{i:05}"), 1 + (i % 9) as i64))
                        .unwrap();
                api.create(&PostParams::default(), &object).await.unwrap();
            }
        }
    });
    futures::future::join_all(creates).await;
    println!(
        "created {objects} v1alpha1 objects in {:.1?}",
        started.elapsed()
    );

    // Storage switches to v1beta1: reading as v1beta1 now converts each.
    install_kv_crd(&client, "v1beta1").await;
    let list_all = |version: &'static str| {
        let api = kvs(&client, version);
        async move {
            let started = Instant::now();
            let mut params = ListParams::default().limit(500);
            let mut seen = 0;
            loop {
                let page = api.list(&params).await.unwrap();
                seen += page.items.len();
                match page.metadata.continue_.filter(|c| !c.is_empty()) {
                    Some(token) => params = params.continue_token(&token),
                    None => break,
                }
            }
            (seen, started.elapsed())
        }
    };
    let (seen, converted) = list_all("v1beta1").await;
    assert_eq!(seen, objects);
    let (_, native) = list_all("v1alpha1").await;
    println!(
        "list of {seen} objects: {converted:.1?} converted through the webhook (v1beta1), {native:.1?} as stored (v1alpha1)"
    );
    let conversion = converted
        .saturating_sub(native)
        .as_secs_f64()
        .max(f64::EPSILON);
    println!(
        "conversions through the webhook: {:.0}/s ({:.1} µs per object beyond a plain list)",
        seen as f64 / conversion,
        conversion * 1e6 / seen as f64
    );

    let started = Instant::now();
    let report = storage::migrate(
        &client,
        CRD,
        &StorageOptions {
            writes_per_second: 0,
            max_objects: None,
        },
        |_, _| {},
    )
    .await
    .unwrap();
    let elapsed = started.elapsed();
    assert!(report.done, "{report:?}");
    println!(
        "storage migration of {} objects: {elapsed:.1?}, {:.0} µs per object (unthrottled; the default --rate 50 makes it 20 ms)",
        report.migrated,
        elapsed.as_secs_f64() * 1e6 / report.migrated as f64
    );
    webhook.shutdown().await;
}
