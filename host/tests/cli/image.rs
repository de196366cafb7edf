//! The container image (`scripts/build-image.sh`) end to end: built and
//! pushed to a loopback registry, checked with `skopeo inspect`, pulled and
//! unpacked afresh, and its binary run inside the image's root filesystem as
//! the image's user: `--version`, `plugin push`, then `run` serving a
//! WasmPlugin from that registry on the real control plane.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::common::{plugin_wasm, spawn_logged};
use crate::support::image::{
    build_image, image_command, path_in_image, run, runs_in_chroot, unpack_from_registry,
};
use crate::support::registry::Registry;
use crate::support::{
    self, api_resource, condition, dynamic_api, example_crd, get_json, install_crd, wait_until,
};

const VERSION: &str = env!("CARGO_PKG_VERSION");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_the_image_runs_the_operator_from_its_rootfs() {
    if !support::real_only(
        "real_only_the_image_runs_the_operator_from_its_rootfs",
        "the real control plane (the image is a real-backend deliverable, built by scripts/test.sh before that pass)",
    ) {
        return;
    }
    let registry = Registry::start();
    let image = registry.reference("wasm-operator:test");
    let built = {
        let image = image.clone();
        tokio::task::spawn_blocking(move || build_image(&["--push", &image, "--insecure"]))
            .await
            .unwrap()
    };
    assert!(
        built.contains(&format!("pushed and checked {image}")),
        "{built}"
    );
    println!("{built}");

    // What the registry serves, read back independently of the script.
    let inspect = run(std::process::Command::new("skopeo")
        .args(["inspect", "--tls-verify=false", "--config"])
        .arg(format!("docker://{image}")));
    let config: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(config["architecture"], "amd64", "{config}");
    assert_eq!(config["os"], "linux", "{config}");
    assert_eq!(config["config"]["User"], "65532:65532", "{config}");
    assert_eq!(
        config["config"]["Entrypoint"],
        json!(["/usr/local/bin/wasm-operator"])
    );
    assert_eq!(config["config"]["Cmd"], json!(["run"]));
    let labels = &config["config"]["Labels"];
    assert_eq!(labels["org.opencontainers.image.version"], VERSION);
    assert!(
        labels["org.opencontainers.image.source"]
            .as_str()
            .is_some_and(|s| s.starts_with("https://")),
        "{labels}"
    );

    let dir = tempfile::tempdir().unwrap();
    let rootfs = unpack_from_registry(&image, dir.path());
    for shell in ["bin/sh", "usr/bin/sh", "bin/bash", "usr/bin/bash"] {
        assert!(
            !rootfs.join(shell).exists(),
            "the image has a shell: {shell}"
        );
    }
    println!(
        "running the image's binary {}",
        if runs_in_chroot() {
            "in a chroot as 65532:65532"
        } else {
            "through the image's loader (not root: no chroot)"
        }
    );
    let version = run(&mut image_command(&rootfs, &["--version"]));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("wasm-operator {VERSION}")
    );

    // The image's binary publishes the plugin to the same registry.
    let wasm_inside = "/tmp/webapp.wasm";
    // Written through the host's view of the rootfs; named by the image's.
    std::fs::copy(plugin_wasm("webapp"), rootfs.join("tmp/webapp.wasm")).unwrap();
    let plugin = registry.reference("plugins/webapp:1.0");
    run(&mut image_command(
        &rootfs,
        &[
            "plugin",
            "push",
            &path_in_image(&rootfs, wasm_inside),
            &plugin,
        ],
    ));

    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_crd(&client, &example_crd("wasmplugin")).await;
    install_crd(&client, &example_crd("webapp")).await;
    let kubeconfig = path_in_image(&rootfs, "/tmp/kubeconfig");
    support::image::copy_readable(cluster.kubeconfig_path(), &rootfs.join("tmp/kubeconfig"));

    let wasmplugins = dynamic_api(
        &client,
        &api_resource("wasm-operator.dev", "v1alpha1", "WasmPlugin", "wasmplugins"),
        None,
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "webapp"},
        "spec": {"source": {"oci": {"reference": plugin}}},
    }))
    .unwrap();
    wasmplugins
        .create(&PostParams::default(), &object)
        .await
        .unwrap();

    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("run.log");
    let child = spawn_logged(
        image_command(
            &rootfs,
            &[
                "run",
                "--kubeconfig",
                &kubeconfig,
                "--metrics-addr",
                "127.0.0.1:0",
            ],
        )
        .env("RUST_LOG", "info"),
        &log_path,
    );
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();

    let limit = Duration::from_secs(180);
    wait_until("WasmPlugin webapp Ready", limit, || async {
        let o = get_json(&wasmplugins, "webapp").await;
        match o.as_ref().and_then(|o| condition(o, "Ready")) {
            Some(c) if c["status"] == "True" => Ok(()),
            _ => Err(format!("{o:?}\nrun's log:\n{}", log())),
        }
    })
    .await;

    let webapps = dynamic_api(
        &client,
        &api_resource("example.com", "v1", "WebApp", "webapps"),
        Some("default"),
    );
    let webapp: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"replicas": 1, "image": "nginx:1.27", "port": 8080},
    }))
    .unwrap();
    webapps
        .create(&PostParams::default(), &webapp)
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    wait_until("the Deployment of WebApp shop", limit, || async {
        deployments
            .get_opt("shop")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no Deployment yet; run's log:\n{}", log()))
    })
    .await;

    let clean = tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();
    assert!(
        clean,
        "run did not exit cleanly on SIGTERM; log:\n{}",
        log()
    );
}
