//! The diffs ConfigMap `wasm-operator canary diff` reads: every differing
//! object's latest field diff of a Shadow canary, as one JSON document
//! owned by the WasmPlugin. Pure: the driver decides when to write it, the
//! I/O handle writes it.

use serde_json::{Value, json};

use crate::contract::{HOST_OBJECT_LABEL, HostObject};
use crate::registry::CanaryObservations;
use crate::wasmplugin::{GROUP, KIND, VERSION};

/// The least time between two writes of the diffs ConfigMap.
pub(super) const DIFFS_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// The largest diffs document written (a ConfigMap holds at most 1 MiB).
const DIFFS_MAX_BYTES: usize = 900 * 1024;

/// The key of the diffs document in the ConfigMap.
pub const DIFFS_KEY: &str = "diffs.json";

/// Field manager of the host's writes of the diffs ConfigMap.
pub(super) const DIFFS_MANAGER: &str = "wasm-operator-canary";

/// The namespace of the diffs ConfigMaps: the host's own (from
/// `POD_NAMESPACE`, set by the Helm chart's Deployment (downward API)), else
/// `default`.
pub fn diffs_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// What writing the diffs ConfigMap came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DiffsWrite {
    /// Written: `namespace/name`.
    Written(String),
    /// The write failed; retried later.
    Failed,
    /// A ConfigMap the host did not create holds the name (a squatter):
    /// not written, never taken over; what it is and what to do.
    NotTheHosts(String),
}

/// The name of WasmPlugin `wasmplugin`'s diffs ConfigMap.
pub fn diffs_config_map_name(wasmplugin: &str) -> String {
    format!("{wasmplugin}{}", crate::contract::CANARY_DIFFS_SUFFIX)
}

/// The diffs document of WasmPlugin `wasmplugin`'s canary of `plugin`,
/// written at `updated_at`: halved in objects until it fits
/// [`DIFFS_MAX_BYTES`].
pub(super) fn document(
    wasmplugin: &str,
    plugin: &str,
    obs: &CanaryObservations,
    updated_at: &str,
) -> String {
    let counts = obs.shadow_counts();
    let mut objects = obs.differing_objects();
    loop {
        let document = json!({
            "wasmplugin": wasmplugin,
            "plugin": plugin,
            "stable": {"version": obs.stable().version, "digest": obs.stable().digest},
            "candidate": {"version": obs.candidate().version, "digest": obs.candidate().digest},
            "counts": counts,
            "updatedAt": updated_at,
            "objects": objects,
        });
        let text = document.to_string();
        if text.len() <= DIFFS_MAX_BYTES || objects.is_empty() {
            return text;
        }
        objects.truncate(objects.len() / 2);
    }
}

/// The diffs ConfigMap `name` in `namespace` holding `document`, owned by
/// WasmPlugin `wasmplugin` (uid `uid`) so it goes with it.
pub(super) fn config_map(
    wasmplugin: &str,
    uid: Option<&str>,
    namespace: &str,
    name: &str,
    document: String,
) -> Value {
    let owner = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": KIND,
        "name": wasmplugin,
        "uid": uid,
    });
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "wasm-operator.dev/canary-diffs": wasmplugin,
                HOST_OBJECT_LABEL: HostObject::CanaryDiffs.label_value(),
            },
            "ownerReferences": [owner],
        },
        "data": {DIFFS_KEY: document},
    })
}
