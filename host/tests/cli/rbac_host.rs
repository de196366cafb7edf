//! `wasm-operator plugin rbac --host`: the host ClusterRole rules plugins
//! add, as the chart's `extraGrants` value, from plugin files, an OCI
//! reference and the WasmPlugins of a devcluster.

use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use wasm_operator::dev::manifests::install_crds;

use crate::common::{plugin_wasm, run_binary, workspace};

const WRITE: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

fn named(group: &str, resource: &str, names: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": [resource], "resourceNames": names, "verbs": verbs})
}

/// What serving a primary kind takes (`webapps` of `example.com`).
fn primary(group: &str, plural: &str) -> [Value; 3] {
    [
        rule(
            group,
            &[plural],
            &["get", "list", "watch", "update", "patch"],
        ),
        rule(group, &[&format!("{plural}/finalizers")], &["update"]),
        rule(group, &[&format!("{plural}/status")], &["update", "patch"]),
    ]
}

/// What serving distributedkv's primary kind takes: as [`primary`], plus
/// `create` (a Restore into a new object creates it).
fn kv_primary() -> [Value; 3] {
    let [_, finalizers, status] = primary("kv.example.com", "distributedkvs");
    [
        rule(
            "kv.example.com",
            &["distributedkvs"],
            &["get", "list", "watch", "create", "update", "patch"],
        ),
        finalizers,
        status,
    ]
}

/// What a plugin with backups adds beside its kinds: Backups and Restores
/// (the host's resources), sorted last by their group.
fn backup_rules() -> [Value; 2] {
    [
        rule("wasm-operator.dev", &["backups", "restores"], &WRITE),
        rule(
            "wasm-operator.dev",
            &["backups/status", "restores/status"],
            &["patch"],
        ),
    ]
}

/// The webapp plugin alone, its writes not impersonated.
fn webapp_rules() -> Vec<Value> {
    let mut rules = vec![
        rule("", &["services"], &WRITE),
        rule("apps", &["deployments"], &WRITE),
    ];
    rules.extend(primary("example.com", "webapps"));
    rules
}

/// The webapp and distributedkv plugins together, not impersonated.
fn both_rules() -> Vec<Value> {
    let crd = ["distributedkvs.kv.example.com"];
    let mut rules = vec![
        // A backup Job's Pods say where the data went.
        rule("", &["pods"], &["list"]),
        rule("", &["services"], &WRITE),
        named(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &crd,
            &["get", "patch"],
        ),
        named(
            "apiextensions.k8s.io",
            "customresourcedefinitions/status",
            &crd,
            &["patch"],
        ),
        rule("apps", &["deployments", "statefulsets"], &WRITE),
        rule("batch", &["jobs"], &WRITE),
    ];
    rules.extend(primary("example.com", "webapps"));
    rules.extend(kv_primary());
    rules.push(rule("policy", &["poddisruptionbudgets"], &WRITE));
    rules.extend(backup_rules());
    rules
}

/// Runs `plugin rbac --host ARGS -o json` and returns `extraGrants`, after
/// checking the YAML output says the same.
fn extra_grants(args: &[&str]) -> Value {
    let mut json_args = vec!["plugin", "rbac", "--host"];
    json_args.extend(args);
    let yaml = run_binary(&json_args);
    json_args.extend(["-o", "json"]);
    let json = run_binary(&json_args);
    for output in [&yaml, &json] {
        assert!(
            output.status.success(),
            "plugin rbac --host {args:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let from_json: Value = serde_json::from_slice(&json.stdout).unwrap();
    let from_yaml: Value = serde_yaml::from_slice(&yaml.stdout).unwrap();
    assert_eq!(from_json, from_yaml, "YAML and JSON outputs differ");
    assert!(
        String::from_utf8_lossy(&yaml.stdout).starts_with("extraGrants:\n"),
        "the YAML is not an extraGrants: value"
    );
    from_json["extraGrants"].clone()
}

#[test]
fn plugin_rbac_host_prints_the_rules_of_plugin_files() {
    let webapp = plugin_wasm("webapp");
    let kv = plugin_wasm("distributedkv");
    let (webapp, kv) = (webapp.to_str().unwrap(), kv.to_str().unwrap());
    assert_eq!(extra_grants(&[webapp]), Value::from(webapp_rules()));
    assert_eq!(extra_grants(&[webapp, kv]), Value::from(both_rules()));
    // The order of the plugins does not change the output.
    assert_eq!(extra_grants(&[kv, webapp]), Value::from(both_rules()));

    // Nothing to read: refused, saying what to give.
    let output = run_binary(&["plugin", "rbac", "--host"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--all-wasm-plugins"), "{stderr}");
    // A file that is not a plugin is named.
    let output = run_binary(&["plugin", "rbac", "--host", "/nonexistent/x.wasm"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/x.wasm"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_rbac_host_reads_an_oci_reference() {
    let registry = crate::support::registry::Registry::start();
    let reference = registry.reference("rbac/webapp:1.0.0");
    let bytes = std::fs::read(plugin_wasm("webapp")).unwrap();
    wasm_operator::oci::push(
        &bytes,
        &reference,
        &wasm_operator::oci::PushOptions::default(),
        &mut |_| {},
    )
    .await
    .unwrap();
    let positional = format!("oci://{reference}");
    let grants = tokio::task::spawn_blocking(move || extra_grants(&[&positional]))
        .await
        .unwrap();
    assert_eq!(grants, Value::from(webapp_rules()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_rbac_host_reads_the_wasmplugins_of_a_cluster() {
    let cluster = crate::support::start_cluster().await;
    install_crds(
        &cluster.client(),
        &workspace().join("deploy/crds/wasmplugin.yaml"),
    )
    .await
    .unwrap();
    let api = Api::<DynamicObject>::all_with(
        cluster.client(),
        &wasm_operator::wasmplugin::api_resource(),
    );
    let webapp = plugin_wasm("webapp");
    let kv = plugin_wasm("distributedkv");
    // webapp's writes impersonate its ServiceAccount: the host only reads
    // its children and needs `impersonate`; distributedkv runs as the host.
    for object in [
        json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "webapp"},
            "spec": {
                "source": {"file": {"path": webapp.to_str().unwrap()}},
                "permissions": {
                    "own": [{"group": "example.com", "kind": "WebApp"},
                            {"group": "apps", "kind": "Deployment"}, {"kind": "Service"}],
                    "namespaces": ["*"],
                    "serviceAccount": {"namespace": "ops", "name": "webapp"},
                },
            },
        }),
        json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "distributedkv"},
            "spec": {"source": {"file": {"path": kv.to_str().unwrap()}}},
        }),
    ] {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        api.create(&PostParams::default(), &object).await.unwrap();
    }
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let (one, all) = tokio::task::spawn_blocking(move || {
        (
            extra_grants(&["--wasm-plugin", "webapp", "--kubeconfig", &kubeconfig]),
            extra_grants(&["--all-wasm-plugins", "--kubeconfig", &kubeconfig]),
        )
    })
    .await
    .unwrap();
    let read = ["get", "list", "watch"];
    let mut impersonated_webapp = vec![
        // "serviceaccounts" sorts before "services".
        named("", "serviceaccounts", &["webapp"], &["impersonate"]),
        rule("", &["services"], &read),
        rule("apps", &["deployments"], &read),
    ];
    impersonated_webapp.extend(primary("example.com", "webapps"));
    assert_eq!(one, Value::from(impersonated_webapp));

    // With distributedkv, services are written (by distributedkv as the
    // host): the verbs merge.
    let crd = ["distributedkvs.kv.example.com"];
    let mut both = vec![
        rule("", &["pods"], &["list"]),
        named("", "serviceaccounts", &["webapp"], &["impersonate"]),
        rule("", &["services"], &WRITE),
        named(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &crd,
            &["get", "patch"],
        ),
        named(
            "apiextensions.k8s.io",
            "customresourcedefinitions/status",
            &crd,
            &["patch"],
        ),
        rule("apps", &["deployments"], &read),
        rule("apps", &["statefulsets"], &WRITE),
        rule("batch", &["jobs"], &WRITE),
    ];
    both.extend(primary("example.com", "webapps"));
    both.extend(kv_primary());
    both.push(rule("policy", &["poddisruptionbudgets"], &WRITE));
    both.extend(backup_rules());
    assert_eq!(all, Value::from(both));
}
