//! What one WasmPlugin worker reaches outside itself: the object it works
//! for, the API client, the registry, the audit trail and the write gate.
//! The worker reads and writes through it; the canary driver sees it only
//! through its narrow port ([`super::canary::CanaryIo`]).

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{Api, DynamicObject};

use super::api_resource;
use super::audit::{AuditTrail, Transition};
use crate::lease::WriteGate;
use crate::registry::Registry;

/// The cluster side of one WasmPlugin's worker.
pub(super) struct Cluster {
    /// The WasmPlugin's name.
    pub(super) name: String,
    pub(super) client: kube::Client,
    pub(super) registry: Registry,
    pub(super) audit: AuditTrail,
    /// This replica writes finalizers, status, events and the diffs
    /// ConfigMap (see [`super::WasmPluginOptions`]).
    pub(super) writes: WriteGate,
    /// WasmPlugins (cluster-scoped).
    pub(super) api: Api<DynamicObject>,
    /// The WasmPlugin as last seen.
    pub(super) object: Arc<DynamicObject>,
}

impl Cluster {
    /// A reference to the WasmPlugin, for events.
    pub(super) fn object_ref(&self) -> ObjectReference {
        self.object.object_ref(&api_resource())
    }

    /// Records `transition` of this WasmPlugin (Event + audit line).
    pub(super) async fn record(&self, transition: &Transition) {
        self.audit
            .record(&self.name, &self.object_ref(), transition)
            .await;
    }
}
