//! `wasm-operator run --plugin` with grants: two components of one plugin
//! name are an error naming both files; a plugin asking for more than its
//! grant (`--grant FILE`, or the restricted default) is refused naming each
//! excess.

use wasm_operator::dev::manifests::install_crds;

use crate::common::{plugin_wasm, run_binary, workspace};

/// Runs `wasm-operator run` against a fresh devcluster with the webapp and
/// Attack CRDs, with `args` after `run`; returns stderr of the failed run.
async fn run_failing(args: Vec<String>) -> String {
    let cluster = crate::support::start_cluster().await;
    for crd in ["examples/webapp/crd.yaml", "examples/hostile/crd.yaml"] {
        install_crds(&cluster.client(), &workspace().join(crd))
            .await
            .unwrap();
    }
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let output = tokio::task::spawn_blocking(move || {
        let mut all: Vec<&str> = vec!["run"];
        all.extend(args.iter().map(String::as_str));
        all.extend(["--kubeconfig", &kubeconfig, "--metrics-addr", "127.0.0.1:0"]);
        run_binary(&all)
    })
    .await
    .unwrap();
    assert!(!output.status.success());
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_two_components_of_one_plugin_name() {
    let v1 = plugin_wasm("webapp").display().to_string();
    let v2 = plugin_wasm("webapp_v2").display().to_string();
    let stderr = run_failing(vec![
        "--plugin".into(),
        v1.clone(),
        "--plugin".into(),
        v2.clone(),
    ])
    .await;
    assert!(
        stderr.contains(&format!(
            "--plugin {v1} and --plugin {v2} are both plugin webapp"
        )),
        "{stderr}"
    );
    // The same file twice is the same mistake.
    let stderr = run_failing(vec![
        "--plugin".into(),
        v1.clone(),
        "--plugin".into(),
        v1.clone(),
    ])
    .await;
    assert!(stderr.contains("are both plugin webapp"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_refuses_a_plugin_beyond_its_grant() {
    let hostile = plugin_wasm("hostile").display().to_string();
    // The restricted default.
    let stderr = run_failing(vec!["--plugin".into(), hostile.clone()]).await;
    assert!(
        stderr.contains("asks for more than its grant")
            && stderr.contains("owns v1 Secret")
            && stderr.contains("ClusterRoleBinding"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("WIT contract"),
        "not a build problem: {stderr}"
    );
    // A grant file that names Secrets but no cluster-scoped kinds.
    let dir = tempfile::tempdir().unwrap();
    let grant = dir.path().join("grant.yaml");
    std::fs::write(
        &grant,
        "own:\n- {group: test.wasm-operator.dev, kind: Attack}\n- {kind: ConfigMap}\n- {kind: Secret}\n- {group: rbac.authorization.k8s.io, kind: ClusterRoleBinding}\n",
    )
    .unwrap();
    let stderr = run_failing(vec![
        "--plugin".into(),
        hostile,
        "--grant".into(),
        grant.display().to_string(),
    ])
    .await;
    assert!(
        stderr.contains("ClusterRoleBinding") && !stderr.contains("owns v1 Secret"),
        "{stderr}"
    );
}

#[test]
fn grant_without_plugins_is_an_error() {
    let output = run_binary(&["run", "--grant", "/nonexistent/grant.yaml"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--grant only applies to --plugin"),
        "{stderr}"
    );
}

#[test]
fn plugin_rbac_prints_the_rbac_of_a_grant_file() {
    let dir = tempfile::tempdir().unwrap();
    let grant = dir.path().join("grant.yaml");
    std::fs::write(
        &grant,
        "own: [{group: example.com, kind: WebApp}, {group: apps, kind: Deployment}]\nnamespaces: [team-a]\nserviceAccount: {namespace: ops, name: webapp}\n",
    )
    .unwrap();
    let output = run_binary(&[
        "plugin",
        "rbac",
        "--grant",
        grant.to_str().unwrap(),
        "-o",
        "json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["ServiceAccount", "Role", "Role", "RoleBinding"]);
    assert_eq!(list["items"][2]["metadata"]["namespace"], "team-a");

    // The restricted default cannot be written as RBAC: refused, saying why.
    std::fs::write(&grant, "serviceAccount: {namespace: ops, name: webapp}\n").unwrap();
    let output = run_binary(&["plugin", "rbac", "--grant", grant.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no `own` list"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_rbac_reads_the_grant_of_a_wasmplugin() {
    use kube::api::{Api, DynamicObject, PostParams};
    let cluster = crate::support::start_cluster().await;
    install_crds(
        &cluster.client(),
        &workspace().join("deploy/crds/wasmplugin.yaml"),
    )
    .await
    .unwrap();
    let object: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "webapp"},
        "spec": {
            "source": {"file": {"path": "/plugins/webapp.wasm"}},
            "permissions": {
                "own": [{"group": "example.com", "kind": "WebApp"}],
                "namespaces": ["*"],
                "serviceAccount": {"namespace": "ops", "name": "webapp"},
            },
        },
    }))
    .unwrap();
    Api::<DynamicObject>::all_with(cluster.client(), &wasm_operator::wasmplugin::api_resource())
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let output = tokio::task::spawn_blocking(move || {
        run_binary(&[
            "plugin",
            "rbac",
            "--wasm-plugin",
            "webapp",
            "--kubeconfig",
            &kubeconfig,
        ])
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("kind: ClusterRoleBinding") && stdout.contains("webapps"),
        "{stdout}"
    );
}
