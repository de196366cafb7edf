//! wasm-operator: a Kubernetes operator host whose application logic runs in
//! sandboxed WebAssembly components (being written).

pub mod apply;
pub mod cache;
pub mod cli;
pub mod contract;
pub mod controller;
pub mod dev;
pub mod engine;
pub mod manager;
pub mod migration;
pub mod oci;
pub mod registry;
pub mod telemetry;
pub mod wasmplugin;

/// The registry's former module path, kept only while
/// `tests/wasmplugin/crd.rs` (another branch's file) still names it; delete
/// it once that test calls `registry::Registry::new` directly.
#[doc(hidden)]
pub mod plugins {
    /// Transitional constructor with the former signature.
    #[derive(Debug)]
    pub struct Registry;

    impl Registry {
        // The old constructor's shape: it answers the registry itself.
        #[allow(clippy::new_ret_no_self)]
        /// `registry::Registry::new(options)`; `client` is unused, the
        /// registry no longer talks to the API server.
        ///
        /// # Errors
        ///
        /// Those of [`crate::registry::Registry::new`].
        pub async fn new(
            _client: kube::Client,
            options: crate::registry::RegistryOptions,
        ) -> Result<crate::registry::Registry, crate::registry::RegistryError> {
            crate::registry::Registry::new(options)
        }
    }
}
