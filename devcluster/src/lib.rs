//! A local Kubernetes API server for development and tests.
//!
//! `devcluster` serves the Kubernetes REST API on loopback with the semantics an
//! operator depends on: discovery, CustomResourceDefinitions, list/watch with
//! resourceVersions, bookmarks and 410 Gone, optimistic concurrency, every patch
//! type including server-side apply, the status and scale subresources,
//! generation, finalizers, ownerReference garbage collection, namespace
//! deletion, admission and conversion webhooks. Real clients (kubectl, the
//! `kube` crate, the Python client) talk to it over HTTP.
//!
//! ```no_run
//! # async fn demo() -> Result<(), devcluster::DevClusterError> {
//! let cluster = devcluster::DevCluster::start(Default::default()).await?;
//! let client = cluster.client();
//! # let _ = client; Ok(()) }
//! ```
//!
//! Modules: [`registry`] (resource types and discovery), [`store`] (objects,
//! resourceVersions, history, watch fan-out, SQLite persistence), [`server`]
//! (HTTP routing and handlers), [`gc`] (garbage collection), [`faults`]
//! (fault injection), [`kubeconfig`], [`stages`] (workload simulation with
//! kwok-compatible stages, when [`DevClusterOptions::simulate_workloads`] is on). The pure modules [`patch`], [`schema`]
//! and [`webhook`] implement patch semantics, structural schemas and webhook calls.

pub mod faults;
pub mod gc;
pub mod kubeconfig;
pub mod names;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod server;
pub mod stages;
pub mod status;
pub mod store;
pub mod testing;
pub mod webhook;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use faults::{ClientFault, Faults};
pub use testing::{TestCluster, test_cluster, test_cluster_simulating_workloads};

/// How to start a [`DevCluster`].
#[derive(Debug, Clone)]
pub struct DevClusterOptions {
    /// TCP port on 127.0.0.1; 0 picks a free port. A given port that is
    /// still in use (a killed process the kernel has not torn down yet) is
    /// retried for a few seconds.
    pub port: u16,
    /// Bearer token every request must carry; `None` disables authentication.
    pub token: Option<String>,
    /// SQLite file holding the cluster state; `None` keeps everything in memory.
    pub data: Option<PathBuf>,
    /// Where to write the kubeconfig; `None` writes a temporary file owned by the handle.
    pub kubeconfig: Option<PathBuf>,
    /// How many watch events are kept for resuming watches from an older resourceVersion.
    pub history_window: usize,
    /// Simulate workloads (issue 25): Pods, Deployments, ReplicaSets,
    /// StatefulSets, DaemonSets and Jobs move to Ready/Complete through
    /// kwok-compatible stages, as kube-scheduler, kube-controller-manager and
    /// a kubelet would move them. Off by default (tests ask for it);
    /// `wasm-operator dev` turns it on.
    pub simulate_workloads: bool,
    /// Stage files (kwok `Stage` YAML) added to the simulation's defaults;
    /// a stage named like a default replaces it. Used only with
    /// `simulate_workloads`.
    pub stages: Vec<PathBuf>,
    /// A file to append an audit log to, like kube-apiserver's
    /// `--audit-log-path`: one `audit.k8s.io/v1` `Event` JSON line per
    /// completed create, update, patch, delete or deletecollection, naming the
    /// client's IP address (see [`server::audit`]). `None` writes no log.
    ///
    /// Guarantees: a line is complete on disk when its response is sent, even
    /// if the process is killed right after; requests answered by fault
    /// injection are recorded with their status code.
    pub audit_log: Option<PathBuf>,
}

impl Default for DevClusterOptions {
    fn default() -> Self {
        Self {
            port: 0,
            token: None,
            data: None,
            kubeconfig: None,
            history_window: 10_000,
            simulate_workloads: false,
            stages: Vec::new(),
            audit_log: None,
        }
    }
}

/// Why a devcluster could not start or restart.
#[derive(Debug, thiserror::Error)]
pub enum DevClusterError {
    /// The port could not be bound (in use, or not permitted).
    #[error(
        "cannot listen on 127.0.0.1:{port}: {source}; pick another port or pass 0 for a free one"
    )]
    Bind { port: u16, source: std::io::Error },
    /// The SQLite data file could not be opened or read.
    #[error(
        "cannot use data file {path}: {message}; check the path is writable or delete a corrupt file"
    )]
    Data { path: PathBuf, message: String },
    /// The kubeconfig could not be written or read back.
    #[error("cannot write kubeconfig {path}: {message}")]
    Kubeconfig { path: PathBuf, message: String },
    /// The `kube` client could not be built from the kubeconfig.
    #[error("cannot build a kube client for {url}: {message}")]
    Client { url: String, message: String },
    /// The test backend named in the environment is unknown.
    #[error("{message}")]
    TestBackend { message: String },
    /// The real control plane (`realcluster`) could not be started, leased or reset.
    #[error("real control plane {binary}: {message}")]
    RealCluster { binary: PathBuf, message: String },
    /// The audit log file could not be created or opened for appending.
    #[error("cannot open audit log {path}: {source}; check the directory exists and is writable")]
    AuditLog {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A stage file of the workload simulation cannot be used.
    #[error("workload simulation: {0}")]
    Stages(#[from] stages::StageError),
}

/// A running (or stopped) local API server. Dropping it stops serving.
pub struct DevCluster {
    shared: Arc<server::Shared>,
    addr: SocketAddr,
    url: String,
    kubeconfig_path: PathBuf,
    _kubeconfig_temp: Option<tempfile_lite::TempDir>,
    client: kube::Client,
    serving: Option<server::Serving>,
    _simulation: Option<stages::driver::Simulation>,
}

mod tempfile_lite {
    //! A tiny owned temp directory so the library needs no `tempfile` dependency.
    use std::path::{Path, PathBuf};

    /// Removed with its contents on drop.
    #[derive(Debug)]
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new() -> std::io::Result<Self> {
            let dir =
                std::env::temp_dir().join(format!("devcluster-{}", uuid::Uuid::new_v4().simple()));
            std::fs::create_dir_all(&dir)?;
            Ok(Self(dir))
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl DevCluster {
    /// Starts serving on 127.0.0.1 and writes a kubeconfig pointing at it.
    ///
    /// # Errors
    ///
    /// [`DevClusterError`] when the data file, a stage file or the audit log
    /// cannot be used, the port cannot be bound, or the kubeconfig cannot be
    /// written.
    pub async fn start(options: DevClusterOptions) -> Result<DevCluster, DevClusterError> {
        let store = store::Store::open(options.data.as_deref(), options.history_window)?;
        // Stage files are checked before anything listens, so a bad file fails the start.
        let stages = if options.simulate_workloads {
            Some(std::sync::Arc::new(stages::StageSet::defaults_with(
                &options.stages,
            )?))
        } else {
            None
        };
        let mut shared = server::Shared::new(store, options.token.clone());
        if let Some(path) = &options.audit_log {
            let log = server::audit::AuditLog::open(path).map_err(|source| {
                DevClusterError::AuditLog {
                    path: path.clone(),
                    source,
                }
            })?;
            shared.audit = Some(log);
        }
        let shared = Arc::new(shared);
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], options.port))).await?;
        let addr = listener
            .local_addr()
            .map_err(|source| DevClusterError::Bind {
                port: options.port,
                source,
            })?;
        let url = format!("http://{addr}");
        let (kubeconfig_path, temp) = match &options.kubeconfig {
            Some(p) => (p.clone(), None),
            None => {
                let dir =
                    tempfile_lite::TempDir::new().map_err(|e| DevClusterError::Kubeconfig {
                        path: std::env::temp_dir(),
                        message: e.to_string(),
                    })?;
                (dir.path().join("kubeconfig"), Some(dir))
            }
        };
        kubeconfig::write(&kubeconfig_path, &url, options.token.as_deref())?;
        let client = kubeconfig::client(&kubeconfig_path, &url).await?;
        let serving = server::serve(listener, shared.clone());
        let simulation = stages.map(|stages| stages::driver::start(shared.store.clone(), stages));
        Ok(DevCluster {
            shared,
            addr,
            url,
            kubeconfig_path,
            _kubeconfig_temp: temp,
            client,
            serving: Some(serving),
            _simulation: simulation,
        })
    }

    /// A real `kube::Client` over HTTP, built from the kubeconfig.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The server URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The kubeconfig written for this cluster (context `devcluster`).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// Fault injection for this cluster (cheap to clone).
    pub fn faults(&self) -> Faults {
        self.shared.faults.clone()
    }

    /// Stops serving (open connections and watches are closed); state stays in memory.
    pub async fn stop(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.stop().await;
        }
        self.shared.store.close_watches();
    }

    /// Serves again on the same port with the same state.
    ///
    /// # Errors
    ///
    /// [`DevClusterError::Bind`] when the port is still in use after a few seconds.
    pub async fn restart(&mut self) -> Result<(), DevClusterError> {
        self.stop().await;
        let listener = bind(self.addr).await?;
        self.serving = Some(server::serve(listener, self.shared.clone()));
        Ok(())
    }
}

/// How long binding a given port is retried while it is still in use.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

/// Binds `addr`, retrying for up to [`BIND_RETRY`] while a given port is in use:
/// the socket of a stopped server, or of a killed process the kernel has not
/// finished tearing down (`kill -9` returns before the port is released), is
/// freed a moment later. Connections the old server left in TIME_WAIT do not
/// block the bind: tokio sets `SO_REUSEADDR`.
///
/// # Errors
///
/// [`DevClusterError::Bind`] when the port stays in use, or on any other error.
async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, DevClusterError> {
    let deadline = tokio::time::Instant::now() + BIND_RETRY;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && addr.port() != 0
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(source) => {
                return Err(DevClusterError::Bind {
                    port: addr.port(),
                    source,
                });
            }
        }
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        if let Some(serving) = self.serving.take() {
            serving.abort();
        }
        self.shared.store.close_watches();
    }
}
