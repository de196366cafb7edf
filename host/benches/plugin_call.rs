//! One reconcile of the webapp plugin with a realistic ~5 KB WebApp, measured
//! side by side:
//!
//! * `native`: the plugin's logic compiled into the host (the SDK's JSON entry
//!   point), with the same host-side work as the engine (serialize the object,
//!   parse and validate the answer);
//! * `wasm_isolated_*`: through the engine, a fresh instance per call, with
//!   the on-demand allocator and with the pooling allocator (what `run` and
//!   `dev` use), on the calling thread (`reconcile_blocking`) and through the
//!   async `reconcile` on a runtime worker (the controller's path);
//! * `http_hook`: the native logic behind an axum JSON endpoint on loopback,
//!   called over a kept-alive reqwest connection (Metacontroller's best case:
//!   the hook reads the object and writes the children as raw JSON, so it does
//!   no parsing the wasm path does not do too).
//!
//! Criterion measures each variant on its own: absolute times and their
//! spread. For ratios between variants use the `plugin_call_side_by_side`
//! bench, which interleaves them (the speed of a shared VM drifts between
//! variants measured one after the other).
//!
//! Needs the components: run `scripts/build-plugins.sh` first.
//! `cargo bench -p wasm-operator --bench plugin_call`

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};

mod support;

fn bench(c: &mut Criterion) {
    for (group_name, scenario) in [
        ("webapp_reconcile", support::Scenario::ApiObject),
        (
            "webapp_reconcile_steady_state",
            support::Scenario::SteadyState,
        ),
    ] {
        bench_scenario(c, group_name, scenario);
    }
}

fn bench_scenario(c: &mut Criterion, group_name: &str, scenario: support::Scenario) {
    let setup = support::Setup::new(scenario);
    let mut group = c.benchmark_group(group_name);
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, run) in support::variants(&setup) {
        // One batch per sample: the async variant spawns one task per batch.
        group.bench_function(name, |b| {
            b.iter_custom(|calls| {
                let started = Instant::now();
                run(calls as usize);
                started.elapsed()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
