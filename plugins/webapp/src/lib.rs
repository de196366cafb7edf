//! The WebApp operator as a wasm-operator plugin (version 1): a `WebApp`
//! (`example.com/v1`) becomes a Deployment and a Service, and its status
//! reports how many replicas are ready. The logic lives in `webapp-logic`,
//! shared with later versions of this plugin.

use wasm_operator_sdk::{Children, Context, Crd, Desired, Failure, Finalized, Manifest, Reconciler};
pub use webapp_logic::{WebApp, WebAppSpec, children_of, desired_state};

/// The plugin.
pub struct WebAppPlugin;

impl Reconciler for WebAppPlugin {
    type Object = WebApp;

    fn manifest() -> Manifest {
        webapp_logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn crd() -> Option<Crd> {
        Some(webapp_logic::crd(env!("CARGO_PKG_VERSION")))
    }

    fn reconcile(_ctx: &Context, app: WebApp, children: &Children) -> Result<Desired, Failure> {
        desired_state(app, children, &[])
    }

    fn finalize(_ctx: &Context, app: WebApp, _children: &Children) -> Result<Finalized, Failure> {
        webapp_logic::finalize(app)
    }
}

wasm_operator_sdk::export_plugin!(WebAppPlugin);
