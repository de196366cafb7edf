//! Which of a primary's Backups to delete: retention richer than a count.
//!
//! Three rules keep a Backup, and a Backup is deleted only when none does
//! (see [`to_delete`]). The third is the point: a run of newer failures can
//! never push the last good backups out (Velero #9061 deleted the only
//! good backup that way).

use chrono::{DateTime, Utc};

/// How many failed Backups are kept for diagnosis when the plan does not
/// say.
pub const DEFAULT_KEEP_FAILED: u32 = 1;

/// Retention as a plugin's backup plan states it, before validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetentionPolicy {
    /// Keep the newest this many finished Backups, completed or failed.
    pub keep_last: u32,
    /// Keep the newest this many failed Backups, even past `keep_last`
    /// (default [`DEFAULT_KEEP_FAILED`]).
    pub keep_failed: u32,
    /// Never delete the newest this many completed Backups, even when more
    /// than `keep_last` newer ones failed. May exceed `keep_last`.
    pub always_keep_completed: u32,
}

impl Default for RetentionPolicy {
    /// Seven finished backups (a week of dailies), the newest failure, and
    /// always the newest good one.
    fn default() -> Self {
        RetentionPolicy {
            keep_last: 7,
            keep_failed: DEFAULT_KEEP_FAILED,
            always_keep_completed: 1,
        }
    }
}

/// Why a retention policy is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetentionError {
    /// Nothing would keep a completed backup.
    #[error(
        "backup retention keeps no completed backup (keepLast 0 and alwaysKeepCompleted 0): every backup would be deleted as soon as it completes; set keepLast or alwaysKeepCompleted to at least 1"
    )]
    KeepsNothing,
}

/// A retention policy that keeps at least one completed Backup; the only
/// input [`to_delete`] accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Retention {
    policy: RetentionPolicy,
}

impl Retention {
    /// Validates `policy`.
    ///
    /// Any combination is accepted except the one that keeps nothing:
    /// `always_keep_completed` above `keep_last` is meaningful (keep a
    /// deeper history of good backups than of all of them), and so is
    /// `keep_failed` above `keep_last`.
    ///
    /// # Errors
    ///
    /// [`RetentionError::KeepsNothing`] when `keep_last` and
    /// `always_keep_completed` are both 0: a backup that is deleted as soon
    /// as it completes is no backup, and a plan saying so is a mistake to
    /// report, not to carry out.
    pub fn new(policy: RetentionPolicy) -> Result<Retention, RetentionError> {
        if policy.keep_last == 0 && policy.always_keep_completed == 0 {
            return Err(RetentionError::KeepsNothing);
        }
        Ok(Retention { policy })
    }

    /// The validated policy.
    pub fn policy(&self) -> RetentionPolicy {
        self.policy
    }
}

/// Where a Backup stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackupPhase {
    /// Created, its Job not yet running.
    New,
    /// Its Job runs.
    Running,
    /// Its Job succeeded and reported where the data went.
    Completed,
    /// Its Job failed, or passed its deadline.
    Failed,
}

/// What retention needs to know of one Backup of the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupRecord {
    /// The Backup's name.
    pub name: String,
    /// Its phase.
    pub phase: BackupPhase,
    /// When it was taken: its `creationTimestamp` (for a scheduled Backup,
    /// at or after its slot). Orders Backups from newest to oldest; equal
    /// times are ordered by name, the name that sorts later counting as
    /// newer.
    pub created: DateTime<Utc>,
}

/// The names of the Backups `retention` deletes, oldest first.
///
/// `backups` are the Backups of one primary, on-demand ones included (the
/// host leaves out any a person asked to keep). A Backup is kept when any
/// rule keeps it:
///
/// 1. it is `New` or `Running`;
/// 2. it is among the newest `keep_last` finished (completed or failed);
/// 3. it is among the newest `keep_failed` failed;
/// 4. it is among the newest `always_keep_completed` completed.
///
/// # Guarantees
///
/// - A `New` or `Running` Backup is never deleted.
/// - The newest `always_keep_completed` (at least one, when `keep_last` is
///   0) completed Backups are never deleted, however many newer ones
///   failed.
/// - The result depends only on the set of Backups, not on their order in
///   `backups`.
#[must_use]
pub fn to_delete(retention: &Retention, backups: &[BackupRecord]) -> Vec<String> {
    let policy = retention.policy;
    let mut finished: Vec<&BackupRecord> = backups
        .iter()
        .filter(|backup| matches!(backup.phase, BackupPhase::Completed | BackupPhase::Failed))
        .collect();
    // Newest first; equal times by name, later names newer.
    finished.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| b.name.cmp(&a.name)));

    let mut failed_seen: u32 = 0;
    let mut completed_seen: u32 = 0;
    let mut doomed: Vec<&BackupRecord> = Vec::new();
    for (rank, backup) in (0u32..).zip(finished) {
        let newest_overall = rank < policy.keep_last;
        let kept_by_phase = match backup.phase {
            BackupPhase::Failed => {
                failed_seen += 1;
                failed_seen <= policy.keep_failed
            }
            _ => {
                completed_seen += 1;
                completed_seen <= policy.always_keep_completed
            }
        };
        if !newest_overall && !kept_by_phase {
            doomed.push(backup);
        }
    }
    doomed.reverse();
    doomed
        .into_iter()
        .map(|backup| backup.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(day: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, day, 3, 0, 0)
            .single()
            .unwrap()
    }

    fn backup(name: &str, phase: BackupPhase, day: u32) -> BackupRecord {
        BackupRecord {
            name: name.to_string(),
            phase,
            created: at(day),
        }
    }

    fn retention(keep_last: u32, keep_failed: u32, always_keep_completed: u32) -> Retention {
        Retention::new(RetentionPolicy {
            keep_last,
            keep_failed,
            always_keep_completed,
        })
        .unwrap()
    }

    use BackupPhase::{Completed, Failed, New, Running};

    #[test]
    fn the_oldest_beyond_keep_last_are_deleted_oldest_first() {
        let backups: Vec<BackupRecord> = (1..=5)
            .map(|day| backup(&format!("kv-{day}"), Completed, day))
            .collect();
        assert_eq!(to_delete(&retention(3, 1, 1), &backups), ["kv-1", "kv-2"]);
    }

    #[test]
    fn newer_failures_never_delete_the_last_good_backup() {
        let mut backups = vec![
            backup("kv-good-old", Completed, 1),
            backup("kv-good", Completed, 2),
        ];
        backups.extend((3..=7).map(|day| backup(&format!("kv-bad-{day}"), Failed, day)));
        let doomed = to_delete(&retention(3, 1, 1), &backups);
        assert!(!doomed.contains(&"kv-good".to_string()), "{doomed:?}");
        // keep_last keeps failures 7, 6, 5; the others go, and so does the
        // older good one (always_keep_completed is 1).
        assert_eq!(doomed, ["kv-good-old", "kv-bad-3", "kv-bad-4"]);
    }

    #[test]
    fn always_keep_completed_may_reach_deeper_than_keep_last() {
        let mut backups: Vec<BackupRecord> = (1..=3)
            .map(|day| backup(&format!("kv-good-{day}"), Completed, day))
            .collect();
        backups.extend((4..=8).map(|day| backup(&format!("kv-bad-{day}"), Failed, day)));
        let doomed = to_delete(&retention(2, 1, 3), &backups);
        assert_eq!(doomed, ["kv-bad-4", "kv-bad-5", "kv-bad-6"]);
    }

    #[test]
    fn the_newest_failure_is_kept_past_keep_last() {
        let backups = vec![
            backup("kv-bad", Failed, 1),
            backup("kv-good-2", Completed, 2),
            backup("kv-good-3", Completed, 3),
        ];
        assert!(to_delete(&retention(2, 1, 1), &backups).is_empty());
        assert_eq!(to_delete(&retention(2, 0, 1), &backups), ["kv-bad"]);
    }

    #[test]
    fn running_and_new_backups_are_never_deleted() {
        let backups = vec![
            backup("kv-running", Running, 1),
            backup("kv-new", New, 2),
            backup("kv-good-3", Completed, 3),
            backup("kv-good-4", Completed, 4),
        ];
        assert_eq!(to_delete(&retention(1, 0, 1), &backups), ["kv-good-3"]);
    }

    #[test]
    fn equal_times_are_ordered_by_name() {
        let backups = vec![
            backup("kv-b", Completed, 1),
            backup("kv-a", Completed, 1),
            backup("kv-c", Completed, 1),
        ];
        assert_eq!(to_delete(&retention(1, 0, 1), &backups), ["kv-a", "kv-b"]);
    }

    #[test]
    fn the_input_order_does_not_matter() {
        let mut backups = vec![
            backup("kv-1", Completed, 1),
            backup("kv-2", Failed, 2),
            backup("kv-3", Completed, 3),
            backup("kv-4", Failed, 4),
            backup("kv-5", Failed, 5),
        ];
        let policy = retention(2, 1, 1);
        let forward = to_delete(&policy, &backups);
        backups.reverse();
        assert_eq!(to_delete(&policy, &backups), forward);
        assert_eq!(forward, ["kv-1", "kv-2"]);
    }

    #[test]
    fn keep_last_zero_still_keeps_the_last_good_ones() {
        let backups = vec![
            backup("kv-1", Completed, 1),
            backup("kv-2", Completed, 2),
            backup("kv-3", Failed, 3),
        ];
        assert_eq!(to_delete(&retention(0, 0, 1), &backups), ["kv-1", "kv-3"]);
    }

    #[test]
    fn a_policy_that_keeps_nothing_is_refused() {
        let error = Retention::new(RetentionPolicy {
            keep_last: 0,
            keep_failed: 3,
            always_keep_completed: 0,
        })
        .unwrap_err();
        assert_eq!(error, RetentionError::KeepsNothing);
        assert!(error.to_string().contains("at least 1"), "{error}");
        assert!(Retention::new(RetentionPolicy::default()).is_ok());
        assert_eq!(RetentionPolicy::default().keep_failed, DEFAULT_KEEP_FAILED);
    }

    #[test]
    fn nothing_to_delete_in_an_empty_history() {
        assert!(to_delete(&retention(1, 1, 1), &[]).is_empty());
    }
}
