//! What the `plugin_call` benchmarks share: the benchmark WebApp, the webapp
//! logic compiled natively, the plugin loaded into engines, the HTTP hook,
//! and the variants of one reconcile call.
//!
//! Each bench target includes this module and uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use wasm_operator::cache::{CachedObject, object_text, prepare_for_cache};
use wasm_operator::contract::{CallContext, Condition, Desired};
use wasm_operator::engine::{
    CacheReader, EmptyCache, Engine, EngineConfig, InstanceAllocation, LoadedPlugin,
};

/// A WebApp as the API server returns it: labels, annotations (incl. the
/// kubectl last-applied copy) and managedFields bring it to ~5 KB.
pub fn webapp_object() -> Value {
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

/// The Deployment and Service of the benchmark WebApp as the API server
/// returns them after a rollout: defaults filled in, ownerReference, the
/// host's labels, managedFields and status.
pub fn webapp_children() -> Vec<Value> {
    let owner = json!([{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop-frontend",
        "uid": "6f1c2e0b-8d3a-4c1e-9a35-2f0c6d7a8b90", "controller": true, "blockOwnerDeletion": true}]);
    let labels = json!({"app": "shop-frontend", "app.kubernetes.io/managed-by": "wasm-operator",
        "wasm-operator.dev/plugin": "webapp"});
    let managed = |fields: Value| {
        json!([{"manager": "wasm-operator/webapp", "operation": "Apply",
        "apiVersion": "v1", "time": "2026-11-20T09:14:28Z", "fieldsType": "FieldsV1", "fieldsV1": fields}])
    };
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "shop-frontend", "namespace": "shop", "uid": "0b7d3c52-1e4f-4a8b-9c6d-7e8f9a0b1c2d",
            "resourceVersion": "48213391", "generation": 7, "creationTimestamp": "2026-10-02T11:20:06Z",
            "labels": labels, "annotations": {"deployment.kubernetes.io/revision": "7"},
            "ownerReferences": owner,
            "managedFields": managed(json!({"f:metadata": {"f:labels": {"f:app": {}, "f:app.kubernetes.io/managed-by": {},
                "f:wasm-operator.dev/plugin": {}}, "f:ownerReferences": {"k:{\"uid\":\"6f1c2e0b-8d3a-4c1e-9a35-2f0c6d7a8b90\"}": {}}},
                "f:spec": {"f:replicas": {}, "f:selector": {}, "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}, "f:ports": {}}}}}}}))},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "shop-frontend"}},
            "template": {"metadata": {"labels": {"app": "shop-frontend"}},
                "spec": {"containers": [{"name": "web", "image": "registry.example.com/shop/frontend:1.27.3",
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}], "resources": {},
                    "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent"}],
                    "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
                    "securityContext": {}, "schedulerName": "default-scheduler"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600},
        "status": {"observedGeneration": 7, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3,
            "availableReplicas": 3, "conditions": [
                {"type": "Available", "status": "True", "lastUpdateTime": "2026-11-20T09:15:01Z",
                 "lastTransitionTime": "2026-11-20T09:15:01Z", "reason": "MinimumReplicasAvailable",
                 "message": "Deployment has minimum availability."},
                {"type": "Progressing", "status": "True", "lastUpdateTime": "2026-11-20T09:15:01Z",
                 "lastTransitionTime": "2026-10-02T11:20:06Z", "reason": "NewReplicaSetAvailable",
                 "message": "ReplicaSet \"shop-frontend-7c9d8f6b5\" has successfully progressed."}]},
    });
    let service = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "shop-frontend", "namespace": "shop", "uid": "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f",
            "resourceVersion": "48201112", "creationTimestamp": "2026-10-02T11:20:06Z",
            "labels": labels, "ownerReferences": owner,
            "managedFields": managed(json!({"f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {"f:ports": {"k:{\"port\":8080,\"protocol\":\"TCP\"}": {".": {}, "f:port": {}, "f:targetPort": {}}},
                "f:selector": {}}}))},
        "spec": {"ports": [{"protocol": "TCP", "port": 8080, "targetPort": 8080}], "selector": {"app": "shop-frontend"},
            "clusterIP": "10.96.142.17", "clusterIPs": ["10.96.142.17"], "type": "ClusterIP",
            "sessionAffinity": "None", "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster"},
        "status": {"loadBalancer": {}},
    });
    vec![deployment, service]
}

/// A Kubernetes object as the controller holds it: typed, with its kind.
pub struct Held {
    pub ar: ApiResource,
    pub object: DynamicObject,
}

impl Held {
    /// `object` as the API server sent it (not yet prepared for a cache).
    pub fn from_api(object: &Value) -> Held {
        let dynamic: DynamicObject = serde_json::from_value(object.clone())
            .expect("benchmark objects are Kubernetes objects");
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk =
            GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap_or_default());
        Held {
            ar: ApiResource::from_gvk(&gvk),
            object: dynamic,
        }
    }

    /// `object` as a shared cache keeps it (the host's own
    /// `prepare_for_cache`: managedFields left out).
    pub fn from_cache(object: &Value) -> Held {
        let mut held = Held::from_api(object);
        let mut cached = CachedObject::from_dynamic(&held.object);
        prepare_for_cache(&mut cached, &held.ar);
        held.object = cached.to_dynamic();
        held
    }

    /// The JSON text a plugin call is given: the controller's serialization
    /// (`cache::object_text`), once per call.
    pub fn text(&self) -> String {
        object_text(&self.object, &self.ar)
    }
}

/// `object` as the controller hands it to a plugin, as a value (for the
/// native and hook variants).
pub fn as_the_controller_passes_it(object: &Value) -> Value {
    serde_json::from_str(&Held::from_cache(object).text()).expect("object_text writes JSON")
}

/// What one reconcile call is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// The WebApp as the API server returns it (with managedFields, ~4.4 KB)
    /// and no children: the first reconcile after a create, on the largest
    /// primary.
    ApiObject,
    /// The steady state: the WebApp and its Deployment and Service, each as
    /// the controller hands them to a plugin (managedFields left out).
    SteadyState,
}

impl Scenario {
    /// The primary and the children of a call as the controller holds them:
    /// what the wasm variants serialize per call.
    pub fn held(self) -> (Held, Vec<Held>) {
        match self {
            Scenario::ApiObject => (Held::from_api(&webapp_object()), Vec::new()),
            Scenario::SteadyState => (
                Held::from_cache(&webapp_object()),
                webapp_children().iter().map(Held::from_cache).collect(),
            ),
        }
    }

    /// The primary and the children of a call.
    pub fn input(self) -> (Value, Vec<Value>) {
        match self {
            Scenario::ApiObject => (webapp_object(), Vec::new()),
            Scenario::SteadyState => (
                as_the_controller_passes_it(&webapp_object()),
                webapp_children()
                    .iter()
                    .map(as_the_controller_passes_it)
                    .collect(),
            ),
        }
    }
}

/// Compact JSON text, as the engine writes it for a call.
pub fn json_text(value: &Value) -> String {
    serde_json::to_string(value).expect("JSON values serialize")
}

pub fn ctx() -> CallContext {
    CallContext {
        plugin_version: "1.0.0".into(),
        attempt: 1,
        managed_by_version: Some("1.0.0".into()),
        config: json!({}),
    }
}

/// The webapp logic compiled natively, through the SDK's JSON entry point:
/// what runs inside the plugin, and inside the hook server.
pub fn native_answer(object: &str, children: &[String]) -> wasm_operator_sdk::DesiredJson {
    let sdk_ctx = wasm_operator_sdk::Context::new("1.0.0");
    wasm_operator_sdk::reconcile_json::<webapp::WebAppPlugin>(&sdk_ctx, object, children)
        .expect("webapp reconciles the benchmark object")
}

/// The SDK's conditions as the host's contract carries them.
fn conditions(conditions: Vec<wasm_operator_sdk::Condition>) -> Vec<Condition> {
    conditions
        .into_iter()
        .map(|c| Condition {
            kind: c.kind,
            status: c.status,
            reason: c.reason,
            message: c.message,
        })
        .collect()
}

/// The host-side work after every variant's call: parse the answer into
/// contract types and validate it (as the engine does with a plugin's answer).
pub fn desired_from(answer: wasm_operator_sdk::DesiredJson) -> Desired {
    let parse = |text: &str| serde_json::from_str::<Value>(text).expect("answer JSON");
    let desired = Desired {
        children: answer.children.iter().map(|c| parse(c)).collect(),
        status: answer.status.as_deref().map(parse),
        conditions: conditions(answer.conditions),
        events: vec![],
        requeue_after_ms: answer.requeue_after_ms,
    };
    desired
        .validate()
        .expect("webapp answers within the contract");
    desired
}

/// The native variant: serialize the inputs, run the logic, parse the answer.
pub fn native_reconcile(object: &Value, children: &[Value]) -> Desired {
    let children: Vec<String> = children.iter().map(json_text).collect();
    desired_from(native_answer(&json_text(object), &children))
}

/// The built component `file` (`target/wasm32-wasip2/release/<file>.wasm`).
pub fn component_path(file: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join(format!("wasm32-wasip2/release/{file}.wasm"))
}

/// The built webapp component's bytes.
pub fn component() -> Vec<u8> {
    let path = component_path("webapp");
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run scripts/build-plugins.sh first",
            path.display()
        )
    })
}

/// Loads the webapp; engines sharing `cache_dir` compile the component once
/// (which keeps the benchmark's setup short).
pub fn load(allocation: InstanceAllocation, cache_dir: &Path) -> LoadedPlugin {
    let engine = Engine::new(EngineConfig {
        allocation,
        cache_dir: Some(cache_dir.to_path_buf()),
        ..Default::default()
    })
    .expect("engine");
    engine.load(&component()).expect("webapp loads")
}

/// What the hook receives: the object and children, left as raw JSON text
/// (the logic parses them itself, as the plugin does).
#[derive(serde::Deserialize)]
struct HookRequest<'a> {
    #[serde(borrow)]
    object: &'a RawValue,
    #[serde(borrow, default)]
    children: Vec<&'a RawValue>,
}

/// What the hook answers: the logic's JSON children and status as they are,
/// in the shape of the host's `Desired`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct HookAnswer {
    children: Vec<Box<RawValue>>,
    status: Option<Box<RawValue>>,
    conditions: Vec<Condition>,
    events: Vec<Value>,
    requeue_after_ms: Option<u64>,
}

/// The webhook: native logic behind POST /reconcile on loopback.
async fn start_hook() -> String {
    async fn hook(body: axum::body::Bytes) -> axum::response::Response {
        let request: HookRequest = serde_json::from_slice(&body).expect("hook request");
        let children: Vec<String> = request.children.iter().map(|c| c.get().into()).collect();
        let answer = native_answer(request.object.get(), &children);
        let raw = |text: String| RawValue::from_string(text).expect("the logic writes JSON");
        let answer = HookAnswer {
            children: answer.children.into_iter().map(raw).collect(),
            status: answer.status.map(raw),
            conditions: conditions(answer.conditions),
            events: vec![],
            requeue_after_ms: answer.requeue_after_ms,
        };
        axum::response::IntoResponse::into_response((
            [(http::header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&answer).expect("answer serializes"),
        ))
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    let app = axum::Router::new().route("/reconcile", axum::routing::post(hook));
    tokio::spawn(async move { axum::serve(listener, app).await.expect("hook server") });
    format!("http://{addr}/reconcile")
}

/// A kept-alive client of the hook.
#[derive(Clone)]
pub struct Hook {
    client: reqwest::Client,
    url: String,
}

impl Hook {
    pub async fn start() -> Hook {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(1)
            .build()
            .expect("http client");
        Hook {
            client,
            url: start_hook().await,
        }
    }

    /// One call, with the same host-side work as the wasm path: serialize the
    /// inputs, parse and validate the answer.
    pub async fn reconcile(&self, object: &Value, children: &[Value]) -> Desired {
        let children: Vec<String> = children.iter().map(json_text).collect();
        let body = format!(
            r#"{{"object":{},"children":[{}]}}"#,
            json_text(object),
            children.join(",")
        );
        let response = self
            .client
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .expect("hook call");
        let desired: Desired = response.json().await.expect("hook answer");
        desired
            .validate()
            .expect("hook answers within the contract");
        desired
    }
}

/// Everything the variants of one [`Scenario`] share, built once.
pub struct Setup {
    pub object: Arc<Value>,
    pub children: Arc<Vec<Value>>,
    /// The same objects as the controller holds them (the wasm variants).
    pub held_object: Arc<Held>,
    pub held_children: Arc<Vec<Held>>,
    pub ctx: CallContext,
    pub cache: Arc<dyn CacheReader>,
    pub runtime: tokio::runtime::Runtime,
    pub on_demand: LoadedPlugin,
    pub pooling: LoadedPlugin,
    pub hook: Hook,
    /// Keeps the compiled components until the end.
    _compiled: tempfile::TempDir,
}

impl Setup {
    pub fn new(scenario: Scenario) -> Setup {
        let (object, children) = scenario.input();
        let (held_object, held_children) = scenario.held();
        let size = |v: &Value| json_text(v).len();
        eprintln!(
            "{scenario:?}: WebApp {} bytes of JSON, children {:?} bytes",
            size(&object),
            children.iter().map(size).collect::<Vec<_>>()
        );
        let compiled = tempfile::tempdir().expect("temp dir for compiled components");
        let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
        let hook = runtime.block_on(Hook::start());
        let setup = Setup {
            on_demand: load(InstanceAllocation::OnDemand, compiled.path()),
            pooling: load(
                InstanceAllocation::Pooling { max_instances: 64 },
                compiled.path(),
            ),
            object: Arc::new(object),
            children: Arc::new(children),
            held_object: Arc::new(held_object),
            held_children: Arc::new(held_children),
            ctx: ctx(),
            cache: Arc::new(EmptyCache),
            runtime,
            hook,
            _compiled: compiled,
        };
        // Every variant computes the same answer.
        let expected = native_reconcile(&setup.object, &setup.children);
        for plugin in [&setup.on_demand, &setup.pooling] {
            assert_eq!(setup.wasm_blocking(plugin), expected);
        }
        let hooked = (setup.runtime).block_on(setup.hook.reconcile(&setup.object, &setup.children));
        assert_eq!(hooked, expected);
        setup
    }

    pub fn native(&self) -> Desired {
        native_reconcile(&self.object, &self.children)
    }

    /// One reconcile on the calling thread, serializing the inputs as the
    /// controller does.
    pub fn wasm_blocking(&self, plugin: &LoadedPlugin) -> Desired {
        let children = self.held_children.iter().map(Held::text).collect();
        plugin
            .reconcile_blocking(
                &self.ctx,
                self.held_object.text(),
                children,
                self.cache.clone(),
            )
            .expect("reconcile")
    }

    /// `calls` async reconciles on a runtime worker, as the controller makes them.
    pub fn wasm_async(&self, calls: usize) {
        let (plugin, ctx, object, children, cache) = (
            self.pooling.clone(),
            self.ctx.clone(),
            self.held_object.clone(),
            self.held_children.clone(),
            self.cache.clone(),
        );
        let task = self.runtime.spawn(async move {
            for _ in 0..calls {
                let children = children.iter().map(Held::text).collect();
                plugin
                    .reconcile(&ctx, object.text(), children, cache.clone())
                    .await
                    .expect("reconcile");
            }
        });
        self.runtime.block_on(task).expect("reconcile task");
    }

    pub fn hook_calls(&self, calls: usize) {
        self.runtime.block_on(async {
            for _ in 0..calls {
                self.hook.reconcile(&self.object, &self.children).await;
            }
        });
    }
}

/// One variant: makes its reconcile call the given number of times.
pub type Calls<'a> = Box<dyn Fn(usize) + 'a>;

/// `call` made `calls` times.
fn repeated<'a>(call: impl Fn() + 'a) -> Calls<'a> {
    Box::new(move |calls| (0..calls).for_each(|_| call()))
}

/// The variants, by name; each runs `calls` reconciles.
pub fn variants(setup: &Setup) -> Vec<(&'static str, Calls<'_>)> {
    vec![
        (
            "native",
            repeated(|| {
                std::hint::black_box(setup.native());
            }),
        ),
        (
            "wasm_isolated_on_demand",
            repeated(|| {
                std::hint::black_box(setup.wasm_blocking(&setup.on_demand));
            }),
        ),
        (
            "wasm_isolated_pooling",
            repeated(|| {
                std::hint::black_box(setup.wasm_blocking(&setup.pooling));
            }),
        ),
        (
            "wasm_isolated_pooling_async",
            Box::new(|calls| setup.wasm_async(calls)),
        ),
        ("http_hook", Box::new(|calls| setup.hook_calls(calls))),
    ]
}
