//! Shared harness: start a cluster, locate fixture files, run an external client script.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use devcluster::{DevCluster, DevClusterOptions};

/// Name of the WebApp CRD installed by every client test.
pub const WEBAPP_CRD_NAME: &str = "webapps.demo.wasm-operator.dev";

/// A running cluster plus the temp dir that holds its kubeconfig and the scripts' scratch files.
pub struct TestCluster {
    pub cluster: DevCluster,
    pub dir: tempfile::TempDir,
}

impl TestCluster {
    /// Starts a fresh in-memory cluster on a random port and writes its kubeconfig into a temp dir.
    pub async fn start() -> TestCluster {
        let dir = tempfile::tempdir().unwrap();
        // The defaults are what the tests need: port 0 (random), no token, in-memory state.
        let cluster = DevCluster::start(DevClusterOptions {
            kubeconfig: Some(dir.path().join("kubeconfig")),
            ..DevClusterOptions::default()
        })
        .await
        .unwrap();
        TestCluster { cluster, dir }
    }

    /// The kubeconfig the external clients load.
    pub fn kubeconfig(&self) -> PathBuf {
        self.cluster.kubeconfig_path().to_path_buf()
    }
}

/// A file shipped next to this test binary's sources (scripts, YAML fixtures).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// True when `program` can be executed (used to skip a client that is not installed).
pub fn on_path(program: &str) -> bool {
    Command::new(program)
        .arg("--help")
        .output()
        .map(|_| true)
        .unwrap_or(false)
}

/// Runs a client script to completion off the async runtime (the cluster keeps serving on it)
/// and panics with its full output when it fails, so the failing step is visible in the test log.
pub async fn run_script(what: &str, mut command: Command) -> Output {
    let what = what.to_string();
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot start the {what} client script: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("----- {what} stdout -----\n{stdout}\n----- {what} stderr -----\n{stderr}");
    assert!(
        output.status.success(),
        "the {what} client script failed ({}); its last step is at the end of the output above",
        output.status
    );
    output
}
