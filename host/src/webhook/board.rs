//! What this host's conversion webhook tells the WasmPlugin controller:
//! the `spec.conversion` it serves, and where each plugin's storage
//! migration stands.
//!
//! The webhook comes before the WasmPlugin controller in the chain, so the
//! controller may read what the webhook posts but the webhook never calls
//! the controller. The composition root (the manager) creates one
//! [`WebhookBoard`] and hands clones to both; a webhook or controller
//! started without one gets a board of its own that nobody else reads.

use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::storage_progress::StorageProgressBoard;
use crate::util::lock;

/// The board between a host's conversion webhook (which posts) and its
/// WasmPlugin controller (which reads). Cheap to clone; clones share it.
///
/// # Guarantees
///
/// - A reader sees the latest [`WebhookBoard::set_conversion_target`] and
///   the latest publication per plugin on
///   [`WebhookBoard::storage_progress`]; nothing is queued.
#[derive(Debug, Clone, Default)]
pub struct WebhookBoard {
    inner: Arc<Notices>,
}

#[derive(Debug, Default)]
struct Notices {
    /// Where this host's storage migrations stand, per plugin.
    storage_progress: StorageProgressBoard,
    /// The `spec.conversion` this host's conversion webhook wants in the
    /// CRDs of the plugins that implement `migration` (set by the webhook).
    conversion_target: Mutex<Option<Value>>,
}

impl WebhookBoard {
    /// An empty board: no webhook serves, no migration ran.
    pub fn new() -> WebhookBoard {
        WebhookBoard::default()
    }

    /// Where the storage-version migrations of this host's plugins stand:
    /// the webhook publishes, the WasmPlugin status shows it.
    pub fn storage_progress(&self) -> &StorageProgressBoard {
        &self.inner.storage_progress
    }

    /// Records the `spec.conversion` (strategy, client config, caBundle)
    /// this host's conversion webhook serves, so that the WasmPlugin
    /// controller can point a plugin's CRD at it *before* the plugin's
    /// first version activates ([`super::point_before_activation`]);
    /// `None` when no webhook serves.
    pub fn set_conversion_target(&self, conversion: Option<Value>) {
        *lock(&self.inner.conversion_target) = conversion;
    }

    /// See [`WebhookBoard::set_conversion_target`].
    pub fn conversion_target(&self) -> Option<Value> {
        lock(&self.inner.conversion_target).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::webhook::{StorageMigrationProgress, StorageMigrationState};

    #[test]
    fn clones_share_the_conversion_target_and_the_progress() {
        let board = WebhookBoard::new();
        let reader = board.clone();
        assert_eq!(reader.conversion_target(), None);
        board.set_conversion_target(Some(serde_json::json!({"strategy": "Webhook"})));
        assert_eq!(
            reader.conversion_target(),
            Some(serde_json::json!({"strategy": "Webhook"}))
        );
        let updates = reader.storage_progress().updates();
        board.storage_progress().publish(
            "distributedkv",
            StorageMigrationProgress {
                crd: "distributedkvs.kv.example.com".into(),
                storage_version: "v1beta1".into(),
                stored_versions: vec!["v1alpha1".into(), "v1beta1".into()],
                state: StorageMigrationState::Completed,
                migrated: 3,
                total: Some(3),
                refused: Vec::new(),
                error: None,
            },
        );
        assert!(updates.has_changed().unwrap_or(false));
        assert_eq!(
            reader
                .storage_progress()
                .get("distributedkv")
                .map(|p| p.migrated),
            Some(3)
        );
        board.set_conversion_target(None);
        assert_eq!(reader.conversion_target(), None);
        // A board of its own shares nothing.
        assert_eq!(
            WebhookBoard::new().storage_progress().get("distributedkv"),
            None
        );
    }
}
