//! Drives the Python `kubernetes` client through `python_client.py` against a fresh cluster.

use std::process::Command;

use crate::common::{TestCluster, fixture, run_script};

/// True when python3 exists and can import the `kubernetes` package.
fn python_client_available() -> bool {
    Command::new("python3")
        .args(["-c", "import kubernetes"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_client_workflow() {
    if !python_client_available() {
        println!(
            "python3 with the `kubernetes` package not found: skipping the Python client test \
             (run scripts/install-test-deps.sh)"
        );
        return;
    }
    let mut tc = TestCluster::start().await;
    let mut command = Command::new("python3");
    command
        .arg(fixture("python_client.py"))
        .arg(tc.kubeconfig())
        .arg(fixture("webapp-crd.yaml"))
        .env("PYTHONUNBUFFERED", "1");
    let output = run_script("python", command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("ALL PYTHON CHECKS PASSED"),
        "python_client.py exited 0 without reaching its last check"
    );
    tc.cluster.stop().await;
}
