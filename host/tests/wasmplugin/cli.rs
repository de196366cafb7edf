//! `wasm-operator run` without `--plugin`: driven by WasmPlugin objects, and
//! a clear error when the CRD is missing.

use std::process::{Child, Command, Stdio};

use serde_json::json;

use crate::support::{self, wait_until};
use crate::{CONVERGE, Fixture, condition_is, digest, file_spec, write_atomically};

const BINARY: &str = env!("CARGO_BIN_EXE_wasm-operator");

/// Kills the child when the test ends, however it ends.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_plugins_needs_the_crd() {
    crate::install_crypto_provider();
    let cluster = support::start_cluster().await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(BINARY)
            .args(["run", "--metrics-addr", "127.0.0.1:0", "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains("deploy/crds/wasmplugin.yaml"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_without_plugins_serves_wasmplugins() {
    // The fixture's own controller is stopped: the binary does the work.
    let fx = Fixture::start().await;
    fx.manager.stop_wasmplugins().await;
    let logs = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(logs.path().join("run.log")).unwrap();
    let child = Command::new(BINARY)
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--kubeconfig"])
        .arg(fx.cluster.kubeconfig_path())
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    let _guard = Guard(child);

    let wasm = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &wasm);
    fx.create("webapp", file_spec(&path)).await;
    let o = fx.wait_serving("webapp", &digest(&wasm)).await;
    assert!(condition_is(&o, "Degraded", "False"), "{o}");
    fx.assert_reconciles("shop").await;
    let version = o["status"]["version"].as_str().unwrap().to_string();

    // kubectl (a client we did not write) shows the printer columns.
    let kubeconfig = fx.cluster.kubeconfig_path().to_path_buf();
    let table = tokio::task::spawn_blocking(move || {
        Command::new("kubectl")
            .args(["get", "wp", "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&table.stderr)
    );
    let header: Vec<&str> = text.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME", "PLUGIN", "VERSION", "SOURCE", "STABLE", "CANARY", "MODE", "WEIGHT", "PHASE",
            "READY", "AGE"
        ],
        "{text}"
    );
    let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..4],
        ["webapp", "webapp", version.as_str(), "file"],
        "{text}"
    );
    // No canary: its five columns are empty (the devcluster) or <none>
    // (kube-apiserver); READY and AGE come last.
    assert_eq!(row.get(row.len() - 2), Some(&"True"), "{text}");

    let log = std::fs::read_to_string(logs.path().join("run.log")).unwrap();
    assert!(log.contains("audit"), "no audit log line in: {log}");

    // Deleting the WasmPlugin unloads it in the binary; the finalizer goes.
    fx.wasmplugins()
        .delete("webapp", &Default::default())
        .await
        .unwrap();
    let api = fx.wasmplugins();
    wait_until("WasmPlugin webapp to disappear", CONVERGE, || async {
        match support::get_json(&api, "webapp").await {
            None => Ok(()),
            Some(o) => Err(format!("{}", json!(o["metadata"]))),
        }
    })
    .await;
    fx.wait_event("webapp", "Unloaded").await;
}
