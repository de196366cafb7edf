//! What one reconcile asks of the caches, with 1,000 and with 10,000
//! unrelated objects cached, side by side: does the cost grow with the
//! number of objects in the owned caches?
//!
//! Two devclusters, each with one primary's 3 children (ConfigMaps in
//! namespace `app`, controlled by uid `target`) and N unrelated children
//! (namespace `bulk`, each controlled by its own owner, as N other
//! primaries' children would be): N = 1,000 in one, 10,000 in the other.
//! A real reflector caches each (the host's `SharedCache`, over HTTP).
//!
//! Variants, each on both clusters:
//! - `owned_children/index`: what `apply::owned_children` does per owned
//!   kind now: the owner index (`CacheLease::children_of`), the plugin
//!   label check, sorted.
//! - `owned_children/walk`: what it did before: every object of the store
//!   (`store.state()`), the same check, sorted.
//! - `cache_list/namespace`: a plugin's namespaced list through the cache
//!   import (`CacheView::list`, served from the namespace index).
//! - `trigger/namespace`: the watched-kind trigger mapping's lookup (the
//!   primaries of one namespace, here the objects of `app`).
//!
//! Rounds of short interleaved batches (the order rotating each round), as
//! in `plugin_call_side_by_side`: the 10k ÷ 1k ratio of each variant is
//! computed within each round, so the machine's drift cancels out. A ratio
//! near 1 means the cost does not grow with the objects cached; the walk's
//! grows with N.
//!
//! `cargo bench -p wasm-operator --bench owner_index`

use std::sync::Arc;
use std::time::{Duration, Instant};

use devcluster::{DevCluster, DevClusterOptions};
use futures::{StreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use wasm_operator::cache::{CacheLease, CacheView, CachedObject, SharedCache};
use wasm_operator::contract::{ResourceKind, Scope};
use wasm_operator::engine::CacheReader;
use wasm_operator::names::PLUGIN_LABEL;

/// Rounds of the side-by-side pass, and the wall time of one variant's batch
/// in a round.
const ROUNDS: usize = 60;
const BATCH_TIME: Duration = Duration::from_millis(5);
/// The unrelated objects cached in the small and the large cluster.
const SIZES: [usize; 2] = [1_000, 10_000];
/// The children of the primary a reconcile is about.
const CHILDREN: usize = 3;
const PLUGIN: &str = "webapp";
const TARGET: &str = "target";

fn configmaps() -> ResourceKind {
    ResourceKind {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        scope: Scope::Namespaced,
    }
}

/// A ConfigMap in `ns`, labelled with the plugin and controlled by `owner`.
fn child(ns: &str, name: &str, owner: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "namespace": ns,
            "labels": {PLUGIN_LABEL: PLUGIN, "app.kubernetes.io/managed-by": "wasm-operator"},
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp",
                                 "name": owner, "uid": owner, "controller": true}],
        },
        "data": {"index.html": "<h1>hello</h1>", "nginx.conf": "server { listen 8080; }"},
    }))
    .expect("a ConfigMap")
}

/// One cluster with its reflector and the plugin's cache view.
struct Sized {
    n: usize,
    _cluster: DevCluster,
    lease: CacheLease,
    view: CacheView,
}

async fn populate(client: &Client, n: usize) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in ["app", "bulk"] {
        let namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).expect("ns");
        namespaces
            .create(&PostParams::default(), &namespace)
            .await
            .expect("namespace created");
    }
    let objects = (0..CHILDREN)
        .map(|i| child("app", &format!("child-{i}"), TARGET))
        .chain((0..n).map(|i| child("bulk", &format!("other-{i}"), &format!("owner-{i}"))));
    stream::iter(objects)
        .map(|cm| {
            let api: Api<ConfigMap> =
                Api::namespaced(client.clone(), &cm.namespace().unwrap_or_default());
            async move {
                api.create(&PostParams::default(), &cm)
                    .await
                    .expect("ConfigMap created")
            }
        })
        .buffer_unordered(16)
        .for_each(|_| async {})
        .await;
}

async fn sized(n: usize) -> Sized {
    let cluster = DevCluster::start(DevClusterOptions::default())
        .await
        .expect("a devcluster");
    let client = cluster.client();
    populate(&client, n).await;
    let cache = SharedCache::new(client);
    let lease = cache.acquire(&configmaps(), None);
    let started = Instant::now();
    while !(lease.synced() && lease.store().state().len() == n + CHILDREN) {
        assert!(started.elapsed() < Duration::from_secs(300), "cache sync");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let view = CacheView::new(cache, [configmaps()]);
    Sized {
        n,
        _cluster: cluster,
        lease,
        view,
    }
}

/// `plan::is_owned_child`: labelled with the plugin, controlled by `uid`.
fn owned(obj: &CachedObject, uid: &str) -> bool {
    obj.labels().get(PLUGIN_LABEL).is_some_and(|p| p == PLUGIN)
        && obj
            .owner_references()
            .iter()
            .any(|o| o.controller == Some(true) && o.uid == uid)
}

fn sorted(mut children: Vec<Arc<CachedObject>>) -> Vec<Arc<CachedObject>> {
    children.sort_by_key(|c| (c.namespace(), c.name_any()));
    children
}

type Variant<'a> = (String, Box<dyn Fn(usize) + 'a>);

fn variants(s: &Sized) -> Vec<Variant<'_>> {
    let n = s.n;
    let check = move |found: usize| assert_eq!(found, CHILDREN, "children found at N={n}");
    vec![
        (
            format!("owned_children/index  N={n}"),
            Box::new(move |times| {
                for _ in 0..times {
                    let found: Vec<_> = s
                        .lease
                        .children_of(TARGET)
                        .into_iter()
                        .filter(|o| owned(o, TARGET))
                        .collect();
                    check(sorted(found).len());
                }
            }),
        ),
        (
            format!("owned_children/walk   N={n}"),
            Box::new(move |times| {
                for _ in 0..times {
                    let found: Vec<_> = s
                        .lease
                        .store()
                        .state()
                        .into_iter()
                        .filter(|o| owned(o, TARGET))
                        .collect();
                    check(sorted(found).len());
                }
            }),
        ),
        (
            format!("cache_list/namespace  N={n}"),
            Box::new(move |times| {
                for _ in 0..times {
                    let listed = s
                        .view
                        .list(
                            "v1",
                            "ConfigMap",
                            Some("app"),
                            Some("app.kubernetes.io/managed-by"),
                        )
                        .expect("a synced cache answers");
                    check(listed.len());
                }
            }),
        ),
        (
            format!("trigger/namespace     N={n}"),
            Box::new(move |times| {
                for _ in 0..times {
                    check(s.lease.in_namespace("app").len());
                }
            }),
        ),
    ]
}

/// Median and quartiles of `values`.
fn quartiles(mut values: Vec<f64>) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let _entered = runtime.enter();
    let clusters: Vec<Sized> = SIZES
        .iter()
        .map(|&n| {
            let started = Instant::now();
            let s = runtime.block_on(sized(n));
            eprintln!("N={n}: created and cached in {:.1?}", started.elapsed());
            s
        })
        .collect();
    let all: Vec<Variant<'_>> = clusters.iter().flat_map(variants).collect();
    let batch: Vec<usize> = all
        .iter()
        .map(|(_, run)| {
            run(5);
            let started = Instant::now();
            run(5);
            let per_call = started.elapsed() / 5;
            (BATCH_TIME.as_nanos() / per_call.as_nanos().max(1)).max(1) as usize
        })
        .collect();
    let mut micros = vec![Vec::with_capacity(ROUNDS); all.len()];
    for round in 0..ROUNDS {
        for k in 0..all.len() {
            let v = (round + k) % all.len();
            let started = Instant::now();
            all[v].1(batch[v]);
            micros[v].push(started.elapsed().as_secs_f64() * 1e6 / batch[v] as f64);
        }
    }
    println!(
        "\nside by side: {ROUNDS} rounds, each variant run for ~{} ms per round; \
         median [quartiles] of the per-round figures",
        BATCH_TIME.as_millis()
    );
    let per_size = all.len() / SIZES.len();
    for v in 0..per_size {
        let (small, large) = (v, v + per_size);
        for i in [small, large] {
            let [lo, mid, hi] = quartiles(micros[i].clone());
            println!("  {:<28} {mid:>10.2} µs/call [{lo:.2}–{hi:.2}]", all[i].0);
        }
        let [lo, mid, hi] = quartiles(
            (0..ROUNDS)
                .map(|r| micros[large][r] / micros[small][r])
                .collect(),
        );
        println!(
            "    N={} ÷ N={}: {mid:.2}× [{lo:.2}–{hi:.2}]",
            SIZES[1], SIZES[0]
        );
    }
}
