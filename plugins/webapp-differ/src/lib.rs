//! webapp 1.2.0: a candidate that differs from webapp 1.0.0 on purpose, for
//! the canary tests: it asks for twice the replicas and drops the Service.
//! In shadow mode every object must show those two differences; a split
//! must never be promoted with it.

use k8s_openapi::api::apps::v1::Deployment;
use serde_json::json;
use wasm_operator_sdk::{Children, Condition, Context, Desired, Failure, Finalized, Manifest, Reconciler};
use webapp_logic::WebApp;

/// The plugin.
pub struct WebAppDiffer;

impl Reconciler for WebAppDiffer {
    type Object = WebApp;

    fn manifest() -> Manifest {
        webapp_logic::manifest(env!("CARGO_PKG_VERSION"))
    }

    fn reconcile(_ctx: &Context, app: WebApp, children: &Children) -> Result<Desired, Failure> {
        let mut spec = app.spec.clone();
        spec.replicas *= 2;
        let name = app.metadata.name.clone().unwrap_or_default();
        let ready =
            children.get::<Deployment>(&name)?.and_then(|d| d.status).and_then(|s| s.ready_replicas).unwrap_or(0);
        let running = ready >= spec.replicas;
        let phase = if running { "Running" } else { "Pending" };
        let reason = if running { "AllReplicasReady" } else { "ReplicasNotReady" };
        // The Service is left out on purpose: the host prunes it.
        let (deployment, _service) = webapp_logic::children_of(&app.metadata, &spec, &[]);
        Ok(Desired::new()
            .child(&deployment)?
            .status(json!({ "readyReplicas": ready, "phase": phase }))
            .condition(Condition::ready(running, reason, format!("{ready}/{} replicas ready", spec.replicas))))
    }

    fn finalize(_ctx: &Context, app: WebApp, _children: &Children) -> Result<Finalized, Failure> {
        webapp_logic::finalize(app)
    }
}

wasm_operator_sdk::export_plugin!(WebAppDiffer);
