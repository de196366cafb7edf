//! The chart's RBAC is sufficient and no larger: the host, run with a token
//! of the chart's ServiceAccount (`kubectl create token`) and the flags the
//! chart passes, loads the webapp and distributedkv plugins from an OCI
//! registry and reconciles them; the uninstall hook's exact command, run
//! with a token of the hook's own ServiceAccount, unloads every WasmPlugin
//! while the host runs; and without one rule of the chart the host shows,
//! in its log, the request the API server refused.
//!
//! On the real test control plane Pods do not run containers (kwok plays
//! them), so the host and the hook's command run here as processes, with
//! the identities the chart gives them.

use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::chart::{
    LIMIT, NAMESPACE, as_list, chart, documents, find, helm_ok, host_command, kubectl_ok,
    plugin_values, render,
};
use crate::common::{ChildGuard, eventually, plugin_wasm, run_binary, spawn_logged};
use crate::support::{self, api_resource, registry::Registry};

/// A kubeconfig like `admin`'s (same server and CA) whose user is the
/// ServiceAccount `namespace/name`, with a token from `kubectl create token`.
fn service_account_kubeconfig(admin: &Path, name: &str, dir: &Path) -> PathBuf {
    let token = kubectl_ok(
        admin,
        &["create", "token", name, "-n", NAMESPACE, "--duration=1h"],
        None,
    );
    let text = std::fs::read_to_string(admin).unwrap();
    let mut config: Value = serde_yaml::from_str(&text).unwrap();
    for user in config["users"].as_array_mut().unwrap() {
        user["user"] = serde_json::json!({"token": token.trim()});
    }
    let path = dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    path
}

/// The arguments the chart's Deployment passes to the host, with the
/// addresses a Pod binds made local: metrics on a free port, the compile
/// cache in the image's /tmp (the Pod's emptyDir), and the conversion
/// webhook on loopback called by URL (the test control plane has no Service
/// routing).
fn chart_host_args(docs: &[Value]) -> Vec<String> {
    let deployment = find(docs, "Deployment", "wasm-operator");
    let webhook_port = support::registry::free_port();
    let cache = support::image::path_in_image(
        &support::image::image_rootfs(),
        &format!("/tmp/cache-{webhook_port}"),
    );
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .map(|arg| {
            if arg.starts_with("--metrics-addr=") {
                "--metrics-addr=127.0.0.1:0".to_string()
            } else if arg.starts_with("--cache-dir=") {
                format!("--cache-dir={cache}")
            } else if arg.starts_with("--webhook-addr=") {
                format!("--webhook-addr=127.0.0.1:{webhook_port}")
            } else if arg.starts_with("--webhook-service=") {
                format!("--webhook-url=https://127.0.0.1:{webhook_port}/convert")
            } else {
                arg.to_string()
            }
        })
        .collect()
}

/// Starts [`host_command`] with `args` and `kubeconfig`, as Pod `name` of
/// the chart's namespace; stderr goes to `log`.
fn start_host(args: &[String], kubeconfig: &Path, log: &Path) -> ChildGuard {
    spawn_logged(
        host_command(args, kubeconfig)
            .env("POD_NAMESPACE", NAMESPACE)
            .env("POD_NAME", "wasm-operator-test")
            .env_remove("KUBECONFIG"),
        log,
    )
}

/// Publishes `plugins` to `registry` as `plugins/<name>:1.0.0`.
fn push(registry: &Registry, plugins: &[&str]) {
    for name in plugins {
        let file = plugin_wasm(name);
        let output = run_binary(&[
            "plugin",
            "push",
            file.to_str().unwrap(),
            &registry.reference(&format!("plugins/{name}:1.0.0")),
        ]);
        assert!(
            output.status.success(),
            "push {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// The chart installed (no hooks: they would run at uninstall only) with
/// the plugins of `values`, on a cluster with the plugins' CRDs.
async fn install(cluster: &devcluster::TestCluster, home: &Path, values: &Path) -> Vec<Value> {
    for example in ["webapp", "distributedkv"] {
        support::install_crd(&cluster.client(), &support::example_crd(example)).await;
    }
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let chart = chart();
    helm_ok(
        home,
        &[
            "install",
            "wasm-operator",
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            "-f",
            values.to_str().unwrap(),
            "--kubeconfig",
            &kubeconfig,
        ],
    );
    render(home, &["-f", values.to_str().unwrap()])
}

fn condition_true(obj: &Value, kind: &str) -> bool {
    support::condition(obj, kind).is_some_and(|c| c["status"] == "True")
}

async fn exists(api: &Api<DynamicObject>, name: &str) -> Option<()> {
    api.get_opt(name).await.ok()?.map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_the_charts_rbac_suffices_and_the_uninstall_hook_unloads() {
    if !support::real_only(
        "real_only_the_charts_rbac_suffices_and_the_uninstall_hook_unloads",
        "Helm (built into realcluster) and the API server's RBAC",
    ) {
        return;
    }
    let cluster = support::start_cluster().await;
    let admin = cluster.kubeconfig_path().to_path_buf();
    let home = tempfile::tempdir().unwrap();
    let registry = Registry::start();
    push(&registry, &["webapp", "distributedkv"]);
    let values = home.path().join("values.yaml");
    std::fs::write(&values, plugin_values(&registry.host())).unwrap();
    let docs = install(&cluster, home.path(), &values).await;

    let as_host = service_account_kubeconfig(&admin, "wasm-operator", home.path());
    let log = home.path().join("host.log");
    let host = start_host(&chart_host_args(&docs), &as_host, &log);
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();

    // Both plugins load from OCI and turn Ready.
    let client = cluster.client();
    let plugins: Api<DynamicObject> =
        Api::all_with(client.clone(), &wasm_operator::wasmplugin::api_resource());
    for name in ["webapp", "distributedkv"] {
        eventually(LIMIT, &format!("WasmPlugin {name} Ready"), || {
            let plugins = plugins.clone();
            async move {
                let obj = support::get_json(&plugins, name).await?;
                condition_true(&obj, "Ready").then_some(())
            }
        })
        .await;
    }

    // A WebApp and a DistributedKV get their children.
    let webapp = std::fs::read_to_string(workspace_file("examples/webapp/webapps.yaml")).unwrap();
    let kv = std::fs::read_to_string(workspace_file("examples/distributedkv/distributedkvs.yaml"))
        .unwrap();
    let mut objects = documents(&webapp);
    objects.truncate(1); // my-webapp
    // sessions, written in the storage version (v1beta1).
    objects.extend(
        documents(&kv)
            .into_iter()
            .filter(|d| d["metadata"]["name"] == "sessions"),
    );
    let refs: Vec<&Value> = objects.iter().collect();
    kubectl_ok(&admin, &["apply", "-f", "-"], Some(&as_list(&refs)));
    let children = [
        (
            api_resource("apps", "v1", "Deployment", "deployments"),
            "my-webapp",
        ),
        (api_resource("", "v1", "Service", "services"), "my-webapp"),
        (
            api_resource("apps", "v1", "StatefulSet", "statefulsets"),
            "sessions",
        ),
        (
            api_resource(
                "policy",
                "v1",
                "PodDisruptionBudget",
                "poddisruptionbudgets",
            ),
            "sessions",
        ),
    ];
    for (ar, name) in children {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
        let what = format!("{} default/{name} (host log:\n{})", ar.kind, read_log());
        eventually(LIMIT, &what, || exists(&api, name)).await;
    }

    // The uninstall hook's command, taken from the rendered Job, with a
    // token of the hook's ServiceAccount (its RBAC applied like Helm does
    // before the Job), while the host runs.
    let chart_dir = chart();
    let hook = documents(&helm_ok(
        home.path(),
        &[
            "template",
            "wasm-operator",
            chart_dir.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "-f",
            values.to_str().unwrap(),
            "--show-only",
            "templates/uninstall-hook.yaml",
        ],
    ));
    let rbac: Vec<&Value> = hook.iter().filter(|d| d["kind"] != "Job").collect();
    kubectl_ok(&admin, &["apply", "-f", "-"], Some(&as_list(&rbac)));
    let as_hook = service_account_kubeconfig(&admin, "wasm-operator-uninstall", home.path());
    let job = find(&hook, "Job", "wasm-operator-uninstall");
    let args: Vec<String> = job["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let output =
        tokio::task::spawn_blocking(move || host_command(&args, &as_hook).output().unwrap())
            .await
            .unwrap();
    assert!(
        output.status.success(),
        "the hook's command failed: {}\nhost log:\n{}",
        String::from_utf8_lossy(&output.stderr),
        read_log()
    );
    let left = plugins.list(&Default::default()).await.unwrap().items;
    assert!(left.is_empty(), "WasmPlugins left: {left:?}");
    host.terminate();
}

fn workspace_file(relative: &str) -> PathBuf {
    crate::common::workspace().join(relative)
}

/// Removes from the installed Role or ClusterRole `wasm-operator` the rule
/// on `resource` (through the admin kubeconfig), as an operator narrowing
/// the chart's RBAC would.
fn remove_rule(admin: &Path, kind: &str, resource: &str) {
    let mut get = vec!["get", kind, "wasm-operator", "-o", "json"];
    if kind == "role" {
        get.extend(["-n", NAMESPACE]);
    }
    let mut role: Value = serde_json::from_str(&kubectl_ok(admin, &get, None)).unwrap();
    let rules = role["rules"].as_array_mut().unwrap();
    let before = rules.len();
    rules.retain(|r| {
        !r["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|x| x == resource))
    });
    assert_eq!(
        rules.len() + 1,
        before,
        "no single rule on {resource} in {kind}"
    );
    kubectl_ok(admin, &["replace", "-f", "-"], Some(&role.to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_one_rule_less_breaks_something_visible() {
    if !support::real_only(
        "real_only_one_rule_less_breaks_something_visible",
        "Helm (built into realcluster) and the API server's RBAC",
    ) {
        return;
    }
    // (the Role or ClusterRole, the rule's resource, what the host's log
    // then names: the refused request).
    for (kind, resource) in [("role", "leases"), ("clusterrole", "wasmplugins/status")] {
        let cluster = support::start_cluster().await;
        let admin = cluster.kubeconfig_path().to_path_buf();
        let home = tempfile::tempdir().unwrap();
        let registry = Registry::start();
        push(&registry, &["webapp"]);
        let values = home.path().join("values.yaml");
        let all = plugin_values(&registry.host());
        // Only the webapp plugin: its WasmPlugin is what the host writes.
        let webapp_only = all.replace(
            &format!(
                "  - name: distributedkv\n    oci:\n      reference: {}/plugins/distributedkv:1.0.0\n",
                registry.host()
            ),
            "",
        );
        std::fs::write(&values, webapp_only).unwrap();
        let docs = install(&cluster, home.path(), &values).await;
        remove_rule(&admin, kind, resource);

        let as_host = service_account_kubeconfig(&admin, "wasm-operator", home.path());
        let log = home.path().join("host.log");
        let host = start_host(&chart_host_args(&docs), &as_host, &log);
        let forbidden = format!("cannot patch resource \\\"{resource}\\\"");
        let forbidden_any = format!("resource \\\"{resource}\\\"");
        eventually(
            LIMIT,
            &format!("the host's log naming the refused {resource} request"),
            || {
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let named = text.contains("forbidden")
                    && (text.contains(&forbidden) || text.contains(&forbidden_any));
                async move { named.then_some(()) }
            },
        )
        .await;
        host.terminate();
        drop(cluster);
    }
}
