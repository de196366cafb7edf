//! End-to-end tests of CRD conversion (issue 14): the DistributedKV plugin
//! (two API versions) deployed as a WasmPlugin, the host's conversion
//! webhook over real HTTPS called by the devcluster, the round-trip gate,
//! and the webhook's certificates kept in a Secret. No mocks.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh`.

#[path = "../support/mod.rs"]
mod support;

mod admission;
mod admission_audit;
mod certificates;
#[cfg(feature = "devcluster")]
mod dev;
mod gate;
mod kv;
mod limits;
mod marks;
mod served;
mod storage;
mod versions;

use std::path::Path;

use devcluster::TestCluster;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wasm_operator::engine::EngineConfig;
use wasm_operator::manager::{Manager, ManagerOptions};
use wasm_operator::registry::{Registry, RegistryOptions};
use wasm_operator::wasmplugin;
use wasm_operator::webhook::ConversionWebhook;

pub use kv::*;
use support::{condition, get_json, wait_until};

/// A devcluster with the WasmPlugin and DistributedKV CRDs, the host
/// (manager, WasmPlugin controller) and its conversion webhook.
pub struct Fixture {
    pub cluster: TestCluster,
    pub manager: Manager,
    pub registry: Registry,
    pub webhook: ConversionWebhook,
    /// Where tests put plugin files.
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub async fn start() -> Fixture {
        Fixture::start_with_storage("v1beta1").await
    }

    /// [`Fixture::start`] with the DistributedKV CRD storing `storage`
    /// (both versions served).
    pub async fn start_with_storage(storage: &str) -> Fixture {
        Fixture::start_on(support::start_cluster().await, storage).await
    }

    /// [`Fixture::start`] on a cluster whose workloads run
    /// (`devcluster::test_cluster_simulating_workloads`): a DistributedKV's
    /// StatefulSet becomes ready.
    pub async fn start_simulating_workloads() -> Fixture {
        let cluster = devcluster::test_cluster_simulating_workloads().await;
        Fixture::start_on(cluster, "v1beta1").await
    }

    /// The fixture on `cluster`, the DistributedKV CRD storing `storage`.
    async fn start_on(cluster: TestCluster, storage: &str) -> Fixture {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .with_test_writer()
            .try_init();
        install_crypto_provider();
        let client = cluster.client();
        support::install_crd(&client, &support::example_crd("wasmplugin")).await;
        install_kv_crd(&client, storage).await;
        let options = RegistryOptions {
            concurrency: 2,
            engine: EngineConfig {
                cache_dir: Some(support::compile_cache_dir()),
                ..EngineConfig::default()
            },
            ..RegistryOptions::default()
        };
        let manager = Manager::start(
            client.clone(),
            ManagerOptions {
                registry: options,
                ..ManagerOptions::default()
            },
        )
        .await
        .unwrap();
        let registry = manager.registry().clone();
        let webhook = ConversionWebhook::start_with(
            client,
            registry.clone(),
            manager.webhook_board().clone(),
            webhook_options(),
        )
        .await
        .unwrap();
        webhook.use_caches(manager.cache().clone());
        manager.serve_wasmplugins().await.unwrap();
        Fixture {
            cluster,
            manager,
            registry,
            webhook,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    pub fn wasmplugins(&self) -> Api<DynamicObject> {
        Api::all_with(self.client(), &wasmplugin::api_resource())
    }

    /// Deploys `plugin` (a built component, e.g. `distributedkv`) as
    /// WasmPlugin `distributedkv`, from a file the test owns, waits until it
    /// serves and the CRD points at the webhook. Returns its digest.
    pub async fn deploy(&self, plugin: &str) -> String {
        let bytes = support::plugin_bytes(plugin);
        let path = self.dir.path().join("distributedkv.wasm");
        write_atomically(&path, &bytes);
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": "distributedkv"},
            "spec": {"source": {"file": {"path": path.display().to_string()}}},
        }))
        .unwrap();
        self.wasmplugins()
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let digest = digest(&bytes);
        self.wait_serving(&digest).await;
        self.wait_crd_points_at(&self.webhook).await;
        digest
    }

    /// Replaces the component the WasmPlugin's file holds with `plugin`.
    pub fn swap_file(&self, plugin: &str) -> String {
        let bytes = support::plugin_bytes(plugin);
        write_atomically(&self.dir.path().join("distributedkv.wasm"), &bytes);
        digest(&bytes)
    }

    pub async fn patch_spec(&self, spec: Value) {
        self.wasmplugins()
            .patch(
                "distributedkv",
                &PatchParams::default(),
                &Patch::Merge(&json!({ "spec": spec })),
            )
            .await
            .unwrap();
    }

    pub async fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let api = self.wasmplugins();
        wait_until(
            &format!("WasmPlugin distributedkv: {what}"),
            CONVERGE,
            || async {
                match get_json(&api, "distributedkv").await {
                    Some(o) if pred(&o) => Ok(o),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
    }

    pub async fn wait_serving(&self, digest: &str) -> Value {
        self.wait_for(&format!("Ready, serving {digest}"), |o| {
            condition_is(o, "Ready", "True")
                && o.pointer("/status/digest") == Some(&json!(digest))
                && o.pointer("/status/observedGeneration") == o.pointer("/metadata/generation")
        })
        .await
    }

    /// Waits for Degraded `reason` while `digest` keeps serving; returns the
    /// condition's message.
    pub async fn wait_degraded(&self, reason: &str, digest: &str) -> String {
        let o = self
            .wait_for(&format!("Degraded {reason}, still serving {digest}"), |o| {
                condition(o, "Degraded").and_then(|c| c.get("reason")) == Some(&json!(reason))
                    && condition_is(o, "Ready", "True")
                    && o.pointer("/status/digest") == Some(&json!(digest))
            })
            .await;
        condition(&o, "Degraded").unwrap()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// Waits until the CRD's conversion is `Webhook` with `webhook`'s URL
    /// and bundle.
    pub async fn wait_crd_points_at(&self, webhook: &ConversionWebhook) -> Value {
        wait_crd_points_at(&self.client(), webhook).await
    }

    /// The DistributedKV API of `version`.
    pub fn kvs(&self, version: &str) -> Api<DynamicObject> {
        kvs(&self.client(), version)
    }

    /// Creates a DistributedKV from `object` (its apiVersion picks the API).
    pub async fn create_kv(&self, object: Value) {
        let version = object["apiVersion"]
            .as_str()
            .unwrap()
            .rsplit('/')
            .next()
            .unwrap()
            .to_string();
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        self.kvs(&version)
            .create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("creating DistributedKV {:?}: {e}", object.metadata.name));
    }

    /// Reads DistributedKV `name` as `version` right after the CRD was
    /// pointed at another webhook: kube-apiserver swaps a CRD's serving
    /// storage (and the webhook it converts through) a moment after the CRD
    /// changes, so a read may still reach the previous address for about a
    /// second; it is retried until the new webhook answers it.
    pub async fn read_kv_after_repoint(&self, version: &str, name: &str) -> Value {
        let api = self.kvs(version);
        let object = crate::support::wait_until(
            &format!("DistributedKV {name} read as {version} through the new webhook"),
            kv::CONVERGE,
            || async { api.get(name).await.map_err(|e| e.to_string()) },
        )
        .await;
        serde_json::to_value(object).unwrap()
    }

    /// Reads DistributedKV `name` as `version` (converted by the webhook
    /// when stored otherwise).
    pub async fn read_kv(&self, version: &str, name: &str) -> Value {
        let object = self
            .kvs(version)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("reading DistributedKV {name} as {version}: {e}"));
        serde_json::to_value(object).unwrap()
    }
}

pub fn condition_is(o: &Value, kind: &str, status: &str) -> bool {
    condition(o, kind).and_then(|c| c.get("status")) == Some(&json!(status))
}

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

pub fn write_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
