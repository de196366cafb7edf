//! webapp 1.4.0: a candidate whose reconcile never returns (it spins until
//! the host's deadline interrupts it), for the canary tests: in shadow mode
//! it must leave the stable version's reconciles unaffected. Its finalize
//! behaves like webapp 1.0.0's.

use wasm_operator_sdk::{Children, Context, Desired, Failure, Finalized, Manifest, Reconciler};
use webapp_logic::WebApp;

/// The plugin.
pub struct WebAppLoop;

impl Reconciler for WebAppLoop {
    type Object = WebApp;

    fn manifest() -> Manifest {
        webapp_logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, _app: WebApp, _children: &Children) -> Result<Desired, Failure> {
        let mut spins: u64 = 0;
        loop {
            spins = std::hint::black_box(spins.wrapping_add(1));
        }
    }

    fn finalize(_ctx: &Context, app: WebApp, _children: &Children) -> Result<Finalized, Failure> {
        webapp_logic::finalize(app)
    }
}

wasm_operator_sdk::export_plugin!(WebAppLoop);
