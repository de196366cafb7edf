//! The writer: who writes a plan (client, field manager, event reporter)
//! and the gate consulted before each write.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::Request;
use kube::{Client, Resource};

use super::{ApplyError, EventSink};
use crate::lease::WriteGate;

/// Who writes: the client, the primary kind and the plugin whose field
/// manager and event reporter the writes use.
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    /// Every write goes through this client.
    pub client: &'a Client,
    /// The primary's kind.
    pub primary: &'a ApiResource,
    /// The plugin's name: field manager `wasm-operator/<plugin>`.
    pub plugin: &'a str,
    /// Records the plan's events as `wasm-operator/<plugin>`.
    pub events: &'a EventSink,
    /// Consulted right before every write: a replica that stopped leading
    /// sends nothing more, even for a plan computed while it led.
    pub gate: &'a WriteGate,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client has no Debug of its own; what it writes is what counts.
        f.debug_struct("Writer")
            .field("primary", &self.primary.kind)
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

/// The fields of a write's answer the host reads. The API server answers a
/// patch with the whole object (managedFields included); parsing it into a
/// `DynamicObject` only to drop it was 9% of the host's CPU at 10,000
/// objects. Unknown fields are skipped without being built.
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct Answer {
    #[serde(default)]
    pub(super) metadata: AnswerMeta,
}

/// The metadata of an [`Answer`].
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct AnswerMeta {
    pub(super) uid: Option<String>,
    #[serde(rename = "resourceVersion")]
    pub(super) resource_version: Option<String>,
}

impl Writer<'_> {
    /// [`ApplyError::Fenced`] unless this replica may write now.
    pub(super) fn may_write(&self, target: &str) -> Result<(), ApplyError> {
        self.gate.check().map(drop).map_err(|_| ApplyError::Fenced {
            target: target.to_string(),
        })
    }

    /// A patch of `name` (of `resource` in `namespace`, or of its
    /// `subresource`), answered with only the fields in [`Answer`]. Errors
    /// are kube's, as [`Api::patch`] returns them.
    pub(super) async fn patch(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        subresource: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch<impl serde::Serialize + std::fmt::Debug>,
    ) -> Result<Answer, kube::Error> {
        self.patch_as(resource, namespace, subresource, name, params, patch)
            .await
    }

    /// [`Writer::patch`] answered with the fields of `T`.
    pub(super) async fn patch_as<T: serde::de::DeserializeOwned>(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        subresource: Option<&str>,
        name: &str,
        params: &PatchParams,
        patch: &Patch<impl serde::Serialize + std::fmt::Debug>,
    ) -> Result<T, kube::Error> {
        let request = Request::new(<DynamicObject as Resource>::url_path(resource, namespace));
        let mut req = match subresource {
            Some(sub) => request.patch_subresource(sub, name, params, patch),
            None => request.patch(name, params, patch),
        }
        .map_err(kube::Error::BuildRequest)?;
        req.extensions_mut().insert("patch");
        self.client.request::<T>(req).await
    }

    /// The API of `resource` in `namespace` (`None`: cluster-scoped).
    pub(super) fn api(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }
}
