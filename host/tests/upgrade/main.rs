//! End-to-end tests of version-aware upgrades: hot swaps under churn, the
//! per-object upgrade walk, upgrade failures and retries, forward-compatible
//! rollbacks, refused rollbacks and per-object incompatibility. A real
//! devcluster over HTTP and the real plugins built to wasm; no mocks.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh` (webapp 1.0.0,
//! webapp_v2 = 2.0.0 with an upgrade step, webapp_v3 = 3.0.0 declaring
//! min_compatible_version 3.0.0).

#[path = "../support/mod.rs"]
mod support;

mod churn;
mod rollback;
mod walk;

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use wasm_operator::registry::LoadedVersion;

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(90);
/// Namespace of the test objects (each test has its own cluster).
pub const NS: &str = "default";

/// webapp 1.0.0 (no upgrade step).
pub const V1: &str = "webapp";
/// webapp 2.0.0 (tier label, upgrade step).
pub const V2: &str = "webapp_v2";
/// webapp 3.0.0 (min_compatible_version 3.0.0).
pub const V3: &str = "webapp_v3";

pub use support::host::Host;

impl Host {
    /// A host with the WebApp CRD installed.
    pub async fn start() -> Host {
        Host::builder().crd("webapp").start().await
    }

    /// Like [`Host::try_load`], panicking on a refusal.
    pub async fn load(&self, file: &str) -> LoadedVersion {
        self.try_load(file)
            .await
            .unwrap_or_else(|e| panic!("loading {file}: {e}"))
    }
}

pub fn webapp_kind() -> ApiResource {
    support::api_resource("example.com", "v1", "WebApp", "webapps")
}

pub fn deployment_kind() -> ApiResource {
    support::api_resource("apps", "v1", "Deployment", "deployments")
}

/// Creates WebApp `name` with `spec` (and `annotations`).
pub async fn create_webapp(client: &kube::Client, name: &str, spec: Value, annotations: Value) {
    let api = support::dynamic_api(client, &webapp_kind(), Some(NS));
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": spec,
    }))
    .unwrap();
    api.create(&PostParams::default(), &app).await.unwrap();
}

/// Annotation `key` of `obj` (`/` in keys need no escaping here).
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// Waits until WebApp `name` is managed by `version` with migration-state
/// `completed`, reconciled for its current generation, and not Degraded.
pub async fn wait_managed_by(client: &kube::Client, name: &str, version: &str) -> Value {
    let api = support::dynamic_api(client, &webapp_kind(), Some(NS));
    support::wait_until(
        &format!("WebApp {name} reconciled by webapp {version}"),
        CONVERGE,
        || async {
            let app = support::get_json(&api, name).await.ok_or("WebApp gone")?;
            let generation = app.pointer("/metadata/generation").cloned();
            let ok = annotation(&app, "wasm-operator.dev/managed-by-version") == Some(version)
                && annotation(&app, "wasm-operator.dev/last-reconciled-version") == Some(version)
                && annotation(&app, "wasm-operator.dev/migration-state") == Some("completed")
                && app.pointer("/status/observedGeneration").cloned() == generation
                && support::condition(&app, "Degraded").map(|c| &c["status"])
                    == Some(&json!("False"));
            if ok { Ok(app) } else { Err(app.to_string()) }
        },
    )
    .await
}

/// The `events.k8s.io/v1` events the host reported in [`NS`], as
/// `(object, type, reason, note)`.
pub async fn events(client: &kube::Client) -> Vec<(String, String, String, String)> {
    support::host_events(client, NS).await
}
