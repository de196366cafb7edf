//! Backups and restores (issue 29): the `Backup` and `Restore` resources,
//! and the runner that takes a plugin's backups beside its controller
//! (docs/backup.md).
//!
//! The decisions are pure values, with no clock, no API and no I/O:
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
//! - [`job`]: the Job the host makes of a plugin's template (name, owner,
//!   labels, env, deadline), how a Job ended, and the location its
//!   termination message reports.
//!
//! The runner reads the state, calls these, and writes what they decide:
//! [`runner`] sweeps one plugin's objects; `drive` moves a Backup through
//! its phases, `primary` runs a primary's schedule, final backup and
//! retention, `restore` moves a Restore (holding the target's reconcile).
//! [`resources`] has the resource types, labels and annotations.

mod context;
mod drive;
mod grant;
pub mod job;
pub mod naming;
mod primary;
pub mod resources;
mod restore;
pub mod retention;
pub mod runner;
pub mod schedule;

pub use context::RunnerDeps;
pub use job::{DEFAULT_JOB_DEADLINE_SECONDS, TERMINATION_MESSAGE_FORMAT};
pub use primary::DEFAULT_STARTING_DEADLINE;
pub use resources::{
    Backup, BackupSpec, BackupStatus, PrimaryRef, RESTORE_HOLD_ANNOTATION, Restore, RestoreSpec,
    RestoreStatus, RestoreTarget,
};

pub use naming::{
    NAME_BUDGET, final_backup_name, job_name, manual_backup_name, scheduled_backup_name,
};
pub use retention::{
    BackupPhase, BackupRecord, Retention, RetentionError, RetentionPolicy, to_delete,
};
pub use schedule::{
    MISSED_COUNT_CAP, RunningBackup, Schedule, ScheduleAction, ScheduleDecision, ScheduleError,
    ScheduleState, SkipReason, next_action,
};
