//! The WebApp operator as a wasm-operator plugin (version 1): a `WebApp`
//! (`example.com/v1`) becomes a Deployment and a Service, and its status
//! reports how many replicas are ready. It admits WebApps too: `validate`
//! refuses a spec it cannot serve (`spec.replicas` outside 1..10), and
//! `defaults` fills `spec.port`. The logic lives in `webapp-logic`, shared
//! with later versions of this plugin.

use wasm_operator_sdk::{
    Children, Context, Crd, Desired, Failure, Finalized, Manifest, Operation, Reconciler, Verdict,
};
pub use webapp_logic::{WebApp, WebAppSpec, children_of, desired_state};

/// The plugin.
pub struct WebAppPlugin;

impl Reconciler for WebAppPlugin {
    type Object = WebApp;

    fn manifest() -> Manifest {
        webapp_logic::manifest(env!("CARGO_PKG_VERSION")).implements_validate().implements_defaults()
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

    fn validate(_ctx: &Context, operation: Operation, app: WebApp, _old: Option<WebApp>) -> Result<Verdict, String> {
        Ok(webapp_logic::validate(operation, &app))
    }

    fn defaults(_ctx: &Context, _operation: Operation, app: WebApp) -> Result<WebApp, String> {
        Ok(webapp_logic::defaults(app))
    }
}

wasm_operator_sdk::export_plugin!(WebAppPlugin);
