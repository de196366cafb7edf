//! The test process's shared real control plane (see the parent module):
//! started once, lazily, leased to one test at a time and reset in between.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};

use crate::DevClusterError;

/// How long `realcluster up` may take to become ready (its own default).
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// How long a reset may take (namespace deletion takes a few seconds).
const RESET_TIMEOUT: Duration = Duration::from_secs(120);

/// The running control plane of this process.
struct Shared {
    binary: PathBuf,
    kubeconfig: PathBuf,
    baseline: HashSet<String>,
    lease: Arc<Semaphore>,
}

static SHARED: OnceCell<Shared> = OnceCell::const_new();

/// A test's exclusive use of the shared control plane; dropping it lets the
/// next test have it.
pub(super) struct Lease {
    client: kube::Client,
    kubeconfig: PathBuf,
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

/// Waits for the shared control plane (starting it on first use), then
/// resets it for the caller.
pub(super) async fn lease(binary: &Path) -> Result<Lease, DevClusterError> {
    let shared = SHARED.get_or_try_init(|| start(binary)).await?;
    let err = |message: String| DevClusterError::RealCluster {
        binary: shared.binary.clone(),
        message,
    };
    let permit = shared
        .lease
        .clone()
        .acquire_owned()
        .await
        .map_err(|e| err(e.to_string()))?;
    // A client per lease: a kube::Client's connections live on the runtime
    // that made them, and every #[tokio::test] has its own runtime.
    let client = crate::kubeconfig::client(&shared.kubeconfig, "the real control plane").await?;
    super::reset::reset(&client, &shared.baseline, RESET_TIMEOUT)
        .await
        .map_err(|e| err(format!("cannot reset it for the next test: {e}")))?;
    Ok(Lease {
        client,
        kubeconfig: shared.kubeconfig.clone(),
        _permit: permit,
    })
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
    let kubeconfig = dir.join(format!(
        "wasm-operator-test-{}-realcluster.kubeconfig",
        std::process::id()
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
        "realcluster: the real control plane of this test process is ready after {:.1?} (kubeconfig {})",
        began.elapsed(),
        kubeconfig.display()
    );
    Ok(Shared {
        binary: binary.to_path_buf(),
        kubeconfig,
        baseline,
        lease: Arc::new(Semaphore::new(1)),
    })
}
