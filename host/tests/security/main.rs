//! Security tests: the hostile test plugins (`plugins/fixtures/hostile`,
//! `plugins/fixtures/hostile-liar`, `plugins/fixtures/hostile-core`,
//! `plugins/fixtures/hostile-workloads`, `plugins/fixtures/hostile-recorder`,
//! `plugins/fixtures/hostile-grower`) attack the host through
//! the API it writes for them, on a real devcluster over HTTP. Every attack
//! must end in a refusal or a clear condition, with nothing written that
//! should not be, and the host serving everything else.
//!
//! Build the plugins first: `bash scripts/build-plugins.sh`.

#![allow(dead_code)] // each attack module uses a part of the harness

#[path = "../support/mod.rs"]
mod support;

mod children;
mod deletion;
mod discovery;
mod grants;
mod growth;
mod host_objects;
mod limits;
mod recorder;
mod status;
mod workloads;

use std::time::Duration;

use kube::api::{ApiResource, DynamicObject, PostParams};
use serde_json::{Value, json};
use wasm_operator::contract::{Grant, GroupKind};
use wasm_operator::engine::CallLimits;
use wasm_operator::registry::{ActivationOptions, LoadedVersion, RegistryError};

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(60);

pub use support::host::Host;

impl Host {
    /// A host with short limits (2 s per call, 256 MiB: the flood attacks
    /// need room to build their answers) and the Attack CRD installed.
    pub async fn start() -> Host {
        Host::builder()
            .limits(CallLimits {
                timeout: Duration::from_secs(2),
                memory_bytes: 256 << 20,
                output_bytes: 16 << 20,
                ..CallLimits::default()
            })
            .crd("hostile")
            .start()
            .await
    }

    /// Prepares and activates the built plugin `plugin` with `grant`; the
    /// registry's verdict.
    pub async fn load_with(
        &self,
        plugin: &str,
        grant: Grant,
    ) -> Result<LoadedVersion, RegistryError> {
        let path = support::plugin_wasm(plugin);
        let candidate = self
            .registry
            .prepare(
                &format!("file:{}", path.display()),
                support::plugin_bytes(plugin),
                None,
            )
            .await?;
        self.registry
            .activate(
                candidate,
                ActivationOptions {
                    grant,
                    ..ActivationOptions::default()
                },
            )
            .await
    }

    /// Like [`Host::try_load`], panicking on a refusal.
    pub async fn load(&self, plugin: &str) -> LoadedVersion {
        self.try_load(plugin)
            .await
            .unwrap_or_else(|e| panic!("loading {plugin}: {e}"))
    }

    /// Creates an Attack `name` in `namespace` with `spec`.
    pub async fn attack(&self, namespace: &str, name: &str, spec: Value) -> DynamicObject {
        let attack: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.wasm-operator.dev/v1", "kind": "Attack",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec,
        }))
        .unwrap();
        support::dynamic_api(&self.client(), &attack_kind(), Some(namespace))
            .create(&PostParams::default(), &attack)
            .await
            .unwrap_or_else(|e| panic!("creating Attack {namespace}/{name}: {e}"))
    }
}

/// Everything the `hostile` manifest asks for, named: it loads with this,
/// so the attacks reach the checks behind the grant.
pub fn full_hostile_grant() -> Grant {
    let gk = GroupKind::new;
    Grant {
        own: Some(vec![
            gk("test.wasm-operator.dev", "Attack"),
            gk("", "ConfigMap"),
            gk("", "Secret"),
            gk("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ]),
        cluster_scoped: true,
        ..Grant::default()
    }
}

/// The `Attack` kind of the hostile plugins.
pub fn attack_kind() -> ApiResource {
    support::api_resource("test.wasm-operator.dev", "v1", "Attack", "attacks")
}

/// The hostile plugins ask for what the attacks need: the tests below rely
/// on these manifests, so a change to them must show up here first.
#[test]
fn hostile_manifests_ask_for_dangerous_kinds() {
    use wasm_operator::engine::inspect::inspect;
    let kinds = |plugin: &str| {
        let manifest = inspect(&support::plugin_bytes(plugin))
            .unwrap_or_else(|e| panic!("inspecting {plugin}: {e}"))
            .manifest;
        let owns: Vec<String> = manifest.owns.iter().map(|k| k.kind.clone()).collect();
        let watches: Vec<(String, String)> = manifest
            .watches
            .iter()
            .map(|k| (k.kind.clone(), k.plural.clone()))
            .collect();
        (manifest.primary.kind, owns, watches)
    };
    let (primary, owns, watches) = kinds("hostile");
    assert_eq!(primary, "Attack");
    assert_eq!(owns, ["ConfigMap", "Secret", "ClusterRoleBinding"]);
    assert_eq!(watches, [("Secret".to_string(), "secrets".to_string())]);
    let (primary, owns, watches) = kinds("hostile_liar");
    assert_eq!(primary, "Attack");
    assert_eq!(owns, ["Ghost"]);
    assert_eq!(
        watches,
        [("ConfigMap".to_string(), "secrets".to_string())],
        "the liar must name Secrets' plural under the ConfigMap kind"
    );
    let (primary, _, _) = kinds("hostile_core");
    assert_eq!(primary, "ConfigMap");
    let (primary, owns, _) = kinds("hostile_recorder");
    assert_eq!(primary, "Attack");
    assert_eq!(owns, ["Event", "Event"], "events.k8s.io and core Events");
    let (primary, owns, _) = kinds("hostile_grower");
    assert_eq!(
        (primary.as_str(), owns.as_slice()),
        ("Attack", ["Attack".to_string()].as_slice())
    );
}
