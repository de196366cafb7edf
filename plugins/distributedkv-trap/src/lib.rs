//! distributedkv 1.2.0, an exercise build for the host's round-trip gate:
//! distributedkv 1.0.0's logic, but its `convert` panics (a wasm trap) on an
//! object annotated [`TRAP_ANNOTATION`]. The host must refuse this version
//! naming that object, while 1.0.0 keeps serving conversions.

#[path = "../../distributedkv/src/logic.rs"]
pub mod logic;

use serde_json::Value;
use wasm_operator_sdk::{Children, Context, Desired, Failure, Manifest, Reconciler};

/// Annotation that makes this version's `convert` trap.
pub const TRAP_ANNOTATION: &str = "kv.example.com/trap-convert";

/// The plugin.
pub struct TrapKv;

impl Reconciler for TrapKv {
    type Object = Value;

    fn manifest() -> Manifest {
        logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, object: Value, children: &Children) -> Result<Desired, Failure> {
        logic::reconcile(object, children)
    }

    fn convert(object: Value, to_api_version: &str) -> Result<Value, String> {
        if object.pointer("/metadata/annotations").and_then(|a| a.get(TRAP_ANNOTATION)).is_some() {
            panic!("distributedkv 1.2.0 cannot convert an object annotated {TRAP_ANNOTATION}");
        }
        logic::convert(object, to_api_version)
    }

    fn upgrade(_ctx: &Context, object: Value, _from_plugin_version: &str) -> Result<Value, String> {
        Ok(object)
    }
}

wasm_operator_sdk::export_plugin!(TrapKv);
