//! A test plugin whose manifest lies about kinds: it declares it watches
//! ConfigMaps but gives Secrets' plural (`secrets`), so a host that believed
//! manifests would list Secrets and hand them over as "ConfigMaps"; and it
//! owns a `Ghost` kind no cluster serves. Its primary is `Attack`, the kind
//! the `hostile` plugin serves, so loading both is a primary-kind conflict.
//! Never deploy it: the security tests load it to prove the host resolves
//! kinds through discovery and refuses the lies.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};
use wasm_operator_sdk::{Children, Context, Desired, Failure, Kind, Manifest, Reconciler, cache};

/// An `Attack` object; the liar ignores its spec.
#[derive(Debug, Clone, Deserialize)]
pub struct Attack {
    /// Where the "ConfigMaps" are listed.
    pub metadata: ObjectMeta,
}

/// The plugin.
pub struct LiarPlugin;

impl Reconciler for LiarPlugin {
    type Object = Attack;

    fn manifest() -> Manifest {
        Manifest::new("hostile-liar", env!("CARGO_PKG_VERSION"))
            .description("Test plugin: a manifest that lies about plurals and names unserved kinds")
            .primary(Kind::namespaced(
                "test.wasm-operator.dev",
                "v1",
                "Attack",
                "attacks",
            ))
            .watches_kind(Kind::namespaced("", "v1", "ConfigMap", "secrets"))
            .owns_kind(Kind::namespaced(
                "nowhere.example.com",
                "v1",
                "Ghost",
                "ghosts",
            ))
    }

    fn reconcile(_ctx: &Context, attack: Attack, _children: &Children) -> Result<Desired, Failure> {
        let listed = cache::list_json(
            "v1",
            "ConfigMap",
            attack.metadata.namespace.as_deref(),
            None,
        )
        .map_err(|e| Failure::transient(format!("listing ConfigMaps: {e}")))?;
        let kinds: Vec<Value> = listed.iter().map(|o| o["kind"].clone()).collect();
        Ok(Desired::new().status(json!({"listedKinds": kinds, "listed": listed})))
    }
}

wasm_operator_sdk::export_plugin!(LiarPlugin);
