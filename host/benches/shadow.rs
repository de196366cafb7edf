//! The stable version's reconcile latency with shadowing off and on, side
//! by side in one run (interleaved rounds), on a devcluster over HTTP with
//! the real plugins: webapp 1.0.0 stable, webapp 1.1.0 (identical) as the
//! shadow candidate.
//!
//! One sample = one stable reconcile as a user sees it: patch a WebApp's
//! spec, wait (watch) until its status reports the new generation. With
//! shadowing on, the candidate computes the same reconcile beside it (off
//! the stable path); the goal is at most +10 % on p50 and p95.
//!
//! Needs the components: run `scripts/build-plugins.sh` first.
//! `cargo bench -p wasm-operator --bench shadow`

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::engine::EngineConfig;
use wasm_operator::manager::{Manager, ManagerOptions};
use wasm_operator::registry::{ActivationOptions, RegistryOptions, Rollout, RolloutSettings};
use wasm_operator::telemetry::Metrics;

const OBJECTS: usize = 20;
const ROUNDS: usize = 8;
const SAMPLES_PER_ROUND: usize = 40;

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Patches WebApp `name` to `replicas` and waits until its status reports
/// the new generation; returns the elapsed time.
async fn one_reconcile(api: &Api<DynamicObject>, name: &str, replicas: i64) -> Duration {
    let started = Instant::now();
    let patched = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .expect("patch");
    let generation = patched.metadata.generation.unwrap_or_default();
    let done = kube::runtime::wait::await_condition(
        api.clone(),
        name,
        move |o: Option<&DynamicObject>| {
            o.and_then(|o| o.data.pointer("/status/observedGeneration"))
                .and_then(Value::as_i64)
                .is_some_and(|g| g >= generation)
        },
    );
    tokio::time::timeout(Duration::from_secs(30), done)
        .await
        .expect("reconciled within 30 s")
        .expect("watch");
    started.elapsed()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    support::install_crd(&client, &support::example_crd("webapp")).await;
    let cache_dir = tempfile::tempdir().expect("temp dir");
    let manager = Manager::start(
        client.clone(),
        ManagerOptions {
            registry: RegistryOptions {
                concurrency: 4,
                engine: EngineConfig {
                    cache_dir: Some(cache_dir.path().to_path_buf()),
                    ..EngineConfig::default()
                },
                metrics: Metrics::new(),
            },
            ..ManagerOptions::default()
        },
    )
    .await
    .expect("manager");
    let registry = manager.registry().clone();
    let stable = support::plugin_wasm("webapp");
    registry
        .load(
            &format!("file:{}", stable.display()),
            &support::plugin_bytes("webapp"),
            json!({}),
        )
        .await
        .expect("webapp loads");
    let next = support::plugin_wasm("webapp_next");
    let candidate = registry
        .prepare(
            &format!("file:{}", next.display()),
            support::plugin_bytes("webapp_next"),
            Some("webapp"),
        )
        .await
        .expect("webapp_next prepares");

    let ar = support::api_resource("example.com", "v1", "WebApp", "webapps");
    let api = support::dynamic_api(&client, &ar, Some("default"));
    for i in 0..OBJECTS {
        let app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": format!("bench-{i}"), "namespace": "default"},
            "spec": {"replicas": 1, "image": "nginx:1.27"},
        }))
        .expect("object");
        api.create(&PostParams::default(), &app)
            .await
            .expect("create");
    }
    // Warm up: every object reconciled once.
    for i in 0..OBJECTS {
        one_reconcile(&api, &format!("bench-{i}"), 2).await;
    }

    let (mut off, mut on) = (Vec::new(), Vec::new());
    // The warm-up left every object at 2 replicas.
    let mut replicas = [2i64; OBJECTS];
    for round in 0..ROUNDS {
        let shadowing = round % 2 == 1;
        if shadowing {
            registry
                .activate_candidate(
                    candidate.clone(),
                    RolloutSettings::new(Rollout::Shadow),
                    ActivationOptions::default(),
                )
                .await
                .expect("shadow candidate");
            // Let the sweep that compares every object once finish first.
            let observations = registry.canary("webapp").expect("candidate");
            while observations.shadow_counts().objects_agreeing < OBJECTS as u64 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        } else {
            registry.drop_candidate("webapp").await.expect("drop");
        }
        for s in 0..SAMPLES_PER_ROUND {
            let i = s % OBJECTS;
            // Every sample changes the spec (a new generation to reconcile).
            replicas[i] = if replicas[i] == 1 { 2 } else { 1 };
            let took = one_reconcile(&api, &format!("bench-{i}"), replicas[i]).await;
            if shadowing {
                on.push(took)
            } else {
                off.push(took)
            }
        }
    }
    let counts = registry
        .canary("webapp")
        .map(|o| o.shadow_counts())
        .unwrap_or_default();
    off.sort();
    on.sort();
    println!(
        "stable reconcile (patch → status), {} samples each, {ROUNDS} interleaved rounds:",
        off.len()
    );
    println!("{:<14}{:>10}{:>10}", "", "p50 ms", "p95 ms");
    for (label, samples) in [("shadow off", &off), ("shadow on", &on)] {
        println!(
            "{label:<14}{:>10.2}{:>10.2}",
            ms(quantile(samples, 0.5)),
            ms(quantile(samples, 0.95))
        );
    }
    println!(
        "change: p50 {:+.1} %, p95 {:+.1} % (goal ≤ +10 %); last round's shadow counts: {counts:?}",
        (ms(quantile(&on, 0.5)) / ms(quantile(&off, 0.5)) - 1.0) * 100.0,
        (ms(quantile(&on, 0.95)) / ms(quantile(&off, 0.95)) - 1.0) * 100.0,
    );
    manager.shutdown().await;
}
