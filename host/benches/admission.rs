//! What admission through the host's webhook adds to a write, measured
//! where it is paid: on the real control plane, kube-apiserver calling the
//! host's HTTPS `/mutate` and `/validate` (webapp's `defaults` and
//! `validate`, Enforce, fail closed) before it stores the object.
//!
//! Two writes of a WebApp, each timed as the client sees it (request sent
//! to response read, one request in flight): a **create**, and an
//! **update** that changes `spec` (a JSON merge patch of `replicas` and
//! `image`: an UPDATE to admission, and not metadata-only, so the plugin is
//! called). Each is made *with* the webhook in the chain and *without* it,
//! side by side in interleaved rounds: every round creates one WebApp on
//! each side and then updates both, the side that goes first alternating
//! from round to round, so machine noise (and etcd's compactions, the
//! garbage collector, the host's own periodic syncs) falls on both sides.
//! Reports p50, p90 and p99 per side and write, the latency the webhook
//! adds (the difference of the p50s, p90s and p99s, and the ratio of the
//! p50s), how many requests each figure is made of, and the mean time of
//! the plugin calls themselves (from the host's call-duration metric).
//!
//! # The side without the webhook
//!
//! The same request for the same kind, to the same API server, in
//! `kube-system`, the one namespace every configuration the host writes
//! leaves out (`namespaceSelector`: `kubernetes.io/metadata.name NotIn
//! [kube-system]`). The configurations stay installed throughout: both
//! sides go through the same API server, the same CRD (schema, defaults,
//! storage), the same admission chain up to the webhooks' matching (which
//! evaluates the namespace selector on both sides), and the same etcd; the
//! only difference is that for one of them kube-apiserver calls `/mutate`
//! and `/validate` and applies their answers. That makes it the marginal
//! cost of the webhook, request by request. Removing the configurations
//! between requests was the other choice, and a worse one: kube-apiserver
//! picks up a configuration change through its informer a moment later
//! (so each switch needs a wait and a probe), the sides could then only be
//! interleaved in blocks, not request by request, and the host's keeper
//! would write the configurations back within half a second. A second,
//! unadmitted kind would not be the same request. The run checks the
//! choice: the plugin's review counters grow by exactly one `validate` and
//! one `defaults` per write with the webhook, and by nothing for the writes
//! in `kube-system`.
//!
//! The host here is the webhook alone (a registry with the webapp plugin,
//! no controller), so no reconcile competes with the writes; its code is as
//! the bench profile builds it. Objects are not deleted between rounds
//! (each round's are new), so the later rounds write into a namespace a few
//! hundred WebApps larger on both sides.
//!
//! Runs on the real control plane unless `WASM_OPERATOR_TEST_BACKEND` (or
//! `WASM_OPERATOR_TEST_KUBECONFIG`) says otherwise (`dev`: the devcluster,
//! whose admission chain is its own). Needs `bash scripts/build-plugins.sh`
//! and `bash scripts/build-realcluster.sh` first.
//!
//! `cargo bench -p wasm-operator --bench admission`
//! (`ADMISSION_BENCH_ROUNDS`, default 2,000: 8,000 measured requests, about
//! a minute on 2 cores with the control plane's start; more for steadier
//! p99s; `ADMISSION_BENCH_WARMUP`, default 20 rounds, not counted).

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

#[path = "../tests/convert/kv.rs"]
#[allow(dead_code)]
mod kv;

use std::time::{Duration, Instant};

use devcluster::testing::{TEST_BACKEND_ENV, TEST_KUBECONFIG_ENV};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use wasm_operator::registry::{Registry, RegistryOptions};
use wasm_operator::webhook::ConversionWebhook;

use kv::{CONVERGE, install_crypto_provider, webhook_options};

/// The namespace written with the webhook in the chain.
const WITH_NS: &str = "default";
/// The namespace every configuration of the host leaves out.
const WITHOUT_NS: &str = "kube-system";

const DEFAULT_ROUNDS: usize = 2_000;
const DEFAULT_WARMUP: usize = 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    With,
    Without,
}

impl Side {
    fn index(self) -> usize {
        match self {
            Side::With => 0,
            Side::Without => 1,
        }
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn webapp(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/name": "shop-frontend",
            "app.kubernetes.io/part-of": "shop",
            "team": "storefront",
        }},
        "spec": {"image": "registry.example.com/shop/frontend:1.27.3", "replicas": 3, "port": 8080},
    }))
    .expect("a WebApp")
}

/// The sum of the values of metric `name`'s series whose labels contain
/// every one of `labels` (`key="value"`), in the text exposition `text`.
fn metric(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix('{'))
        .filter(|rest| labels.iter().all(|label| rest.contains(label)))
        .filter_map(|rest| rest.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Reviews the webapp plugin's `function` answered so far.
fn reviews(registry: &Registry, function: &str) -> u64 {
    metric(
        &registry.metrics().encode(),
        "wasm_operator_admission_reviews_total",
        &[r#"plugin="webapp""#, &format!(r#"function="{function}""#)],
    ) as u64
}

/// The plugin calls of `function` so far: how many, and their total time.
fn calls(registry: &Registry, function: &str) -> (f64, f64) {
    let text = registry.metrics().encode();
    let labels = [r#"plugin="webapp""#, &format!(r#"function="{function}""#)];
    (
        metric(
            &text,
            "wasm_operator_plugin_call_duration_seconds_count",
            &labels,
        ),
        metric(
            &text,
            "wasm_operator_plugin_call_duration_seconds_sum",
            &labels,
        ),
    )
}

/// Nearest-rank percentile `p` (0–1) of `sorted`.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Waits until kube-apiserver calls the webhook for a create in
/// [`WITH_NS`] (its configurations reach it through an informer, a
/// moment after they are written), then checks that a create in
/// [`WITHOUT_NS`] does not reach it.
async fn wait_webhook_in_chain(registry: &Registry, apis: &[Api<DynamicObject>; 2]) {
    let deadline = Instant::now() + CONVERGE;
    let mut probe = 0;
    while reviews(registry, "validate") == 0 || reviews(registry, "defaults") == 0 {
        assert!(
            Instant::now() < deadline,
            "kube-apiserver did not call the webhook within {CONVERGE:?}"
        );
        apis[Side::With.index()]
            .create(&PostParams::default(), &webapp(&format!("probe-{probe}")))
            .await
            .expect("a probe WebApp");
        probe += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = (reviews(registry, "validate"), reviews(registry, "defaults"));
    apis[Side::Without.index()]
        .create(&PostParams::default(), &webapp("probe-exempt"))
        .await
        .expect("a probe WebApp in kube-system");
    assert_eq!(
        before,
        (reviews(registry, "validate"), reviews(registry, "defaults")),
        "a write in {WITHOUT_NS} reached the webhook"
    );
}

fn main() {
    if std::env::var_os(TEST_BACKEND_ENV).is_none()
        && std::env::var_os(TEST_KUBECONFIG_ENV).is_none()
    {
        // SAFETY: no other thread exists yet: the runtime is built below,
        // and nothing before it reads or writes the environment.
        unsafe { std::env::set_var(TEST_BACKEND_ENV, "real") };
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(run());
}

async fn run() {
    install_crypto_provider();
    let rounds = env_count("ADMISSION_BENCH_ROUNDS", DEFAULT_ROUNDS).max(1);
    let warmup = env_count("ADMISSION_BENCH_WARMUP", DEFAULT_WARMUP);
    let started = Instant::now();
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    support::install_crd(&client, &support::example_crd("webapp")).await;
    // The plugin in a registry of its own: the webhook answers with it, no
    // controller reconciles the objects while they are written.
    let registry = Registry::new(RegistryOptions::default()).expect("registry");
    registry
        .load(
            "file:webapp.wasm",
            &support::plugin_bytes("webapp"),
            json!({}),
        )
        .await
        .expect("loading webapp");
    // Its keeper writes the plugin's Validating- and
    // MutatingWebhookConfiguration within half a second.
    let webhook = ConversionWebhook::start(client.clone(), registry.clone(), webhook_options())
        .await
        .expect("webhook");
    let resource = support::api_resource("example.com", "v1", "WebApp", "webapps");
    let apis = [
        support::dynamic_api(&client, &resource, Some(WITH_NS)),
        support::dynamic_api(&client, &resource, Some(WITHOUT_NS)),
    ];
    wait_webhook_in_chain(&registry, &apis).await;
    println!(
        "{} ready, webhook at {} in the chain for {WITH_NS}, not for {WITHOUT_NS}, after {:.1?}",
        cluster.backend().name(),
        webhook.addr(),
        started.elapsed()
    );

    // [write][side]: create, update; with, without.
    let mut samples: [[Vec<Duration>; 2]; 2] = Default::default();
    let mut counted = None;
    let measuring = Instant::now();
    for round in 0..warmup + rounds {
        if round == warmup {
            counted = Some((
                reviews(&registry, "validate"),
                reviews(&registry, "defaults"),
                calls(&registry, "admission.validate"),
                calls(&registry, "admission.defaults"),
            ));
        }
        let order = if round % 2 == 0 {
            [Side::With, Side::Without]
        } else {
            [Side::Without, Side::With]
        };
        let name = format!("bench-{round:05}");
        let object = webapp(&name);
        for side in order {
            let took = Instant::now();
            apis[side.index()]
                .create(&PostParams::default(), &object)
                .await
                .expect("create");
            if round >= warmup {
                samples[0][side.index()].push(took.elapsed());
            }
        }
        let patch = json!({"spec": {
            "replicas": 1 + round % 10,
            "image": format!("registry.example.com/shop/frontend:1.27.{}", 4 + round % 50),
        }});
        for side in order {
            let took = Instant::now();
            apis[side.index()]
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .expect("update");
            if round >= warmup {
                samples[1][side.index()].push(took.elapsed());
            }
        }
    }
    let measured = measuring.elapsed();

    let (validate, defaults, validate_calls, defaults_calls) =
        counted.expect("at least one measured round");
    let with_writes = 2 * rounds as u64;
    let reviewed = (
        reviews(&registry, "validate") - validate,
        reviews(&registry, "defaults") - defaults,
    );
    assert_eq!(
        reviewed,
        (with_writes, with_writes),
        "every write with the webhook (and none without) is reviewed once by validate and once by defaults"
    );
    let plugin_call = |function: &str, (count, sum): (f64, f64)| {
        let (now_count, now_sum) = calls(&registry, function);
        (now_sum - sum) / (now_count - count).max(1.0) * 1e3
    };
    let validate_ms = plugin_call("admission.validate", validate_calls);
    let defaults_ms = plugin_call("admission.defaults", defaults_calls);

    println!(
        "{rounds} interleaved rounds (+{warmup} warm-up) in {measured:.1?}: {} requests measured, {rounds} per write and side; one request in flight",
        4 * rounds
    );
    println!(
        "{:<7} {:<24} {:>5} {:>9} {:>9} {:>9}",
        "write", "side", "n", "p50 ms", "p90 ms", "p99 ms"
    );
    for (write, sides) in ["create", "update"].iter().zip(&mut samples) {
        let mut figures = Vec::new();
        for (side, label) in [
            (Side::With, "with webhook (default)"),
            (Side::Without, "without (kube-system)"),
        ] {
            let sorted = &mut sides[side.index()];
            sorted.sort();
            let p = [0.5, 0.9, 0.99].map(|p| percentile(sorted, p));
            println!(
                "{write:<7} {label:<24} {:>5} {:>9.2} {:>9.2} {:>9.2}",
                sorted.len(),
                ms(p[0]),
                ms(p[1]),
                ms(p[2])
            );
            figures.push(p);
        }
        let (with, without) = (figures[0], figures[1]);
        let added = |i: usize| ms(with[i]) - ms(without[i]);
        println!(
            "{write:<7} added by the webhook: p50 {:+.2} ms (ratio {:.2}), p90 {:+.2} ms, p99 {:+.2} ms",
            added(0),
            with[0].as_secs_f64() / without[0].as_secs_f64().max(f64::EPSILON),
            added(1),
            added(2)
        );
    }
    println!(
        "reviews during the rounds: {} validate, {} defaults (one each per write with the webhook, none without); plugin calls inside them: {validate_ms:.3} ms validate, {defaults_ms:.3} ms defaults (means)",
        reviewed.0, reviewed.1
    );
    webhook.shutdown().await;
    // Not reset on drop (which deletes every WebApp written, one by one):
    // the control plane stops with this process.
    std::mem::forget(cluster);
}
