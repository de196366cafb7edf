//! End-to-end tests of the reconcile runtime: a real devcluster over HTTP,
//! the real plugins built to wasm, the registry, controllers, apply layer and
//! telemetry. No mocks.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh`.

#[path = "../support/mod.rs"]
mod support;

mod backup;
mod caches;
mod conformance;
mod faulty;
mod langs;
mod readiness;
mod resilience;
mod telemetry;
mod webapp;
mod workloads;
mod writes;

use std::time::Duration;

use kube::api::ApiResource;
use wasm_operator::engine::CallLimits;
use wasm_operator::registry::LoadedVersion;

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(60);

pub use support::host::Host;

impl Host {
    /// Short limits keep the fault tests quick: a looping plugin is cut off
    /// after 1 s, a greedy one at 64 MiB.
    pub async fn start() -> Host {
        Host::builder()
            .limits(CallLimits {
                timeout: Duration::from_secs(1),
                memory_bytes: 64 << 20,
                output_bytes: 1 << 20,
                ..CallLimits::default()
            })
            .start()
            .await
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
