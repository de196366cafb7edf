//! Restart-to-first-reconcile with a cold and a warm compiled-component
//! cache, measured side by side in one run.
//!
//! One sample = what a restarted host does before its first reconcile:
//! `Engine::new`, `Engine::load(webapp.wasm)` (compile, or deserialize from
//! the disk cache) and one `reconcile` call. Cold samples start from an
//! empty cache directory; warm samples reuse a directory populated by an
//! earlier load (a restart with unchanged plugins).
//!
//! Needs the components: run `scripts/build-plugins.sh` first.
//! `cargo bench -p wasm-operator --bench cold_start`

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use wasm_operator::contract::CallContext;
use wasm_operator::engine::{CacheStats, EmptyCache, Engine, EngineConfig};

mod support;

const COLD_SAMPLES: usize = 5;
const WARM_SAMPLES: usize = 10;

/// One restart: engine, load, first reconcile. Returns the elapsed time of
/// each phase and the cache counters.
fn restart(bytes: &[u8], cache_dir: &Path) -> ([Duration; 3], CacheStats) {
    let object = json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "default", "uid": "5b1f2a4e-0000-4000-8000-000000000001", "generation": 1},
        "spec": {"image": "nginx:1.27", "replicas": 2, "port": 8080},
    });
    let ctx = CallContext {
        plugin_version: "1.0.0".into(),
        attempt: 1,
        managed_by_version: None,
        config: json!({}),
    };
    let start = Instant::now();
    let engine = Engine::new(EngineConfig {
        cache_dir: Some(cache_dir.to_path_buf()),
        ..Default::default()
    })
    .expect("engine");
    let engine_done = Instant::now();
    let plugin = engine.load(bytes).expect("webapp loads");
    let load_done = Instant::now();
    plugin
        .reconcile_blocking(&ctx, object.to_string(), Vec::new(), Arc::new(EmptyCache))
        .expect("first reconcile");
    let reconcile_done = Instant::now();
    (
        [
            engine_done - start,
            load_done - engine_done,
            reconcile_done - load_done,
        ],
        engine.cache_stats(),
    )
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Row {
    name: &'static str,
    phases: [Duration; 3],
    total: Duration,
    stats: CacheStats,
}

fn measure(
    name: &'static str,
    samples: usize,
    mut dir: impl FnMut() -> PathBuf,
    bytes: &[u8],
) -> Row {
    let mut phases: [Vec<Duration>; 3] = Default::default();
    let mut totals = Vec::new();
    let mut stats = CacheStats::default();
    for _ in 0..samples {
        let cache_dir = dir();
        let (p, s) = restart(bytes, &cache_dir);
        for (all, one) in phases.iter_mut().zip(p) {
            all.push(one);
        }
        totals.push(p.iter().sum());
        stats.hits += s.hits;
        stats.misses += s.misses;
    }
    let [a, b, c] = phases;
    Row {
        name,
        phases: [median(a), median(b), median(c)],
        total: median(totals),
        stats,
    }
}

fn main() {
    let bytes = support::component();
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut n = 0;
    let cold = measure(
        "cold cache",
        COLD_SAMPLES,
        || {
            n += 1;
            scratch.path().join(format!("cold-{n}"))
        },
        &bytes,
    );
    let warm_dir = scratch.path().join("warm");
    // Populate once: the restart before the measured ones.
    restart(&bytes, &warm_dir);
    let warm = measure("warm cache", WARM_SAMPLES, || warm_dir.clone(), &bytes);

    println!(
        "restart-to-first-reconcile, webapp.wasm ({} KB), medians:",
        bytes.len() / 1024
    );
    println!(
        "{:<12} {:>8} {:>12} {:>10} {:>14} {:>10} {:>6} {:>6}",
        "", "samples", "engine ms", "load ms", "reconcile ms", "total ms", "hits", "misses"
    );
    for (row, samples) in [(&cold, COLD_SAMPLES), (&warm, WARM_SAMPLES)] {
        println!(
            "{:<12} {:>8} {:>12.1} {:>10.1} {:>14.2} {:>10.1} {:>6} {:>6}",
            row.name,
            samples,
            ms(row.phases[0]),
            ms(row.phases[1]),
            ms(row.phases[2]),
            ms(row.total),
            row.stats.hits,
            row.stats.misses
        );
    }
    println!(
        "cold / warm: {:.1}x (total), {:.1}x (load)",
        cold.total.as_secs_f64() / warm.total.as_secs_f64(),
        cold.phases[1].as_secs_f64() / warm.phases[1].as_secs_f64()
    );
    // The warm rows must really have come from the cache, or the ratio
    // means nothing.
    assert_eq!(
        warm.stats.misses, 0,
        "warm restarts compiled: the disk cache was not used"
    );
    assert_eq!(cold.stats.hits, 0, "cold restarts hit the cache");
}
