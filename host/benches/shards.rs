//! Reconcile throughput with 1, 2 and 3 replicas sharing the work through
//! `--shards` (issue 15): a benchmark, not a test; it asserts nothing.
//!
//! Every run starts a fresh in-memory devcluster (in this process), the
//! webapp CRD and K replicas of the release host (`wasm-operator run
//! --leader-elect --shards 6`, short election timings) with the real webapp
//! plugin, waits until the six shard Leases are spread evenly and every
//! replica's controller runs, then measures:
//!
//! - create: N WebApps created, until every one reports
//!   `status.observedGeneration == metadata.generation`;
//! - update: every WebApp's spec changed, until the same holds again.
//!
//! Rounds are interleaved (1, 2, 3 replicas, then again), the median per
//! configuration is reported with its ratio to one replica. The devcluster,
//! the replicas and this process share the machine's cores: on a 2-core
//! machine three replicas cannot scale beyond about 2x.
//!
//! `cargo bench -p wasm-operator --bench shards`; `SHARDS_BENCH_OBJECTS`
//! (default 600) and `SHARDS_BENCH_ROUNDS` (default 2) change the size.
//! Needs the webapp plugin built (`scripts/build-plugins.sh`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use devcluster::{DevCluster, DevClusterOptions};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const NS: &str = "default";
const SHARDS: usize = 6;
const LEASE: &str = "bench-shards";
const DEADLINE: Duration = Duration::from_secs(600);
fn webapp_resource() -> ApiResource {
    support::api_resource("example.com", "v1", "WebApp", "webapps")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

async fn install_crd(client: &Client) {
    let path = support::example_crd("webapp");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = crd.metadata.name.clone().unwrap_or_default();
    Api::<CustomResourceDefinition>::all(client.clone())
        .patch(
            &name,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot install CRD {name}: {e}"));
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &webapp_resource());
    wait("the WebApp CRD to be served", || async {
        api.list(&ListParams::default()).await.is_ok()
    })
    .await;
}

async fn wait<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + DEADLINE;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

struct Replica {
    child: Child,
    port: u16,
}

impl Replica {
    fn start(name: &str, kubeconfig: &Path, dir: &Path) -> Replica {
        let wasm = support::plugin_wasm("webapp");
        assert!(
            wasm.exists(),
            "{} is missing: run scripts/build-plugins.sh",
            wasm.display()
        );
        let port = free_port();
        let log = std::fs::File::create(dir.join(format!("{name}.log")))
            .unwrap_or_else(|e| panic!("cannot create the replica's log: {e}"));
        // The Lease's namespace is the host's: the WebApps in it are served
        // only because the grant names it.
        let grant = dir.join(format!("{name}-grant.yaml"));
        std::fs::write(&grant, format!("namespaces: [{NS}]\n"))
            .unwrap_or_else(|e| panic!("cannot write the replica's grant: {e}"));
        let child = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
            .args(["run", "--plugin"])
            .arg(&wasm)
            .arg("--grant")
            .arg(&grant)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .arg("--cache-dir")
            .arg(std::env::temp_dir().join("wasm-operator-bench-shards-cache"))
            .args(["--leader-elect", "--leader-election-namespace", NS])
            .args(["--leader-election-id", LEASE])
            .args(["--lease-duration", "3s", "--renew-deadline", "2s"])
            .args(["--retry-period", "500ms"])
            .args(["--shards", &SHARDS.to_string()])
            .env("RUST_LOG", "warn")
            .env("POD_NAME", name)
            .env_remove("POD_NAMESPACE")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start wasm-operator: {e}"));
        Replica { child, port }
    }

    async fn controller_runs(&self) -> bool {
        let url = format!("http://127.0.0.1:{}/readyz?verbose", self.port);
        match reqwest::get(url).await {
            Ok(response) => response
                .text()
                .await
                .is_ok_and(|body| body.contains("[+]plugin webapp ok")),
            Err(_) => false,
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every shard Lease held, each of the `replicas` holding its even share.
async fn spread_evenly(client: &Client, replicas: usize) -> bool {
    let api = Api::<Lease>::namespaced(client.clone(), NS);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for shard in 0..SHARDS {
        let Ok(Some(lease)) = api.get_opt(&format!("{LEASE}-shard-{shard}")).await else {
            return false;
        };
        let Some(holder) = lease.spec.and_then(|s| s.holder_identity) else {
            return false;
        };
        *counts.entry(holder).or_default() += 1;
    }
    counts.len() == replicas && counts.values().all(|c| *c == SHARDS / replicas)
}

/// True when every WebApp reports its current generation observed.
async fn converged(api: &Api<DynamicObject>, objects: usize) -> bool {
    let Ok(list) = api.list(&ListParams::default()).await else {
        return false;
    };
    list.items.len() == objects
        && list.items.iter().all(|o| {
            let value = serde_json::to_value(o).unwrap_or(Value::Null);
            let generation = value
                .pointer("/metadata/generation")
                .and_then(Value::as_i64);
            generation.is_some()
                && value
                    .pointer("/status/observedGeneration")
                    .and_then(Value::as_i64)
                    == generation
        })
}

async fn apply_all(api: &Api<DynamicObject>, objects: usize, replicas: i64) {
    futures::stream::iter(0..objects)
        .map(|i| async move {
            let name = format!("bench-{i:05}");
            let webapp = json!({
                "apiVersion": "example.com/v1", "kind": "WebApp",
                "metadata": {"name": name, "namespace": NS},
                "spec": {"image": "nginx:1.27", "replicas": replicas},
            });
            api.patch(
                &name,
                &PatchParams::apply("bench").force(),
                &Patch::Apply(&webapp),
            )
            .await
            .map(drop)
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await
        .unwrap_or_else(|e| panic!("cannot apply the WebApps: {e}"));
}

/// One run: seconds to converge after creating, then after updating.
async fn run(replicas: usize, objects: usize) -> (f64, f64) {
    let cluster = DevCluster::start(DevClusterOptions::default())
        .await
        .unwrap_or_else(|e| panic!("cannot start a devcluster: {e}"));
    let client = cluster.client();
    install_crd(&client).await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("cannot create a temp dir: {e}"));
    let running: Vec<Replica> = (0..replicas)
        .map(|i| Replica::start(&format!("r{i}"), cluster.kubeconfig_path(), dir.path()))
        .collect();
    wait("the shards to spread evenly", || {
        spread_evenly(&client, replicas)
    })
    .await;
    for replica in &running {
        wait("every replica's controller", || replica.controller_runs()).await;
    }
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), NS, &webapp_resource());
    let started = Instant::now();
    apply_all(&api, objects, 1).await;
    wait("the created WebApps to converge", || {
        converged(&api, objects)
    })
    .await;
    let create = started.elapsed().as_secs_f64();
    let started = Instant::now();
    apply_all(&api, objects, 2).await;
    wait("the updated WebApps to converge", || {
        converged(&api, objects)
    })
    .await;
    let update = started.elapsed().as_secs_f64();
    drop(running);
    (create, update)
}

/// The median; of an even count, the mean of the middle two.
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    }
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    // `cargo test --benches` runs bench targets once as a smoke check:
    // only a real `cargo bench` measures.
    if !std::env::args().any(|a| a == "--bench") {
        println!("shards: run with `cargo bench -p wasm-operator --bench shards`");
        return;
    }
    let objects = env_number("SHARDS_BENCH_OBJECTS", 600);
    let rounds = env_number("SHARDS_BENCH_ROUNDS", 2).max(1);
    let configs = [1usize, 2, 3];
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "shards: {objects} WebApps, --shards {SHARDS}, {rounds} interleaved rounds, {cores} cores (devcluster, replicas and this process share them)"
    );
    let mut results: Vec<(Vec<f64>, Vec<f64>)> = vec![(Vec::new(), Vec::new()); configs.len()];
    for round in 1..=rounds {
        for (index, replicas) in configs.iter().enumerate() {
            let (create, update) = run(*replicas, objects).await;
            println!(
                "round {round}: {replicas} replica(s): create {create:.2} s ({:.0}/s), update {update:.2} s ({:.0}/s)",
                objects as f64 / create,
                objects as f64 / update
            );
            results[index].0.push(create);
            results[index].1.push(update);
        }
    }
    println!();
    println!(
        "| replicas | create (s) | create (objects/s) | vs 1 | update (s) | update (objects/s) | vs 1 |"
    );
    println!("|---|---|---|---|---|---|---|");
    let mut base = (0.0, 0.0);
    for (index, replicas) in configs.iter().enumerate() {
        let create = median(&mut results[index].0);
        let update = median(&mut results[index].1);
        if index == 0 {
            base = (create, update);
        }
        println!(
            "| {replicas} | {create:.2} | {:.0} | {:.2}x | {update:.2} | {:.0} | {:.2}x |",
            objects as f64 / create,
            base.0 / create,
            objects as f64 / update,
            base.1 / update
        );
    }
}
