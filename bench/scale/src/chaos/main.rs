//! `chaos`: the host at scale under faults (issue 32).
//!
//! N WebApps across namespaces, R replicas of `wasm-operator run
//! --leader-elect --shards S`, each reaching the API server through its own
//! loopback proxy (`proxy.rs`); a steady stream of spec updates, creates and
//! deletes (`workload.rs`); and faults on a seeded schedule (`faults.rs`,
//! executed by `storm.rs`): kill -9 and SIGTERM of replicas, partitions of
//! shard holders longer than the lease, slow links, API latency and 5xx/429
//! bursts, API server restarts, a plugin hot swap and a canary promotion.
//!
//! While it runs, the harness watches every WebApp (fencing tokens,
//! generations, status) and the shard Leases (terms) from its own
//! connection (`observe.rs`), and samples every replica. At the end it
//! lifts every fault, waits for convergence, and checks (`check.rs`):
//! every object converged; no replica wrote outside its term (the API
//! server's audit log against the Lease terms) and no token went
//! backwards; nothing lost, doubled, orphaned or stuck. The report
//! (`report.rs`) goes to `<out>/report.json` and `<out>/report.md`.
//!
//! Exit status: 0 every invariant held, 1 one did not, 2 the harness failed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use clap::Parser;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use bench_scale::process::{client, crds, ensure_namespace, resource};
use bench_scale::webapp::webapp_resource;
use serde::Deserialize as _;

mod api;
mod check;
mod faults;
mod observe;
mod proxy;
mod replicas;
mod report;
mod storm;
mod workload;

use faults::{FaultKind, Rng, Shape};
use observe::Shared;
use replicas::{Replica, ReplicaConfig};
use storm::{Rig, Version};

/// The Lease name prefix (`--leader-election-id`).
pub const LEASE_ID: &str = "chaos";
/// The namespace of the Leases.
const LEASE_NAMESPACE: &str = "chaos-system";

/// Which API server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Backend {
    Dev,
    Real,
}

#[derive(Debug, Parser, serde::Serialize)]
#[command(
    name = "chaos",
    version,
    about = "The host at scale under faults: see bench/scale/src/chaos/main.rs"
)]
struct Args {
    /// The API server: the devcluster or a real control plane.
    #[arg(long, value_enum, default_value = "dev")]
    backend: Backend,
    /// WebApps created before the storm.
    #[arg(long, default_value_t = 5000)]
    objects: usize,
    /// Host replicas.
    #[arg(long, default_value_t = 3)]
    replicas: usize,
    /// `--shards` of every replica.
    #[arg(long, default_value_t = 6)]
    shards: usize,
    /// The storm's length (e.g. 90s, 10m, 1h).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    #[serde(serialize_with = "seconds")]
    storm: Duration,
    /// Changes per second during the storm (70 % updates, 15 % creates, 15 % deletes).
    #[arg(long, default_value_t = 20.0)]
    churn: f64,
    /// The seed of the schedule and the churn (default: from the clock; printed).
    #[arg(long)]
    seed: Option<u64>,
    /// Fault kinds (comma-separated); `--faults none` for a soak.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    faults: Vec<String>,
    /// The pause between faults, least and most (e.g. 2s,6s).
    #[arg(long, value_delimiter = ',', default_value = "2s,6s", value_parser = parse_duration)]
    #[serde(skip)]
    gap: Vec<Duration>,
    /// `--lease-duration`, `--renew-deadline`, `--retry-period` of the replicas.
    #[arg(long, value_delimiter = ',', default_value = "5s,3s,1s")]
    lease: Vec<String>,
    /// How long the end may take to converge.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    #[serde(serialize_with = "seconds")]
    converge_timeout: Duration,
    /// Directory of the `wasm-operator` and `devcluster` binaries.
    #[arg(long)]
    bin_dir: PathBuf,
    /// Directory of `webapp.wasm` and `webapp_next.wasm`.
    #[arg(long)]
    plugins_dir: PathBuf,
    /// The repository root (for the CRDs: examples/webapp/crd.yaml, deploy/crds/wasmplugin.yaml).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    #[command(flatten)]
    real: bench_scale::cluster::RealClusterArgs,
    /// Where the report, logs and the API server's data go.
    #[arg(long, default_value = "target/chaos")]
    out: PathBuf,
    /// Replica log verbosity (`-v`).
    #[arg(long)]
    verbosity: Option<u8>,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let (number, unit) = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map(|i| text.split_at(i))
        .ok_or_else(|| format!("{text}: a duration needs a unit (ms, s, m, h)"))?;
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text}: not a number"))?;
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{text}: unit must be ms, s, m or h")),
    };
    Ok(Duration::from_secs_f64(value * scale))
}

fn kinds(names: &[String], real: bool) -> anyhow::Result<Vec<FaultKind>> {
    use clap::ValueEnum as _;
    let mut kinds = Vec::new();
    for name in names {
        match name.as_str() {
            "all" => kinds.extend(FaultKind::ALL),
            "none" => {}
            other => kinds.push(
                FaultKind::from_str(other, true)
                    .map_err(|_| anyhow::anyhow!("unknown fault kind {other}"))?,
            ),
        }
    }
    kinds.retain(|k| k.available(real));
    kinds.dedup();
    Ok(kinds)
}

#[tokio::main]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    match run(&args).await {
        Ok(report) => {
            println!("{}", report.markdown());
            println!(
                "report: {} and report.json",
                args.out.join("report.md").display()
            );
            std::process::exit(if report.held() { 0 } else { 1 });
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(2);
        }
    }
}

async fn install(client: &Client, repo: &Path, namespaces: &[String]) -> anyhow::Result<()> {
    let crds = crds(client);
    for file in ["examples/webapp/crd.yaml", "deploy/crds/wasmplugin.yaml"] {
        let path = repo.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(doc)?;
            if value.is_null() {
                continue;
            }
            let crd: DynamicObject = serde_yaml::from_value(value)?;
            crds.create(&PostParams::default(), &crd)
                .await
                .with_context(|| format!("creating the CRD of {}", path.display()))?;
        }
    }
    for ns in namespaces
        .iter()
        .map(String::as_str)
        .chain([LEASE_NAMESPACE])
    {
        ensure_namespace(client, ns).await?;
    }
    // CRDs are served a moment after they are created.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let apps = Api::<DynamicObject>::all_with(client.clone(), &webapp_resource());
        let wps = storm::wasm_plugins(client);
        if apps.list(&ListParams::default().limit(1)).await.is_ok()
            && wps.list(&ListParams::default().limit(1)).await.is_ok()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("WebApps and WasmPlugins are not served 60 s after creating their CRDs");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until the backlog is empty; returns the seconds it took.
async fn wait_backlog(shared: &Shared, timeout: Duration, what: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    loop {
        let backlog = shared.lock().backlog();
        if backlog == 0 {
            return Ok(started.elapsed().as_secs_f64());
        }
        if started.elapsed() > timeout {
            bail!(
                "{what}: {backlog} objects still not reconciled after {} s",
                timeout.as_secs()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn list_all(
    client: &Client,
    ar: &kube::api::ApiResource,
    labels: Option<&str>,
) -> anyhow::Result<Vec<DynamicObject>> {
    let api = Api::<DynamicObject>::all_with(client.clone(), ar);
    let mut params = ListParams::default();
    if let Some(l) = labels {
        params = params.labels(l);
    }
    Ok(api
        .list(&params)
        .await?
        .items
        .into_iter()
        .filter(|o| {
            o.namespace()
                .is_some_and(|ns| ns.starts_with("chaos-") && ns != LEASE_NAMESPACE)
        })
        .collect())
}

/// Polls the final state until it holds or `timeout` passes.
async fn settle(
    client: &Client,
    ledger: &workload::Ledger,
    timeout: Duration,
) -> (check::FinalState, Option<f64>) {
    let started = Instant::now();
    let mut last = check::FinalState::default();
    loop {
        let lists = async {
            let apps = list_all(client, &webapp_resource(), Some("chaos=1")).await?;
            let deployments = list_all(
                client,
                &resource("apps", "v1", "Deployment", "deployments"),
                None,
            )
            .await?;
            let services =
                list_all(client, &resource("", "v1", "Service", "services"), None).await?;
            anyhow::Ok((apps, deployments, services))
        };
        if let Ok((apps, deployments, services)) = lists.await {
            last = check::final_state(
                &apps,
                &deployments,
                &services,
                &ledger.alive,
                &ledger.deleted,
            );
            if last.holds() {
                return (last, Some(started.elapsed().as_secs_f64()));
            }
        }
        if started.elapsed() > timeout {
            return (last, None);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn run(args: &Args) -> anyhow::Result<report::Report> {
    let seed = args.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(1)
    });
    eprintln!("chaos: seed {seed}");
    let real = args.backend == Backend::Real;
    let kinds = kinds(&args.faults, real)?;
    if args.lease.len() != 3 || args.gap.len() != 2 {
        bail!("--lease takes three durations and --gap two");
    }
    std::fs::create_dir_all(&args.out)?;
    let out = std::fs::canonicalize(&args.out)?;
    let logs = out.join("logs");
    std::fs::create_dir_all(&logs)?;
    // The API server's data, audit log and kubeconfigs: kept for reading
    // after the run (every write of every replica is in the audit log).
    let work_dir = out.join("work");
    if work_dir.exists() {
        std::fs::remove_dir_all(&work_dir)?;
    }
    std::fs::create_dir_all(&work_dir)?;
    let work = work_dir.as_path();
    let api = match args.backend {
        Backend::Dev => {
            api::ApiServer::dev(&args.bin_dir.join("devcluster"), work, args.objects).await?
        }
        Backend::Real => {
            api::ApiServer::real(
                &args.real.realcluster,
                work,
                &args.real.real_controllers,
                &logs.join("realcluster.log"),
            )
            .await?
        }
    };
    let admin = client(api.kubeconfig()).await?;
    let namespaces = workload::namespaces(args.objects);
    install(&admin, &args.repo, &namespaces).await?;
    let shared = Shared::default();
    let watches = observe::watch(&admin, LEASE_NAMESPACE, LEASE_ID, &shared);

    let plugins_dir = std::fs::canonicalize(&args.plugins_dir)?;
    let versions = [
        Version {
            path: plugins_dir.join("webapp.wasm"),
            version: "1.0.0".into(),
        },
        Version {
            path: plugins_dir.join("webapp_next.wasm"),
            version: "1.1.0".into(),
        },
    ];
    for v in &versions {
        if !v.path.exists() {
            bail!(
                "{} is missing: build it with `bash scripts/build-plugins.sh`",
                v.path.display()
            );
        }
    }
    let wp: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": storm::PLUGIN},
        "spec": {"source": {"file": {"path": versions[0].path}}},
    }))?;
    storm::wasm_plugins(&admin)
        .create(&PostParams::default(), &wp)
        .await?;

    let upstream = api.address()?;
    let mut proxies = Vec::new();
    let mut replica_set = Vec::new();
    for i in 0..args.replicas {
        let proxy = proxy::Proxy::start(u8::try_from(i)?, upstream).await?;
        let kubeconfig = work.join(format!("replica-{i}.kubeconfig"));
        api.kubeconfig_via(proxy.port, &kubeconfig)?;
        proxies.push(proxy);
        replica_set.push(Replica::new(i, kubeconfig, &logs)?);
    }
    let config = ReplicaConfig {
        binary: args.bin_dir.join("wasm-operator"),
        shards: args.shards,
        lease_namespace: LEASE_NAMESPACE.into(),
        timings: [
            args.lease[0].clone(),
            args.lease[1].clone(),
            args.lease[2].clone(),
        ],
        cache_dir: out.join("wasm-cache"),
        verbosity: args.verbosity,
    };
    for replica in &mut replica_set {
        replica.start(&config)?;
    }
    let replicas = Arc::new(tokio::sync::Mutex::new(replica_set));
    let run_start = Instant::now();

    // The sampler: every replica every 5 s, the backlog, and crashes.
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let backlog = Arc::new(std::sync::Mutex::new(Vec::new()));
    let crashes = Arc::new(std::sync::Mutex::new(vec![0u32; args.replicas]));
    let sampler = {
        let replicas = replicas.clone();
        let shared = shared.clone();
        let stop = stop_sampling.clone();
        let backlog = backlog.clone();
        let crashes = crashes.clone();
        let config = config.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = run_start.elapsed().as_secs_f64();
                {
                    let mut set = replicas.lock().await;
                    for replica in set.iter_mut() {
                        if replica.starts > 0 && !replica.running() && replica.has_process() {
                            // Exited on its own: count it and start it again.
                            if let Ok(mut c) = crashes.lock() {
                                c[replica.index] += 1;
                            }
                            let _ = replica.start(&config);
                        }
                        replica.sample(t).await;
                    }
                }
                let (count, oldest) = {
                    let obs = shared.lock();
                    (obs.backlog(), obs.oldest_expected())
                };
                let age = oldest
                    .and_then(|o| SystemTime::now().duration_since(o).ok())
                    .map(|d| d.as_secs_f64())
                    .unwrap_or(0.0);
                if let Ok(mut b) = backlog.lock() {
                    b.push((t, count, age));
                }
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        })
    };

    eprintln!(
        "chaos: creating {} WebApps in {} namespaces",
        args.objects,
        namespaces.len()
    );
    let mut ledger = workload::Ledger::default();
    let created = Instant::now();
    workload::create_initial(&admin, args.objects, &mut ledger, &shared).await?;
    wait_backlog(&shared, args.converge_timeout, "initial convergence").await?;
    // From the first create: the creates themselves are part of it.
    let initial_convergence_s = created.elapsed().as_secs_f64();
    eprintln!(
        "chaos: {} WebApps converged after {initial_convergence_s:.1} s; the storm begins",
        args.objects
    );

    let mut rng = Rng::new(seed);
    let plan = faults::schedule(
        rng.next_u64(),
        &Shape {
            storm: args.storm,
            lease: parse_duration(&args.lease[0]).map_err(anyhow::Error::msg)?,
            gap: (args.gap[0], args.gap[1]),
            replicas: args.replicas,
            shards: args.shards,
            kinds,
        },
    );
    let stop_churn = Arc::new(AtomicBool::new(false));
    let churn = tokio::spawn(workload::churn(
        admin.clone(),
        args.objects,
        args.churn,
        Rng::new(rng.next_u64()),
        ledger,
        shared.clone(),
        stop_churn.clone(),
    ));
    let mut rig = Rig {
        api,
        client: admin.clone(),
        proxies,
        replicas: replicas.clone(),
        config,
        shared: shared.clone(),
        versions,
        serving: 0,
    };
    let storm_start = Instant::now();
    let storm_t0 = run_start.elapsed().as_secs_f64();
    let storm_wall = SystemTime::now();
    let mut records = Vec::new();
    for fault in &plan {
        tokio::time::sleep_until((storm_start + fault.at).into()).await;
        eprintln!(
            "chaos: {:>5.0} s {}",
            fault.at.as_secs_f64(),
            fault.kind.name()
        );
        let record = rig.inject(fault).await;
        if let Some(e) = &record.error {
            eprintln!("chaos:       {}: {e}", record.detail);
        }
        records.push(record);
    }
    tokio::time::sleep_until((storm_start + args.storm).into()).await;
    stop_churn.store(true, Ordering::Relaxed);
    let ledger = churn.await.context("the churn task")?;
    let storm_end = SystemTime::now();
    rig.restore().await?;
    eprintln!("chaos: the storm is over; waiting for convergence");
    let (final_state, final_convergence_s) = settle(&admin, &ledger, args.converge_timeout).await;
    // The last changes' status events.
    let _ = wait_backlog(&shared, Duration::from_secs(30), "final").await;
    stop_sampling.store(true, Ordering::Relaxed);
    let _ = sampler.await;

    // Judge every replica write.
    let writes = observe::read_audit(rig.api.audit_log())
        .with_context(|| format!("reading the audit log {}", rig.api.audit_log().display()))?;
    let sources: Vec<String> = rig.proxies.iter().map(|p| p.source.to_string()).collect();
    let delays: Vec<Vec<proxy::Delay>> = rig.proxies.iter().map(proxy::Proxy::delays).collect();
    let report = {
        let set = replicas.lock().await;
        let crashes = crashes.lock().map(|c| c.clone()).unwrap_or_default();
        let obs = shared.lock();
        let uid_of = |key: &str| obs.apps.get(key).map(|a| a.uid.clone());
        let replica_of_source = |source: &str| sources.iter().position(|s| s == source);
        // WasmPlugins and their Events (in the host's namespace).
        let cluster_wide = |w: &observe::Write| {
            w.resource == "wasmplugins"
                || (w.resource == "events" && !w.namespace.starts_with("chaos-"))
        };
        let rules = check::Attribution {
            election_namespace: LEASE_NAMESPACE,
            cluster_wide: &cluster_wide,
            replica_of_source: &replica_of_source,
            uid_of: &uid_of,
        };
        let stale = check::stale_writes(&writes, &rules, &obs.terms, args.shards, &delays);
        let replica_summaries: Vec<report::ReplicaSummary> = set
            .iter()
            .map(|r| {
                report::replica_summary(
                    r,
                    crashes.get(r.index).copied().unwrap_or(0),
                    &writes,
                    &sources[r.index],
                    (storm_wall, storm_end),
                    storm_t0,
                )
            })
            .collect();
        let storm_latencies: Vec<f64> = obs
            .latencies
            .iter()
            .filter(|l| l.sent >= storm_wall)
            .map(observe::Latency::seconds)
            .collect();
        let kinds = report::by_kind(&records, &obs.latencies);
        let stale_count = stale.counts.get("stale").copied().unwrap_or(0);
        let in_flight = stale.counts.get("delayedInFlight").copied().unwrap_or(0);
        let crashed: u32 = crashes.iter().sum();
        let fds_max = replica_summaries
            .iter()
            .map(|r| r.fds_max)
            .max()
            .unwrap_or(0);
        let threads_max = replica_summaries
            .iter()
            .map(|r| r.threads_max)
            .max()
            .unwrap_or(0);
        let slopes: Vec<f64> = replica_summaries
            .iter()
            .filter_map(|r| r.rss_slope_mib_per_h)
            .collect();
        let mut invariants = vec![
            report::Invariant {
                name: "convergence",
                held: final_convergence_s.is_some(),
                figure: match final_convergence_s {
                    Some(t) => format!(
                        "{} of {} objects converged {t:.1} s after the storm",
                        final_state.converged, final_state.apps
                    ),
                    None => format!(
                        "{} of {} converged after {} s; first not converged: {:?}",
                        final_state.converged,
                        final_state.apps,
                        args.converge_timeout.as_secs(),
                        final_state.not_converged
                    ),
                },
            },
            report::Invariant {
                name: "no stale write",
                held: stale_count == 0 && obs.regressions.is_empty(),
                figure: format!(
                    "{} replica writes judged: {} in term, {stale_count} stale, {in_flight} delayed in flight (sent in term, held by the partition), {} unattributed; {} tokens went backwards",
                    stale.by_replica.values().sum::<usize>(),
                    stale.counts.get("inTerm").copied().unwrap_or(0),
                    stale.counts.get("unattributed").copied().unwrap_or(0),
                    obs.regressions.len()
                ),
            },
            report::Invariant {
                name: "nothing lost or doubled",
                held: final_state.lost.is_empty()
                    && final_state.undeleted.is_empty()
                    && final_state.stuck_terminating.is_empty()
                    && final_state.doubled.is_empty()
                    && final_state.orphaned.is_empty(),
                figure: format!(
                    "{} lost, {} deleted but present, {} stuck terminating, {} doubled, {} orphaned children ({} creates, {} deletes, {} updates)",
                    final_state.lost.len(),
                    final_state.undeleted.len(),
                    final_state.stuck_terminating.len(),
                    final_state.doubled.len(),
                    final_state.orphaned.len(),
                    ledger.creates,
                    ledger.deletes,
                    ledger.updates
                ),
            },
            report::Invariant {
                name: "load held",
                held: crashed == 0,
                figure: format!(
                    "{crashed} replica exits not caused by the harness; at most {fds_max} fds and {threads_max} threads in a replica; backlog at most {}",
                    backlog
                        .lock()
                        .map(|b| b.iter().map(|x| x.1).max().unwrap_or(0))
                        .unwrap_or(0)
                ),
            },
        ];
        if !slopes.is_empty() {
            let worst = slopes.iter().copied().fold(f64::MIN, f64::max);
            invariants.push(report::Invariant {
                name: "memory flat",
                held: worst <= MEMORY_SLOPE_BOUND_MIB_PER_H,
                figure: format!(
                    "RSS slope over the last 40 minutes at most {worst:+.1} MiB/h (bound {MEMORY_SLOPE_BOUND_MIB_PER_H} MiB/h)"
                ),
            });
        }
        let terms_per_shard: BTreeMap<usize, usize> =
            obs.terms.iter().map(|(s, t)| (*s, t.len())).collect();
        report::Report {
            settings: json!({
                "backend": args.backend, "objects": args.objects, "replicas": args.replicas,
                "shards": args.shards, "storm_s": args.storm.as_secs(), "churn": args.churn,
                "lease": args.lease.join("/"), "faults": args.faults,
            }),
            seed,
            load: std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
                .to_owned(),
            initial_convergence_s,
            final_convergence_s,
            invariants,
            kinds,
            faults: records,
            latency: report::Spread::of(storm_latencies),
            churn: json!({
                "creates": ledger.creates, "deletes": ledger.deletes, "updates": ledger.updates,
                "failed": ledger.failed, "ambiguous": ledger.ambiguous.len(), "unknown": ledger.unknown.len(),
            }),
            final_state,
            stale,
            regressions: obs.regressions.clone(),
            skipped_terms: obs.skipped_terms,
            terms_per_shard,
            replicas: replica_summaries,
            backlog: backlog.lock().map(|b| b.clone()).unwrap_or_default(),
            samples: set.iter().map(|r| r.samples.clone()).collect(),
        }
    };
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)?,
    )?;
    std::fs::write(out.join("report.md"), report.markdown())?;
    for w in watches {
        w.abort();
    }
    {
        let mut set = replicas.lock().await;
        for r in set.iter_mut() {
            r.terminate(Duration::from_secs(10)).await;
        }
    }
    rig.api.stop().await;
    Ok(report)
}

/// The RSS growth a replica may show over the last 40 minutes of a soak.
const MEMORY_SLOPE_BOUND_MIB_PER_H: f64 = 10.0;
