//! `bench-scale`: the side-by-side scale benchmark of issues 11 and 12.
//!
//! For every size N and round, each operator (in an order rotated every
//! round, so no operator always runs first or last on a warm or cold machine)
//! gets a fresh API server (`--backend dev`: a `devcluster` process;
//! `--backend real`: `realcluster up`, kube-apiserver + etcd +
//! kube-controller-manager, see `cluster.rs`), the WebApp CRD and an empty
//! `bench` namespace; the operator is started as its own process and, once it
//! is running (dev: its watches are open; real: it has reconciled a probe
//! WebApp in another namespace), the harness
//!
//! 1. creates N WebApps (16 requests in flight) and waits until all are
//!    converged, then
//! 2. bumps `spec.replicas` of every WebApp (16 in flight) and waits again.
//!
//! **Converged** (checked by polling lists every 200 ms): every WebApp has a
//! finalizer and `status.observedGeneration == metadata.generation`, and a
//! Deployment of the same name owned by it (ownerReference uid) with
//! `spec.replicas == WebApp.spec.replicas`, and a Service of the same name
//! exist. Convergence time runs from the phase's first write to the first
//! poll that sees every object converged.
//!
//! Measured per phase: convergence time, operator CPU seconds
//! (`/proc/<pid>/stat` utime+stime+cutime+cstime, the startup excluded),
//! peak RSS (`VmHWM`), and, on the devcluster only, the operator's requests
//! counted by it (`GET /_devcluster/requests`) minus the harness's own (its
//! creates, patches and lists). The floor is not a watcher: it runs once per phase
//! after the harness's writes and reports its own CPU and RSS.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::process::Command;

mod report;

use bench_scale::cluster::{self, Backend};
use bench_scale::process::{Proc, client, crds, ensure_namespace, resource, spawn, tail};
use bench_scale::webapp::{converged, status_converged, webapp_resource};

/// The operators the harness knows.
const OPERATORS: &[&str] = &[
    "wasm-operator",
    "controller-runtime",
    "native",
    "kopf",
    "floor",
];
/// The namespace every WebApp lives in.
const NAMESPACE: &str = "bench";
/// How often convergence is checked.
const POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Parser)]
#[command(name = "bench-scale", version)]
struct Args {
    /// Numbers of WebApps, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    sizes: Vec<usize>,
    /// Rounds per size (each runs every operator once).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Operators to measure, comma-separated: wasm-operator, controller-runtime, native, kopf, floor.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "wasm-operator,controller-runtime,native,kopf,floor"
    )]
    operators: Vec<String>,
    /// The API server: `dev` (a fresh devcluster per run) or `real` (a fresh
    /// `realcluster up` per run; no request counts, so no writes per object).
    #[arg(long, value_enum, default_value_t = Backend::Dev)]
    backend: Backend,
    #[command(flatten)]
    real: cluster::RealClusterArgs,
    /// The controller-runtime peer (built by `scripts/bench-scale.sh` from
    /// `bench/scale/controller-runtime`).
    #[arg(
        long,
        default_value = "target/bench-scale/bin/controller-runtime-webapp"
    )]
    controller_runtime: PathBuf,
    /// Reconciles (and harness requests) in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Directory of the release binaries (devcluster, wasm-operator, native-webapp).
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// The webapp plugin component.
    #[arg(long, default_value = "target/wasm32-wasip2/release/webapp.wasm")]
    wasm: PathBuf,
    /// The WebApp CRD.
    #[arg(long, default_value = "examples/webapp/crd.yaml")]
    crd: PathBuf,
    /// The `kopf` executable (from a virtualenv with kopf and kubernetes).
    #[arg(long, default_value = "target/bench-scale/kopf-venv/bin/kopf")]
    kopf: PathBuf,
    /// The kopf operator script.
    #[arg(long, default_value = "bench/scale/kopf/webapp.py")]
    kopf_script: PathBuf,
    /// Seconds a phase may take before the run is abandoned (default: 60 + 60 ms per object).
    #[arg(long)]
    phase_timeout: Option<u64>,
    /// Where the JSON results and operator logs go.
    #[arg(long, default_value = "target/bench-scale")]
    out: PathBuf,
}

/// One measured run: one operator, one N, one round.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The API server: `dev` or `real`.
    pub backend: Backend,
    /// Operator name.
    pub operator: String,
    /// WebApps.
    pub n: usize,
    /// Round number, from 0.
    pub round: usize,
    /// Seconds to converge after the bulk create.
    pub create_s: f64,
    /// Seconds to converge after the bulk update.
    pub update_s: f64,
    /// Operator CPU seconds during the create phase.
    pub cpu_create_s: f64,
    /// Operator CPU seconds during the update phase.
    pub cpu_update_s: f64,
    /// Peak resident set size of the operator, MiB.
    pub rss_peak_mib: f64,
    /// Operator requests in the create phase, by `verb resource`.
    pub requests_create: BTreeMap<String, i64>,
    /// Operator requests in the update phase, by `verb resource`.
    pub requests_update: BTreeMap<String, i64>,
    /// Operator writes per WebApp in the create phase (devcluster only).
    pub writes_per_object_create: Option<f64>,
    /// Operator writes per WebApp in the update phase (devcluster only).
    pub writes_per_object_update: Option<f64>,
    /// Failed operator requests (e.g. 409 conflicts) over both phases, by `verb resource status`.
    pub failed: BTreeMap<String, i64>,
    /// The machine's load averages (`/proc/loadavg`: 1, 5, 15 minutes) when
    /// the run ended: the machine may be shared, and the figures say so.
    pub load: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // One TLS provider for the process: the workspace enables two (ring and
    // aws-lc-rs), and rustls will not choose by itself.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    for op in &args.operators {
        if !OPERATORS.contains(&op.as_str()) {
            bail!(
                "unknown operator {op:?}; use one or more of {}",
                OPERATORS.join(", ")
            );
        }
    }
    std::fs::create_dir_all(args.out.join("logs"))
        .with_context(|| format!("creating {}", args.out.display()))?;
    check_inputs(&args)?;
    let ticks = clock_ticks();
    // The host compiles the plugin into its cache on its first start, once
    // per machine; measured rounds start from a warm cache, and the
    // compile's own peak is reported apart.
    let cold_start = if args.operators.iter().any(|op| op == "wasm-operator") {
        eprintln!("== wasm-operator: compiling the plugin into its cache (not measured)");
        Some(warm_compile_cache(&args).await?)
    } else {
        None
    };
    let mut runs: Vec<Run> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for &n in &args.sizes {
        for round in 0..args.rounds {
            let k = args.operators.len();
            for i in 0..k {
                let op = &args.operators[(i + round) % k];
                eprintln!(
                    "== {op} N={n} round {}/{} on {}",
                    round + 1,
                    args.rounds,
                    args.backend
                );
                match run_one(&args, op, n, round, ticks).await {
                    Ok(run) => {
                        eprintln!(
                            "   create {:.2} s, update {:.2} s, CPU {:.2} s, peak RSS {:.1} MiB, writes/object {} / {}, load {}",
                            run.create_s,
                            run.update_s,
                            run.cpu_create_s + run.cpu_update_s,
                            run.rss_peak_mib,
                            report::optional(run.writes_per_object_create),
                            report::optional(run.writes_per_object_update),
                            run.load
                        );
                        runs.push(run);
                    }
                    Err(e) => {
                        let msg = format!("{op} N={n} round {}: {e:#}", round + 1);
                        eprintln!("   FAILED: {msg}");
                        failures.push(msg);
                    }
                }
            }
        }
    }
    let summary = report::summarize(&runs);
    let ratios = report::ratios(&summary);
    let mut markdown = format!(
        "Backend: {} ({}), {} reconciles in flight, {} CPUs.\n\n",
        args.backend,
        args.backend.describe(),
        args.concurrency,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    markdown.push_str(&report::markdown(&summary, &ratios, &failures));
    if let Some(peak) = cold_start {
        markdown.push_str(&format!(
            "\nwasm-operator's peak RSS in a start that compiled the plugin into an empty cache (once per machine, before the rounds; not in the table): {peak:.1} MiB.\n"
        ));
    }
    markdown.push_str("\nLoad averages (1 / 5 / 15 min) at the end of each run:\n");
    for run in &runs {
        markdown.push_str(&format!(
            "- {} N={} round {}: {}\n",
            run.operator,
            run.n,
            run.round + 1,
            run.load
        ));
    }
    println!("{markdown}");
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let doc = json!({
        "config": {
            "backend": args.backend, "sizes": args.sizes, "rounds": args.rounds, "operators": args.operators,
            "concurrency": args.concurrency, "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        },
        "runs": runs,
        "summary": summary,
        "ratios": ratios,
        "failures": failures,
    });
    let path = args
        .out
        .join(format!("scale-{}-{stamp}.json", args.backend));
    std::fs::write(&path, serde_json::to_string_pretty(&doc)?)?;
    std::fs::write(
        args.out.join("latest.json"),
        serde_json::to_string_pretty(&doc)?,
    )?;
    std::fs::write(args.out.join("latest.md"), &markdown)?;
    std::fs::write(
        args.out.join(format!("scale-{}-{stamp}.md", args.backend)),
        &markdown,
    )?;
    eprintln!("results: {} (and latest.json, latest.md)", path.display());
    if !failures.is_empty() {
        bail!("{} runs failed (see above)", failures.len());
    }
    Ok(())
}

/// Every file a run needs exists, with a hint on how to make it.
fn check_inputs(args: &Args) -> anyhow::Result<()> {
    let mut need = match args.backend {
        Backend::Dev => vec![(
            args.bin_dir.join("devcluster"),
            "cargo build --release -p wasm-operator-devcluster",
        )],
        Backend::Real => vec![(
            args.real.realcluster.clone(),
            "REALCLUSTER_BIN=<path> scripts/build-realcluster.sh",
        )],
    };
    for op in &args.operators {
        match op.as_str() {
            "wasm-operator" => {
                need.push((
                    args.bin_dir.join("wasm-operator"),
                    "cargo build --release -p wasm-operator",
                ));
                need.push((args.wasm.clone(), "scripts/build-plugins.sh"));
            }
            "controller-runtime" => {
                need.push((
                    args.controller_runtime.clone(),
                    "scripts/build-controller-runtime-peer.sh <output path>",
                ));
            }
            "native" | "floor" => {
                need.push((
                    args.bin_dir.join("native-webapp"),
                    "cargo build --release -p bench-scale",
                ));
            }
            "kopf" => {
                need.push((args.kopf.clone(), "python3 -m venv target/bench-scale/kopf-venv && target/bench-scale/kopf-venv/bin/pip install kopf kubernetes"));
                need.push((args.kopf_script.clone(), "run from the repository root"));
            }
            _ => {}
        }
    }
    need.push((args.crd.clone(), "run from the repository root"));
    for (path, hint) in need {
        if !path.exists() {
            bail!("{} is missing; build it with: {hint}", path.display());
        }
    }
    Ok(())
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// CPU seconds of `pid` and its waited-for children.
fn cpu_seconds(pid: u32, ticks: f64) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat (did the operator exit?)"))?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14..=17 (utime, stime, cutime, cstime) are 11..=14 after the state field (3).
    let sum: f64 = (11..=14)
        .map(|i| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        })
        .sum();
    Ok(sum / ticks)
}

/// Peak resident set size (`VmHWM`) of `pid`, MiB.
fn peak_rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status (did the operator exit?)"))?;
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .context("no VmHWM in /proc/<pid>/status")?;
    Ok(kib / 1024.0)
}

/// [`request_counts`] when `counted` (the devcluster), else empty counts.
async fn maybe_request_counts(
    client: &Client,
    counted: bool,
) -> anyhow::Result<(BTreeMap<String, i64>, BTreeMap<String, i64>)> {
    if counted {
        request_counts(client).await
    } else {
        Ok(Default::default())
    }
}

/// The devcluster's request counts: `verb resource` → count, plus `failed`.
async fn request_counts(
    client: &Client,
) -> anyhow::Result<(BTreeMap<String, i64>, BTreeMap<String, i64>)> {
    let req = http::Request::get("/_devcluster/requests").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("GET /_devcluster/requests")?;
    let v: Value = serde_json::from_str(&text)?;
    let map = |key: &str| -> BTreeMap<String, i64> {
        v[key]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, n)| (k.clone(), n.as_i64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok((map("byVerbResource"), map("failed")))
}

/// `after - before - harness`, zeros dropped.
fn diff(
    after: &BTreeMap<String, i64>,
    before: &BTreeMap<String, i64>,
    harness: &BTreeMap<String, i64>,
) -> BTreeMap<String, i64> {
    after
        .iter()
        .map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0) - harness.get(k).copied().unwrap_or(0);
            (k.clone(), d)
        })
        .filter(|(_, d)| *d != 0)
        .collect()
}

fn writes(counts: &BTreeMap<String, i64>) -> i64 {
    counts
        .iter()
        .filter(|(k, _)| {
            let verb = k.split(' ').next().unwrap_or_default();
            !matches!(verb, "get" | "list" | "watch" | "other")
        })
        .map(|(_, v)| *v)
        .sum()
}

/// Creates the CRD and the namespace, and waits until WebApps are served.
async fn prepare_cluster(client: &Client, crd_path: &Path) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(crd_path)?;
    let crd: DynamicObject = serde_yaml::from_str(&text).context("parsing the CRD")?;
    let crds = crds(client);
    crds.create(&PostParams::default(), &crd)
        .await
        .context("creating the CRD")?;
    ensure_namespace(client, NAMESPACE).await?;
    let webapps =
        Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &webapp_resource());
    // The real API server establishes a CRD in about a second; give a
    // loaded machine a minute.
    for _ in 0..600 {
        if webapps.list(&ListParams::default().limit(1)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("WebApps are not served 60 s after creating the CRD")
}

/// Starts `op` (not the floor) against `kubeconfig`.
fn start_operator(args: &Args, op: &str, kubeconfig: &Path, log: &Path) -> anyhow::Result<Proc> {
    let cmd = match op {
        "wasm-operator" => {
            let mut c = Command::new(args.bin_dir.join("wasm-operator"));
            c.arg("run")
                .arg("--plugin")
                .arg(&args.wasm)
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--concurrency", &args.concurrency.to_string()])
                .args(["--metrics-addr", "127.0.0.1:0"])
                // Compiled once, reused by every run: startup is not what is measured.
                .arg("--cache-dir")
                .arg(args.out.join("wasm-cache"));
            c
        }
        "controller-runtime" => {
            let mut c = Command::new(&args.controller_runtime);
            c.arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--concurrency", &args.concurrency.to_string()]);
            c
        }
        "native" => {
            let mut c = Command::new(args.bin_dir.join("native-webapp"));
            c.arg("run")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .args(["--concurrency", &args.concurrency.to_string()]);
            c
        }
        "kopf" => {
            let mut c = Command::new(&args.kopf);
            c.args(["run", "--standalone", "--all-namespaces"])
                .arg(&args.kopf_script)
                .env("KUBECONFIG", kubeconfig)
                .env("BENCH_CONCURRENCY", args.concurrency.to_string());
            c
        }
        other => bail!("no long-running process for {other}"),
    };
    spawn(cmd, op, log)
}

/// The watches `op` opens before it can react: what "started" means.
fn expected_watches(op: &str) -> &'static [&'static str] {
    match op {
        "wasm-operator" | "controller-runtime" | "native" => {
            &["watch webapps", "watch deployments", "watch services"]
        }
        "kopf" => &["watch webapps"],
        _ => &[],
    }
}

async fn wait_started(client: &Client, op: &str, proc_: &mut Proc) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        proc_.check_alive()?;
        let (counts, _) = request_counts(client).await?;
        if expected_watches(op)
            .iter()
            .all(|w| counts.get(*w).copied().unwrap_or(0) > 0)
        {
            // The watch requests are in; give the streams a moment to be read.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{op} did not open its watches ({:?}) within 120 s; see {}",
                expected_watches(op),
                proc_.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The namespace of the probe WebApp on the real control plane.
const PROBE_NAMESPACE: &str = "bench-probe";

/// On the real control plane, where no request counter shows the operator's
/// watches: creates a WebApp in [`PROBE_NAMESPACE`] (outside what the
/// harness checks and times) and waits until `op` has written its status,
/// i.e. it is watching and reconciling.
async fn wait_probe_reconciled(client: &Client, op: &str, proc_: &mut Proc) -> anyhow::Result<()> {
    let namespaces = Api::<DynamicObject>::all_with(
        client.clone(),
        &resource("", "v1", "Namespace", "namespaces"),
    );
    let ns: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROBE_NAMESPACE}
    }))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating the probe namespace"),
    }
    let webapps =
        Api::<DynamicObject>::namespaced_with(client.clone(), PROBE_NAMESPACE, &webapp_resource());
    let mut probe = webapp_doc(0)?;
    probe.metadata.name = Some("probe".to_owned());
    probe.metadata.namespace = Some(PROBE_NAMESPACE.to_owned());
    webapps
        .create(&PostParams::default(), &probe)
        .await
        .context("creating the probe WebApp")?;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        proc_.check_alive()?;
        if status_converged(&webapps.get("probe").await?) {
            // Owned kinds' watches may open a moment after the primary's.
            tokio::time::sleep(Duration::from_millis(500)).await;
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{op} did not reconcile the probe WebApp {PROBE_NAMESPACE}/probe within 180 s; see {}",
                proc_.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs the floor once for `phase`; returns (CPU seconds, peak RSS MiB) it reports.
async fn run_floor(
    args: &Args,
    kubeconfig: &Path,
    phase: &str,
    log: &Path,
) -> anyhow::Result<(f64, f64)> {
    let out = Command::new(args.bin_dir.join("native-webapp"))
        .arg("floor")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "--concurrency",
            &args.concurrency.to_string(),
            "--phase",
            phase,
        ])
        .env("BENCH_REPORT_USAGE", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .context("running the floor")?;
    std::fs::write(log, [&out.stdout[..], &out.stderr[..]].concat())?;
    if !out.status.success() {
        bail!("the floor failed ({}): {}", out.status, tail(log, 10));
    }
    let usage: Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .context("the floor printed no usage line")?;
    Ok((
        usage["cpuSeconds"].as_f64().unwrap_or(0.0),
        usage["peakRssMib"].as_f64().unwrap_or(0.0),
    ))
}

/// Harness requests per phase, subtracted from the devcluster's counts.
#[derive(Default)]
struct HarnessRequests(BTreeMap<String, i64>);

impl HarnessRequests {
    fn add(&mut self, key: &str, n: i64) {
        *self.0.entry(key.to_owned()).or_default() += n;
    }
}

/// Counts of converged WebApps, polled until all `n` are or `timeout` passes.
async fn wait_converged(
    client: &Client,
    n: usize,
    started: Instant,
    timeout: Duration,
    harness: &mut HarnessRequests,
    operator: Option<&mut Proc>,
    phase: &str,
) -> anyhow::Result<f64> {
    let webapps =
        Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &webapp_resource());
    let deployments = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NAMESPACE,
        &resource("apps", "v1", "Deployment", "deployments"),
    );
    let services = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NAMESPACE,
        &resource("", "v1", "Service", "services"),
    );
    let mut operator = operator;
    loop {
        if let Some(p) = operator.as_deref_mut() {
            p.check_alive()?;
        }
        let apps = webapps.list(&ListParams::default()).await?.items;
        harness.add("list webapps", 1);
        let status_ok = apps.iter().filter(|a| status_converged(a)).count();
        let mut done = 0;
        if status_ok == n && apps.len() == n {
            let ds = deployments.list(&ListParams::default()).await?.items;
            let ss = services.list(&ListParams::default()).await?.items;
            harness.add("list deployments", 1);
            harness.add("list services", 1);
            done = converged(&apps, &ds, &ss);
            if done == n {
                return Ok(started.elapsed().as_secs_f64());
            }
        }
        if started.elapsed() > timeout {
            bail!(
                "{phase} did not converge within {} s: {status_ok}/{n} WebApps show a status for their generation, {done}/{n} fully converged (children checked only once every status is)",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

fn webapp_doc(i: usize) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": {"name": format!("app-{i:05}"), "namespace": NAMESPACE},
        "spec": {"replicas": 1, "image": "nginx:1.27", "port": 80},
    }))?)
}

/// Starts wasm-operator once against a fresh API server with an empty
/// compile cache (`<out>/wasm-cache` is cleared), so every measured run
/// loads the compiled plugin from the cache; returns that start's peak RSS,
/// MiB.
async fn warm_compile_cache(args: &Args) -> anyhow::Result<f64> {
    let cache = args.out.join("wasm-cache");
    if cache.exists() {
        std::fs::remove_dir_all(&cache).with_context(|| format!("clearing {}", cache.display()))?;
    }
    let dir = tempfile::Builder::new().prefix("bench-scale-").tempdir()?;
    let cluster = start_cluster(args, dir.path(), "warm-up", 0, 0).await?;
    let result = async {
        let kubeconfig = cluster.kubeconfig();
        let client = client(kubeconfig).await?;
        prepare_cluster(&client, &args.crd).await?;
        let log = args
            .out
            .join("logs")
            .join(format!("{}-warm-up.log", args.backend));
        let mut p = start_operator(args, "wasm-operator", kubeconfig, &log)?;
        match args.backend {
            Backend::Dev => wait_started(&client, "wasm-operator", &mut p).await?,
            Backend::Real => wait_probe_reconciled(&client, "wasm-operator", &mut p).await?,
        }
        let peak = peak_rss_mib(p.pid()?)?;
        p.stop().await;
        anyhow::Ok(peak)
    }
    .await;
    cluster.stop().await;
    result
}

/// A fresh API server of the chosen backend, data in `dir`.
async fn start_cluster(
    args: &Args,
    dir: &Path,
    op: &str,
    n: usize,
    round: usize,
) -> anyhow::Result<cluster::Cluster> {
    match args.backend {
        Backend::Dev => {
            cluster::Cluster::dev(&args.bin_dir.join("devcluster"), dir, n, 0, &[]).await
        }
        Backend::Real => {
            cluster::Cluster::real(
                &args.real.realcluster,
                dir,
                &args.real.real_controllers,
                &[],
                &args
                    .out
                    .join("logs")
                    .join(format!("realcluster-{op}-{n}-r{round}.log")),
            )
            .await
        }
    }
}

async fn run_one(args: &Args, op: &str, n: usize, round: usize, ticks: f64) -> anyhow::Result<Run> {
    let dir = tempfile::Builder::new().prefix("bench-scale-").tempdir()?;
    let cluster = start_cluster(args, dir.path(), op, n, round).await?;
    let result = measure(args, op, n, round, ticks, cluster.kubeconfig()).await;
    cluster.stop().await;
    result
}

async fn measure(
    args: &Args,
    op: &str,
    n: usize,
    round: usize,
    ticks: f64,
    kubeconfig: &Path,
) -> anyhow::Result<Run> {
    let client = client(kubeconfig).await?;
    prepare_cluster(&client, &args.crd).await?;
    let log = args
        .out
        .join("logs")
        .join(format!("{}-{op}-{n}-r{round}.log", args.backend));
    let mut operator = if op == "floor" {
        None
    } else {
        let mut p = start_operator(args, op, kubeconfig, &log)?;
        match args.backend {
            Backend::Dev => wait_started(&client, op, &mut p).await?,
            Backend::Real => wait_probe_reconciled(&client, op, &mut p).await?,
        }
        Some(p)
    };
    let timeout = Duration::from_secs(args.phase_timeout.unwrap_or(60 + (n as u64 * 60) / 1000));
    let webapps =
        Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &webapp_resource());

    // Create phase.
    let counted = args.backend == Backend::Dev;
    let (c0, f0) = maybe_request_counts(&client, counted).await?;
    let cpu0 = match &operator {
        Some(p) => cpu_seconds(p.pid()?, ticks)?,
        None => 0.0,
    };
    let mut harness = HarnessRequests::default();
    let started = Instant::now();
    let created: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let webapps = webapps.clone();
            async move {
                webapps
                    .create(&PostParams::default(), &webapp_doc(i)?)
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    if let Some(e) = created.into_iter().find_map(Result::err) {
        return Err(e.context("creating WebApps"));
    }
    harness.add("create webapps", n as i64);
    let (mut floor_cpu, mut floor_rss) = (0.0, 0.0);
    if op == "floor" {
        let (cpu, rss) = run_floor(args, kubeconfig, "create", &log).await?;
        floor_cpu += cpu;
        floor_rss = rss;
    }
    let create_s = wait_converged(
        &client,
        n,
        started,
        timeout,
        &mut harness,
        operator.as_mut(),
        "create",
    )
    .await?;
    let (c1, _) = maybe_request_counts(&client, counted).await?;
    let cpu1 = match &operator {
        Some(p) => cpu_seconds(p.pid()?, ticks)?,
        None => floor_cpu,
    };
    let requests_create = diff(&c1, &c0, &harness.0);

    // Update phase: replicas 1 -> 2 on every WebApp.
    let mut harness = HarnessRequests::default();
    let started = Instant::now();
    let patch = json!({"spec": {"replicas": 2}});
    let updated: Vec<anyhow::Result<()>> = futures::stream::iter(0..n)
        .map(|i| {
            let webapps = webapps.clone();
            let patch = patch.clone();
            async move {
                webapps
                    .patch(
                        &format!("app-{i:05}"),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                Ok(())
            }
        })
        .buffer_unordered(args.concurrency)
        .collect()
        .await;
    if let Some(e) = updated.into_iter().find_map(Result::err) {
        return Err(e.context("updating WebApps"));
    }
    harness.add("patch-merge webapps", n as i64);
    if op == "floor" {
        let (cpu, rss) = run_floor(
            args,
            kubeconfig,
            "update",
            &log.with_extension("update.log"),
        )
        .await?;
        floor_cpu += cpu;
        floor_rss = f64::max(floor_rss, rss);
    }
    let update_s = wait_converged(
        &client,
        n,
        started,
        timeout,
        &mut harness,
        operator.as_mut(),
        "update",
    )
    .await?;
    let (c2, f2) = maybe_request_counts(&client, counted).await?;
    let (cpu2, rss) = match &operator {
        Some(p) => (cpu_seconds(p.pid()?, ticks)?, peak_rss_mib(p.pid()?)?),
        None => (floor_cpu, floor_rss),
    };
    let requests_update = diff(&c2, &c1, &harness.0);
    if let Some(p) = operator.take() {
        p.stop().await;
    }
    let per_object =
        |counts: &BTreeMap<String, i64>| counted.then(|| writes(counts) as f64 / n as f64);
    Ok(Run {
        backend: args.backend,
        operator: op.to_owned(),
        n,
        round,
        create_s,
        update_s,
        cpu_create_s: cpu1 - cpu0,
        cpu_update_s: cpu2 - cpu1,
        rss_peak_mib: rss,
        writes_per_object_create: per_object(&requests_create),
        writes_per_object_update: per_object(&requests_update),
        requests_create,
        requests_update,
        failed: diff(&f2, &f0, &BTreeMap::new()),
        load: load_average(),
    })
}

/// The 1, 5 and 15 minute load averages, e.g. `2.10 1.95 1.80`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_subtracts_the_harness() {
        let before = BTreeMap::from([("apply deployments".to_owned(), 2)]);
        let after = BTreeMap::from([
            ("apply deployments".to_owned(), 12),
            ("create webapps".to_owned(), 10),
            ("list webapps".to_owned(), 4),
        ]);
        let harness = BTreeMap::from([
            ("create webapps".to_owned(), 10),
            ("list webapps".to_owned(), 3),
        ]);
        let d = diff(&after, &before, &harness);
        assert_eq!(
            d,
            BTreeMap::from([
                ("apply deployments".to_owned(), 10),
                ("list webapps".to_owned(), 1)
            ])
        );
        assert_eq!(writes(&d), 10);
    }

    #[test]
    fn convergence_needs_status_children_and_owner() {
        let app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a", "uid": "u1", "generation": 2, "finalizers": ["f"]},
            "spec": {"replicas": 2}, "status": {"observedGeneration": 2}
        }))
        .unwrap();
        let dep = |replicas: i64, uid: &str| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "a", "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "a", "uid": uid}]},
                "spec": {"replicas": replicas}
            }))
            .unwrap()
        };
        let svc: DynamicObject = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}}),
        )
        .unwrap();
        assert_eq!(
            converged(
                std::slice::from_ref(&app),
                &[dep(2, "u1")],
                std::slice::from_ref(&svc)
            ),
            1
        );
        assert_eq!(
            converged(
                std::slice::from_ref(&app),
                &[dep(1, "u1")],
                std::slice::from_ref(&svc)
            ),
            0
        );
        assert_eq!(
            converged(
                std::slice::from_ref(&app),
                &[dep(2, "other")],
                std::slice::from_ref(&svc)
            ),
            0
        );
        assert_eq!(
            converged(std::slice::from_ref(&app), &[dep(2, "u1")], &[]),
            0
        );
        let mut stale = app.clone();
        stale.data["status"]["observedGeneration"] = json!(1);
        assert!(!status_converged(&stale));
    }

    #[test]
    fn proc_stat_fields_are_read_after_the_command_name() {
        // Our own process: utime+stime only grow, and the parser finds them.
        let cpu = cpu_seconds(std::process::id(), 100.0).unwrap();
        assert!(cpu >= 0.0);
        assert!(peak_rss_mib(std::process::id()).unwrap() > 0.0);
    }
}
