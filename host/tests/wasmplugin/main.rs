//! End-to-end tests of the WasmPlugin resource and its controller: a real
//! devcluster over HTTP, the real plugins built to wasm, and (for OCI) a real
//! registry (Debian's docker-registry). No mocks.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh`; install the
//! registry with `scripts/install-test-deps.sh`.

#[path = "../support/mod.rs"]
mod support;

mod access;
mod bad_inputs;
mod canary_lifecycle;
mod canary_shadow;
mod canary_split;
mod cli;
mod counters;
mod crd;
mod crd_install;
mod langs;
mod oci;
mod permissions;
mod signed;
mod sources;
mod survival;
mod versions;

use std::path::Path;
use std::time::Duration;

use devcluster::TestCluster;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wasm_operator::engine::EngineConfig;
use wasm_operator::manager::{Manager, ManagerOptions};
use wasm_operator::registry::{Registry, RegistryOptions};
use wasm_operator::wasmplugin;

use support::{condition, get_json, wait_until};

/// oci-client enables rustls's aws-lc-rs provider next to kube's ring, so
/// rustls cannot pick one by itself: pick ring, once per process.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(60);

const NS: &str = "default";

/// A devcluster with the WasmPlugin and WebApp CRDs, and the host (manager,
/// registry, WasmPlugin controller) running against it.
pub struct Fixture {
    pub cluster: TestCluster,
    pub manager: Manager,
    /// The manager's registry.
    pub registry: Registry,
    /// Where tests put plugin files.
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn start() -> Fixture {
        Fixture::start_with(EngineConfig::default()).await
    }

    /// [`Fixture::start`] with the registry's engine configured by `engine`
    /// (its compiled-component cache is the run's shared one).
    pub async fn start_with(engine: EngineConfig) -> Fixture {
        Fixture::start_as(engine, |_| async {}, |client| client).await
    }

    /// [`Fixture::start_with`] whose host runs with the client `identity`
    /// makes of the admin client, after `prepare` ran with the admin
    /// client (the CRDs installed), e.g. to create the RBAC of a
    /// restricted identity before the host starts as it.
    pub async fn start_as<F>(
        engine: EngineConfig,
        prepare: impl FnOnce(kube::Client) -> F,
        identity: impl FnOnce(kube::Client) -> kube::Client,
    ) -> Fixture
    where
        F: std::future::Future<Output = ()>,
    {
        Fixture::start_custom(engine, true, prepare, identity).await
    }

    /// [`Fixture::start`] without the WebApp CRD (`prepare` may install
    /// its own, before the host starts): for the host's CRD installation.
    pub async fn start_without_webapp_crd<F>(prepare: impl FnOnce(kube::Client) -> F) -> Fixture
    where
        F: std::future::Future<Output = ()>,
    {
        Fixture::start_custom(EngineConfig::default(), false, prepare, |c| c).await
    }

    async fn start_custom<F>(
        engine: EngineConfig,
        webapp_crd: bool,
        prepare: impl FnOnce(kube::Client) -> F,
        identity: impl FnOnce(kube::Client) -> kube::Client,
    ) -> Fixture
    where
        F: std::future::Future<Output = ()>,
    {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .with_test_writer()
            .try_init();
        install_crypto_provider();
        let cluster = support::start_cluster().await;
        let client = cluster.client();
        support::install_crd(&client, &support::example_crd("wasmplugin")).await;
        if webapp_crd {
            support::install_crd(&client, &support::example_crd("webapp")).await;
        }
        prepare(client.clone()).await;
        let client = identity(client);
        let options = RegistryOptions {
            concurrency: 2,
            engine: EngineConfig {
                cache_dir: Some(support::compile_cache_dir()),
                ..engine
            },
            ..RegistryOptions::default()
        };
        let manager = Manager::start(
            client,
            ManagerOptions {
                registry: options,
                ..ManagerOptions::default()
            },
        )
        .await
        .unwrap();
        manager.serve_wasmplugins().await.unwrap();
        Fixture {
            cluster,
            registry: manager.registry().clone(),
            manager,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    pub fn wasmplugins(&self) -> Api<DynamicObject> {
        Api::all_with(self.client(), &wasmplugin::api_resource())
    }

    /// Creates WasmPlugin `name` with `spec`.
    pub async fn create(&self, name: &str, spec: Value) {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap();
        self.wasmplugins()
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating WasmPlugin {name}: {e}"));
    }

    /// Merge-patches WasmPlugin `name`'s spec.
    pub async fn patch_spec(&self, name: &str, spec: Value) {
        self.wasmplugins()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
            .unwrap_or_else(|e| panic!("patching WasmPlugin {name}: {e}"));
    }

    /// Waits until WasmPlugin `name` satisfies `pred` and returns it.
    pub async fn wait_for(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let api = self.wasmplugins();
        wait_until(&format!("WasmPlugin {name}: {what}"), CONVERGE, || async {
            let object = get_json(&api, name).await;
            match object {
                Some(o) if pred(&o) => Ok(o),
                other => Err(format!("{other:?}")),
            }
        })
        .await
    }

    /// Waits until Ready is True, generation observed, and serving `digest`.
    pub async fn wait_serving(&self, name: &str, digest: &str) -> Value {
        self.wait_for(name, &format!("Ready, serving {digest}"), |o| {
            condition_is(o, "Ready", "True")
                && o.pointer("/status/digest") == Some(&json!(digest))
                && o.pointer("/status/observedGeneration") == o.pointer("/metadata/generation")
        })
        .await
    }

    /// Waits for Degraded=True with `reason` while the last good version
    /// (`digest`) keeps serving and Ready stays True.
    pub async fn wait_degraded(&self, name: &str, reason: &str, digest: &str) -> Value {
        self.wait_for(
            name,
            &format!("Degraded {reason}, still serving {digest}"),
            |o| {
                condition_is(o, "Degraded", "True")
                    && condition(o, "Degraded").and_then(|c| c.get("reason"))
                        == Some(&json!(reason))
                    && condition_is(o, "Ready", "True")
                    && o.pointer("/status/digest") == Some(&json!(digest))
                    && o.pointer("/status/observedGeneration") == o.pointer("/metadata/generation")
            },
        )
        .await
    }

    /// Waits for `Degraded` with `reason` (a refusal: nothing need be
    /// serving); returns the object and the condition's message.
    pub async fn wait_refused(&self, name: &str, reason: &str) -> (Value, String) {
        let o = self
            .wait_for(name, &format!("Degraded {reason}"), |o| {
                condition(o, "Degraded").and_then(|c| c.get("reason")) == Some(&json!(reason))
            })
            .await;
        let message = condition(&o, "Degraded")
            .and_then(|c| c["message"].as_str())
            .unwrap_or_default()
            .to_string();
        (o, message)
    }

    /// Waits for an event about WasmPlugin `name` with `reason`; returns
    /// `(type, note)`.
    pub async fn wait_event(&self, name: &str, reason: &str) -> (String, String) {
        let client = self.client();
        wait_until(
            &format!("event {reason} on WasmPlugin {name}"),
            CONVERGE,
            || {
                let client = client.clone();
                async move {
                    let events = events_for(&client, name).await;
                    events
                        .iter()
                        .find(|(_, r, _)| r == reason)
                        .map(|(t, _, n)| (t.clone(), n.clone()))
                        .ok_or_else(|| format!("{events:?}"))
                }
            },
        )
        .await
    }

    /// Creates WebApp `app` and waits until its Deployment exists: the
    /// plugin serves.
    pub async fn assert_reconciles(&self, app: &str) {
        self.create_webapp(app).await;
        let deployments: Api<Deployment> = Api::namespaced(self.client(), NS);
        wait_until(&format!("the Deployment of WebApp {app}"), CONVERGE, || {
            let deployments = deployments.clone();
            async move {
                deployments
                    .get_opt(app)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "no Deployment yet".to_string())
            }
        })
        .await;
    }

    pub async fn create_webapp(&self, app: &str) {
        let webapps = support::dynamic_api(
            &self.client(),
            &support::api_resource("example.com", "v1", "WebApp", "webapps"),
            Some(NS),
        );
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": app, "namespace": NS},
            "spec": {"replicas": 1, "image": "nginx:1.27", "port": 8080},
        }))
        .unwrap();
        webapps
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating WebApp {app}: {e}"));
    }
}

pub fn condition_is(o: &Value, kind: &str, status: &str) -> bool {
    condition(o, kind).and_then(|c| c.get("status")) == Some(&json!(status))
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Writes `bytes` to `path` atomically (temp file + rename), as a deploy
/// tool would: the watcher never sees half a component.
pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

pub use support::with_custom_section;

/// The events.k8s.io/v1 events about WasmPlugin `name` (cluster-scoped
/// objects' events live in `default`), as `(type, reason, note)`.
pub async fn events_for(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    support::events_about(client, NS, Some("WasmPlugin"), name).await
}

/// A file source spec for `path`.
pub fn file_spec(path: &Path) -> Value {
    json!({"source": {"file": {"path": path.display().to_string()}}})
}
