//! The host (manager, registry, controllers, telemetry) running against a
//! test cluster (a fresh devcluster, or a lease on the real control plane): what the `e2e` and `security` binaries start per test.

use devcluster::TestCluster;
use wasm_operator::engine::{CallLimits, EngineConfig};
use wasm_operator::manager::{Manager, ManagerOptions};
use wasm_operator::registry::{Registry, RegistryOptions};
use wasm_operator::telemetry::Metrics;

/// A devcluster with the host running against it.
pub struct Host {
    pub cluster: TestCluster,
    pub manager: Manager,
    /// The manager's registry.
    pub registry: Registry,
    pub metrics: Metrics,
    _cache_dir: tempfile::TempDir,
}

impl Host {
    /// Starts a devcluster and a manager (concurrency 4, a private compile
    /// cache) whose plugin calls get `limits`.
    pub async fn start_with(limits: CallLimits) -> Host {
        // Captured per test, shown when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .with_test_writer()
            .try_init();
        let cluster = super::start_cluster().await;
        let cache_dir = tempfile::tempdir().unwrap();
        let metrics = Metrics::new();
        let options = RegistryOptions {
            concurrency: 4,
            engine: EngineConfig {
                cache_dir: Some(cache_dir.path().to_path_buf()),
                limits,
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
}
