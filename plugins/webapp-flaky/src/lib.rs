//! webapp 1.3.0: a candidate that fails on some objects, for the canary
//! tests: a WebApp labelled `canary.example.com/fail: "true"` fails
//! (transiently, like a dependency that is down); every other WebApp is
//! served exactly like webapp 1.0.0 serves it. Analysis must roll it back,
//! and a dry run must name the labelled objects.

use wasm_operator_sdk::{Children, Context, Desired, Failure, Finalized, Manifest, Reconciler};
use webapp_logic::WebApp;

/// The label that makes this version fail on an object.
pub const FAIL_LABEL: &str = "canary.example.com/fail";

/// The plugin.
pub struct WebAppFlaky;

impl Reconciler for WebAppFlaky {
    type Object = WebApp;

    fn manifest() -> Manifest {
        webapp_logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, app: WebApp, children: &Children) -> Result<Desired, Failure> {
        let marked =
            app.metadata.labels.as_ref().and_then(|labels| labels.get(FAIL_LABEL)).is_some_and(|v| v == "true");
        if marked {
            let name = app.metadata.name.unwrap_or_default();
            return Err(Failure::transient(format!(
                "webapp {} fails on purpose: WebApp {name} is labelled {FAIL_LABEL}=true",
                env!("CARGO_PKG_VERSION")
            )));
        }
        webapp_logic::desired_state(app, children, &[])
    }

    fn finalize(_ctx: &Context, app: WebApp, _children: &Children) -> Result<Finalized, Failure> {
        webapp_logic::finalize(app)
    }
}

wasm_operator_sdk::export_plugin!(WebAppFlaky);
