//! The canary driver's port to the world ([`CanaryIo`]): every read and
//! write the driver makes, and nothing else, so the driver can be run
//! against a recording handle in tests. [`Cluster`] is the production
//! handle: the registry, the API client, the audit trail and the write
//! gate of the WasmPlugin's worker.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::diffs::{self, DiffsWrite};
use crate::contract::HostObject;
use crate::oci::signature::SignerRule;
use crate::registry::{
    ActivationOptions, CanaryObservations, Candidate, CounterSnapshot, LoadedVersion,
    RegistryError, RolloutSettings,
};
use crate::wasmplugin::audit::Transition;
use crate::wasmplugin::cluster::Cluster;
use crate::wasmplugin::source::Fetched;
use crate::wasmplugin::spec::Source;
use crate::wasmplugin::status::{Problem, problem};
use crate::wasmplugin::watch::{self as source_watch, Trigger};

use super::run::ACTION_ANNOTATION;

/// Counters of the stable version and (while it is loaded) the candidate.
pub(crate) type Counters = (CounterSnapshot, Option<CounterSnapshot>);

/// What the canary driver reads and writes, for one WasmPlugin.
///
/// # Guarantees
///
/// The driver makes no other I/O: every registry change, Kubernetes write,
/// event and source read of a canary goes through this trait, in the order
/// the driver calls it.
pub(crate) trait CanaryIo {
    /// A compiled, checked component not yet serving
    /// ([`crate::registry::Candidate`] in production).
    type Candidate;

    /// The WasmPlugin's name.
    fn name(&self) -> &str;
    /// The monotonic clock: analysis schedule, step intervals, diffs pacing.
    fn now(&self) -> Instant;
    /// Whether this replica writes (see [`crate::lease::WriteGate`]).
    fn may_write(&self) -> bool;

    /// Fetches the component at `source` (under the WasmPlugin's
    /// verification policy): its bytes and, for OCI, the manifest digest.
    ///
    /// # Errors
    ///
    /// The condition reason and message of a source that cannot be read.
    async fn fetch(&mut self, source: &Source) -> Result<Fetched, Problem>;
    /// Who signed manifest `digest` of `source` as `rule` requires
    /// (`spec.canary.requireSigner`).
    ///
    /// # Errors
    ///
    /// Why it is not so signed (or cannot be checked), for the refusal.
    async fn signed_by(
        &mut self,
        source: &Source,
        digest: Option<&str>,
        rule: &SignerRule,
    ) -> Result<String, String>;
    /// Compiles and checks `bytes` (from `source`) as a version of `plugin`.
    ///
    /// # Errors
    ///
    /// The registry's refusal.
    async fn prepare(
        &mut self,
        source: &str,
        bytes: Vec<u8>,
        plugin: &str,
    ) -> Result<Self::Candidate, RegistryError>;
    /// Sets `candidate` beside the serving version.
    ///
    /// # Errors
    ///
    /// The registry's refusal.
    async fn activate_candidate(
        &mut self,
        candidate: Self::Candidate,
        rollout: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError>;
    /// Loads `stable` and `candidate` beside it in one registry change (a
    /// canary resumed after a restart).
    ///
    /// # Errors
    ///
    /// The registry's refusal.
    async fn activate_with_candidate(
        &mut self,
        stable: Self::Candidate,
        candidate: Self::Candidate,
        rollout: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError>;
    /// Changes how the candidate of `plugin` takes part.
    ///
    /// # Errors
    ///
    /// The registry's refusal (e.g. `CanaryIrreversible`).
    async fn set_rollout(
        &mut self,
        plugin: &str,
        rollout: RolloutSettings,
    ) -> Result<(), RegistryError>;
    /// Makes the candidate of `plugin` its stable version.
    ///
    /// # Errors
    ///
    /// The registry's refusal.
    async fn promote_candidate(&mut self, plugin: &str) -> Result<LoadedVersion, RegistryError>;
    /// Drops the candidate of `plugin`.
    ///
    /// # Errors
    ///
    /// The registry's refusal.
    async fn drop_candidate(&mut self, plugin: &str) -> Result<(), RegistryError>;
    /// What the host observed of the candidate of `plugin`, while it is
    /// loaded.
    fn observations(&self, plugin: &str) -> Option<Arc<CanaryObservations>>;
    /// The counters of `plugin`'s versions.
    fn counters(&self, plugin: &str) -> Option<Counters>;
    /// `(apiVersion, kind)` of the primary kind of `plugin`'s serving
    /// version.
    fn primary_kind(&self, plugin: &str) -> Option<(String, String)>;

    /// Records a transition of the WasmPlugin (Event + audit line), with a
    /// related object on the Event.
    async fn record(&mut self, transition: &Transition, related: Option<ObjectReference>);
    /// Writes the diffs document to the diffs ConfigMap: written (as
    /// `namespace/name`), failed (retried later), or refused because a
    /// ConfigMap the host did not create holds the name.
    async fn write_diffs(&mut self, document: String) -> DiffsWrite;
    /// Removes the `canary-action` annotation from the WasmPlugin.
    async fn remove_action_annotation(&mut self);
    /// Watches `source`, sending a trigger on every change.
    fn watch_source(&mut self, source: &Source, triggers: mpsc::Sender<Trigger>) -> JoinHandle<()>;
}

impl CanaryIo for Cluster {
    type Candidate = Candidate;

    fn name(&self) -> &str {
        &self.name
    }

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn may_write(&self) -> bool {
        self.writes.may_write()
    }

    async fn fetch(&mut self, source: &Source) -> Result<Fetched, Problem> {
        Cluster::fetch(self, source)
            .await
            .map_err(|error| problem(error.reason(), error.to_string()))
    }

    async fn signed_by(
        &mut self,
        source: &Source,
        digest: Option<&str>,
        rule: &SignerRule,
    ) -> Result<String, String> {
        let (Source::Oci(oci), Some(digest)) = (source, digest) else {
            return Err(format!(
                "spec.canary.requireSigner needs an OCI source; {} carries no signature",
                source.describe()
            ));
        };
        crate::wasmplugin::oci_source::signed_by(&self.client, oci, digest, rule)
            .await
            .map(|verified| verified.signer.to_string())
            .map_err(|error| error.to_string())
    }

    async fn prepare(
        &mut self,
        source: &str,
        bytes: Vec<u8>,
        plugin: &str,
    ) -> Result<Candidate, RegistryError> {
        self.registry.prepare(source, bytes, Some(plugin)).await
    }

    async fn activate_candidate(
        &mut self,
        candidate: Candidate,
        rollout: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        self.registry
            .activate_candidate(candidate, rollout, options)
            .await
    }

    async fn activate_with_candidate(
        &mut self,
        stable: Candidate,
        candidate: Candidate,
        rollout: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        self.registry
            .activate_with(stable, options.clone(), Some((candidate, rollout, options)))
            .await
    }

    async fn set_rollout(
        &mut self,
        plugin: &str,
        rollout: RolloutSettings,
    ) -> Result<(), RegistryError> {
        self.registry.set_rollout(plugin, rollout).await
    }

    async fn promote_candidate(&mut self, plugin: &str) -> Result<LoadedVersion, RegistryError> {
        self.registry.promote_candidate(plugin).await
    }

    async fn drop_candidate(&mut self, plugin: &str) -> Result<(), RegistryError> {
        self.registry.drop_candidate(plugin).await.map(|_| ())
    }

    fn observations(&self, plugin: &str) -> Option<Arc<CanaryObservations>> {
        self.registry.canary(plugin)
    }

    fn counters(&self, plugin: &str) -> Option<Counters> {
        self.registry.counters(plugin)
    }

    fn primary_kind(&self, plugin: &str) -> Option<(String, String)> {
        self.registry.current(plugin).map(|v| {
            let primary = &v.plugin.manifest().primary;
            (primary.api_version(), primary.kind.clone())
        })
    }

    async fn record(&mut self, transition: &Transition, related: Option<ObjectReference>) {
        self.audit
            .record_related(&self.name, &self.object_ref(), transition, related)
            .await;
    }

    async fn write_diffs(&mut self, document: String) -> DiffsWrite {
        let namespace = diffs::diffs_namespace();
        let name = diffs::diffs_config_map_name(&self.name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        match api.get_opt(&name).await {
            Ok(Some(found))
                if !HostObject::CanaryDiffs.created_by_host(found.metadata.labels.as_ref()) =>
            {
                let message =
                    HostObject::CanaryDiffs.squatter_message("ConfigMap", &namespace, &name);
                tracing::error!(wasmplugin = %self.name, configmap = %name, "{message}");
                return DiffsWrite::NotTheHosts(message);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(%error, wasmplugin = %self.name, configmap = %name, "cannot read the canary diffs ConfigMap; retrying later");
                return DiffsWrite::Failed;
            }
        }
        let body = diffs::config_map(
            &self.name,
            self.object.metadata.uid.as_deref(),
            &namespace,
            &name,
            document,
        );
        match api
            .patch(
                &name,
                // Not forced: a manager other than the host's on these
                // fields (a squatter planted since the read) is a conflict.
                &PatchParams::apply(diffs::DIFFS_MANAGER),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => DiffsWrite::Written(format!("{namespace}/{name}")),
            Err(error) => {
                tracing::warn!(%error, wasmplugin = %self.name, configmap = %name, "cannot write the canary diffs ConfigMap; retrying later");
                DiffsWrite::Failed
            }
        }
    }

    async fn remove_action_annotation(&mut self) {
        if !self.writes.may_write() {
            return;
        }
        let patch = json!({"metadata": {"annotations": {ACTION_ANNOTATION: null}}});
        if let Err(error) = self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(%error, wasmplugin = %self.name, "cannot remove the canary-action annotation");
        }
    }

    fn watch_source(&mut self, source: &Source, triggers: mpsc::Sender<Trigger>) -> JoinHandle<()> {
        source_watch::spawn(self.client.clone(), source.clone(), triggers)
    }
}
