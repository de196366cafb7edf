//! webapp 1.1.0: behaves exactly like webapp 1.0.0 under a new version. The
//! canary tests roll it out next to 1.0.0: in shadow mode it must show no
//! differences, and analysis promotes it.

use wasm_operator_sdk::{Children, Context, Desired, Failure, Finalized, Manifest, Reconciler};
use webapp_logic::WebApp;

/// The plugin.
pub struct WebAppNext;

impl Reconciler for WebAppNext {
    type Object = WebApp;

    fn manifest() -> Manifest {
        webapp_logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, app: WebApp, children: &Children) -> Result<Desired, Failure> {
        webapp_logic::desired_state(app, children, &[])
    }

    fn finalize(_ctx: &Context, app: WebApp, _children: &Children) -> Result<Finalized, Failure> {
        webapp_logic::finalize(app)
    }
}

wasm_operator_sdk::export_plugin!(WebAppNext);
