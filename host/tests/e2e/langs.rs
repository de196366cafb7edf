//! Plugins in Python, TypeScript and Go (plugins/webapp-py, webapp-ts,
//! webapp-go, built by scripts/build-lang-plugins.sh) through the same WIT
//! contract as the Rust ones: the same answers as the Rust webapp,
//! hot-swapped under a running WebApp, and bounded and reported like a Rust
//! plugin when they raise, loop or allocate without bound
//! (plugins/fixtures/py-faulty, ts-faulty, go-faulty). docs/languages.md has
//! the figures.

use std::sync::Arc;
use std::time::Instant;

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::contract::CallContext;
use wasm_operator::engine::{EmptyCache, Engine, EngineConfig, LoadedPlugin};

use crate::support::{self, condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, deployment_kind, service_kind, webapp_kind};

const NS: &str = "default";

/// The webapp in each language, by its built file's name (Rust first: the
/// reference).
const WEBAPPS: [&str; 4] = ["webapp", "webapp_py", "webapp_ts", "webapp_go"];

fn ctx(plugin: &LoadedPlugin) -> CallContext {
    CallContext {
        plugin_version: plugin.manifest().version.clone(),
        attempt: 1,
        managed_by_version: None,
        config: json!({}),
    }
}

/// WebApp `name` with `spec`, and `status` when given.
fn webapp(name: &str, spec: Value, status: Option<Value>) -> Value {
    let mut app = json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    });
    if let Some(status) = status {
        app["status"] = status;
    }
    app
}

/// Each port answers every input exactly like the Rust webapp: the same
/// children (field for field), status, conditions, events and failures.
#[test]
fn python_typescript_and_go_webapps_answer_like_rust() {
    let engine = Engine::new(EngineConfig {
        cache_dir: Some(support::compile_cache_dir()),
        ..EngineConfig::default()
    })
    .unwrap();
    let ready_deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop", "namespace": NS},
        "spec": {"replicas": 2}, "status": {"readyReplicas": 2},
    });
    let inputs = [
        // First reconcile: nothing yet, default port.
        (
            webapp("shop", json!({"replicas": 2, "image": "nginx:1.27"}), None),
            vec![],
        ),
        // Every replica ready after Pending: Running, with its event.
        (
            webapp(
                "shop",
                json!({"replicas": 2, "image": "nginx:1.27", "port": 8080}),
                Some(json!({"phase": "Pending", "readyReplicas": 1})),
            ),
            vec![ready_deployment.clone()],
        ),
        // Still running: no event.
        (
            webapp(
                "shop",
                json!({"replicas": 2, "image": "nginx:1.27", "port": 8080}),
                Some(json!({"phase": "Running", "readyReplicas": 2})),
            ),
            vec![ready_deployment],
        ),
        // Scaled up from Running: Pending, with its event.
        (
            webapp(
                "shop",
                json!({"replicas": 3, "image": "nginx:1.27"}),
                Some(json!({"phase": "Running"})),
            ),
            vec![],
        ),
        // An invalid spec: the same permanent failure.
        (
            webapp("shop", json!({"replicas": 11, "image": ""}), None),
            vec![],
        ),
    ];
    let mut answers: Vec<(String, Vec<String>)> = Vec::new();
    let mut manifests = Vec::new();
    for name in WEBAPPS {
        let started = Instant::now();
        let plugin = engine.load(&support::plugin_bytes(name)).unwrap();
        let loaded_in = started.elapsed();
        assert_eq!(plugin.manifest().name, "webapp", "{name}");
        manifests.push(plugin.manifest().clone());
        let mut outputs = Vec::new();
        let started = Instant::now();
        for (object, children) in &inputs {
            let answer = plugin.reconcile_blocking(
                &ctx(&plugin),
                object.to_string(),
                children.iter().map(Value::to_string).collect(),
                Arc::new(EmptyCache),
            );
            outputs.push(match answer {
                Ok(desired) => serde_json::to_string_pretty(&desired).unwrap(),
                Err(e) => format!("{} {:?}", e.reason(), e.failure),
            });
        }
        // Figures for docs/languages.md (not asserted: they vary by machine).
        println!(
            "{name}: {} bytes, compiled in {loaded_in:?}, {} reconciles in {:?}",
            support::plugin_bytes(name).len(),
            inputs.len(),
            started.elapsed()
        );
        answers.push((name.to_string(), outputs));
    }
    let (_, rust) = &answers[0];
    assert!(rust[4].contains("ReconcilePermanentFailure"), "{}", rust[4]);
    for (name, outputs) in &answers[1..] {
        for (i, (theirs, ours)) in outputs.iter().zip(rust).enumerate() {
            assert_eq!(
                theirs, ours,
                "{name} answers input {i} unlike the Rust webapp"
            );
        }
    }
    // The manifests are the same too (what the host enforces).
    for (name, manifest) in WEBAPPS.iter().zip(&manifests).skip(1) {
        assert_eq!(&manifests[0], manifest, "{name}");
    }
}

/// Loads (or swaps to) the built plugin `file` from its file source.
async fn swap_to(host: &Host, file: &str) {
    let loaded = host
        .try_load(file)
        .await
        .unwrap_or_else(|e| panic!("loading {file}: {e}"));
    assert_eq!(loaded.name, "webapp", "{file}");
    assert_eq!(host.registry.loaded().len(), 1, "{file} swapped in place");
}

/// What a WebApp's children and status look like, with its name replaced
/// by `NAME` and the fields the API server fills in removed, so that two
/// WebApps can be compared.
async fn outcome(client: &kube::Client, name: &str, replicas: i64) -> Value {
    let webapps = dynamic_api(client, &webapp_kind(), Some(NS));
    let deployments = dynamic_api(client, &deployment_kind(), Some(NS));
    let services = dynamic_api(client, &service_kind(), Some(NS));
    let (deployment, service, app) = wait_until(
        &format!("WebApp {name}'s children with {replicas} replicas and its status"),
        CONVERGE,
        || async {
            let d = get_json(&deployments, name).await.ok_or("no Deployment")?;
            let s = get_json(&services, name).await.ok_or("no Service")?;
            let a = get_json(&webapps, name).await.ok_or("no WebApp")?;
            // The status of this generation, not the last one's.
            let message = format!("/{replicas} replicas ready");
            let done = d.pointer("/spec/replicas") == Some(&json!(replicas))
                && a.pointer("/status/phase").is_some()
                && condition(&a, "Ready")
                    .and_then(|c| c["message"].as_str())
                    .is_some_and(|m| m.ends_with(&message));
            if done {
                Ok((d, s, a))
            } else {
                Err(format!("{d}\n{a}"))
            }
        },
    )
    .await;
    let mut ready = condition(&app, "Ready").cloned().unwrap();
    let fields = ready.as_object_mut().unwrap();
    fields.remove("lastTransitionTime");
    fields.remove("observedGeneration");
    let result = json!({
        "deployment": {"labels": deployment["metadata"]["labels"], "spec": {
            "replicas": deployment["spec"]["replicas"],
            "selector": deployment["spec"]["selector"],
            "template": deployment["spec"]["template"],
        }},
        "service": {"labels": service["metadata"]["labels"], "ports": service["spec"]["ports"], "selector": service["spec"]["selector"]},
        "status": {"phase": app["status"]["phase"], "readyReplicas": app["status"]["readyReplicas"]},
        "ready": ready,
    });
    serde_json::from_str(
        &result
            .to_string()
            .replace(&format!("\"{name}\""), "\"NAME\""),
    )
    .unwrap()
}

/// Rust → Python → TypeScript → Go under running WebApps, each swap from a file
/// source: each version keeps reconciling the WebApps of the one before, and
/// a WebApp each created ends up exactly like the Rust one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webapp_swaps_between_rust_python_typescript_and_go() {
    let host = Host::start().await;
    let client = host.client();
    host.load("webapp").await;
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let create = |name: &str| {
        let app = serde_json::from_value(webapp(
            name,
            json!({"replicas": 1, "image": "nginx:1.27", "port": 8080}),
            None,
        ))
        .unwrap();
        let webapps = webapps.clone();
        async move { webapps.create(&PostParams::default(), &app).await.unwrap() }
    };
    let scale = |name: &'static str, replicas: i64| {
        let webapps = webapps.clone();
        async move {
            webapps
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"replicas": replicas}})),
                )
                .await
                .unwrap()
        }
    };
    create("by-rust").await;
    let rust = outcome(&client, "by-rust", 1).await;

    for (file, own, replicas) in [
        ("webapp_py", "by-python", 2),
        ("webapp_ts", "by-typescript", 3),
        ("webapp_go", "by-go", 4),
    ] {
        swap_to(&host, file).await;
        // The WebApp the Rust version made is now served by this one.
        scale("by-rust", replicas).await;
        let mut expected = rust.clone();
        expected["deployment"]["spec"]["replicas"] = json!(replicas);
        expected["ready"]["message"] = json!(format!("0/{replicas} replicas ready"));
        assert_eq!(
            outcome(&client, "by-rust", replicas).await,
            expected,
            "{file} serving by-rust"
        );
        // And one it makes from scratch is the Rust one's, field for field.
        create(own).await;
        assert_eq!(outcome(&client, own, 1).await, rust, "{file} making {own}");
    }
    host.manager.shutdown().await;
}

/// `spec.mode` of a Fault and the reason its failure must carry, as for the
/// Rust `faulty` plugin (host/tests/e2e/faulty.rs).
const FAILING: [(&str, &str); 3] = [
    ("raise", "ReconcileFailed"),
    ("loop", "PluginTimeout"),
    ("memory", "PluginMemoryExceeded"),
];

/// Loads `file` (py_faulty, ts_faulty or go_faulty), creates one Fault per
/// mode, checks the loop and memory Faults name the Rust plugin's limits,
/// and returns each failing Fault's Degraded condition message.
async fn faults_of(file: &str, prefix: &str) -> Vec<(String, String)> {
    // The e2e limits of the Rust faulty plugin (1 s, 64 MiB): the Python
    // runtime's linear memory starts at 13.25 MiB (212 pages), JS's at 9 MiB.
    let host = Host::start().await;
    let client = host.client();
    support::install_crd(&client, &support::example_crd("faulty")).await;
    let loaded = host
        .try_load(file)
        .await
        .unwrap_or_else(|e| panic!("loading {file}: {e}"));
    let faults = dynamic_api(
        &client,
        &support::api_resource("test.wasm-operator.dev", "v1", "Fault", "faults"),
        Some(NS),
    );
    for mode in FAILING.iter().map(|(m, _)| *m).chain(["ok"]) {
        let fault = serde_json::from_value(json!({
            "apiVersion": "test.wasm-operator.dev/v1", "kind": "Fault",
            "metadata": {"name": format!("{prefix}-{mode}"), "namespace": NS}, "spec": {"mode": mode},
        }))
        .unwrap();
        faults.create(&PostParams::default(), &fault).await.unwrap();
    }
    let configmaps = dynamic_api(
        &client,
        &support::api_resource("", "v1", "ConfigMap", "configmaps"),
        Some(NS),
    );
    let ok = format!("{prefix}-ok");
    wait_until(
        &format!("{file}'s ConfigMap for Fault {ok}"),
        CONVERGE,
        || async {
            get_json(&configmaps, &ok)
                .await
                .map(|_| ())
                .ok_or_else(|| "absent".to_string())
        },
    )
    .await;
    let mut messages = Vec::new();
    for (mode, reason) in FAILING {
        let name = format!("{prefix}-{mode}");
        let fault = wait_until(
            &format!("Fault {name} Degraded with {reason}"),
            CONVERGE,
            || async {
                let f = get_json(&faults, &name).await.ok_or("Fault gone")?;
                let degraded = condition(&f, "Degraded").cloned().unwrap_or(Value::Null);
                if degraded["status"] == "True" && degraded["reason"] == reason {
                    Ok(f)
                } else {
                    Err(f.to_string())
                }
            },
        )
        .await;
        let message = condition(&fault, "Degraded").unwrap()["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains(&loaded.name) && message.contains(&loaded.version),
            "Fault {name}: {message}"
        );
        wait_until(
            &format!("a Warning event {reason} on Fault {name}"),
            CONVERGE,
            || async {
                let events = crate::events_for(&client, NS, &name).await;
                if events
                    .iter()
                    .any(|(kind, r, _)| kind == "Warning" && r == reason)
                {
                    Ok(())
                } else {
                    Err(format!("{events:?}"))
                }
            },
        )
        .await;
        messages.push((mode.to_string(), message));
    }
    host.manager.shutdown().await;
    // The limits are reported in the Rust plugin's words, whatever the
    // language.
    assert!(
        messages[1].1.contains("did not finish within 1s"),
        "{messages:?}"
    );
    assert!(
        messages[2]
            .1
            .contains("exceeded its memory limit of 67108864 bytes"),
        "{messages:?}"
    );
    messages
}

/// A Python plugin that raises, loops forever or allocates without bound
/// fails that call only, with the Rust plugin's reasons; the exception's
/// condition names it, its message and the Python source line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_exceptions_and_limits_are_reported_like_rust() {
    let messages = faults_of("py_faulty", "py").await;
    let raised = &messages[0].1;
    assert!(
        raised.contains("ZeroDivisionError: division by zero")
            && raised.contains("app.py:26 in ratio"),
        "{raised}"
    );
}

/// The same for a TypeScript plugin: a thrown TypeError names its message
/// and the source line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_exceptions_and_limits_are_reported_like_rust() {
    let messages = faults_of("ts_faulty", "ts").await;
    let raised = &messages[0].1;
    assert!(
        raised.contains("TypeError") && raised.contains("replicasOf"),
        "{raised}"
    );
}

/// The same for a Go plugin: a recovered panic names the runtime error and
/// the Go source line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_panics_and_limits_are_reported_like_rust() {
    let messages = faults_of("go_faulty", "go").await;
    let raised = &messages[0].1;
    assert!(
        raised.contains("panic: runtime error: integer divide by zero")
            && raised.contains("app.go:35 in main.ratio"),
        "{raised}"
    );
}
