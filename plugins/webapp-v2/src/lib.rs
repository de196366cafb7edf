//! webapp 2.0.0: the WebApp operator of plugins/webapp plus a tier label on
//! its children and an `upgrade` step for objects written by 1.x. Same
//! manifest name and primary kind as webapp 1.0.0, so it hot-swaps with it.

pub mod logic;

use serde_json::Value;
use wasm_operator_sdk::{Children, Context, Desired, Failure, Finalized, Manifest, Reconciler};

/// The plugin.
pub struct WebAppV2;

impl Reconciler for WebAppV2 {
    type Object = logic::WebApp;

    fn manifest() -> Manifest {
        logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, app: logic::WebApp, children: &Children) -> Result<Desired, Failure> {
        logic::reconcile(app, children)
    }

    fn finalize(_ctx: &Context, app: logic::WebApp, _children: &Children) -> Result<Finalized, Failure> {
        webapp_logic::finalize(app)
    }

    fn upgrade(_ctx: &Context, object: Value, from_plugin_version: &str) -> Result<Value, String> {
        logic::upgrade(object, from_plugin_version)
    }

    fn convert(_object: Value, to_api_version: &str) -> Result<Value, String> {
        // WebApp has one API version; nothing to convert to.
        Err(format!("webapp serves only example.com/v1; cannot convert to {to_api_version}"))
    }
}

wasm_operator_sdk::export_plugin!(WebAppV2);
