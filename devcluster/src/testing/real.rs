//! The test process's real control planes (see the parent module): a pool
//! of at most [`DEFAULT_POOL`] (or `WASM_OPERATOR_REALCLUSTER_POOL`), started
//! lazily, each leased to one test at a time and reset in between.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::DevClusterError;

/// How long `realcluster up` may take to become ready (its own default).
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a reset may take (namespace deletion takes a few seconds).
const RESET_TIMEOUT: Duration = Duration::from_secs(120);

/// Environment variable: how many control planes a test process may run
/// (default [`DEFAULT_POOL`]).
pub const POOL_ENV: &str = "WASM_OPERATOR_REALCLUSTER_POOL";

/// Two control planes per test process: the tests of one binary take half
/// as long as with one, for 600 MB more (CI runs one test binary at a time).
pub const DEFAULT_POOL: usize = 2;

/// One running control plane.
struct Shared {
    kubeconfig: PathBuf,
    baseline: HashSet<String>,
}

/// The control planes of this process: at most `admit`'s permits of them,
/// started when a test finds none free.
struct Pool {
    binary: PathBuf,
    admit: Arc<Semaphore>,
    free: Mutex<Vec<Arc<Shared>>>,
}

static POOL: OnceLock<Pool> = OnceLock::new();

/// A test's exclusive use of one control plane of the pool; dropping it
/// lets the next test have it.
pub(super) struct Lease {
    client: kube::Client,
    kubeconfig: PathBuf,
    shared: Option<Arc<Shared>>,
    pool: &'static Pool,
    // Dropped after `drop` below has put the control plane back.
    _permit: OwnedSemaphorePermit,
}

impl Lease {
    pub(super) fn client(&self) -> kube::Client {
        self.client.clone()
    }

    pub(super) fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(shared);
        }
    }
}

/// Waits for a free control plane (starting one on first use, up to the
/// pool's size), then resets it for the caller: a test's objects gone, its
/// fake Nodes running Pods only when `run_workloads`.
pub(super) async fn lease(binary: &Path, run_workloads: bool) -> Result<Lease, DevClusterError> {
    let pool = POOL.get_or_init(|| {
        let size = std::env::var(POOL_ENV)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(DEFAULT_POOL);
        Pool {
            binary: binary.to_path_buf(),
            admit: Arc::new(Semaphore::new(size)),
            free: Mutex::new(Vec::new()),
        }
    });
    let err = |message: String| DevClusterError::RealCluster {
        binary: pool.binary.clone(),
        message,
    };
    let permit = pool
        .admit
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| err(e.to_string()))?;
    let free = pool.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let shared = match free {
        Some(shared) => shared,
        None => Arc::new(start(&pool.binary).await?),
    };
    // A client per lease: a kube::Client's connections live on the runtime
    // that made them, and every #[tokio::test] has its own runtime.
    let lease = Lease {
        client: crate::kubeconfig::client(&shared.kubeconfig, "the real control plane").await?,
        kubeconfig: shared.kubeconfig.clone(),
        shared: Some(shared.clone()),
        pool,
        _permit: permit,
    };
    super::reset::reset(&lease.client, &shared.baseline, RESET_TIMEOUT)
        .await
        .map_err(|e| err(format!("cannot reset it for the next test: {e}")))?;
    super::reset::set_workloads(&lease.client, run_workloads)
        .await
        .map_err(|e| {
            err(format!(
                "cannot switch its workloads for the next test: {e}"
            ))
        })?;
    Ok(lease)
}

/// Starts `realcluster up` from a thread that lives as long as the process
/// (so `--exit-with-parent` fires only when the process exits) and waits
/// for its kubeconfig, which `up` writes once everything is ready.
async fn start(binary: &Path) -> Result<Shared, DevClusterError> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let err = |message: String| DevClusterError::RealCluster {
        binary: binary.to_path_buf(),
        message,
    };
    if !binary.is_file() {
        return Err(err(
            "not built; run `scripts/build-realcluster.sh` (or set WASM_OPERATOR_REALCLUSTER)"
                .to_string(),
        ));
    }
    let dir = std::env::temp_dir();
    // `up` removes this file (and its state directory under `dir`) on exit.
    static STARTED: AtomicUsize = AtomicUsize::new(0);
    let kubeconfig = dir.join(format!(
        "wasm-operator-test-{}-realcluster-{}.kubeconfig",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    ));
    let log = Arc::new(Mutex::new(String::new()));
    let exited = Arc::new(Mutex::new(None::<String>));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    {
        let (binary, kubeconfig, dir) = (binary.to_path_buf(), kubeconfig.clone(), dir.clone());
        let (log, exited) = (log.clone(), exited.clone());
        std::thread::Builder::new()
            .name("realcluster".to_string())
            .spawn(move || {
                let child = Command::new(&binary)
                    .arg("up")
                    .arg("--exit-with-parent")
                    .arg("--quiet")
                    .arg("--dir")
                    .arg(&dir)
                    .arg("--kubeconfig")
                    .arg(&kubeconfig)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::piped())
                    .spawn();
                let mut child = match child {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = started_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = started_tx.send(Ok(()));
                if let Some(mut stderr) = child.stderr.take() {
                    // Keep the tail of up's log for error messages.
                    let log = log.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 4096];
                        while let Ok(n) = stderr.read(&mut buf) {
                            if n == 0 {
                                break;
                            }
                            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
                            log.push_str(&String::from_utf8_lossy(&buf[..n]));
                            if log.len() > 16_384 {
                                let cut = log.len() - 8_192;
                                let cut = (cut..log.len())
                                    .find(|i| log.is_char_boundary(*i))
                                    .unwrap_or(0);
                                log.drain(..cut);
                            }
                        }
                    });
                }
                // This thread must outlive the cluster: PR_SET_PDEATHSIG
                // fires when the thread that spawned `up` exits.
                let status = child.wait();
                *exited.lock().unwrap_or_else(|e| e.into_inner()) = Some(match status {
                    Ok(s) => s.to_string(),
                    Err(e) => e.to_string(),
                });
            })
            .map_err(|e| err(format!("cannot spawn a thread: {e}")))?;
    }
    match started_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(err(format!("cannot run it: {e}"))),
        Err(_) => return Err(err("its thread ended before starting it".to_string())),
    }
    let tail = || log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let began = Instant::now();
    while !kubeconfig.is_file() {
        if let Some(status) = exited.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(err(format!(
                "`up` exited ({status}) before it was ready:\n{}",
                tail()
            )));
        }
        if began.elapsed() > READY_TIMEOUT {
            return Err(err(format!(
                "not ready after {READY_TIMEOUT:?}; its log ends:\n{}",
                tail()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let client = crate::kubeconfig::client(&kubeconfig, "the real control plane").await?;
    let baseline = super::reset::baseline(&client)
        .await
        .map_err(|e| err(format!("cannot read its initial objects: {e}")))?;
    eprintln!(
        "realcluster: a real control plane of this test process is ready after {:.1?} (kubeconfig {})",
        began.elapsed(),
        kubeconfig.display()
    );
    Ok(Shared {
        kubeconfig,
        baseline,
    })
}
