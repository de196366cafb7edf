//! What conversion through the host's webhook costs a reader, side by side
//! in one run: listing `CONVERT_BENCH_OBJECTS` DistributedKVs (default
//! 10,000) stored as v1alpha1, read as v1alpha1 (as stored, no conversion)
//! and as v1beta1 (every object converted by the plugin behind the host's
//! HTTPS webhook), in interleaved rounds; then the storage migration's cost
//! per object, unthrottled.
//!
//! Reports the ratio converted ÷ as-stored (medians over the rounds), the
//! conversions per second beyond a plain list, and µs per migrated object.
//! Against the devcluster on loopback (the real API server adds its own
//! decoding); the host's code is as the bench profile builds it.
//!
//! Needs the components: run `scripts/build-plugins.sh` first.
//! `cargo bench -p wasm-operator --bench convert`

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

#[path = "../tests/convert/kv.rs"]
#[allow(dead_code)]
mod kv;

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, ListParams, PostParams};
use wasm_operator::registry::{Registry, RegistryOptions};
use wasm_operator::webhook::ConversionWebhook;
use wasm_operator::webhook::storage::{self, StorageOptions};

use kv::{CRD, alpha, install_kv_crd, kvs, wait_crd_points_at, webhook_options};

const ROUNDS: usize = 5;

/// Lists every object of `api` in pages of 500; the count and the time.
async fn list_all(api: &Api<DynamicObject>) -> (usize, Duration) {
    let started = Instant::now();
    let mut params = ListParams::default().limit(500);
    let mut seen = 0;
    loop {
        let page = api.list(&params).await.expect("list");
        seen += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    (seen, started.elapsed())
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    kv::install_crypto_provider();
    let objects: usize = std::env::var("CONVERT_BENCH_OBJECTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_kv_crd(&client, "v1alpha1").await;
    // The plugin in a registry of its own: no controller reconciles the
    // objects while they are measured.
    let registry = Registry::new(RegistryOptions::default()).expect("registry");
    registry
        .load(
            "file:distributedkv.wasm",
            &support::plugin_bytes("distributedkv"),
            serde_json::json!({}),
        )
        .await
        .expect("loading distributedkv");
    let webhook = ConversionWebhook::start(client.clone(), registry.clone(), webhook_options())
        .await
        .expect("webhook");
    webhook
        .sync_crds()
        .await
        .expect("pointing the CRD at the webhook");
    wait_crd_points_at(&client, &webhook).await;

    // Objects stored as v1alpha1, 8 creates in flight.
    let started = Instant::now();
    let alpha_api = kvs(&client, "v1alpha1");
    futures::future::join_all((0..8).map(|lane| {
        let api = alpha_api.clone();
        async move {
            for i in (lane..objects).step_by(8) {
                let object: DynamicObject =
                    serde_json::from_value(alpha(&format!("kv-{i:05}"), 1 + (i % 9) as i64))
                        .expect("object");
                api.create(&PostParams::default(), &object)
                    .await
                    .expect("create");
            }
        }
    }))
    .await;
    println!(
        "created {objects} v1alpha1 objects in {:.1?}",
        started.elapsed()
    );

    // Storage switches to v1beta1; the objects stay stored as v1alpha1
    // until migrated, so reading them as v1beta1 converts each.
    install_kv_crd(&client, "v1beta1").await;
    let beta_api = kvs(&client, "v1beta1");
    let (mut converted, mut stored) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Alternate which goes first, so neither always runs warm.
        let order = if round % 2 == 0 {
            [&beta_api, &alpha_api]
        } else {
            [&alpha_api, &beta_api]
        };
        for api in order {
            let (seen, took) = list_all(api).await;
            assert_eq!(seen, objects, "every object listed");
            if std::ptr::eq(api, &beta_api) {
                converted.push(took);
            } else {
                stored.push(took);
            }
        }
    }
    let (converted, stored) = (median(converted), median(stored));
    let extra = converted
        .saturating_sub(stored)
        .as_secs_f64()
        .max(f64::EPSILON);
    println!(
        "list of {objects} objects, medians of {ROUNDS} interleaved rounds: {converted:.1?} read as v1beta1 (converted through the webhook), {stored:.1?} as stored (v1alpha1): ratio {:.2}",
        converted.as_secs_f64() / stored.as_secs_f64().max(f64::EPSILON)
    );
    println!(
        "conversions through the webhook: {:.0}/s ({:.1} µs per object beyond a plain list)",
        objects as f64 / extra,
        extra * 1e6 / objects as f64
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
    .expect("storage migration");
    let elapsed = started.elapsed();
    assert!(report.done, "{report:?}");
    println!(
        "storage migration of {} objects: {elapsed:.1?}, {:.0} µs per object (unthrottled; the default --rate 50 makes it 20 ms)",
        report.migrated,
        elapsed.as_secs_f64() * 1e6 / report.migrated.max(1) as f64
    );
    webhook.shutdown().await;
}
