//! A plugin's serving state: its version set, and the holder controllers read
//! it from. Replacing the set is atomic per call: a call that already took a
//! version finishes on it, the next call reads the new set.

use std::sync::{Arc, RwLock};

use kube::Resource;
use serde_json::Value;

use super::access::PluginAccess;
use super::assign::serves_candidate;
use super::audit::AuditBoard;
use super::loaded_version::LoadedVersion;
use super::observations::CanaryObservations;
use super::rollout::RolloutSettings;
use super::stats::VersionCounters;
use crate::contract::{Grant, ReconcileLimits};
use crate::engine::LoadedPlugin;

/// One activated version with the deployment's config.
#[derive(Debug, Clone)]
pub struct ActiveVersion {
    /// The compiled component, with this deployment's call limits.
    pub plugin: LoadedPlugin,
    /// The `config` handed to every call (`{}` when unset).
    pub config: Value,
    /// This deployment's limits per reconcile.
    pub limits: ReconcileLimits,
    /// Name, version, digest and source, as reported by [`super::Registry::loaded`].
    pub info: LoadedVersion,
    /// This version's reconcile/failure counts (see [`super::Registry::stats`]).
    pub counters: Arc<VersionCounters>,
    /// What the cluster operator granted this deployment; the manifest was
    /// checked against it. The controller serves primaries and answers
    /// reads only in its namespaces.
    pub grant: Arc<Grant>,
    /// How this deployment's admission is served (mode, failure policy;
    /// read by the webhook per request).
    pub admission: super::AdmissionSettings,
}

/// A second version rolled out next to the stable one.
#[derive(Debug, Clone)]
pub struct RolloutCandidate {
    /// The candidate version.
    pub version: Arc<ActiveVersion>,
    /// How it takes part.
    pub settings: RolloutSettings,
    /// What the host observed of it (dry run, shadow comparisons); lives as
    /// long as the candidate, across weight steps.
    pub observations: Arc<CanaryObservations>,
}

/// The versions of one plugin that serve now: the stable version and at
/// most one rollout candidate, with the settings its controller runs with.
#[derive(Debug, Clone)]
pub struct VersionSet {
    /// The version every object is served by unless a candidate claims it.
    pub stable: Arc<ActiveVersion>,
    /// A rollout candidate ([`super::Registry::activate_candidate`]).
    pub candidate: Option<RolloutCandidate>,
    /// Reconciles of this plugin that may run at once (different objects).
    pub concurrency: usize,
}

impl VersionSet {
    /// A set serving `stable` alone.
    pub fn stable(stable: ActiveVersion, concurrency: usize) -> VersionSet {
        VersionSet {
            stable: Arc::new(stable),
            candidate: None,
            concurrency,
        }
    }

    /// True when the candidate serves `object` (a split picks its UID, or a
    /// selector its labels; see [`super::assign::serves_candidate`]).
    pub fn candidate_serves(&self, object: &impl Resource) -> bool {
        self.candidate.as_ref().is_some_and(|c| {
            let meta = object.meta();
            let labels = meta.labels.clone().unwrap_or_default();
            serves_candidate(&c.settings.rollout, meta.uid.as_deref(), &labels)
        })
    }

    /// The version that reconciles `object`: the candidate when its split
    /// or selector picks the object, else the stable version. Shadow and
    /// dry-run candidates never serve. Pure and sticky: the same set and
    /// object always give the same version.
    pub fn serving_for(&self, object: &impl Resource) -> Arc<ActiveVersion> {
        match &self.candidate {
            Some(candidate) if self.candidate_serves(object) => candidate.version.clone(),
            _ => self.stable.clone(),
        }
    }

    /// The candidate when it computes beside the stable version (Shadow or
    /// DryRun).
    pub fn shadow(&self) -> Option<&RolloutCandidate> {
        self.candidate
            .as_ref()
            .filter(|c| c.settings.rollout.shadows())
    }

    /// True when `object` is served by another version in `next` than in
    /// this set: it must be reconciled again by its new version.
    pub fn moves(&self, next: &VersionSet, object: &impl Resource) -> bool {
        !Arc::ptr_eq(&self.serving_for(object), &next.serving_for(object))
    }

    /// The plugin's manifest name.
    pub fn plugin(&self) -> &str {
        &self.stable.info.name
    }
}

/// The live holder of one plugin's [`VersionSet`], shared by the registry
/// (which replaces the set) and the plugin's controller (which reads it per
/// object).
#[derive(Debug)]
pub struct ServingVersions {
    current: RwLock<Arc<VersionSet>>,
    /// What the plugin's controller could not reach (RBAC refusals, the
    /// primaries outside its grant); kept across version swaps.
    access: PluginAccess,
    /// The latest audit of the stored objects against the stable
    /// version's `validate`; kept across version swaps until the next run.
    audit: AuditBoard,
}

impl ServingVersions {
    /// A holder serving `versions`.
    pub fn new(versions: VersionSet) -> ServingVersions {
        ServingVersions {
            current: RwLock::new(Arc::new(versions)),
            access: PluginAccess::default(),
            audit: AuditBoard::default(),
        }
    }

    /// What the plugin's controller could not reach (see [`PluginAccess`]).
    pub fn access(&self) -> &PluginAccess {
        &self.access
    }

    /// The latest audit of the stored objects (see [`AuditBoard`]).
    pub fn admission_audit(&self) -> &AuditBoard {
        &self.audit
    }

    /// The set new calls use.
    pub fn current(&self) -> Arc<VersionSet> {
        // The lock only guards an Arc swap; a poisoned lock still holds a
        // valid Arc.
        self.current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The version that reconciles `object` now (see [`VersionSet::serving_for`]).
    pub fn serving_for(&self, object: &impl Resource) -> Arc<ActiveVersion> {
        self.current().serving_for(object)
    }

    /// Makes `versions` the set new calls use; returns the previous one.
    pub(super) fn replace(&self, versions: VersionSet) -> Arc<VersionSet> {
        let mut guard = self
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::replace(&mut *guard, Arc::new(versions))
    }
}
