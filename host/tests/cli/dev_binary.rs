//! `wasm-operator dev` as a user runs it: the real binary on a free port,
//! installing the repository's examples and serving a prebuilt plugin.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use wasm_operator::cli::connect::connect;

use crate::common::{ChildGuard, binary, eventually, plugin_wasm, workspace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_installs_examples_and_prints_how_to_use_them() {
    if !crate::support::once_per_run("dev_installs_examples_and_prints_how_to_use_them") {
        return;
    }
    dev_session(&[]).await;
}

/// `dev --real`: the same session on a real control plane, stopped (its
/// kubeconfig removed) when dev exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_dev_real_runs_the_examples_on_the_real_control_plane() {
    if !crate::support::real_only(
        "real_only_dev_real_runs_the_examples_on_the_real_control_plane",
        "the built realcluster binary (WASM_OPERATOR_TEST_BACKEND=real)",
    ) {
        return;
    }
    let binary = match devcluster::testing::Backend::from_env() {
        Ok(devcluster::testing::Backend::Real { binary }) => binary,
        other => panic!("not the real backend: {other:?}"),
    };
    let kubeconfig = dev_session(&["--real", "--realcluster", binary.to_str().unwrap()]).await;
    assert!(
        kubeconfig.contains("wasm-operator-dev-real-"),
        "not the real control plane's kubeconfig: {kubeconfig}"
    );
    assert!(
        !std::path::Path::new(&kubeconfig).exists(),
        "the real control plane's kubeconfig {kubeconfig} outlived dev"
    );
}

/// Runs `dev` (with `extra` arguments) on the examples and the webapp
/// plugin, checks what it prints and does, stops it; returns its kubeconfig.
async fn dev_session(extra: &[&str]) -> String {
    let wasm_dir = tempfile::tempdir().unwrap();
    std::fs::copy(plugin_wasm("webapp"), wasm_dir.path().join("webapp.wasm")).unwrap();

    let mut child = Command::new(binary())
        .args(["dev", "--port", "0", "--no-build"])
        .args(extra)
        .args(["--wasm-dir", wasm_dir.path().to_str().unwrap()])
        .args([
            "--plugins-dir",
            wasm_dir.path().join("none").to_str().unwrap(),
        ])
        .args([
            "--examples-dir",
            workspace().join("examples").to_str().unwrap(),
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let child = ChildGuard(Some(child));

    // Keep draining stdout so the process never blocks on a full pipe.
    let (lines_tx, lines_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut banner = Vec::new();
    let kubeconfig = tokio::task::spawn_blocking(move || {
        loop {
            let line = lines_rx
                .recv_timeout(Duration::from_secs(300))
                .expect("dev printed no kubeconfig line");
            banner.push(line.clone());
            if let Some(path) = line.trim().strip_prefix("kubeconfig: ") {
                let path = path.to_string();
                // The kubectl hint follows the kubeconfig line.
                for _ in 0..4 {
                    if let Ok(line) = lines_rx.recv_timeout(Duration::from_secs(10)) {
                        banner.push(line);
                    }
                }
                return (path, banner);
            }
        }
    })
    .await
    .unwrap();
    let (kubeconfig, banner) = kubeconfig;
    let banner = banner.join("\n");
    assert!(banner.contains("plugin webapp 1.0.0"), "{banner}");
    assert!(
        banner.contains(&format!(
            "kubectl --kubeconfig {kubeconfig} get webapps,deployments,services -A"
        )),
        "{banner}"
    );

    let client = connect(Some(std::path::Path::new(&kubeconfig)), None)
        .await
        .unwrap();
    let webapps: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "WebApp"),
            "webapps",
        ),
    );
    let examples = webapps.list(&ListParams::default()).await.unwrap().items;
    assert!(!examples.is_empty(), "no example WebApp was applied");
    let uids: Vec<String> = examples
        .iter()
        .filter_map(|w| w.metadata.uid.clone())
        .collect();
    let deployments: Api<Deployment> = Api::all(client.clone());
    eventually(
        Duration::from_secs(180),
        "a Deployment for every example WebApp",
        || {
            let deployments = deployments.clone();
            let uids = uids.clone();
            async move {
                let list = deployments.list(&ListParams::default()).await.ok()?;
                let owned = uids
                    .iter()
                    .filter(|uid| {
                        list.items.iter().any(|d| {
                            d.metadata
                                .owner_references
                                .iter()
                                .flatten()
                                .any(|o| &o.uid == *uid)
                        })
                    })
                    .count();
                (owned == uids.len()).then_some(())
            }
        },
    )
    .await;

    // Workloads run (simulated on the devcluster, by the real controllers
    // and kwok on the real control plane): every example WebApp turns
    // Running with all its replicas ready, computed from its Deployment.
    let started = std::time::Instant::now();
    eventually(
        Duration::from_secs(120),
        "every example WebApp Running with readyReplicas == replicas",
        || {
            let webapps = webapps.clone();
            async move {
                let list = webapps.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .all(|w| {
                        w.data["status"]["phase"] == "Running"
                            && w.data["status"]["readyReplicas"] == w.data["spec"]["replicas"]
                    })
                    .then_some(())
            }
        },
    )
    .await;
    eprintln!(
        "example WebApps Running {:?} after their Deployments existed",
        started.elapsed()
    );

    // `kubectl describe webapp` tells the story: the webapp plugin's event
    // for the change of phase, recorded by the host, found by kubectl.
    let list = webapps.list(&ListParams::default()).await.unwrap();
    for webapp in &list.items {
        let name = webapp.metadata.name.clone().unwrap_or_default();
        let namespace = webapp.metadata.namespace.clone().unwrap_or_default();
        let what = format!("kubectl describe webapp {namespace}/{name} to show its Running event");
        eventually(Duration::from_secs(60), &what, || {
            let (kubeconfig, name, namespace) =
                (kubeconfig.clone(), name.clone(), namespace.clone());
            async move {
                let described = tokio::task::spawn_blocking(move || {
                    Command::new("kubectl")
                        .args([
                            "--kubeconfig",
                            &kubeconfig,
                            "describe",
                            "webapp",
                            &name,
                            "-n",
                            &namespace,
                        ])
                        .output()
                })
                .await
                .ok()?
                .ok()?;
                let text = String::from_utf8_lossy(&described.stdout).into_owned();
                let events = text.split("Events:").nth(1)?;
                (events.contains("Running") && events.contains("replicas ready")).then_some(())
            }
        })
        .await;
    }

    // The faulty plugin is a test fixture: its CRD is installed, its
    // examples are not.
    let faults: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("test.wasm-operator.dev", "v1", "Fault"),
            "faults",
        ),
    );
    let faults = faults.list(&ListParams::default()).await.unwrap().items;
    assert!(
        faults.is_empty(),
        "faulty examples were applied: {faults:?}"
    );

    let clean = tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();
    assert!(clean, "dev did not exit cleanly on SIGTERM");
    kubeconfig
}
