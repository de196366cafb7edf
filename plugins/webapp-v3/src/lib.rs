//! webapp 3.0.0: webapp 2.0.0's logic with `min_compatible_version = 3.0.0`,
//! i.e. it declares every older version unable to handle objects it wrote.
//! Used to exercise refused rollbacks. It includes webapp-v2's logic module
//! by path instead of depending on the crate: a library dependency would
//! link webapp-v2's plugin exports into this component too.

#[path = "../../webapp-v2/src/logic.rs"]
pub mod logic;

use serde_json::Value;
use wasm_operator_sdk::{Children, Context, Desired, Failure, Manifest, Reconciler};

/// The plugin.
pub struct WebAppV3;

impl Reconciler for WebAppV3 {
    type Object = logic::WebApp;

    fn manifest() -> Manifest {
        logic::manifest(env!("CARGO_PKG_VERSION")).min_compatible_version(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, app: logic::WebApp, children: &Children) -> Result<Desired, Failure> {
        logic::reconcile(app, children)
    }

    fn upgrade(_ctx: &Context, object: Value, from_plugin_version: &str) -> Result<Value, String> {
        logic::upgrade(object, from_plugin_version)
    }
}

wasm_operator_sdk::export_plugin!(WebAppV3);
