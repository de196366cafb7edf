//! The API server of one run: a fresh devcluster or a fresh real control
//! plane (`realcluster up`), started before the operator and stopped after it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::process::{Proc, spawn, tail};

/// The real control plane's options, shared by the benchmarks' command lines.
#[derive(Debug, Clone, clap::Args, serde::Serialize)]
pub struct RealClusterArgs {
    /// The `realcluster` binary (`--backend real`).
    #[arg(long, default_value = "target/realcluster/realcluster")]
    pub realcluster: PathBuf,
    /// kube-controller-manager's controllers on the real control plane. The
    /// Deployment and ReplicaSet controllers are left out by default: with
    /// them every WebApp also gets a ReplicaSet and Pods that never run, load
    /// on the shared machine that is no operator's, and that the devcluster
    /// does not have either.
    #[arg(
        long,
        default_value = "garbage-collector-controller,namespace-controller"
    )]
    pub real_controllers: String,
}

/// Which API server the benchmark runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// The project's devcluster, one process per run.
    Dev,
    /// kube-apiserver + etcd + kube-controller-manager from `realcluster up`, one per run.
    Real,
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Backend::Dev => "dev",
            Backend::Real => "real",
        })
    }
}

impl Backend {
    /// One line for the report.
    pub fn describe(self) -> &'static str {
        match self {
            Backend::Dev => "a fresh devcluster per run; writes counted by it",
            Backend::Real => {
                "a fresh `realcluster up` (kube-apiserver, etcd, kube-controller-manager) per run; no request counter, so no writes per object"
            }
        }
    }
}

/// A running API server and the kubeconfig that reaches it.
pub enum Cluster {
    /// A devcluster process.
    Dev {
        /// The process (killed on drop).
        child: Child,
        /// Its kubeconfig.
        kubeconfig: PathBuf,
    },
    /// `realcluster up` (its components die with it; it removes its state on SIGTERM).
    Real {
        /// The `up` process (killed on drop).
        proc_: Proc,
        /// The kubeconfig `up` wrote once ready.
        kubeconfig: PathBuf,
    },
}

impl Cluster {
    /// A devcluster in `dir` on `port` (0: a free one), with enough watch
    /// history for `n` WebApps and the `extra` flags (e.g. `--data FILE`);
    /// ready once it prints its URL.
    ///
    /// # Errors
    /// When it does not start serving within 30 s.
    pub async fn dev(
        devcluster: &Path,
        dir: &Path,
        n: usize,
        port: u16,
        extra: &[String],
    ) -> anyhow::Result<Cluster> {
        let kubeconfig = dir.join("kubeconfig");
        // Enough watch history that a watch resumed mid-run is not expired.
        let history = (n * 8).max(10_000);
        let mut child = Command::new(devcluster)
            .args([
                "--port",
                &port.to_string(),
                "--history-window",
                &history.to_string(),
                "--kubeconfig",
            ])
            .arg(&kubeconfig)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting devcluster")?;
        let stdout = child.stdout.take().context("devcluster stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let serving = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await? {
                if line.starts_with("devcluster serving at") {
                    return Ok::<_, anyhow::Error>(());
                }
            }
            bail!("devcluster exited before serving")
        })
        .await;
        match serving {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => bail!("devcluster did not print its URL within 30 s"),
        }
        // Keep draining stdout so the process never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Cluster::Dev { child, kubeconfig })
    }

    /// A fresh real control plane with its state in `dir` and its output in
    /// `log`; ready when `up` has written the kubeconfig (it writes it only
    /// once kube-apiserver's `/readyz` and the controller manager's
    /// `/healthz` answer).
    ///
    /// # Errors
    /// When it is not ready within 330 s (with the tail of its log).
    pub async fn real(
        realcluster: &Path,
        dir: &Path,
        controllers: &str,
        extra_apiserver_flags: &[String],
        log: &Path,
    ) -> anyhow::Result<Cluster> {
        let kubeconfig = dir.join("kubeconfig");
        let mut cmd = Command::new(realcluster);
        cmd.arg("up")
            .arg("--dir")
            .arg(dir)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["--quiet", "--timeout", "5m", "--controllers", controllers])
            // realcluster's /24 Service range holds ~250 ClusterIPs; every
            // WebApp has a Service (the last flag wins).
            .arg("--apiserver-flag=--service-cluster-ip-range=10.96.0.0/16");
        for flag in extra_apiserver_flags {
            cmd.arg(format!("--apiserver-flag={flag}"));
        }
        let mut proc_ = spawn(cmd, "realcluster up", log)?;
        let deadline = Instant::now() + Duration::from_secs(330);
        while !kubeconfig.exists() {
            proc_.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "the real control plane was not ready within 330 s; last lines of {}:\n{}",
                    log.display(),
                    tail(log, 15)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(Cluster::Real { proc_, kubeconfig })
    }

    /// The kubeconfig of an admin client.
    pub fn kubeconfig(&self) -> &Path {
        match self {
            Cluster::Dev { kubeconfig, .. } | Cluster::Real { kubeconfig, .. } => kubeconfig,
        }
    }

    /// Stops the API server: the devcluster is killed; `realcluster up` gets
    /// SIGTERM and 60 s to stop its components and remove its state
    /// directory, then is killed (its components die with it, and its reaper
    /// removes what is left).
    pub async fn stop(self) {
        match self {
            Cluster::Dev { mut child, .. } => {
                let _ = child.kill().await;
            }
            Cluster::Real { mut proc_, .. } => {
                if let Ok(pid) = proc_.pid() {
                    let _ = Command::new("kill")
                        .args(["-TERM", &pid.to_string()])
                        .status()
                        .await;
                    let exited =
                        tokio::time::timeout(Duration::from_secs(60), proc_.child.wait()).await;
                    if exited.is_ok() {
                        return;
                    }
                }
                proc_.stop().await;
            }
        }
    }
}
