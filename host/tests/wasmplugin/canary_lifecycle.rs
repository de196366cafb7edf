//! More of a canary's life through a WasmPlugin: steps advance to a
//! promotion, a selector split picks exactly the labelled objects, a
//! candidate whose source breaks is rolled back, and a candidate that would
//! make rollback impossible is refused unless the spec accepts it.

use kube::api::{DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::support::{self, condition, wait_until};
use crate::{CONVERGE, Fixture, digest, file_spec, write_atomically};

const NS: &str = "default";

fn webapps(fx: &Fixture) -> kube::Api<DynamicObject> {
    support::dynamic_api(
        &fx.client(),
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(NS),
    )
}

async fn create_webapp(fx: &Fixture, name: &str, labels: Value) {
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

async fn managed_by(fx: &Fixture) -> Vec<(String, Option<String>)> {
    let list = webapps(fx).list(&Default::default()).await.unwrap();
    let mut all: Vec<_> = list
        .items
        .into_iter()
        .map(|o| {
            let version = o
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("wasm-operator.dev/managed-by-version"))
                .cloned();
            (o.metadata.name.unwrap_or_default(), version)
        })
        .collect();
    all.sort();
    all
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

fn candidate(fx: &Fixture, plugin: &str) -> std::path::PathBuf {
    let path = fx.dir.path().join(format!("{plugin}.wasm"));
    write_atomically(&path, &support::plugin_bytes(plugin));
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_advance_while_analysis_passes_and_auto_promotes_at_the_last() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    // Enough objects that the first step's hash share is not empty (a step
    // that picks no object gets no calls, and its checks stay inconclusive).
    // Latency is not what this test checks: a candidate's first calls on a
    // loaded machine can be several times slower than the warm stable's, a
    // failed latency check then waits for calls the converged objects never
    // make, and the canary stays Paused. So the latency bound is wide.
    for i in 0..20 {
        create_webapp(&fx, &format!("app-{i}"), json!({})).await;
    }
    let next = candidate(&fx, "webapp_next");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": next.display().to_string()}},
            "mode": "Split", "steps": [50, 100], "stepInterval": "1s",
            "promotion": "Auto", "skipDryRun": true,
            "analysis": {"interval": "1s", "minCalls": 1, "maxLatencyRatio": 1000},
        }}),
    )
    .await;
    let o = fx
        .wait_for("webapp", "promoted after the steps", |o| {
            phase(o) == Some("Promoted")
        })
        .await;
    assert_eq!(o["status"]["canary"]["weight"], 100, "{o}");
    let (_, note) = fx.wait_event("webapp", "CanaryStepped").await;
    assert!(note.contains("weight 50 -> 100"), "{note}");
    fx.wait_event("webapp", "CanaryPromoted").await;
    wait_until("every WebApp on 1.1.0", CONVERGE, || async {
        let all = managed_by(&fx).await;
        all.iter()
            .all(|(_, v)| v.as_deref() == Some("1.1.0"))
            .then_some(())
            .ok_or(format!("{all:?}"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_split_serves_exactly_the_labelled_objects() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    let next = candidate(&fx, "webapp_next");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": next.display().to_string()}},
            "mode": "Split", "skipDryRun": true,
            "selector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["canary"]}]},
            "analysis": {"interval": "1s", "minCalls": 1000},
        }}),
    )
    .await;
    let o = fx
        .wait_for("webapp", "selector split running", |o| {
            matches!(phase(o), Some("Progressing" | "Paused"))
        })
        .await;
    assert_eq!(o["status"]["canary"]["selector"], "tier in (canary)", "{o}");
    for i in 0..4 {
        let labels = if i % 2 == 0 {
            json!({"tier": "canary"})
        } else {
            json!({})
        };
        create_webapp(&fx, &format!("app-{i}"), labels).await;
    }
    wait_until(
        "labelled WebApps on 1.1.0, the others on 1.0.0",
        CONVERGE,
        || async {
            let all = managed_by(&fx).await;
            let want = vec![
                ("app-0".to_string(), Some("1.1.0".to_string())),
                ("app-1".to_string(), Some("1.0.0".to_string())),
                ("app-2".to_string(), Some("1.1.0".to_string())),
                ("app-3".to_string(), Some("1.0.0".to_string())),
            ];
            (all == want).then_some(()).ok_or(format!("{all:?}"))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_whose_source_breaks_is_rolled_back() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    let next = candidate(&fx, "webapp_next");
    fx.patch_spec(
        "webapp",
        json!({"canary": {
            "source": {"file": {"path": next.display().to_string()}},
            "mode": "Split", "weight": 100, "skipDryRun": true,
            "analysis": {"interval": "1s", "minCalls": 1000},
        }}),
    )
    .await;
    fx.wait_for("webapp", "canary running", |o| {
        matches!(phase(o), Some("Progressing" | "Paused"))
    })
    .await;
    assert!(fx.registry.canary("webapp").is_some());
    write_atomically(&next, b"not a component");
    let o = fx
        .wait_for("webapp", "rolled back", |o| phase(o) == Some("RolledBack"))
        .await;
    let failed = condition(&o, "CanaryFailed").unwrap();
    assert_eq!(failed["status"], "True", "{o}");
    assert_eq!(failed["reason"], "CandidateUnloadable", "{o}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("InvalidComponent"),
        "{o}"
    );
    assert!(fx.registry.canary("webapp").is_none());
    assert_eq!(fx.registry.current("webapp").unwrap().info.version, "1.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_split_is_refused_unless_accepted() {
    let fx = Fixture::start().await;
    stable(&fx).await;
    // webapp 3.0.0 declares min-compatible-version 3.0.0: objects it wrote
    // could not go back to 1.0.0.
    let v3 = candidate(&fx, "webapp_v3");
    let spec = |accept: bool| {
        json!({"canary": {
            "source": {"file": {"path": v3.display().to_string()}},
            "mode": "Split", "weight": 10, "skipDryRun": true, "acceptIrreversible": accept,
            "analysis": {"interval": "1s", "minCalls": 1000},
        }})
    };
    fx.patch_spec("webapp", spec(false)).await;
    let o = fx
        .wait_for("webapp", "refused as irreversible", |o| {
            phase(o) == Some("Failed")
        })
        .await;
    let failed = condition(&o, "CanaryFailed").unwrap();
    assert_eq!(failed["status"], "True", "{o}");
    assert_eq!(failed["reason"], "CanaryIrreversible", "{o}");
    assert!(fx.registry.canary("webapp").is_none());
    fx.patch_spec("webapp", spec(true)).await;
    fx.wait_for("webapp", "accepted", |o| {
        matches!(phase(o), Some("Progressing" | "Paused"))
    })
    .await;
    assert_eq!(
        fx.registry.canary("webapp").unwrap().candidate().version,
        "3.0.0"
    );
}
