//! distributedkv 1.1.0, an exercise build for the host's round-trip gate:
//! distributedkv 1.0.0's logic, but its `convert` to `v1alpha1` drops
//! `spec.maxUnavailable` instead of keeping it in an annotation, so a
//! `v1beta1` object that sets it does not come back identical. The host must
//! refuse this version (`ConversionNotLossless`) unless the WasmPlugin allows
//! lossy conversion.

#[path = "../../distributedkv/src/logic.rs"]
pub mod logic;

use serde_json::Value;
use wasm_operator_sdk::{Children, Context, Desired, Failure, Manifest, Reconciler};

/// The plugin.
pub struct LossyKv;

/// The lossy conversion: 1.0.0's, minus the annotation that carries the
/// fields `v1alpha1` cannot hold.
pub fn convert(object: Value, to_api_version: &str) -> Result<Value, String> {
    let mut converted = logic::convert(object, to_api_version)?;
    if let Some(annotations) = converted.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        annotations.remove(logic::PRESERVED_ANNOTATION);
        if annotations.is_empty()
            && let Some(metadata) = converted.get_mut("metadata").and_then(Value::as_object_mut)
        {
            metadata.remove("annotations");
        }
    }
    Ok(converted)
}

impl Reconciler for LossyKv {
    type Object = Value;

    fn manifest() -> Manifest {
        logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, object: Value, children: &Children) -> Result<Desired, Failure> {
        logic::reconcile(object, children)
    }

    fn convert(object: Value, to_api_version: &str) -> Result<Value, String> {
        convert(object, to_api_version)
    }

    fn upgrade(_ctx: &Context, object: Value, _from_plugin_version: &str) -> Result<Value, String> {
        Ok(object)
    }
}

wasm_operator_sdk::export_plugin!(LossyKv);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn max_unavailable_is_lost_on_the_way_through_v1alpha1() {
        let object = json!({"apiVersion": logic::V1BETA1, "kind": "DistributedKV", "metadata": {"name": "a"},
                            "spec": {"replicaCount": 3, "image": "kv:1", "maxUnavailable": 2}});
        let back = convert(convert(object, logic::V1ALPHA1).unwrap(), logic::V1BETA1).unwrap();
        assert!(back["spec"].get("maxUnavailable").is_none());
    }
}
