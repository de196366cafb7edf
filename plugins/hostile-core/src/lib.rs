//! A test plugin whose primary is a core kind, ConfigMap: without bounds the
//! host would put its finalizer and version annotations on every ConfigMap
//! of the cluster, `kube-system` included. Never deploy it: the security
//! tests load it to prove core primaries need an explicit grant and stay in
//! the granted namespaces.

use k8s_openapi::api::core::v1::ConfigMap;
use wasm_operator_sdk::{Children, Context, Desired, Failure, Manifest, Reconciler};

/// The plugin.
pub struct CorePlugin;

impl Reconciler for CorePlugin {
    type Object = ConfigMap;

    fn manifest() -> Manifest {
        Manifest::new("hostile-core", env!("CARGO_PKG_VERSION"))
            .description("Test plugin: reconciles every ConfigMap it is let near")
            .primary(wasm_operator_sdk::Kind::of::<ConfigMap>())
            .owns::<ConfigMap>()
            .finalizer(true)
    }

    fn reconcile(
        _ctx: &Context,
        _object: ConfigMap,
        _children: &Children,
    ) -> Result<Desired, Failure> {
        Ok(Desired::new())
    }
}

wasm_operator_sdk::export_plugin!(CorePlugin);
