//! Drives the real `kubectl` binary through `kubectl.sh` against a fresh cluster.

use std::process::Command;

use crate::common::{TestCluster, fixture, on_path, run_script};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_client_workflow() {
    if !on_path("kubectl") {
        println!("kubectl not found: skipping the kubectl client test");
        return;
    }
    let mut tc = TestCluster::start().await;
    let work = tc.dir.path().join("kubectl-work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = Command::new("bash");
    command
        .arg(fixture("kubectl.sh"))
        .env("KUBECONFIG", tc.kubeconfig())
        .env("WORKDIR", &work)
        .env("CRD_FILE", fixture("webapp-crd.yaml"))
        // kubectl caches discovery per server URL under $HOME/.kube/cache: keep it per test.
        .env("HOME", tc.dir.path())
        .current_dir(&work);
    let output = run_script("kubectl", command).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("ALL KUBECTL CHECKS PASSED"),
        "kubectl.sh exited 0 without reaching its last check"
    );
    tc.cluster.stop().await;
}
