//! The host (manager, registry, controllers, telemetry) running against a
//! test cluster (a fresh devcluster, or a lease on the real control plane):
//! what the `e2e`, `security`, `canary` and `upgrade` binaries start per
//! test, each through [`Host::builder`] with the options it needs.

use devcluster::TestCluster;
use serde_json::json;
use wasm_operator::contract::HostObjects;
use wasm_operator::engine::{CallLimits, EngineConfig};
use wasm_operator::manager::{Manager, ManagerOptions};
use wasm_operator::registry::{LoadedVersion, Registry, RegistryError, RegistryOptions};
use wasm_operator::telemetry::Metrics;

/// A test cluster with the host running against it.
pub struct Host {
    pub cluster: TestCluster,
    pub manager: Manager,
    /// The manager's registry.
    pub registry: Registry,
    pub metrics: Metrics,
    /// The limits every plugin call gets; a restart keeps them.
    limits: CallLimits,
    /// The host's own namespaces and objects; a restart keeps them.
    host_objects: HostObjects,
}

/// How a [`Host`] is started: the limits of its plugin calls and the example
/// CRDs installed before the manager starts.
#[derive(Debug, Clone, Default)]
pub struct HostBuilder {
    limits: CallLimits,
    crds: Vec<String>,
    host_objects: HostObjects,
    simulate_workloads: bool,
}

impl HostBuilder {
    /// Workloads run (Pods, Deployments, StatefulSets, Jobs become
    /// Ready/Complete): the devcluster's simulation is turned on; the real
    /// control plane always runs them.
    pub fn simulating_workloads(mut self) -> HostBuilder {
        self.simulate_workloads = true;
        self
    }

    /// Every plugin call gets `limits` (default: [`CallLimits::default`]).
    pub fn limits(mut self, limits: CallLimits) -> HostBuilder {
        self.limits = limits;
        self
    }

    /// The host's own namespaces and objects (default: none, as an embedded
    /// manager), what `run` computes from the pod's namespace and its flags.
    pub fn host_objects(mut self, host_objects: HostObjects) -> HostBuilder {
        self.host_objects = host_objects;
        self
    }

    /// Installs `examples/<example>/crd.yaml` once the cluster is up, before
    /// the manager starts.
    pub fn crd(mut self, example: &str) -> HostBuilder {
        self.crds.push(example.to_string());
        self
    }

    /// Starts a cluster, installs the CRDs and starts a manager
    /// (concurrency 4, the run's shared compile cache).
    pub async fn start(self) -> Host {
        // oci-client enables rustls's aws-lc-rs next to kube's ring; with two
        // providers rustls cannot pick one by itself.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Captured per test, shown when a test fails.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "info".into()),
            )
            .with_test_writer()
            .try_init();
        let cluster = if self.simulate_workloads {
            devcluster::test_cluster_simulating_workloads().await
        } else {
            super::start_cluster().await
        };
        for example in &self.crds {
            super::install_crd(&cluster.client(), &super::example_crd(example)).await;
        }
        let metrics = Metrics::new();
        let manager = new_manager(&cluster, &metrics, self.limits, &self.host_objects).await;
        Host {
            cluster,
            registry: manager.registry().clone(),
            manager,
            metrics,
            limits: self.limits,
            host_objects: self.host_objects,
        }
    }
}

impl Host {
    /// A builder for a host with default limits and no CRDs.
    pub fn builder() -> HostBuilder {
        HostBuilder::default()
    }

    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    /// Stops every controller and starts a fresh host with no plugins (same
    /// cluster, metrics, limits and compile cache): what the host looks like
    /// after a process restart.
    pub async fn restart(&mut self) {
        self.manager.shutdown().await;
        self.manager = new_manager(
            &self.cluster,
            &self.metrics,
            self.limits,
            &self.host_objects,
        )
        .await;
        self.registry = self.manager.registry().clone();
    }

    /// Loads (or swaps to) the built plugin `file` (e.g. `webapp_v2`) with
    /// an empty config; the registry's verdict.
    pub async fn try_load(&self, file: &str) -> Result<LoadedVersion, RegistryError> {
        let path = super::plugin_wasm(file);
        self.registry
            .load(
                &format!("file:{}", path.display()),
                &super::plugin_bytes(file),
                json!({}),
            )
            .await
    }
}

async fn new_manager(
    cluster: &TestCluster,
    metrics: &Metrics,
    limits: CallLimits,
    host_objects: &HostObjects,
) -> Manager {
    let options = RegistryOptions {
        concurrency: 4,
        engine: EngineConfig {
            cache_dir: Some(super::compile_cache_dir()),
            limits,
            ..EngineConfig::default()
        },
        metrics: metrics.clone(),
    };
    Manager::start(
        cluster.client(),
        ManagerOptions {
            registry: options,
            host_objects: host_objects.clone(),
            ..ManagerOptions::default()
        },
    )
    .await
    .unwrap()
}
