//! One reconcile of the webapp plugin with a realistic ~5 KB WebApp, measured
//! side by side:
//!
//! * `native`: the plugin's logic compiled into the host (the SDK's JSON entry
//!   point), with the same host-side work as the engine (serialize the object,
//!   parse and validate the answer);
//! * `wasm_isolated_*`: through the engine, a fresh instance per call, with
//!   the on-demand allocator and with the pooling allocator (what `run` and
//!   `dev` use), on the calling thread (`reconcile_blocking`) and through the
//!   async `reconcile`;
//! * `http_hook`: the native logic behind an axum JSON endpoint on loopback,
//!   called over a kept-alive reqwest connection (Metacontroller's best case).
//!
//! Needs the components: run `scripts/build-plugins.sh` first.
//! `cargo bench -p wasm-operator --bench plugin_call`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Value, json};
use wasm_operator::contract::{CallContext, Condition, Desired};
use wasm_operator::engine::{
    CacheReader, EmptyCache, Engine, EngineConfig, InstanceAllocation, LoadedPlugin,
};

/// A WebApp as the API server returns it: labels, annotations (incl. the
/// kubectl last-applied copy) and managedFields bring it to ~5 KB.
fn webapp_object() -> Value {
    let spec =
        json!({"image": "registry.example.com/shop/frontend:1.27.3", "replicas": 3, "port": 8080});
    let last_applied = json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop-frontend", "namespace": "shop",
            "labels": {"app.kubernetes.io/name": "shop-frontend", "app.kubernetes.io/part-of": "shop"}},
        "spec": spec,
    });
    let mut labels = serde_json::Map::new();
    for (k, v) in [
        ("app.kubernetes.io/name", "shop-frontend"),
        ("app.kubernetes.io/instance", "shop-frontend-prod"),
        ("app.kubernetes.io/version", "1.27.3"),
        ("app.kubernetes.io/component", "frontend"),
        ("app.kubernetes.io/part-of", "shop"),
        ("app.kubernetes.io/managed-by", "argocd"),
        ("team", "storefront"),
        ("cost-center", "cc-4711"),
        ("environment", "production"),
        ("tier", "web"),
    ] {
        labels.insert(k.into(), v.into());
    }
    let managed = |manager: &str, op: &str, sub: Option<&str>| {
        let mut entry = json!({
            "manager": manager, "operation": op, "apiVersion": "example.com/v1",
            "time": "2026-11-20T09:14:27Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {},
                "f:argocd.argoproj.io/tracking-id": {}}, "f:labels": {".": {}, "f:app.kubernetes.io/component": {},
                "f:app.kubernetes.io/instance": {}, "f:app.kubernetes.io/managed-by": {}, "f:app.kubernetes.io/name": {},
                "f:app.kubernetes.io/part-of": {}, "f:app.kubernetes.io/version": {}, "f:cost-center": {},
                "f:environment": {}, "f:team": {}, "f:tier": {}}},
                "f:spec": {".": {}, "f:image": {}, "f:port": {}, "f:replicas": {}}},
        });
        if let Some(sub) = sub {
            entry["subresource"] = sub.into();
            entry["fieldsV1"] = json!({"f:status": {".": {}, "f:phase": {}, "f:readyReplicas": {}, "f:conditions": {}}});
        }
        entry
    };
    let rollout_history: String = (1..=7)
        .map(|i| format!("{{\"revision\":{i},\"image\":\"registry.example.com/shop/frontend:1.27.{i}\",\"by\":\"argocd\",\"at\":\"2026-11-{:02}T09:14:27Z\"}}", 10 + i))
        .collect::<Vec<_>>()
        .join(",");
    let rollout_history = format!("[{rollout_history}]");
    json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": {
            "name": "shop-frontend",
            "namespace": "shop",
            "uid": "6f1c2e0b-8d3a-4c1e-9a35-2f0c6d7a8b90",
            "resourceVersion": "48213377",
            "generation": 7,
            "creationTimestamp": "2026-10-02T11:20:05Z",
            "labels": labels,
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": last_applied.to_string(),
                "argocd.argoproj.io/tracking-id": "shop:example.com/WebApp:shop/shop-frontend",
                "wasm-operator.dev/managed-by-version": "1.0.0",
                "wasm-operator.dev/last-reconciled-version": "1.0.0",
                "deployment.example.com/change-ticket": "CHG-2026-11-0042",
                "deployment.example.com/owner": "storefront-oncall@example.com",
                "deployment.example.com/rollout-history": rollout_history,
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9102",
                "prometheus.io/path": "/metrics",
            },
            "finalizers": ["wasm-operator.dev/finalizer"],
            "managedFields": [
                managed("argocd-controller", "Apply", None),
                managed("kubectl-client-side-apply", "Update", None),
                managed("wasm-operator/webapp", "Apply", Some("status")),
                managed("kube-controller-manager", "Update", Some("status")),
            ],
        },
        "spec": spec,
        "status": {"phase": "Running", "readyReplicas": 3, "observedGeneration": 7,
            "conditions": [{"type": "Ready", "status": "True", "reason": "AllReplicasReady",
                "message": "3/3 replicas ready", "lastTransitionTime": "2026-11-20T09:15:02Z", "observedGeneration": 7}]},
    })
}

/// Compact JSON text, as the engine writes it for a call.
fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("JSON values serialize")
}

fn ctx() -> CallContext {
    CallContext {
        plugin_version: "1.0.0".into(),
        attempt: 1,
        managed_by_version: Some("1.0.0".into()),
        config: json!({}),
    }
}

/// The host-side work around a call that is the same for every variant:
/// parse the answer into contract types and validate it.
fn desired_from(
    children: Vec<Value>,
    status: Option<Value>,
    conditions: Vec<Condition>,
) -> Desired {
    let desired = Desired {
        children,
        status,
        conditions,
        events: vec![],
        requeue_after_ms: None,
    };
    desired
        .validate()
        .expect("webapp answers within the contract");
    desired
}

/// The webapp logic compiled natively, through the SDK's JSON entry point.
fn native_reconcile(object: &str, children: &[String]) -> Desired {
    let sdk_ctx = wasm_operator_sdk::Context::new("1.0.0");
    let answer =
        wasm_operator_sdk::reconcile_json::<webapp::WebAppPlugin>(&sdk_ctx, object, children)
            .expect("webapp reconciles the benchmark object");
    desired_from(
        answer
            .children
            .iter()
            .map(|c| serde_json::from_str(c).expect("child JSON"))
            .collect(),
        answer
            .status
            .as_deref()
            .map(|s| serde_json::from_str(s).expect("status JSON")),
        answer
            .conditions
            .into_iter()
            .map(|c| Condition {
                kind: c.kind,
                status: c.status,
                reason: c.reason,
                message: c.message,
            })
            .collect(),
    )
}

fn component() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/wasm32-wasip2/release/webapp.wasm");
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run scripts/build-plugins.sh first",
            path.display()
        )
    })
}

/// Loads the webapp; engines sharing `cache_dir` compile the component once
/// (which keeps the benchmark's setup short).
fn load(allocation: InstanceAllocation, cache_dir: &std::path::Path) -> LoadedPlugin {
    let engine = Engine::new(EngineConfig {
        allocation,
        cache_dir: Some(cache_dir.to_path_buf()),
        ..Default::default()
    })
    .expect("engine");
    engine.load(&component()).expect("webapp loads")
}

/// The webhook: native logic behind POST /reconcile on loopback.
async fn start_hook() -> String {
    async fn hook(axum::Json(body): axum::Json<Value>) -> axum::Json<Value> {
        let object = json_text(&body["object"]);
        let children: Vec<String> = body["children"]
            .as_array()
            .map(|c| c.iter().map(json_text).collect())
            .unwrap_or_default();
        let desired = native_reconcile(&object, &children);
        axum::Json(serde_json::to_value(&desired).expect("desired serializes"))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let app = axum::Router::new().route("/reconcile", axum::routing::post(hook));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("hook server") });
    format!("http://{addr}/reconcile")
}

fn bench(c: &mut Criterion) {
    let object = webapp_object();
    let object_text = json_text(&object);
    eprintln!("WebApp object: {} bytes of JSON", object_text.len());
    let cache: Arc<dyn CacheReader> = Arc::new(EmptyCache);
    let ctx = ctx();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");

    let mut group = c.benchmark_group("webapp_reconcile");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    group.bench_function("native", |b| {
        b.iter(|| native_reconcile(&json_text(&object), &[]))
    });

    let compiled = tempfile::tempdir().expect("temp dir for compiled components");
    let variants = [
        ("on_demand", InstanceAllocation::OnDemand),
        ("pooling", InstanceAllocation::Pooling { max_instances: 64 }),
    ];
    for (name, allocation) in variants {
        let plugin = load(allocation, compiled.path());
        assert_eq!(
            plugin
                .reconcile_blocking(&ctx, &object, &[], cache.clone())
                .unwrap(),
            native_reconcile(&object_text, &[])
        );
        group.bench_function(format!("wasm_isolated_{name}"), |b| {
            b.iter(|| {
                plugin
                    .reconcile_blocking(&ctx, &object, &[], cache.clone())
                    .expect("reconcile")
            })
        });
        if name == "pooling" {
            group.bench_function("wasm_isolated_pooling_async_block_in_place", |b| {
                b.to_async(&runtime)
                    .iter(|| plugin.reconcile(&ctx, &object, &[], cache.clone()))
            });
        }
    }

    let url = runtime.block_on(start_hook());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .expect("http client");
    let body = json!({"object": object, "children": []});
    group.bench_function("http_hook", |b| {
        b.to_async(&runtime).iter(|| async {
            let response = client
                .post(&url)
                .json(&body)
                .send()
                .await
                .expect("hook call");
            let desired: Desired = response.json().await.expect("hook answer");
            desired
                .validate()
                .expect("hook answers within the contract");
            desired
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
