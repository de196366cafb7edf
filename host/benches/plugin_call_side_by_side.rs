//! The variants of one webapp reconcile call (see `support`: native, wasm
//! with each allocator and call path, HTTP hook) measured side by side, for
//! their ratios.
//!
//! Rounds of short, interleaved batches: each round runs every variant for a
//! few milliseconds (the order rotating from round to round) and the ratios
//! are computed *within* each round, then summarised as median and quartiles
//! over the rounds. On shared machines the speed of the whole VM drifts by
//! tens of percent within seconds, which skews ratios of variants measured
//! one after the other (as criterion does in `plugin_call`); within one round
//! every variant sees the same machine.
//!
//! Needs the components: run `scripts/build-plugins.sh` first.
//! `cargo bench -p wasm-operator --bench plugin_call_side_by_side`

use std::time::{Duration, Instant};

mod support;

/// Rounds of the side-by-side pass, and the wall time of one variant's batch
/// in a round: short batches follow the machine's drift closely.
const ROUNDS: usize = 150;
const BATCH_TIME: Duration = Duration::from_millis(6);

/// Median and quartiles of `values`.
fn quartiles(mut values: Vec<f64>) -> [f64; 3] {
    values.sort_by(f64::total_cmp);
    let at = |q: usize| values[(values.len() - 1) * q / 4];
    [at(1), at(2), at(3)]
}

fn main() {
    for scenario in [support::Scenario::ApiObject, support::Scenario::SteadyState] {
        side_by_side(scenario);
    }
}

/// Interleaves batches of every variant, `ROUNDS` times (the order rotates
/// each round), and prints each variant's median time per call and the
/// ratios computed within each round.
fn side_by_side(scenario: support::Scenario) {
    let setup = support::Setup::new(scenario);
    let variants = support::variants(&setup);
    // Batch sizes from a short calibration, after a warm-up.
    let batch: Vec<usize> = variants
        .iter()
        .map(|(_, run)| {
            run(20);
            let started = Instant::now();
            run(20);
            let per_call = started.elapsed() / 20;
            (BATCH_TIME.as_nanos() / per_call.as_nanos().max(1)).max(1) as usize
        })
        .collect();
    let mut micros = vec![Vec::with_capacity(ROUNDS); variants.len()];
    let progress = indicatif::ProgressBar::new(ROUNDS as u64)
        .with_message("side by side: interleaving every variant");
    for round in 0..ROUNDS {
        for k in 0..variants.len() {
            let v = (round + k) % variants.len();
            let started = Instant::now();
            variants[v].1(batch[v]);
            micros[v].push(started.elapsed().as_secs_f64() * 1e6 / batch[v] as f64);
        }
        progress.inc(1);
    }
    progress.finish_and_clear();

    let index = |name: &str| {
        variants
            .iter()
            .position(|(n, _)| *n == name)
            .expect("known variant")
    };
    let ratio = |a: usize, b: usize| -> [f64; 3] {
        quartiles((0..ROUNDS).map(|r| micros[a][r] / micros[b][r]).collect())
    };
    let (native, pooling, hook) = (
        index("native"),
        index("wasm_isolated_pooling"),
        index("http_hook"),
    );
    println!(
        "\n{scenario:?}, side by side: {ROUNDS} rounds, each variant run for ~{} ms per round; \
         median [quartiles] of the per-round figures",
        BATCH_TIME.as_millis()
    );
    for (v, (name, _)) in variants.iter().enumerate() {
        let [_, median, _] = quartiles(micros[v].clone());
        let [lo, mid, hi] = ratio(v, native);
        print!("  {name:<30} {median:>8.1} µs/call  {mid:>5.2}× native [{lo:.2}–{hi:.2}]");
        if v == hook {
            for wasm in [pooling, index("wasm_isolated_pooling_async")] {
                let [lo, mid, hi] = ratio(hook, wasm);
                print!("  {mid:.2}× {} [{lo:.2}–{hi:.2}]", variants[wasm].0);
            }
        }
        println!();
    }
}
