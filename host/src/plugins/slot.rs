//! The slot a running plugin's controller reads its current version from.
//! Swapping the slot is atomic per call: a call that already took the old
//! version finishes on it, the next call takes the new one.

use std::sync::{Arc, RwLock};

use serde_json::Value;

use super::LoadedVersion;
use super::stats::VersionCounters;
use crate::engine::LoadedPlugin;

/// One loaded version with the deployment's config.
#[derive(Debug, Clone)]
pub struct ActiveVersion {
    pub plugin: LoadedPlugin,
    /// The `config` handed to every call (`{}` when unset).
    pub config: Value,
    /// Name, version, digest and source, as reported by [`super::Registry::loaded`].
    pub info: LoadedVersion,
    /// This version's reconcile/failure counts (see [`super::Registry::stats`]).
    pub counters: Arc<VersionCounters>,
}

/// Holder of a plugin's current version.
#[derive(Debug)]
pub struct PluginSlot {
    current: RwLock<Arc<ActiveVersion>>,
}

impl PluginSlot {
    /// A slot serving `version`.
    pub fn new(version: ActiveVersion) -> PluginSlot {
        PluginSlot {
            current: RwLock::new(Arc::new(version)),
        }
    }

    /// The version new calls use.
    pub fn current(&self) -> Arc<ActiveVersion> {
        // The lock only guards an Arc swap; a poisoned lock still holds a
        // valid Arc.
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Makes `version` the one new calls use; returns the previous one.
    pub fn swap(&self, version: ActiveVersion) -> Arc<ActiveVersion> {
        let mut guard = self.current.write().unwrap_or_else(|p| p.into_inner());
        std::mem::replace(&mut *guard, Arc::new(version))
    }
}
