//! A plugin's serving state: its version set, and the holder controllers read
//! it from. Replacing the set is atomic per call: a call that already took a
//! version finishes on it, the next call reads the new set.

use std::sync::{Arc, RwLock};

use kube::api::DynamicObject;
use serde_json::Value;

use super::LoadedVersion;
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
}

/// How a rollout candidate takes part next to the stable version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RolloutMode {
    /// The candidate computes for every object, never writes; its answers
    /// are compared with the stable version's.
    Shadow,
    /// The candidate serves a sticky slice of the objects.
    Split {
        /// Share of the objects the candidate serves, 0 to 100.
        weight_percent: u8,
    },
}

/// A second version rolled out next to the stable one.
#[derive(Debug, Clone)]
pub struct RolloutCandidate {
    /// The candidate version.
    pub version: Arc<ActiveVersion>,
    /// How it takes part.
    pub mode: RolloutMode,
}

/// The versions of one plugin that serve now: the stable version and (in a
/// later issue) at most one rollout candidate, with the settings its
/// controller runs with.
#[derive(Debug, Clone)]
pub struct VersionSet {
    /// The version every object is served by unless a candidate claims it.
    pub stable: Arc<ActiveVersion>,
    /// A rollout candidate; no code path activates one yet, so this is
    /// always `None` today.
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

    /// The version that reconciles `object`. Shadow candidates never serve
    /// (they compute beside the stable version), and split candidates are
    /// not routed to yet: today this is always the stable version.
    pub fn serving_for(&self, _object: &DynamicObject) -> Arc<ActiveVersion> {
        self.stable.clone()
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
}

impl ServingVersions {
    /// A holder serving `versions`.
    pub fn new(versions: VersionSet) -> ServingVersions {
        ServingVersions {
            current: RwLock::new(Arc::new(versions)),
        }
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
    pub fn serving_for(&self, object: &DynamicObject) -> Arc<ActiveVersion> {
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
