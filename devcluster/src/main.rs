//! `devcluster`: serve a local Kubernetes API server until Ctrl-C.
//!
//! Fault injection is exposed as an admin API: `POST /_devcluster/faults/close-watches`,
//! `/expire-history`, `/fail-next` (`{"pathPrefix": "/api", "count": 3, "status": 503}`)
//! and `/latency` (`{"millis": 200}`); `GET /_devcluster/requests` answers the count of served
//! requests by verb and resource (for benchmarks).

use std::path::PathBuf;

use clap::Parser;
use devcluster::{DevCluster, DevClusterOptions};

/// A local Kubernetes API server on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "devcluster", version)]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "devcluster.kubeconfig")]
    kubeconfig: PathBuf,
    /// SQLite file keeping the state across restarts (in memory when absent).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Require this bearer token on every request.
    #[arg(long)]
    token: Option<String>,
    /// Watch events kept for resuming watches.
    #[arg(long, default_value_t = 10_000)]
    history_window: usize,
    /// Simulate workloads: fake nodes, Pods that become Ready, Deployments,
    /// StatefulSets, DaemonSets and Jobs whose status moves (kwok-compatible stages).
    #[arg(long)]
    simulate_workloads: bool,
    /// A kwok Stage YAML file added to the simulation's stages (one named
    /// like a default replaces it); repeatable.
    #[arg(long = "stages", value_name = "FILE", requires = "simulate_workloads")]
    stages: Vec<PathBuf>,
    /// Append an audit log (audit.k8s.io/v1 Event JSON lines, level Metadata)
    /// of every create, update, patch, delete and deletecollection to FILE.
    #[arg(long, value_name = "FILE")]
    audit_log: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .init();
    let args = Args::parse();
    let mut cluster = DevCluster::start(DevClusterOptions {
        port: args.port,
        token: args.token,
        data: args.data,
        kubeconfig: Some(args.kubeconfig),
        history_window: args.history_window,
        simulate_workloads: args.simulate_workloads,
        stages: args.stages,
        audit_log: args.audit_log,
    })
    .await?;
    println!("devcluster serving at {}", cluster.url());
    println!("kubeconfig: {}", cluster.kubeconfig_path().display());
    println!(
        "try: kubectl --kubeconfig {} get namespaces",
        cluster.kubeconfig_path().display()
    );
    tokio::signal::ctrl_c().await?;
    cluster.stop().await;
    Ok(())
}
