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
use super::source::{Fetched, SourceError};
use super::spec::Source;
use crate::lease::WriteGate;
use crate::oci::signature::VerificationPolicy;
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
    /// The verification policy its OCI sources (stable and canary) are
    /// fetched under: `spec.verification`, else the host-wide one.
    pub(super) verification: Option<Arc<VerificationPolicy>>,
    /// The host-wide policy (`wasm-operator run --verification-policy`).
    pub(super) default_verification: Option<Arc<VerificationPolicy>>,
}

impl Cluster {
    /// Fetches `source` under this WasmPlugin's verification policy.
    pub(super) async fn fetch(&self, source: &Source) -> Result<Fetched, SourceError> {
        super::source::fetch(&self.client, source, self.verification.as_deref()).await
    }

    /// Fetches under `policy` (the spec's) from now on, or under the
    /// host-wide policy when the spec has none.
    pub(super) fn verify_with(&mut self, policy: Option<VerificationPolicy>) {
        self.verification = policy
            .map(Arc::new)
            .or_else(|| self.default_verification.clone());
    }

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
