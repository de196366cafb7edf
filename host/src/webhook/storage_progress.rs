//! Where the storage-version migrations a host runs stand, per plugin.
//!
//! The webhook runs the migrations ([`super::storage`]), the WasmPlugin
//! controller owns the status they show in. The [`StorageProgressBoard`]
//! (part of the [`super::WebhookBoard`] the manager creates and hands to
//! both) is between them: the migration publishes a
//! [`StorageMigrationProgress`] under the plugin's name, the WasmPlugin
//! worker reads it when it writes status and is woken by
//! [`StorageProgressBoard::updates`]. A plugin without a WasmPlugin
//! (`run --plugin`) has no reader: its progress is only logged.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Serialize;
use tokio::sync::watch;

use crate::util::lock;

/// Where one CRD's storage migration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StorageMigrationState {
    /// Objects are being rewritten now.
    InProgress,
    /// Every object was rewritten and `storedVersions` narrowed to the
    /// storage version.
    Completed,
    /// The CRD stores only its storage version already; this host had
    /// nothing to rewrite (it may have been done by another replica or an
    /// earlier run).
    AlreadyMigrated,
    /// The API server refused to rewrite some objects; `storedVersions` is
    /// kept and the migration is tried again later.
    ObjectsRefused,
    /// The migration stopped on an API error (listing, saving progress,
    /// the status write); it resumes later from its saved progress.
    Interrupted,
}

impl StorageMigrationState {
    /// True when nothing is left to do: [`Self::Completed`] or
    /// [`Self::AlreadyMigrated`].
    pub fn is_settled(self) -> bool {
        matches!(self, Self::Completed | Self::AlreadyMigrated)
    }
}

/// One CRD's storage migration as a host last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StorageMigrationProgress {
    /// The CRD (`<plural>.<group>`).
    pub crd: String,
    /// The version every object moves to.
    pub storage_version: String,
    /// `status.storedVersions` when the migration started.
    pub stored_versions: Vec<String>,
    /// Where it stands.
    pub state: StorageMigrationState,
    /// Objects rewritten so far (this run and the runs it resumed).
    pub migrated: usize,
    /// Objects to rewrite in all, when known (the API server's
    /// `remainingItemCount`, exact on the last page).
    pub total: Option<usize>,
    /// Objects the API server refused to rewrite, `namespace/name: why`
    /// (in progress: the previous run's, still to be retried).
    pub refused: Vec<String>,
    /// The error that interrupted it ([`StorageMigrationState::Interrupted`]).
    pub error: Option<String>,
}

/// The progress of every plugin's storage migration in this host.
#[derive(Debug)]
pub struct StorageProgressBoard {
    by_plugin: Mutex<HashMap<String, StorageMigrationProgress>>,
    /// Counts publications; receivers wake on each.
    changed: watch::Sender<u64>,
}

impl Default for StorageProgressBoard {
    fn default() -> Self {
        StorageProgressBoard {
            by_plugin: Mutex::new(HashMap::new()),
            changed: watch::Sender::new(0),
        }
    }
}

impl StorageProgressBoard {
    /// Records where plugin `plugin`'s migration stands and wakes readers.
    pub fn publish(&self, plugin: &str, progress: StorageMigrationProgress) {
        lock(&self.by_plugin).insert(plugin.to_string(), progress);
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Where plugin `plugin`'s migration stands, when this host ran or
    /// checked one.
    pub fn get(&self, plugin: &str) -> Option<StorageMigrationProgress> {
        lock(&self.by_plugin).get(plugin).cloned()
    }

    /// Changes on every [`StorageProgressBoard::publish`].
    pub fn updates(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(migrated: usize) -> StorageMigrationProgress {
        StorageMigrationProgress {
            crd: "distributedkvs.kv.example.com".into(),
            storage_version: "v1beta1".into(),
            stored_versions: vec!["v1alpha1".into(), "v1beta1".into()],
            state: StorageMigrationState::InProgress,
            migrated,
            total: Some(10),
            refused: Vec::new(),
            error: None,
        }
    }

    #[test]
    fn the_latest_publication_wins_and_wakes_readers() {
        let board = StorageProgressBoard::default();
        let updates = board.updates();
        assert_eq!(board.get("distributedkv"), None);
        board.publish("distributedkv", progress(1));
        board.publish("distributedkv", progress(4));
        assert!(updates.has_changed().unwrap());
        assert_eq!(board.get("distributedkv").unwrap().migrated, 4);
        assert_eq!(board.get("webapp"), None);
    }
}
