//! `wasm-operator run` when the API server cannot be reached: it says which
//! server and why, retries with backoff, and SIGTERM/SIGINT stop it whether
//! it ever synced or not.

use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

use devcluster::{DevCluster, DevClusterOptions};
use wasm_operator::dev::manifests::install_crds;

use crate::common::{
    ChildGuard, eventually, plugin_wasm, run_plugin_command, spawn_logged, workspace,
};

/// A local port nobody listens on: bound, then released.
fn unused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn kubeconfig_for(dir: &Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: {server}\ncontexts:\n- name: gone\n  context: {{cluster: gone, user: nobody, namespace: default}}\ncurrent-context: gone\nusers:\n- name: nobody\n  user: {{}}\n"
        ),
    )
    .unwrap();
    path
}

/// Starts `run --plugin webapp.wasm` with `kubeconfig`, logging to `log`.
fn spawn_run(kubeconfig: &Path, log: &Path) -> ChildGuard {
    let wasm = plugin_wasm("webapp");
    spawn_logged(
        run_plugin_command(&wasm, kubeconfig)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .env("NO_COLOR", "1"),
        log,
    )
}

/// Sends `signal` (e.g. `-INT`) and waits (bounded) for the exit; returns
/// whether the process exited successfully.
fn stop_with(mut guard: ChildGuard, signal: &str) -> bool {
    let mut child: Child = guard.0.take().unwrap();
    let _ = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status();
    for _ in 0..600 {
        if let Some(status) = child.try_wait().unwrap() {
            return status.success();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    false
}

fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

async fn names_the_server_then_stops_on(signal: &'static str) {
    let dir = tempfile::tempdir().unwrap();
    let port = unused_port();
    let server = format!("http://127.0.0.1:{port}");
    let kubeconfig = kubeconfig_for(dir.path(), &server);
    let log = dir.path().join("run.log");
    let child = spawn_run(&kubeconfig, &log);
    let expected = format!("cannot reach the Kubernetes API server at {server}/");
    // Two tries logged: it retries rather than giving up.
    eventually(
        Duration::from_secs(60),
        "two tries naming the server",
        || {
            let text = log_text(&log);
            let expected = expected.clone();
            async move { (text.matches(&expected).count() >= 2).then_some(()) }
        },
    )
    .await;
    let text = log_text(&log);
    assert!(text.contains("retrying with backoff"), "{text}");
    let log_path = log.clone();
    let clean = tokio::task::spawn_blocking(move || stop_with(child, signal))
        .await
        .unwrap();
    assert!(
        clean,
        "run did not exit cleanly on {signal} while the API server was unreachable; log:\n{}",
        log_text(&log_path)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_and_sigterm_stops_the_host() {
    names_the_server_then_stops_on("-TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_named_and_sigint_stops_the_host() {
    names_the_server_then_stops_on("-INT").await;
}

/// The host served, then the API server went away: reflectors retry, and a
/// SIGTERM still stops the host (within the grace period).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_sigterm_stops_the_host_after_the_server_went_away() {
    if !crate::support::devcluster_only(
        "devcluster_only_sigterm_stops_the_host_after_the_server_went_away",
        "stopping the API server under a running host",
    ) {
        return;
    }
    let mut cluster = DevCluster::start(DevClusterOptions::default())
        .await
        .unwrap();
    install_crds(
        &cluster.client(),
        &workspace().join("examples/webapp/crd.yaml"),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.log");
    let child = spawn_run(cluster.kubeconfig_path(), &log);
    eventually(Duration::from_secs(180), "the plugin to load", || {
        let text = log_text(&log);
        async move { text.contains("plugin loaded").then_some(()) }
    })
    .await;
    cluster.stop().await;
    let log_path = log.clone();
    let clean = tokio::task::spawn_blocking(move || stop_with(child, "-TERM"))
        .await
        .unwrap();
    assert!(
        clean,
        "run did not exit cleanly on SIGTERM after the API server went away; log:\n{}",
        log_text(&log_path)
    );
}
