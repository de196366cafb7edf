//! The backup families: backups and restores by result, skipped and missed
//! schedule slots, and when each primary's last good backup completed.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::{Metrics, NameLabels, Registrar, registered};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BackupResultLabels {
    plugin: String,
    trigger: String,
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RestoreResultLabels {
    plugin: String,
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PrimaryLabels {
    plugin: String,
    namespace: String,
    name: String,
}

/// The backup families (see the module doc).
#[derive(Clone)]
pub(super) struct BackupFamilies {
    backups: Family<BackupResultLabels, Counter>,
    restores: Family<RestoreResultLabels, Counter>,
    skipped: Family<NameLabels, Counter>,
    missed: Family<NameLabels, Counter>,
    last_success: Family<PrimaryLabels, Gauge>,
}

impl BackupFamilies {
    pub(super) fn register(registry: &mut Registrar) -> Self {
        BackupFamilies {
            backups: registered(
                registry,
                "wasm_operator_backups",
                "Backups that finished, by plugin, trigger (scheduled, manual, final) and result (completed, failed)",
                Family::default(),
            ),
            restores: registered(
                registry,
                "wasm_operator_restores",
                "Restores that finished, by plugin and result (completed, failed)",
                Family::default(),
            ),
            skipped: registered(
                registry,
                "wasm_operator_backup_slots_skipped",
                "Schedule slots that fell due while a backup of the same primary ran (concurrency Forbid): recorded, not taken",
                Family::default(),
            ),
            missed: registered(
                registry,
                "wasm_operator_backup_slots_missed",
                "Schedule slots that passed while no host acted on them (downtime, leader change); the last of them is caught up when within the starting deadline",
                Family::default(),
            ),
            last_success: registered(
                registry,
                "wasm_operator_backup_last_success_timestamp_seconds",
                "Unix time at which the newest Completed backup of a primary completed; its age is time() minus this (the BackupTooOld alert)",
                Family::default(),
            ),
        }
    }
}

impl Metrics {
    /// A backup of a `plugin` primary finished.
    pub fn backup_finished(&self, plugin: &str, trigger: &str, completed: bool) {
        self.backup
            .backups
            .get_or_create(&BackupResultLabels {
                plugin: plugin.to_string(),
                trigger: trigger.to_string(),
                result: if completed { "completed" } else { "failed" }.to_string(),
            })
            .inc();
    }

    /// A restore into a `plugin` primary finished.
    pub fn restore_finished(&self, plugin: &str, completed: bool) {
        self.backup
            .restores
            .get_or_create(&RestoreResultLabels {
                plugin: plugin.to_string(),
                result: if completed { "completed" } else { "failed" }.to_string(),
            })
            .inc();
    }

    /// `count` schedule slots of a `plugin` primary were skipped.
    pub fn backup_slots_skipped(&self, plugin: &str, count: u32) {
        self.backup
            .skipped
            .get_or_create(&NameLabels {
                plugin: plugin.to_string(),
            })
            .inc_by(u64::from(count));
    }

    /// `count` schedule slots of a `plugin` primary were missed.
    pub fn backup_slots_missed(&self, plugin: &str, count: u32) {
        self.backup
            .missed
            .get_or_create(&NameLabels {
                plugin: plugin.to_string(),
            })
            .inc_by(u64::from(count));
    }

    /// The newest Completed backup of primary `namespace/name` completed at
    /// `unix_seconds`.
    pub fn backup_last_success(
        &self,
        plugin: &str,
        namespace: &str,
        name: &str,
        unix_seconds: i64,
    ) {
        self.backup
            .last_success
            .get_or_create(&PrimaryLabels {
                plugin: plugin.to_string(),
                namespace: namespace.to_string(),
                name: name.to_string(),
            })
            .set(unix_seconds);
    }

    /// Drops the last-success series of primary `namespace/name` (deleted).
    pub fn backup_forget(&self, plugin: &str, namespace: &str, name: &str) {
        self.backup.last_success.remove(&PrimaryLabels {
            plugin: plugin.to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    }

    /// Creates `plugin`'s backup series at zero, so alerts see `0` before
    /// the first skipped or missed slot.
    pub fn backups_started(&self, plugin: &str) {
        let labels = NameLabels {
            plugin: plugin.to_string(),
        };
        let _ = self.backup.skipped.get_or_create(&labels);
        let _ = self.backup.missed.get_or_create(&labels);
    }
}
