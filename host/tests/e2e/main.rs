//! End-to-end tests of the reconcile runtime: a real devcluster over HTTP,
//! the real plugins built to wasm, the registry, controllers, apply layer and
//! telemetry. No mocks.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh`.

#[path = "../support/mod.rs"]
mod support;

mod caches;
mod faulty;
mod readiness;
mod resilience;
mod telemetry;
mod webapp;

use std::time::Duration;

use devcluster::DevCluster;
use kube::api::ApiResource;
use wasm_operator::engine::{CallLimits, EngineConfig};
use wasm_operator::manager::{Manager, ManagerOptions};
use wasm_operator::registry::{LoadedVersion, Registry, RegistryOptions};
use wasm_operator::telemetry::Metrics;

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(60);

/// A devcluster with the host (manager, registry, controllers) running
/// against it.
pub struct Host {
    pub cluster: DevCluster,
    pub manager: Manager,
    /// The manager's registry.
    pub registry: Registry,
    pub metrics: Metrics,
    _cache_dir: tempfile::TempDir,
}

impl Host {
    /// Short limits keep the fault tests quick: a looping plugin is cut off
    /// after 1 s, a greedy one at 64 MiB.
    pub async fn start() -> Host {
        // Captured per test, shown when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .with_test_writer()
            .try_init();
        let cluster = support::start_cluster().await;
        let cache_dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let options = RegistryOptions {
            concurrency: 4,
            engine: EngineConfig {
                cache_dir: Some(cache_dir.path().to_path_buf()),
                limits: CallLimits {
                    timeout: Duration::from_secs(1),
                    memory_bytes: 64 << 20,
                    output_bytes: 1 << 20,
                    ..CallLimits::default()
                },
                ..EngineConfig::default()
            },
            metrics: metrics.clone(),
        };
        let manager = Manager::start(
            cluster.client(),
            ManagerOptions {
                registry: options,
                ..ManagerOptions::default()
            },
        )
        .await
        .unwrap();
        Host {
            cluster,
            registry: manager.registry().clone(),
            manager,
            metrics,
            _cache_dir: cache_dir,
        }
    }

    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    /// Installs `examples/<plugin>/crd.yaml` and loads the built plugin.
    pub async fn load(&self, plugin: &str) -> LoadedVersion {
        support::install_crd(&self.client(), &support::example_crd(plugin)).await;
        let path = support::plugin_wasm(plugin);
        self.registry
            .load(
                &format!("file:{}", path.display()),
                &support::plugin_bytes(plugin),
                serde_json::json!({}),
            )
            .await
            .unwrap_or_else(|e| panic!("loading {plugin}: {e}"))
    }
}

pub fn webapp_kind() -> ApiResource {
    support::api_resource("example.com", "v1", "WebApp", "webapps")
}

pub fn deployment_kind() -> ApiResource {
    support::api_resource("apps", "v1", "Deployment", "deployments")
}

pub fn service_kind() -> ApiResource {
    support::api_resource("", "v1", "Service", "services")
}

/// The `events.k8s.io/v1` events about object `name`, as `(type, reason, note)`.
pub async fn events_for(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Vec<(String, String, String)> {
    support::events_about(client, namespace, None, name).await
}
