//! The webapp plugin in each language — Rust (plugins/webapp), Python
//! (plugins/webapp-py), TypeScript (plugins/webapp-ts) and Go
//! (plugins/webapp-go, when built) — measured side by side in one run, for
//! docs/languages.md's cost table:
//!
//! - **size**: the component, raw and gzip'd (what a registry or a
//!   ConfigMap holds);
//! - **cold compile**: `Engine::load` with an empty compile cache, and the
//!   warm load that deserializes the cached artifact (a restart);
//! - **per call**: one reconcile with the same inputs (the steady state of
//!   `support::Scenario`: the WebApp, its Deployment and Service), p50 and
//!   p99 over every call, and the ratio to Rust computed within each round
//!   (rounds interleave the languages, the order rotating, as
//!   `plugin_call_side_by_side` does);
//! - **instantiation** and **memory per instance**: from the engine's
//!   [`CallReport`] of each call (store set-up plus instantiation from the
//!   pooling allocator; the linear memory the instance held at the end);
//! - **pool**: the registry's default concurrency of calls at once on the
//!   default pool, counting calls refused with `InstancePoolFull`;
//! - **shared runtime**: the core modules (by sha256) the webapp has in
//!   common with a second plugin of its language (the faulty fixture): what
//!   a runtime component shared between plugins would let the host compile
//!   and keep once.
//!
//! Needs the components: `scripts/build-plugins.sh` and
//! `scripts/build-lang-plugins.sh`.
//! `cargo bench -p wasm-operator --bench languages`
//! (env: `LANGUAGES_COMPILE_SAMPLES`, default 3; `LANGUAGES_ROUNDS`,
//! default 40).

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wasm_operator::engine::{
    CallFailure, CallObserver, CallReport, EmptyCache, Engine, EngineConfig, LoadedPlugin,
};
use wasm_operator::registry::{DEFAULT_MAX_INSTANCES, RegistryOptions};

mod support;

/// Each language's webapp, by its built file's name.
const PORTS: [(&str, &str); 4] = [
    ("Rust", "webapp"),
    ("Python", "webapp_py"),
    ("TypeScript", "webapp_ts"),
    ("Go", "webapp_go"),
];

/// A second plugin in each language (the faulty fixtures), for what two
/// plugins of one language have in common.
const SECOND: [(&str, &str); 4] = [
    ("Rust", "faulty"),
    ("Python", "py_faulty"),
    ("TypeScript", "ts_faulty"),
    ("Go", "go_faulty"),
];

/// Wall time of one language's batch of calls in a round.
const BATCH_TIME: Duration = Duration::from_millis(60);

/// Calls each thread of the pool check makes.
const POOL_CALLS_PER_THREAD: usize = 25;

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

/// The instantiation time and memory of every call an engine makes.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(Duration, usize)>>,
}

impl CallObserver for Recorder {
    fn observe(&self, report: &CallReport<'_>) {
        if report.function == "reconcile"
            && let Ok(mut calls) = self.calls.lock()
        {
            calls.push((report.instantiation, report.memory_bytes));
        }
    }
}

/// One language's webapp, loaded into the production engine configuration
/// (pooling allocator of the default size).
struct Port {
    language: &'static str,
    plugin: LoadedPlugin,
    recorder: Arc<Recorder>,
}

fn gzip_len(bytes: &[u8]) -> usize {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(bytes).expect("gzip in memory");
    encoder.finish().expect("gzip in memory").len()
}

fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let at = ((values.len() - 1) as f64 * p).round() as usize;
    values[at]
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let compile_samples = env_count("LANGUAGES_COMPILE_SAMPLES", 3);
    let rounds = env_count("LANGUAGES_ROUNDS", 40);
    let available: Vec<(&str, Vec<u8>)> = PORTS
        .iter()
        .filter_map(|(language, file)| {
            let path = support::component_path(file);
            match std::fs::read(&path) {
                Ok(bytes) => Some((*language, bytes)),
                Err(e) => {
                    println!("{language}: skipped ({}: {e})", path.display());
                    None
                }
            }
        })
        .collect();
    assert!(
        available.first().is_some_and(|(l, _)| *l == "Rust"),
        "the Rust webapp is the reference: run scripts/build-plugins.sh first"
    );

    println!("\nsize (raw, gzip'd):");
    for (language, bytes) in &available {
        println!(
            "  {language:<11} {:>6.2} MiB  {:>6.2} MiB gzip'd",
            mib(bytes.len()),
            mib(gzip_len(bytes))
        );
    }

    shared_runtime(&available);
    compile_side_by_side(&available, compile_samples);
    let cache = tempfile::tempdir().expect("temp dir");
    let ports: Vec<Port> = available
        .into_iter()
        .map(|(language, bytes)| {
            let recorder = Arc::new(Recorder::default());
            let engine = Engine::new(EngineConfig {
                cache_dir: Some(cache.path().to_path_buf()),
                observer: Some(recorder.clone()),
                ..RegistryOptions::default().engine
            })
            .expect("engine");
            let plugin = engine
                .load(&bytes)
                .unwrap_or_else(|e| panic!("{language} webapp loads: {e}"));
            Port {
                language,
                plugin,
                recorder,
            }
        })
        .collect();
    calls_side_by_side(&ports, rounds);
    pool_at_default_concurrency(&ports);
}

/// Reads the sections of a wasm binary (module or component): each
/// section's id and payload, by its LEB128 size after the 8-byte preamble.
fn sections(binary: &[u8]) -> Vec<(u8, &[u8])> {
    let mut out = Vec::new();
    let mut pos = 8; // magic and version
    while pos < binary.len() {
        let id = binary[pos];
        pos += 1;
        let (mut size, mut shift) = (0usize, 0u32);
        loop {
            let Some(byte) = binary.get(pos) else {
                return out;
            };
            pos += 1;
            size |= usize::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 28 {
                return out;
            }
        }
        let Some(payload) = binary.get(pos..pos + size) else {
            return out;
        };
        out.push((id, payload));
        pos += size;
    }
    out
}

/// The code of every core module of a component, nested components
/// included: each code section's sha256 and size. The code is what the
/// engine compiles; data segments (e.g. a pre-initialized interpreter's
/// heap, which holds the plugin's own program) stay per plugin.
fn module_code(component: &[u8], out: &mut Vec<([u8; 32], usize)>) {
    use sha2::Digest as _;
    for (id, payload) in sections(component) {
        match id {
            1 => {
                for (section, code) in sections(payload) {
                    // A module without functions (count 0) has no code.
                    if section == 10 && code.first() != Some(&0) {
                        out.push((sha2::Sha256::digest(code).into(), code.len()));
                    }
                }
            }
            4 => module_code(payload, out),
            _ => {}
        }
    }
}

/// Per language: the code of the webapp's core modules that a second
/// plugin of the language (its faulty fixture) holds too, byte for byte.
fn shared_runtime(ports: &[(&str, Vec<u8>)]) {
    println!(
        "
code a second plugin of the language has too (byte-identical code sections):"
    );
    for (language, bytes) in ports {
        let Some((_, file)) = SECOND.iter().find(|(l, _)| l == language) else {
            continue;
        };
        let Ok(second) = std::fs::read(support::component_path(file)) else {
            println!("  {language:<11} ({file}.wasm not built)");
            continue;
        };
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        module_code(bytes, &mut ours);
        module_code(&second, &mut theirs);
        let total: usize = ours.iter().map(|(_, n)| n).sum();
        let shared: Vec<usize> = ours
            .iter()
            .filter(|(hash, _)| theirs.iter().any(|(h, _)| h == hash))
            .map(|(_, n)| *n)
            .collect();
        let shared_bytes: usize = shared.iter().sum();
        println!(
            "  {language:<11} {} of {} modules' code, {:>6.2} of {:>6.2} MiB of code ({:.0}%); the component is {:.2} MiB",
            shared.len(),
            ours.len(),
            mib(shared_bytes),
            mib(total),
            100.0 * shared_bytes as f64 / total.max(1) as f64,
            mib(bytes.len())
        );
    }
}

/// Cold compiles (empty cache) and warm loads (the cached artifact), the
/// languages interleaved, `samples` of each.
fn compile_side_by_side(ports: &[(&str, Vec<u8>)], samples: usize) {
    let mut cold = vec![Vec::new(); ports.len()];
    let mut warm = vec![Vec::new(); ports.len()];
    let progress = indicatif::ProgressBar::new((samples * ports.len()) as u64)
        .with_message("compiling every language, cold and warm");
    for sample in 0..samples {
        for k in 0..ports.len() {
            let p = (sample + k) % ports.len();
            let dir = tempfile::tempdir().expect("temp dir");
            let config = || EngineConfig {
                cache_dir: Some(dir.path().to_path_buf()),
                ..RegistryOptions::default().engine
            };
            let engine = Engine::new(config()).expect("engine");
            let started = Instant::now();
            engine.load(&ports[p].1).expect("loads");
            cold[p].push(started.elapsed().as_secs_f64());
            // A restart: a new engine, the artifact on disk.
            let engine = Engine::new(config()).expect("engine");
            let started = Instant::now();
            engine.load(&ports[p].1).expect("loads");
            warm[p].push(started.elapsed().as_secs_f64());
            progress.inc(1);
        }
    }
    progress.finish_and_clear();
    println!("\nload, median of {samples} (cold: compile; warm: the cached artifact):");
    for (p, (language, _)) in ports.iter().enumerate() {
        let cold_s = percentile(&mut cold[p], 0.5);
        let warm_ms = percentile(&mut warm[p], 0.5) * 1e3;
        println!("  {language:<11} cold {cold_s:>7.2} s   warm {warm_ms:>8.1} ms");
    }
}

/// Rounds of one batch per language (the order rotating); per-call
/// latencies, and each round's median per language for the ratio to Rust.
fn calls_side_by_side(ports: &[Port], rounds: usize) {
    let (object, children) = support::Scenario::SteadyState.held();
    let object = object.text();
    let children: Vec<String> = children.iter().map(|c| c.text()).collect();
    let ctx = support::ctx();
    let call = |port: &Port| {
        port.plugin
            .reconcile_blocking(&ctx, object.clone(), children.clone(), Arc::new(EmptyCache))
            .unwrap_or_else(|e| panic!("{} webapp reconciles: {e}", port.language));
    };
    // Warm-up, then each language's batch size from a short calibration.
    let batch: Vec<usize> = ports
        .iter()
        .map(|port| {
            for _ in 0..3 {
                call(port);
            }
            let started = Instant::now();
            call(port);
            call(port);
            let per_call = started.elapsed() / 2;
            (BATCH_TIME.as_nanos() / per_call.as_nanos().max(1)).clamp(1, 200) as usize
        })
        .collect();
    for port in ports {
        if let Ok(mut calls) = port.recorder.calls.lock() {
            calls.clear();
        }
    }
    let mut all = vec![Vec::new(); ports.len()];
    let mut round_medians = vec![Vec::with_capacity(rounds); ports.len()];
    let progress = indicatif::ProgressBar::new(rounds as u64)
        .with_message("reconcile calls, every language interleaved");
    for round in 0..rounds {
        for k in 0..ports.len() {
            let p = (round + k) % ports.len();
            let mut this_round = Vec::with_capacity(batch[p]);
            for _ in 0..batch[p] {
                let started = Instant::now();
                call(&ports[p]);
                this_round.push(started.elapsed().as_secs_f64() * 1e6);
            }
            all[p].extend_from_slice(&this_round);
            round_medians[p].push(percentile(&mut this_round, 0.5));
        }
        progress.inc(1);
    }
    progress.finish_and_clear();

    println!(
        "\nreconcile (steady state, pooling allocator), {rounds} interleaved rounds of ~{} ms per language:",
        BATCH_TIME.as_millis()
    );
    println!(
        "  {:<11} {:>10} {:>10} {:>18} {:>14} {:>12}",
        "", "p50 µs", "p99 µs", "× Rust [quartiles]", "instantiate µs", "memory MiB"
    );
    for (p, port) in ports.iter().enumerate() {
        let p50 = percentile(&mut all[p], 0.5);
        let p99 = percentile(&mut all[p], 0.99);
        let mut ratios: Vec<f64> = (0..rounds)
            .map(|r| round_medians[p][r] / round_medians[0][r])
            .collect();
        let (lo, mid, hi) = (
            percentile(&mut ratios, 0.25),
            percentile(&mut ratios, 0.5),
            percentile(&mut ratios, 0.75),
        );
        let calls = port
            .recorder
            .calls
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let mut instantiation: Vec<f64> =
            calls.iter().map(|(d, _)| d.as_secs_f64() * 1e6).collect();
        let mut memory: Vec<f64> = calls.iter().map(|(_, m)| *m as f64).collect();
        let (instantiate, memory) = if calls.is_empty() {
            (f64::NAN, f64::NAN)
        } else {
            (
                percentile(&mut instantiation, 0.5),
                mib(percentile(&mut memory, 0.5) as usize),
            )
        };
        println!(
            "  {:<11} {p50:>10.1} {p99:>10.1} {mid:>7.2}× [{lo:.2}–{hi:.2}] {instantiate:>14.1} {memory:>12.2}",
            port.language
        );
    }
}

/// The registry's default concurrency of calls at once, per language, on
/// an engine with the default pool: how many were refused for a full pool.
fn pool_at_default_concurrency(ports: &[Port]) {
    let concurrency = RegistryOptions::default().concurrency;
    let (object, children) = support::Scenario::SteadyState.held();
    let object = object.text();
    let children: Vec<String> = children.iter().map(|c| c.text()).collect();
    println!(
        "\npool: {concurrency} calls at once (the default concurrency) × {POOL_CALLS_PER_THREAD} each, pool of {DEFAULT_MAX_INSTANCES} instances:"
    );
    for port in ports {
        let refused = std::sync::atomic::AtomicUsize::new(0);
        let failed = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..concurrency {
                scope.spawn(|| {
                    let ctx = support::ctx();
                    for _ in 0..POOL_CALLS_PER_THREAD {
                        match port.plugin.reconcile_blocking(
                            &ctx,
                            object.clone(),
                            children.clone(),
                            Arc::new(EmptyCache),
                        ) {
                            Ok(_) => {}
                            Err(e) if matches!(e.failure, CallFailure::InstancePoolFull { .. }) => {
                                refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(_) => {
                                failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        println!(
            "  {:<11} {} refused (InstancePoolFull), {} failed otherwise, of {}",
            port.language,
            refused.into_inner(),
            failed.into_inner(),
            concurrency * POOL_CALLS_PER_THREAD
        );
    }
}
