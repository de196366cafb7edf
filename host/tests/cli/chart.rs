//! The Helm chart (deploy/helm/wasm-operator) with the Helm linked into
//! realcluster (`realcluster helm ...`, built by scripts/build-realcluster.sh):
//! lint, template, install/upgrade/uninstall on the real control plane, the
//! deploy/ manifests generated from it, its rendering applied to a
//! devcluster, and the RBAC proof: the host run with a token of the chart's
//! ServiceAccount serves the webapp and distributedkv plugins from OCI, and
//! one permission less breaks something visible.
//!
//! Helm exists only once realcluster is built, which in CI finishes before
//! the real-backend pass: every test here is `real_only_` and prints SKIPPED
//! on the devcluster pass. The devcluster apply starts its own devcluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::common::{eventually, workspace};
use crate::support;

/// The namespace the chart is installed into everywhere (the shared contract).
pub(crate) const NAMESPACE: &str = "wasm-operator-system";

/// How long the cluster may take to show what a test waits for.
pub(crate) const LIMIT: Duration = Duration::from_secs(120);

/// The host the RBAC proof runs: the container image's binary
/// (scripts/build-image.sh), run inside the image's root filesystem as its
/// user (host/tests/support/image.rs), with `args` and then `--kubeconfig`
/// naming a copy of `kubeconfig` in the image.
pub(crate) fn host_command(args: &[String], kubeconfig: &std::path::Path) -> Command {
    static COPIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let rootfs = support::image::image_rootfs();
    let inside = format!(
        "/tmp/kubeconfig-{}",
        COPIES.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    );
    support::image::copy_readable(kubeconfig, &rootfs.join(inside.trim_start_matches('/')));
    let seen = support::image::path_in_image(&rootfs, &inside);
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--kubeconfig", seen.as_str()]);
    support::image::image_command(&rootfs, &args)
}

/// The realcluster binary (it embeds Helm): `WASM_OPERATOR_REALCLUSTER`, else
/// the workspace's `target/realcluster/realcluster`.
pub(crate) fn realcluster() -> PathBuf {
    std::env::var_os("WASM_OPERATOR_REALCLUSTER")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/realcluster/realcluster"))
}

pub(crate) fn chart() -> PathBuf {
    workspace().join("deploy/helm/wasm-operator")
}

/// Runs `realcluster helm ARGS` with Helm's state in `home` (parallel-safe:
/// no shared ~/.config/helm or ~/.cache/helm).
pub(crate) fn helm(home: &Path, args: &[&str]) -> Output {
    Command::new(realcluster())
        .arg("helm")
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} helm: {e}; build it with bash scripts/build-realcluster.sh",
                realcluster().display()
            )
        })
}

/// [`helm`], asserting it succeeded; returns stdout.
pub(crate) fn helm_ok(home: &Path, args: &[&str]) -> String {
    let output = helm(home, args);
    assert!(
        output.status.success(),
        "helm {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every non-empty YAML document of `text`.
pub(crate) fn documents(text: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(text)
        .map(|doc| {
            <Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("a rendered document is not YAML: {e}\n{text}"))
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// `helm template` of the chart with `extra` arguments, as documents.
pub(crate) fn render(home: &Path, extra: &[&str]) -> Vec<Value> {
    let chart = chart();
    let mut args = vec![
        "template",
        "wasm-operator",
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
        // The WasmPlugin CRD lives in crds/ (installed first by `helm install`).
        "--include-crds",
    ];
    args.extend_from_slice(extra);
    documents(&helm_ok(home, &args))
}

pub(crate) fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in the rendering"))
}

/// Runs kubectl with `kubeconfig`, feeding `stdin`.
pub(crate) fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    use std::io::Write as _;
    let mut child = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kubectl");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(pipe);
    child.wait_with_output().unwrap()
}

pub(crate) fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let output = kubectl(kubeconfig, args, stdin);
    assert!(
        output.status.success(),
        "kubectl {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `docs` as one JSON List for `kubectl apply -f -`.
pub(crate) fn as_list(docs: &[&Value]) -> String {
    json!({"apiVersion": "v1", "kind": "List", "items": docs}).to_string()
}

/// `docs` as a stream of JSON documents (kubectl reads one after another).
/// The devcluster serves no
/// OpenAPI v2 (protobuf), which kubectl's client-side validation of a `v1
/// List` falls back to; separate documents validate against OpenAPI v3.
fn as_stream(docs: &[&Value]) -> String {
    docs.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_crd(doc: &Value) -> bool {
    doc["kind"] == "CustomResourceDefinition"
}

#[test]
fn real_only_helm_lint_is_clean() {
    if !support::real_only(
        "real_only_helm_lint_is_clean",
        "Helm (built into realcluster)",
    ) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let chart = chart();
    for extra in [
        vec![],
        vec![
            "--set",
            "metrics.serviceMonitor.enabled=true,metrics.prometheusRule.enabled=true,compileCache.persistentVolumeClaim.enabled=true,shards=3",
        ],
    ] {
        let mut args = vec!["lint", "--strict", chart.to_str().unwrap()];
        args.extend_from_slice(&extra);
        let out = helm_ok(home.path(), &args);
        assert!(out.contains("0 chart(s) failed"), "{out}");
        assert!(
            !out.contains("[WARNING]") && !out.contains("[ERROR]"),
            "{out}"
        );
    }
}

/// Values for the webapp and distributedkv plugins from `registry`: their
/// WasmPlugins, and the RBAC their kinds need (extraGrants) exactly as
/// `wasm-operator plugin rbac --host` prints it for the two plugin files, so
/// the RBAC proof also proves what that command prints.
pub(crate) fn plugin_values(registry: &str) -> String {
    let webapp = crate::common::plugin_wasm("webapp");
    let distributedkv = crate::common::plugin_wasm("distributedkv");
    let grants = crate::common::run_binary(&[
        "plugin",
        "rbac",
        "--host",
        webapp.to_str().unwrap(),
        distributedkv.to_str().unwrap(),
    ]);
    let grants_text = String::from_utf8_lossy(&grants.stdout).to_string();
    assert!(
        grants.status.success() && grants_text.starts_with("extraGrants:"),
        "plugin rbac --host failed: {}{grants_text}",
        String::from_utf8_lossy(&grants.stderr)
    );
    format!(
        r#"plugins:
  - name: webapp
    oci:
      reference: {registry}/plugins/webapp:1.0.0
  - name: distributedkv
    oci:
      reference: {registry}/plugins/distributedkv:1.0.0
{grants_text}"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_the_rendering_applies_on_the_real_control_plane() {
    if !support::real_only(
        "real_only_the_rendering_applies_on_the_real_control_plane",
        "Helm (built into realcluster)",
    ) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let values = home.path().join("values.yaml");
    std::fs::write(&values, plugin_values("127.0.0.1:5000")).unwrap();
    let docs = render(
        home.path(),
        &[
            "-f",
            values.to_str().unwrap(),
            "--set",
            "compileCache.persistentVolumeClaim.enabled=true,shards=2",
        ],
    );
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "PersistentVolumeClaim",
        "WasmPlugin",
        "Job",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    // The CRD is kept on uninstall; every container runs restricted.
    let crd = find(
        &docs,
        "CustomResourceDefinition",
        "wasmplugins.wasm-operator.dev",
    );
    assert_eq!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"],
        "keep"
    );
    let deployment = find(&docs, "Deployment", "wasm-operator");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"],
        json!(["ALL"])
    );
    assert_eq!(container["securityContext"]["runAsUser"], 65532);
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        args.contains(&"--leader-elect") && args.contains(&"--shards=2"),
        "{args:?}"
    );
    if let Err(error) = <wasm_operator::cli::Cli as clap::Parser>::try_parse_from(
        std::iter::once("wasm-operator").chain(args.iter().copied()),
    ) {
        panic!("the chart passes arguments the binary refuses: {error}");
    }

    // The API server accepts every document: the CRD for real (a dry run
    // of a WasmPlugin needs its kind served), the rest as a server dry run.
    let cluster = support::start_cluster().await;
    let kubeconfig = cluster.kubeconfig_path();
    kubectl_ok(kubeconfig, &["create", "namespace", NAMESPACE], None);
    let crds: Vec<&Value> = docs.iter().filter(|d| is_crd(d)).collect();
    kubectl_ok(kubeconfig, &["apply", "-f", "-"], Some(&as_list(&crds)));
    kubectl_ok(
        kubeconfig,
        &[
            "wait",
            "--for=condition=Established",
            "crd/wasmplugins.wasm-operator.dev",
        ],
        None,
    );
    let rest: Vec<&Value> = docs.iter().filter(|d| !is_crd(d)).collect();
    let out = kubectl_ok(
        kubeconfig,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&as_list(&rest)),
    );
    assert_eq!(out.lines().count(), rest.len(), "{out}");
}

#[test]
fn real_only_deploy_is_the_charts_rendering() {
    if !support::real_only(
        "real_only_deploy_is_the_charts_rendering",
        "Helm (built into realcluster)",
    ) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let rendered = render(home.path(), &["--no-hooks"]);
    let path = workspace().join("deploy/wasm-operator.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let on_disk = documents(&text);
    let fix = "deploy/wasm-operator.yaml is not the chart's rendering; regenerate it with `bash scripts/render-deploy.sh`";
    assert_eq!(
        on_disk.first().map(|d| &d["kind"]),
        Some(&json!("Namespace")),
        "{fix}"
    );
    assert_eq!(on_disk[0]["metadata"]["name"], NAMESPACE, "{fix}");
    // Compared as sets of objects: the order of the documents is Helm's.
    let key = |d: &Value| {
        format!(
            "{}/{}/{}",
            d["kind"], d["metadata"]["namespace"], d["metadata"]["name"]
        )
    };
    let mut expected = rendered.clone();
    expected.sort_by_key(key);
    let mut found = on_disk[1..].to_vec();
    found.sort_by_key(key);
    assert!(found == expected, "{fix}");
    // One namespace name everywhere.
    for doc in &on_disk[1..] {
        if let Some(ns) = doc["metadata"]["namespace"].as_str() {
            assert_eq!(ns, NAMESPACE, "{fix}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_the_rendering_applies_to_a_devcluster() {
    if !support::real_only(
        "real_only_the_rendering_applies_to_a_devcluster",
        "Helm (built into realcluster; the devcluster is started here)",
    ) {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let values = home.path().join("values.yaml");
    std::fs::write(&values, plugin_values("127.0.0.1:5000")).unwrap();
    let docs = render(home.path(), &["-f", values.to_str().unwrap(), "--no-hooks"]);
    let dev = support::start_devcluster().await;
    let kubeconfig = dev.kubeconfig_path();
    kubectl_ok(kubeconfig, &["create", "namespace", NAMESPACE], None);
    let crds: Vec<&Value> = docs.iter().filter(|d| is_crd(d)).collect();
    kubectl_ok(kubeconfig, &["apply", "-f", "-"], Some(&as_stream(&crds)));
    let rest: Vec<&Value> = docs.iter().filter(|d| !is_crd(d)).collect();
    kubectl_ok(kubeconfig, &["apply", "-f", "-"], Some(&as_stream(&rest)));
    let deployments: Api<Deployment> = Api::namespaced(dev.client(), NAMESPACE);
    assert!(
        deployments
            .get_opt("wasm-operator")
            .await
            .unwrap()
            .is_some()
    );
    let plugins: Api<DynamicObject> =
        Api::all_with(dev.client(), &wasm_operator::wasmplugin::api_resource());
    let names: Vec<String> = plugins
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_helm_install_upgrade_and_uninstall() {
    if !support::real_only(
        "real_only_helm_install_upgrade_and_uninstall",
        "Helm (built into realcluster) and Pods that turn Ready (kwok)",
    ) {
        return;
    }
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let home = tempfile::tempdir().unwrap();
    let chart = chart();
    let chart = chart.to_str().unwrap();
    let base = ["--kubeconfig", &kubeconfig, "--namespace", NAMESPACE];
    let mut install = vec![
        "install",
        "wasm-operator",
        chart,
        "--create-namespace",
        "--wait",
        "--timeout",
        "3m",
    ];
    install.extend_from_slice(&base);
    helm_ok(home.path(), &install);

    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let ready = |want: i32| {
        let deployments = deployments.clone();
        move || {
            let deployments = deployments.clone();
            async move {
                let d = deployments.get("wasm-operator").await.ok()?;
                let status = d.status?;
                (status.ready_replicas == Some(want) && status.updated_replicas == Some(want))
                    .then_some(())
            }
        }
    };
    eventually(LIMIT, "the host's 2 Pods Ready", ready(2)).await;
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    assert!(
        crds.get_opt("wasmplugins.wasm-operator.dev")
            .await
            .unwrap()
            .is_some()
    );

    // Upgrade: a third replica, an extra argument and a plugin.
    let values = home.path().join("values.yaml");
    std::fs::write(
        &values,
        "replicaCount: 3\nextraArgs: [--max-instances=8]\nplugins:\n  - name: webapp\n    oci:\n      reference: registry.example.com/plugins/webapp:1.0.0\n",
    )
    .unwrap();
    let mut upgrade = vec![
        "upgrade",
        "wasm-operator",
        chart,
        "-f",
        values.to_str().unwrap(),
        "--wait",
        "--timeout",
        "3m",
    ];
    upgrade.extend_from_slice(&base);
    helm_ok(home.path(), &upgrade);
    eventually(LIMIT, "the host's 3 Pods Ready", ready(3)).await;
    let deployment = deployments.get("wasm-operator").await.unwrap();
    let args = deployment.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap_or_default();
    assert!(args.contains(&"--max-instances=8".to_string()), "{args:?}");
    let plugins: Api<DynamicObject> =
        Api::all_with(client.clone(), &wasm_operator::wasmplugin::api_resource());
    assert!(plugins.get_opt("webapp").await.unwrap().is_some());

    // Uninstall: the pre-delete hook's Job runs first (kwok completes its
    // Pod: its container does not really run here, see
    // real_only_the_charts_rbac_suffices_and_the_uninstall_hook_unloads for
    // its command), then the release's objects go; the CRD stays.
    // --keep-history: `helm status` then still shows how the hook ran.
    let mut uninstall = vec![
        "uninstall",
        "wasm-operator",
        "--wait",
        "--timeout",
        "3m",
        "--keep-history",
    ];
    uninstall.extend_from_slice(&base);
    helm_ok(home.path(), &uninstall);
    let mut status = vec!["status", "wasm-operator", "-o", "json"];
    status.extend_from_slice(&base);
    let release: Value = serde_json::from_str(&helm_ok(home.path(), &status)).unwrap();
    let hook = release["hooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["kind"] == "Job" && h["name"] == "wasm-operator-uninstall")
        .unwrap_or_else(|| panic!("no uninstall hook in the release: {release}"));
    assert_eq!(hook["events"], json!(["pre-delete"]), "{hook}");
    assert_eq!(hook["last_run"]["phase"], "Succeeded", "{hook}");
    assert!(
        deployments
            .get_opt("wasm-operator")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        crds.get_opt("wasmplugins.wasm-operator.dev")
            .await
            .unwrap()
            .is_some()
    );
    eventually(LIMIT, "the release's WasmPlugin gone", || {
        let plugins = plugins.clone();
        async move {
            plugins
                .get_opt("webapp")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
}
