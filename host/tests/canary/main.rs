//! End-to-end tests of canary serving: a rollout candidate beside the
//! stable webapp 1.0.0, driven through the registry (`activate_candidate`,
//! `set_rollout`, `drop_candidate`), on a devcluster over HTTP with the real
//! plugins built to wasm. Shadow comparisons write nothing, splits are
//! sticky (and survive a restart), a selector picks by label, a looping
//! candidate leaves the stable version alone, and a dry run names the
//! objects a candidate would fail on.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh` (webapp 1.0.0,
//! webapp_next 1.1.0 identical, webapp_differ 1.2.0 doubles replicas and
//! drops the Service, webapp_flaky 1.3.0 fails on labelled objects,
//! webapp_loop 1.4.0 never returns, webapp_v3 3.0.0 declares
//! min_compatible_version 3.0.0).

#[path = "../support/mod.rs"]
mod support;

mod serving;
mod shadow;

use std::collections::BTreeMap;
use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use wasm_operator::registry::{
    ActivationOptions, LoadedVersion, RegistryError, Rollout, RolloutSettings,
};

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(120);
/// Namespace of the test objects (each test has its own cluster).
pub const NS: &str = "default";

/// webapp 1.0.0, the stable version.
pub const STABLE: &str = "webapp";
/// webapp 1.1.0, identical in behaviour.
pub const NEXT: &str = "webapp_next";
/// webapp 1.2.0: doubles replicas, drops the Service.
pub const DIFFER: &str = "webapp_differ";
/// webapp 1.3.0: fails on WebApps labelled `canary.example.com/fail=true`.
pub const FLAKY: &str = "webapp_flaky";
/// webapp 1.4.0: its reconcile never returns.
pub const LOOP: &str = "webapp_loop";
/// webapp 2.0.0: an upgrade step, a tier label on its children.
pub const V2: &str = "webapp_v2";
/// webapp 3.0.0: min_compatible_version 3.0.0.
pub const V3: &str = "webapp_v3";

pub use support::host::Host;

impl Host {
    /// A host with the WebApp CRD installed.
    pub async fn start() -> Host {
        Host::builder().crd("webapp").start().await
    }

    /// Loads the built plugin `file` as the stable version.
    pub async fn load(&self, file: &str) -> LoadedVersion {
        self.try_load(file)
            .await
            .unwrap_or_else(|e| panic!("loading {file}: {e}"))
    }

    /// Compiles and checks the built plugin `file` as a new webapp version.
    pub async fn prepare(&self, file: &str) -> wasm_operator::registry::Candidate {
        let path = support::plugin_wasm(file);
        self.registry
            .prepare(
                &format!("file:{}", path.display()),
                support::plugin_bytes(file),
                Some("webapp"),
            )
            .await
            .unwrap_or_else(|e| panic!("preparing {file}: {e}"))
    }

    /// Sets the built plugin `file` as webapp's candidate with `settings`.
    pub async fn try_canary(
        &self,
        file: &str,
        settings: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        let path = support::plugin_wasm(file);
        let candidate = self
            .registry
            .prepare(
                &format!("file:{}", path.display()),
                support::plugin_bytes(file),
                Some("webapp"),
            )
            .await?;
        self.registry
            .activate_candidate(candidate, settings, options)
            .await
    }

    pub async fn canary(&self, file: &str, rollout: Rollout) -> LoadedVersion {
        self.try_canary(file, fast(rollout), ActivationOptions::default())
            .await
            .unwrap_or_else(|e| panic!("canary {file}: {e}"))
    }
}

/// `rollout` with a rate that keeps the tests short.
pub fn fast(rollout: Rollout) -> RolloutSettings {
    RolloutSettings {
        rollout_rate: 500.0,
        ..RolloutSettings::new(rollout)
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

/// Creates WebApps `{prefix}-{i}` for `i` in `0..n` (1 replica), with the
/// labels `labels(i)`; returns their names.
pub async fn create_webapps(
    client: &kube::Client,
    prefix: &str,
    n: usize,
    labels: impl Fn(usize) -> Value,
) -> Vec<String> {
    let api = support::dynamic_api(client, &webapp_kind(), Some(NS));
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i:03}");
        let app: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": name, "namespace": NS, "labels": labels(i)},
            "spec": {"replicas": 1, "image": "nginx:1.27"},
        }))
        .unwrap();
        api.create(&PostParams::default(), &app).await.unwrap();
        names.push(name);
    }
    names
}

/// Annotation `key` of `obj`.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// Every WebApp in [`NS`] by name.
pub async fn webapps(client: &kube::Client) -> BTreeMap<String, Value> {
    let api = support::dynamic_api(client, &webapp_kind(), Some(NS));
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| {
            let v = serde_json::to_value(&o).unwrap();
            (o.metadata.name.unwrap_or_default(), v)
        })
        .collect()
}

/// True when `app` was last reconciled (successfully, for its current
/// generation) by `version`.
pub fn reconciled_by(app: &Value, version: &str) -> bool {
    let generation = app.pointer("/metadata/generation").cloned();
    annotation(app, "wasm-operator.dev/managed-by-version") == Some(version)
        && annotation(app, "wasm-operator.dev/last-reconciled-version") == Some(version)
        && app.pointer("/status/observedGeneration").cloned() == generation
        && support::condition(app, "Degraded").map(|c| &c["status"]) == Some(&json!("False"))
}

/// Waits until every WebApp is reconciled by the version `expected` names
/// for it (by name); returns the WebApps.
pub async fn wait_versions(
    client: &kube::Client,
    expected: impl Fn(&str, &Value) -> &'static str,
) -> BTreeMap<String, Value> {
    support::wait_until("every WebApp on its expected version", CONVERGE, || async {
        let apps = webapps(client).await;
        let wrong: Vec<String> = apps
            .iter()
            .filter(|(name, app)| !reconciled_by(app, expected(name, app)))
            .map(|(name, app)| {
                format!(
                    "{name}: want {}, managed-by {:?}",
                    expected(name, app),
                    annotation(app, "wasm-operator.dev/managed-by-version")
                )
            })
            .collect();
        if wrong.is_empty() {
            Ok(apps)
        } else {
            Err(format!(
                "{} not there yet: {:?}",
                wrong.len(),
                &wrong[..wrong.len().min(5)]
            ))
        }
    })
    .await
}

/// The UID of a WebApp.
pub fn uid(app: &Value) -> &str {
    app.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The `events.k8s.io/v1` events the host reported in [`NS`], as
/// `(object, type, reason, note)`.
pub async fn events(client: &kube::Client) -> Vec<(String, String, String, String)> {
    support::host_events(client, NS).await
}

/// `kind name → (resourceVersion, field managers)` of every WebApp,
/// Deployment and Service in [`NS`].
/// What moves when the host (stable or candidate) writes an object. Its
/// resourceVersion, except for Deployments: on a real control plane the
/// Deployment controller writes their status and a revision annotation all
/// the time, so for them the mark is the generation (any spec change) and
/// the host's own managedFields entries (their fields and time move with
/// every apply the host makes).
fn write_mark(kind: &str, o: &DynamicObject) -> String {
    if kind != "Deployment" {
        return o.metadata.resource_version.clone().unwrap_or_default();
    }
    let host_entries = support::host_managed_fields(&o.metadata);
    format!(
        "generation {} host entries {host_entries:?}",
        o.metadata.generation.unwrap_or_default()
    )
}

pub async fn written_state(client: &kube::Client) -> BTreeMap<String, (String, Vec<String>)> {
    let mut out = BTreeMap::new();
    for ar in [webapp_kind(), deployment_kind(), service_kind()] {
        let api = support::dynamic_api(client, &ar, Some(NS));
        for o in api.list(&Default::default()).await.unwrap().items {
            let managers = o
                .metadata
                .managed_fields
                .clone()
                .unwrap_or_default()
                .into_iter()
                // A Deployment's status is the cluster's Deployment
                // controller's (on a real control plane), never the host's.
                .filter(|m| {
                    !(ar.kind == "Deployment" && m.subresource.as_deref() == Some("status"))
                })
                .map(|m| {
                    format!(
                        "{}/{}",
                        m.manager.unwrap_or_default(),
                        m.subresource.unwrap_or_default()
                    )
                })
                .collect();
            out.insert(
                format!(
                    "{} {}",
                    ar.kind,
                    o.metadata.name.clone().unwrap_or_default()
                ),
                (write_mark(&ar.kind, &o), managers),
            );
        }
    }
    out
}
