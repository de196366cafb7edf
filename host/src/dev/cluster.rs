//! The cluster a dev session runs on: the embedded devcluster (the default)
//! or, with `dev --real`, a real control plane (`realcluster up`, built by
//! `scripts/build-realcluster.sh`) run as a child process.
//!
//! # Guarantees
//!
//! The real control plane is started with `--exit-with-parent`, so it stops
//! (and removes its state and kubeconfig) when the dev process exits, even
//! when it is killed; [`Cluster::stop`] stops it with SIGTERM and waits.
//!
//! # Errors
//!
//! [`RealClusterError`]: the binary is missing, exits before it is ready, is
//! not ready in time, or its kubeconfig cannot be used.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use devcluster::DevCluster;

/// How long `realcluster up` may take to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// Why the real control plane could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RealClusterError {
    /// The binary does not exist.
    #[error("{} is not built; run `bash scripts/build-realcluster.sh` first (or drop --real to use the embedded devcluster)", binary.display())]
    NotBuilt {
        /// The `realcluster` binary looked for.
        binary: PathBuf,
    },
    /// `--data` keeps a devcluster's state; the real control plane keeps none.
    #[error("--data keeps the embedded devcluster's state and cannot be used with --real")]
    DataWithReal,
    /// It could not be run, exited early or was not ready in time.
    #[error("the real control plane {} did not start: {message}", binary.display())]
    Start {
        /// The `realcluster` binary.
        binary: PathBuf,
        /// What happened, with the end of its log when there is one.
        message: String,
    },
    /// Its kubeconfig could not be read into a client.
    #[error("cannot use the real control plane's kubeconfig {}: {message}", path.display())]
    Kubeconfig {
        /// The kubeconfig `up` wrote.
        path: PathBuf,
        /// The client's error.
        message: String,
    },
}

/// A running real control plane.
pub struct RealCluster {
    child: Running,
    kubeconfig: PathBuf,
    url: String,
    client: kube::Client,
    log: PathBuf,
}

/// The cluster of a dev session.
pub enum Cluster {
    /// The embedded in-memory devcluster.
    Embedded(DevCluster),
    /// A real control plane run as a child process.
    Real(RealCluster),
}

impl Cluster {
    /// A client for the cluster.
    pub fn client(&self) -> kube::Client {
        match self {
            Cluster::Embedded(c) => c.client(),
            Cluster::Real(c) => c.client.clone(),
        }
    }

    /// The API server's URL.
    pub fn url(&self) -> &str {
        match self {
            Cluster::Embedded(c) => c.url(),
            Cluster::Real(c) => &c.url,
        }
    }

    /// The kubeconfig pointing at the cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        match self {
            Cluster::Embedded(c) => c.kubeconfig_path(),
            Cluster::Real(c) => &c.kubeconfig,
        }
    }

    /// What the step line of dev's output calls it.
    pub fn describe(&self) -> String {
        match self {
            Cluster::Embedded(c) => c.url().to_string(),
            Cluster::Real(c) => format!("{} (logs in {})", c.url, c.log.display()),
        }
    }

    /// Stops serving.
    pub async fn stop(&mut self) {
        match self {
            Cluster::Embedded(c) => c.stop().await,
            Cluster::Real(c) => {
                if let Some(child) = c.child.0.take() {
                    let _ = tokio::task::spawn_blocking(move || terminate(child)).await;
                }
                // A clean stop leaves nothing behind (`up` removed its state
                // and kubeconfig); a failed start keeps the log to read.
                let _ = std::fs::remove_file(&c.log);
            }
        }
    }
}

/// The `up` process, stopped when dropped (also when a start fails half-way).
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            terminate(child);
        }
    }
}

/// SIGTERM (so `up` stops its components and cleans up), then wait.
fn terminate(mut child: Child) {
    // The crate has no unsafe code, so no kill(2) of our own: kill(1) does it.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = child.wait();
}

impl RealCluster {
    /// Runs `binary up` serving on `port` (0: a free one), writing its
    /// kubeconfig to `kubeconfig` (default: a file in the temp directory),
    /// and waits until it is ready.
    ///
    /// # Errors
    ///
    /// See [`RealClusterError`].
    pub async fn start(
        binary: &Path,
        port: u16,
        kubeconfig: Option<&Path>,
    ) -> Result<RealCluster, RealClusterError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        if !binary.is_file() {
            return Err(RealClusterError::NotBuilt {
                binary: binary.to_path_buf(),
            });
        }
        let start_err = |message: String| RealClusterError::Start {
            binary: binary.to_path_buf(),
            message,
        };
        let pid = std::process::id();
        let kubeconfig = kubeconfig.map_or_else(
            || std::env::temp_dir().join(format!("wasm-operator-dev-real-{pid}.kubeconfig")),
            Path::to_path_buf,
        );
        let log = std::env::temp_dir().join(format!("wasm-operator-dev-real-{pid}.log"));
        let log_file = std::fs::File::create(&log)
            .map_err(|e| start_err(format!("cannot create {}: {e}", log.display())))?;
        let mut command = Command::new(binary);
        command
            .arg("up")
            // This runs on a runtime worker thread, which lives as long as dev.
            .arg("--exit-with-parent")
            .arg("--quiet")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log_file));
        if port != 0 {
            command.arg("--port").arg(port.to_string());
        }
        let child = command
            .spawn()
            .map_err(|e| start_err(format!("cannot run it: {e}")))?;
        let mut running = Running(Some(child));
        let began = Instant::now();
        while !kubeconfig.is_file() {
            let exited = running.0.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                return Err(start_err(format!(
                    "it exited ({status}) before it was ready; its log ends:\n{}",
                    tail(&log)
                )));
            }
            if began.elapsed() > READY_TIMEOUT {
                return Err(start_err(format!(
                    "not ready after {READY_TIMEOUT:?}; its log ends:\n{}",
                    tail(&log)
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let kerr = |message: String| RealClusterError::Kubeconfig {
            path: kubeconfig.clone(),
            message,
        };
        let parsed =
            kube::config::Kubeconfig::read_from(&kubeconfig).map_err(|e| kerr(e.to_string()))?;
        let config = kube::Config::from_custom_kubeconfig(
            parsed,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| kerr(e.to_string()))?;
        let url = config.cluster_url.to_string();
        let client = kube::Client::try_from(config).map_err(|e| kerr(e.to_string()))?;
        Ok(RealCluster {
            child: running,
            kubeconfig,
            url,
            client,
            log,
        })
    }
}

/// The last lines of the log at `path`.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}
