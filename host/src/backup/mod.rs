//! Backups, the pure part (issue 29): the decisions a backup controller
//! makes, as values, with no clock, no API and no I/O. Nothing calls them
//! yet: the controller that reads Backups, runs their Jobs and writes what
//! these decide is the next step (docs/backup.md).
//!
//! - [`schedule`]: a cron schedule in a time zone ([`Schedule::parse`],
//!   errors that name the field at fault), and [`next_action`]: at a given
//!   instant, take the due slot, skip it because a backup runs
//!   (concurrency `Forbid`, recorded), catch up exactly one backup for the
//!   last of several missed slots within the starting deadline, or report
//!   them missed; plus the status's `lastScheduleTime` and
//!   `nextScheduleTime`.
//! - [`naming`]: the deterministic Backup name of a slot
//!   (`<primary>-<yyyymmddhhmm>`) and of an on-demand backup, always a
//!   valid name short enough to name the Backup's Job after, so a retry, a
//!   restart or a new leader never duplicates a backup.
//! - [`retention`]: which Backups to delete: the newest N, the newest
//!   failed for diagnosis, and never the last M completed whatever newer
//!   ones do.
//!
//! The host reads the state, calls these, and writes what they decide.

pub mod naming;
pub mod retention;
pub mod schedule;

pub use naming::{NAME_BUDGET, manual_backup_name, scheduled_backup_name};
pub use retention::{
    BackupPhase, BackupRecord, Retention, RetentionError, RetentionPolicy, to_delete,
};
pub use schedule::{
    MISSED_COUNT_CAP, RunningBackup, Schedule, ScheduleAction, ScheduleDecision, ScheduleError,
    ScheduleState, SkipReason, next_action,
};
