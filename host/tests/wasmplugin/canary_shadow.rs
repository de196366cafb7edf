//! Shadow canaries and the dry run through a WasmPlugin's `spec.canary`:
//! the differing candidate is caught on every object, writes nothing and is
//! rolled back by analysis with a reason naming the diff ratio; the
//! identical candidate shows no difference and is promoted by itself; the
//! dry run catches the failing candidate before it serves anything.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use wasm_operator::cli::OutputFormat;
use wasm_operator::cli::canary::{self, CanaryCommand, Target};

use crate::support::{self, condition, wait_until};
use crate::{CONVERGE, Fixture, digest, file_spec, write_atomically};

const NS: &str = "default";

fn webapps(fx: &Fixture) -> Api<DynamicObject> {
    support::dynamic_api(
        &fx.client(),
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(NS),
    )
}

async fn create_webapp(fx: &Fixture, name: &str, fail: bool) {
    let labels = if fail {
        json!({"canary.example.com/fail": "true"})
    } else {
        json!({})
    };
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"replicas": 1, "image": "nginx:1.27", "port": 8080},
    }))
    .unwrap();
    webapps(fx)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating WebApp {name}: {e}"));
}

/// Waits until WebApp `name`'s Deployment exists (the stable version
/// served it) and returns it.
async fn deployment(fx: &Fixture, name: &str) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(fx.client(), NS);
    wait_until(&format!("Deployment {name}"), CONVERGE, || {
        let api = api.clone();
        async move {
            api.get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no Deployment yet".to_string())
        }
    })
    .await
}

fn phase(o: &Value) -> Option<&str> {
    o.pointer("/status/canary/phase").and_then(Value::as_str)
}

async fn stable(fx: &Fixture) {
    let bytes = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &bytes);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&bytes)).await;
}

fn candidate(fx: &Fixture, plugin: &str) -> String {
    let path = fx.dir.path().join(format!("{plugin}.wasm"));
    write_atomically(&path, &support::plugin_bytes(plugin));
    path.display().to_string()
}

fn target(name: &str, output: OutputFormat) -> Target {
    Target {
        name: name.to_string(),
        namespace: None,
        output,
        kubeconfig: None,
        context: None,
    }
}

/// What a write of the host would move on a Deployment: its generation and
/// the host's own managedFields entries. Not the resourceVersion: on a real
/// cluster kube-controller-manager's Deployment controller writes every
/// Deployment's status and revision annotation (docs/conformance.md #8).
fn host_write_mark(d: &Deployment) -> (Option<i64>, Vec<String>) {
    (
        d.metadata.generation,
        support::host_managed_fields(&d.metadata),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_differing_shadow_is_caught_on_every_object_writes_nothing_and_is_rolled_back() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    let differ = candidate(&fx, "webapp_differ");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": differ}},
            "mode": "Shadow", "promotion": "Auto",
            "analysis": {"interval": "1s", "minCalls": 4, "failureLimit": 2},
        }}),
    )
    .await;
    // The dry run (over no objects) passes, then it shadows.
    fx.wait_for("webapp", "shadowing", |o| {
        matches!(phase(o), Some("Shadowing" | "Paused" | "RolledBack"))
    })
    .await;
    fx.wait_event("webapp", "DryRunStarted").await;
    // All four exist before the stable version's Deployments are awaited:
    // on the real control plane the Deployment controller's status writes
    // re-reconcile each WebApp, and waiting object by object let the
    // analysis (minCalls 4) roll back before the last ones were shadowed.
    let names: Vec<String> = (0..4).map(|i| format!("app-{i}")).collect();
    for name in &names {
        create_webapp(&fx, name, false).await;
    }
    let mut before = Vec::new();
    for name in &names {
        before.push(deployment(&fx, name).await);
    }
    let o = fx
        .wait_for("webapp", "rolled back by analysis", |o| {
            phase(o) == Some("RolledBack")
        })
        .await;
    let failed = condition(&o, "CanaryFailed").unwrap();
    assert_eq!(failed["status"], "True", "{o}");
    assert_eq!(failed["reason"], "AnalysisFailed", "{o}");
    let message = failed["message"].as_str().unwrap();
    assert!(message.contains("shadow diff ratio 1.00"), "{message}");
    assert!(message.contains("maxDiffRatio"), "{message}");
    let (kind, note) = fx.wait_event("webapp", "ShadowDiffers").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("replicas"), "{note}");
    // Nothing the candidate computed was written: the stable version's
    // Deployments (replicas 1) and Services are untouched.
    let deployments: Api<Deployment> = Api::namespaced(fx.client(), NS);
    let services: Api<Service> = Api::namespaced(fx.client(), NS);
    for d in &before {
        let name = d.metadata.name.clone().unwrap();
        let now = deployments.get(&name).await.unwrap();
        assert_eq!(host_write_mark(&now), host_write_mark(d), "{name}");
        assert_eq!(now.spec.unwrap().replicas, Some(1), "{name}");
        assert!(services.get_opt(&name).await.unwrap().is_some(), "{name}");
        let managed = now.metadata.managed_fields.unwrap_or_default();
        assert!(
            managed
                .iter()
                .all(|m| m.manager.as_deref() != Some("wasm-operator-canary")),
            "{name}: {managed:?}"
        );
    }
    // The full diffs: every object, replicas 1 -> 2, the Service dropped.
    let client = fx.client();
    let diff = wait_until("canary diff of 4 objects", CONVERGE, || {
        let client = client.clone();
        async move {
            let out = canary::run(
                &client,
                &CanaryCommand::Diff(target("webapp", OutputFormat::Json)),
            )
            .await
            .map_err(|e| e.to_string())?;
            let doc: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
            (doc["objects"].as_array().map_or(0, Vec::len) == 4)
                .then_some(doc.clone())
                .ok_or(format!("{doc}"))
        }
    })
    .await;
    for object in diff["objects"].as_array().unwrap() {
        let fields = object["fields"].as_array().unwrap();
        assert!(
            fields
                .iter()
                .any(|f| f["path"].as_str().unwrap().ends_with(".spec.replicas")
                    && f["stable"] == 1
                    && f["candidate"] == 2),
            "{object}"
        );
        assert!(
            fields.iter().any(|f| f["path"]
                .as_str()
                .unwrap()
                .starts_with("children[v1/Service/")
                && f.get("candidate").is_none_or(Value::is_null)),
            "{object}"
        );
    }
    let text = canary::run(
        &client,
        &CanaryCommand::Diff(target("webapp", OutputFormat::Text)),
    )
    .await
    .unwrap();
    assert!(text.contains("spec.replicas: 1 -> 2"), "{text}");
    assert_eq!(fx.registry.current("webapp").unwrap().info.version, "1.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_shadow_shows_no_difference_and_is_promoted_by_itself() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    for i in 0..2 {
        create_webapp(&fx, &format!("old-{i}"), false).await;
        deployment(&fx, &format!("old-{i}")).await;
    }
    let next = candidate(&fx, "webapp_next");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": next}},
            "mode": "Shadow", "promotion": "Auto",
            "analysis": {"interval": "1s", "minCalls": 3},
        }}),
    )
    .await;
    // The dry run goes over the 2 existing WebApps first.
    let o = fx
        .wait_for("webapp", "shadowing after the dry run", |o| {
            matches!(phase(o), Some("Shadowing" | "Paused"))
        })
        .await;
    assert_eq!(o["status"]["canary"]["dryRun"]["total"], 2, "{o}");
    assert_eq!(o["status"]["canary"]["dryRun"]["failedCount"], 0, "{o}");
    for i in 0..3 {
        create_webapp(&fx, &format!("app-{i}"), false).await;
    }
    let o = fx
        .wait_for("webapp", "promoted", |o| phase(o) == Some("Promoted"))
        .await;
    assert_eq!(
        condition(&o, "CanaryPromoted").unwrap()["status"],
        "True",
        "{o}"
    );
    assert_eq!(o["status"]["canary"]["shadow"]["differing"], 0, "{o}");
    assert!(
        o["status"]["canary"]["shadow"]["compared"]
            .as_i64()
            .unwrap()
            >= 3,
        "{o}"
    );
    assert_eq!(
        o["status"]["canary"]["lastAnalysis"]["diffRatio"], 0.0,
        "{o}"
    );
    assert_eq!(o["status"]["version"], "1.1.0", "{o}");
    assert_eq!(fx.registry.current("webapp").unwrap().info.version, "1.1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_run_catches_a_failing_candidate_before_it_serves_anything() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    for i in 0..4 {
        let name = format!("app-{i}");
        create_webapp(&fx, &name, i % 2 == 0).await;
        deployment(&fx, &name).await;
    }
    let flaky = candidate(&fx, "webapp_flaky");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": flaky}},
            "mode": "Split", "weight": 100,
            "analysis": {"interval": "1s", "minCalls": 1},
        }}),
    )
    .await;
    let o = fx
        .wait_for("webapp", "dry run failed", |o| {
            condition(o, "CanaryFailed").and_then(|c| c.get("reason"))
                == Some(&json!("DryRunFailed"))
        })
        .await;
    assert_eq!(phase(&o), Some("DryRun"), "{o}");
    assert_eq!(
        condition(&o, "CanaryFailed").unwrap()["status"],
        "True",
        "{o}"
    );
    let failures: Vec<&str> = o["status"]["canary"]["dryRun"]["failures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["object"].as_str().unwrap())
        .collect();
    assert_eq!(failures, vec!["default/app-0", "default/app-2"], "{o}");
    let (kind, note) = fx.wait_event("webapp", "DryRunFailed").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("2 of 4"), "{note}");
    // It served nothing: every WebApp is still the stable version's.
    assert!(fx.registry.canary("webapp").is_none());
    let list = webapps(&fx).list(&Default::default()).await.unwrap();
    for w in list.items {
        let version = w
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("wasm-operator.dev/managed-by-version"))
            .cloned();
        assert_eq!(version.as_deref(), Some("1.0.0"), "{:?}", w.metadata.name);
    }
    let text = canary::run(
        &fx.client(),
        &CanaryCommand::Status(target("webapp", OutputFormat::Text)),
    )
    .await
    .unwrap();
    assert!(text.contains("Phase:      DryRun"), "{text}");
    assert!(text.contains("default/app-0"), "{text}");
}

/// A ConfigMap planted at the canary's diffs name before the canary (by a
/// plugin, or anyone who may write ConfigMaps there) claims no difference:
/// the host neither writes nor reads it, status names it, and `canary
/// diff` says it is not the host's instead of printing its `0 differing`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_diffs_configmap_is_named_never_shown_as_the_canarys_diffs() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use wasm_operator::cli::canary::CanaryCliError;

    let fx = Fixture::start().await;
    let planted_doc = json!({"wasmplugin": "webapp", "counts": {"compared": 200, "differing": 0},
                             "objects": []})
    .to_string();
    let planted: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "webapp-canary-diffs", "namespace": NS},
        "data": {"diffs.json": planted_doc},
    }))
    .unwrap();
    let config_maps: Api<ConfigMap> = Api::namespaced(fx.client(), NS);
    config_maps
        .create(&PostParams::default(), &planted)
        .await
        .expect("plant the diffs ConfigMap");
    stable(&fx).await;
    let differ = candidate(&fx, "webapp_differ");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": differ}},
            "mode": "Shadow", "promotion": "Auto",
            "analysis": {"interval": "1s", "minCalls": 2, "failureLimit": 2},
        }}),
    )
    .await;
    for i in 0..2 {
        create_webapp(&fx, &format!("sq-{i}"), false).await;
    }
    let o = fx
        .wait_for("webapp", "status.canary.diffsNotTheHosts", |o| {
            o.pointer("/status/canary/diffsNotTheHosts").is_some()
        })
        .await;
    let named = o["status"]["canary"]["diffsNotTheHosts"].as_str().unwrap();
    assert!(
        named.contains(&format!("ConfigMap {NS}/webapp-canary-diffs is named like"))
            && named.contains(&format!(
                "kubectl -n {NS} delete configmap webapp-canary-diffs"
            )),
        "{named}"
    );
    assert!(o.pointer("/status/canary/diffsConfigMap").is_none(), "{o}");

    let refused = canary::run(
        &fx.client(),
        &CanaryCommand::Diff(target("webapp", OutputFormat::Text)),
    )
    .await;
    match refused {
        Err(error @ CanaryCliError::DiffsNotTheHosts { .. }) => {
            let text = error.to_string();
            assert!(
                text.contains("not the canary's diffs") && text.contains("did not create it"),
                "{text}"
            );
        }
        other => panic!("`canary diff` must name the squatter, got {other:?}"),
    }
    let status = canary::run(
        &fx.client(),
        &CanaryCommand::Status(target("webapp", OutputFormat::Text)),
    )
    .await
    .unwrap();
    assert!(status.contains("Diffs:      none: ConfigMap"), "{status}");
    // Untouched: neither written nor labelled by the host.
    let still = config_maps.get("webapp-canary-diffs").await.unwrap();
    assert_eq!(
        still.data.unwrap_or_default().get("diffs.json"),
        Some(&planted_doc)
    );
    assert!(still.metadata.labels.is_none(), "{:?}", still.metadata);
}
