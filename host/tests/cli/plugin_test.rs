//! `wasm-operator plugin test` and `plugin record`: the first-party
//! plugins' golden fixtures pass through the real binary and engine; a
//! changed expected.yaml fails with a diff naming the field and `--update`
//! rewrites it; unusable input exits 2 naming the file and field; a fixture
//! recorded from a cluster's real WebApp and children passes.

use std::path::Path;
use std::process::Output;

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::dev::manifests::install_crds;

use crate::common::{plugin_wasm, run_binary, workspace};
use crate::support::{self, api_resource, dynamic_api};

fn plugin_test(plugin: &str, fixtures: &Path, extra: &[&str]) -> Output {
    let wasm = plugin_wasm(plugin);
    let mut args = vec![
        "plugin",
        "test",
        wasm.to_str().unwrap(),
        fixtures.to_str().unwrap(),
    ];
    args.extend(extra);
    run_binary(&args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Copies a fixtures directory (one level of case directories).
fn copy_fixtures(from: &Path, to: &Path) {
    for case in std::fs::read_dir(from).unwrap() {
        let case = case.unwrap().path();
        let target = to.join(case.file_name().unwrap());
        std::fs::create_dir_all(&target).unwrap();
        for file in std::fs::read_dir(&case).unwrap() {
            let file = file.unwrap().path();
            std::fs::copy(&file, target.join(file.file_name().unwrap())).unwrap();
        }
    }
}

#[test]
fn the_first_party_plugins_pass_their_fixtures() {
    if !support::once_per_run("the_first_party_plugins_pass_their_fixtures") {
        return;
    }
    for (plugin, cases) in [("webapp", 3), ("distributedkv", 3)] {
        let fixtures = workspace().join("plugins").join(plugin).join("fixtures");
        let output = plugin_test(plugin, &fixtures, &[]);
        let stdout = text(&output.stdout);
        assert!(
            output.status.success(),
            "{plugin}: {stdout}\n{}",
            text(&output.stderr)
        );
        assert!(
            stdout.contains(&format!("{cases} passed, 0 failed")),
            "{plugin}: {stdout}"
        );
    }
    // The JSON report says the same.
    let fixtures = workspace().join("plugins/distributedkv/fixtures");
    let output = plugin_test("distributedkv", &fixtures, &["-o", "json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (report["passed"].as_u64(), report["failed"].as_u64()),
        (Some(3), Some(0))
    );
    let names: Vec<&str> = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["convert-round-trip", "invalid-spec", "reconcile"]);
}

#[test]
fn a_changed_expected_file_fails_with_a_diff_and_update_rewrites_it() {
    if !support::once_per_run("a_changed_expected_file_fails_with_a_diff_and_update_rewrites_it") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    copy_fixtures(&workspace().join("plugins/webapp/fixtures"), dir.path());
    let expected = dir.path().join("fresh/expected.yaml");
    let original = std::fs::read_to_string(&expected).unwrap();
    assert!(original.contains("phase: Pending"), "{original}");
    std::fs::write(
        &expected,
        original.replace("phase: Pending", "phase: Running"),
    )
    .unwrap();

    let output = plugin_test("webapp", dir.path(), &[]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("FAILED  fresh"), "{stdout}");
    assert!(stdout.contains("-  phase: Running"), "{stdout}");
    assert!(stdout.contains("+  phase: Pending"), "{stdout}");
    assert!(stdout.contains("2 passed, 1 failed"), "{stdout}");
    assert!(
        text(&output.stderr).contains("rerun with --update"),
        "{}",
        text(&output.stderr)
    );

    let output = plugin_test("webapp", dir.path(), &["--update"]);
    assert!(output.status.success(), "{}", text(&output.stdout));
    assert!(
        text(&output.stdout).contains("updated fresh"),
        "{}",
        text(&output.stdout)
    );
    assert_eq!(std::fs::read_to_string(&expected).unwrap(), original);
    assert!(plugin_test("webapp", dir.path(), &[]).status.success());
}

#[test]
fn unusable_input_exits_2_naming_the_file_and_field() {
    if !support::once_per_run("unusable_input_exits_2_naming_the_file_and_field") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("no-target");
    std::fs::create_dir_all(&case).unwrap();
    std::fs::write(
        case.join("input.yaml"),
        "call: convert\nobject: {apiVersion: kv.example.com/v1beta1, kind: DistributedKV, metadata: {name: a}}\n",
    )
    .unwrap();
    let output = plugin_test("distributedkv", dir.path(), &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no-target/input.yaml"), "{stderr}");
    assert!(stderr.contains("field `to` is missing"), "{stderr}");

    std::fs::write(case.join("input.yaml"), "object: {}\nattempt: first\n").unwrap();
    let output = plugin_test("distributedkv", dir.path(), &[]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("attempt"), "{stderr}");
}

/// A WebApp with a Deployment (two ready replicas) and a Service it
/// controls, created directly on a cluster, recorded into a fixture that
/// then passes; the recorded objects carry no server noise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_webapp_becomes_a_passing_fixture() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_crds(&client, &workspace().join("examples/webapp/crd.yaml"))
        .await
        .unwrap();
    let namespace = "default";
    let webapps = api_resource("example.com", "v1", "WebApp", "webapps");
    let webapp: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": namespace},
        "spec": {"replicas": 2, "image": "nginx:1.27", "port": 8080},
    }))
    .unwrap();
    let created = support::wait_until(
        "the WebApp CRD to serve",
        std::time::Duration::from_secs(30),
        || {
            let api = dynamic_api(&client, &webapps, Some(namespace));
            let webapp = webapp.clone();
            async move {
                api.create(&PostParams::default(), &webapp)
                    .await
                    .map_err(|e| e.to_string())
            }
        },
    )
    .await;
    let uid = created.metadata.uid.clone().unwrap();
    let owner = json!([{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop",
                        "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"app": "shop"});
    let deployments = api_resource("apps", "v1", "Deployment", "deployments");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": namespace, "labels": labels, "ownerReferences": owner},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shop", "namespace": namespace, "labels": labels, "ownerReferences": owner},
        "spec": {"selector": labels, "ports": [{"port": 8080, "targetPort": 8080}]},
    });
    let deploy_api = dynamic_api(&client, &deployments, Some(namespace));
    deploy_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(deployment).unwrap(),
        )
        .await
        .unwrap();
    deploy_api
        .patch_status(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 2, "readyReplicas": 2}})),
        )
        .await
        .unwrap();
    let services = api_resource("", "v1", "Service", "services");
    dynamic_api(&client, &services, Some(namespace))
        .create(
            &PostParams::default(),
            &serde_json::from_value(service).unwrap(),
        )
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.kubeconfig_path().to_str().unwrap().to_string();
    let out = dir.path().to_str().unwrap().to_string();
    let wasm = plugin_wasm("webapp");
    let output = tokio::task::spawn_blocking(move || {
        run_binary(&[
            "plugin",
            "record",
            "webapp/shop",
            wasm.to_str().unwrap(),
            "-n",
            namespace,
            "--kubeconfig",
            &kubeconfig,
            "-o",
            &out,
        ])
    })
    .await
    .unwrap();
    assert!(output.status.success(), "{}", text(&output.stderr));

    let input: Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.path().join("shop/input.yaml")).unwrap())
            .unwrap();
    assert_eq!(input["object"]["spec"]["replicas"], 2);
    let kinds: Vec<&str> = input["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Deployment", "Service"], "{input:#}");
    for object in std::iter::once(&input["object"]).chain(input["children"].as_array().unwrap()) {
        assert!(
            object["metadata"].get("managedFields").is_none(),
            "{object:#}"
        );
        assert!(
            object["metadata"].get("resourceVersion").is_none(),
            "{object:#}"
        );
    }
    assert!(
        input["now"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{input:#}"
    );

    let expected: Value = serde_yaml::from_str(
        &std::fs::read_to_string(dir.path().join("shop/expected.yaml")).unwrap(),
    )
    .unwrap();
    // The status follows the recorded Deployment's: on the real control
    // plane the Deployment controller owns that status and may have reset
    // what the test patched in.
    let recorded_ready = input["children"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["kind"] == "Deployment")
        .and_then(|d| d.pointer("/status/readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    assert_eq!(
        expected["status"]["readyReplicas"],
        json!(recorded_ready),
        "{expected:#}"
    );
    let output = plugin_test("webapp", dir.path(), &[]);
    assert!(output.status.success(), "{}", text(&output.stdout));
    assert!(text(&output.stdout).contains("1 passed, 0 failed"));
}
