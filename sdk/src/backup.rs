//! Backups: the plan a plugin answers `backup.plan` (and `backup-policy`)
//! with, and the `status.backup` the host writes on a primary.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `retain` of [`BackupPlan::new`]: the newest seven finished Backups.
pub const DEFAULT_RETAIN: u32 = 7;

/// How to back one primary up: a schedule, the Job that takes one backup,
/// and how the host keeps and bounds them (the WIT `backup-plan` and
/// `backup-policy`).
///
/// The host names the Job, puts it in the primary's namespace, labels it,
/// sets its `activeDeadlineSeconds` and injects the environment variable
/// `WASM_OPERATOR_BACKUP_NAME` (the Backup's name) into every container.
/// The Job reports where the backup went by writing `{"location": "..."}`
/// to its container's termination message (`/dev/termination-log`).
///
/// Every `Option` field left `None` takes the host's default, named on it.
///
/// ```
/// use serde_json::json;
/// use wasm_operator_sdk::BackupPlan;
///
/// let job = json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {}}});
/// let plan = BackupPlan::new("0 3 * * *", job)
///     .retain(14)
///     .keep_failed(2)
///     .time_zone("Europe/Berlin")
///     .job_deadline_seconds(1800)
///     .backup_on_delete(true);
/// assert_eq!(plan.retain, 14);
/// assert_eq!(plan.always_keep_completed, None);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BackupPlan {
    /// Cron expression (standard 5 fields), e.g. `0 3 * * *`.
    pub schedule: String,
    /// The `batch/v1` Job that takes one backup, without `metadata.name`
    /// (the host names it).
    pub job: Value,
    /// How many of the newest finished Backups to keep. Default 7.
    pub retain: u32,
    /// Take a final backup before the primary is deleted. Default false.
    pub backup_on_delete: bool,
    /// IANA time zone the schedule is read in, e.g. `Europe/Berlin`.
    /// `None`: UTC.
    pub time_zone: Option<String>,
    /// How many of the newest failed Backups to keep for diagnosis.
    /// `None`: 1.
    pub keep_failed: Option<u32>,
    /// How many of the newest Completed Backups are never deleted, whatever
    /// fails after them. `None`: 1.
    pub always_keep_completed: Option<u32>,
    /// `activeDeadlineSeconds` of each backup Job. `None`: 3600.
    pub job_deadline_seconds: Option<u64>,
    /// A scheduled slot older than this many seconds is reported missed
    /// instead of caught up. `None`: the host's default.
    pub starting_deadline_seconds: Option<u64>,
    /// `activeDeadlineSeconds` of a restore Job. `None`: 3600.
    pub restore_deadline_seconds: Option<u64>,
}

impl BackupPlan {
    /// A plan taking backups on `schedule` with `job`: keeps the newest 7,
    /// no final backup on delete, the host's defaults for everything else.
    pub fn new(schedule: impl Into<String>, job: Value) -> Self {
        BackupPlan {
            schedule: schedule.into(),
            job,
            retain: DEFAULT_RETAIN,
            backup_on_delete: false,
            time_zone: None,
            keep_failed: None,
            always_keep_completed: None,
            job_deadline_seconds: None,
            starting_deadline_seconds: None,
            restore_deadline_seconds: None,
        }
    }

    /// Keeps the newest `n` finished Backups.
    pub fn retain(mut self, n: u32) -> Self {
        self.retain = n;
        self
    }

    /// Keeps the newest `n` failed Backups for diagnosis.
    pub fn keep_failed(mut self, n: u32) -> Self {
        self.keep_failed = Some(n);
        self
    }

    /// Never deletes the newest `n` Completed Backups.
    pub fn always_keep_completed(mut self, n: u32) -> Self {
        self.always_keep_completed = Some(n);
        self
    }

    /// Reads the schedule in the IANA time zone `zone`.
    pub fn time_zone(mut self, zone: impl Into<String>) -> Self {
        self.time_zone = Some(zone.into());
        self
    }

    /// Fails a backup Job still running after `seconds`.
    pub fn job_deadline_seconds(mut self, seconds: u64) -> Self {
        self.job_deadline_seconds = Some(seconds);
        self
    }

    /// Reports a slot older than `seconds` as missed instead of catching up.
    pub fn starting_deadline_seconds(mut self, seconds: u64) -> Self {
        self.starting_deadline_seconds = Some(seconds);
        self
    }

    /// Fails a restore Job still running after `seconds`.
    pub fn restore_deadline_seconds(mut self, seconds: u64) -> Self {
        self.restore_deadline_seconds = Some(seconds);
        self
    }

    /// Takes (or not) a final backup before the primary is deleted.
    pub fn backup_on_delete(mut self, backup_on_delete: bool) -> Self {
        self.backup_on_delete = backup_on_delete;
        self
    }
}

/// The `status.backup` the **host** writes on a primary whose plugin
/// declares `backup`. Put it in the plugin's status type
/// (`backup: Option<BackupStatus>`, left `None`) so that the CRD the SDK
/// derives keeps it: its schema is an object with
/// `x-kubernetes-preserve-unknown-fields: true`, so the API server never
/// prunes what the host writes there. A plugin must never write
/// `status.backup` itself: the host overwrites it.
///
/// ```
/// use wasm_operator_sdk::BackupStatus;
///
/// let status: BackupStatus = serde_json::from_str(
///     r#"{"lastSuccessfulBackup": "kv-202611280300", "missedSlots": 0}"#,
/// ).unwrap();
/// assert_eq!(status.last_successful_backup.as_deref(), Some("kv-202611280300"));
/// assert_eq!(serde_json::to_string(&BackupStatus::default()).unwrap(), "{}");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// The last schedule slot the host acted on (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<String>,
    /// The next schedule slot (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<String>,
    /// Name of the last Completed Backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup: Option<String>,
    /// When the last Completed Backup completed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_backup_time: Option<String>,
    /// Name of the last failed Backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_backup: Option<String>,
    /// Schedule slots missed (not caught up) since the last one taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_slots: Option<u32>,
    /// The host's backup conditions, in the shape of `metav1.Condition`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Value>>,
}

impl JsonSchema for BackupStatus {
    fn schema_name() -> Cow<'static, str> {
        "BackupStatus".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let time = |description: &str| serde_json::json!({"type": "string", "format": "date-time", "description": description});
        let name =
            |description: &str| serde_json::json!({"type": "string", "description": description});
        json_schema!({
            "type": "object",
            "description": "Backups of this object, written by the host (never by the plugin).",
            "x-kubernetes-preserve-unknown-fields": true,
            "properties": {
                "lastScheduleTime": time("The last schedule slot the host acted on."),
                "nextScheduleTime": time("The next schedule slot."),
                "lastSuccessfulBackup": name("Name of the last Completed Backup."),
                "lastBackupTime": time("When the last Completed Backup completed."),
                "lastFailedBackup": name("Name of the last failed Backup."),
                "missedSlots": {
                    "type": "integer", "format": "int32", "minimum": 0,
                    "description": "Schedule slots missed (not caught up) since the last one taken.",
                },
                "conditions": {
                    "type": "array",
                    "description": "The host's backup conditions.",
                    "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn new_has_the_documented_defaults_and_setters_chain() {
        let plan = BackupPlan::new("*/5 * * * *", json!({"kind": "Job"}));
        assert_eq!(
            (plan.retain, plan.backup_on_delete, &plan.time_zone),
            (7, false, &None)
        );
        assert_eq!(plan.keep_failed, None);
        assert_eq!(plan.restore_deadline_seconds, None);
        let plan = plan
            .retain(3)
            .keep_failed(1)
            .always_keep_completed(2)
            .time_zone("UTC")
            .job_deadline_seconds(10)
            .starting_deadline_seconds(20)
            .restore_deadline_seconds(30)
            .backup_on_delete(true);
        assert_eq!(plan.retain, 3);
        assert_eq!(
            (plan.keep_failed, plan.always_keep_completed),
            (Some(1), Some(2))
        );
        assert_eq!(
            (
                plan.job_deadline_seconds,
                plan.starting_deadline_seconds,
                plan.restore_deadline_seconds
            ),
            (Some(10), Some(20), Some(30))
        );
        assert!(plan.backup_on_delete);
        assert_eq!(plan.time_zone.as_deref(), Some("UTC"));
    }

    #[test]
    fn backup_status_is_camel_case_and_skips_what_is_unset() {
        let status = BackupStatus {
            last_backup_time: Some("2026-11-28T03:00:00Z".into()),
            missed_slots: Some(2),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"lastBackupTime": "2026-11-28T03:00:00Z", "missedSlots": 2})
        );
        let back: BackupStatus =
            serde_json::from_value(json!({"lastFailedBackup": "x", "future": true})).unwrap();
        assert_eq!(back.last_failed_backup.as_deref(), Some("x"));
    }
}
