//! What the host observed of a rollout candidate, per plugin: the blackboard
//! the controller writes (dry-run progress and failures, shadow comparisons)
//! and the canary analysis reads ([`CanaryObservations`]).
//!
//! # Bounded memory
//!
//! - The agreement flag of at most [`MAX_OBJECTS`] objects is kept (more
//!   objects are still counted, their flag is not kept).
//! - The latest diff of at most [`MAX_DIFFS`] objects is kept: an object
//!   that already has one gets it replaced, a new object past the bound is
//!   counted in [`ShadowCounts::diffs_not_kept`].
//! - At most [`MAX_KINDS`] kinds of difference and [`MAX_DRY_RUN_FAILURES`]
//!   dry-run failures are kept, the rest counted.

use crate::util::lock;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::loaded_version::LoadedVersion;

/// Objects whose agreement flag is kept.
pub const MAX_OBJECTS: usize = 100_000;
/// Objects whose latest diff is kept.
pub const MAX_DIFFS: usize = 1_000;
/// Kinds of difference kept (with their first sample).
pub const MAX_KINDS: usize = 100;
/// Dry-run failures kept.
pub const MAX_DRY_RUN_FAILURES: usize = 100;

/// A primary object, as named in diffs and reports.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectName {
    /// Its namespace; `None` for a cluster-scoped primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its UID.
    pub uid: String,
}

impl std::fmt::Display for ObjectName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One differing field of two answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldDiff {
    /// Where, e.g. `children[apps/v1/Deployment/team-a/web].spec.replicas`,
    /// `status.url`, `conditions[Ready].reason`, `events[0].message`,
    /// `requeueAfterMs`. A child in one answer only is one entry at
    /// `children[...]`.
    pub path: String,
    /// The stable version's value; `None` when absent from its answer.
    pub stable: Option<Value>,
    /// The candidate's value; `None` when absent from its answer.
    pub candidate: Option<Value>,
}

/// The latest disagreement on one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectDiff {
    /// The primary.
    pub object: ObjectName,
    /// Every differing field, in a deterministic order (sorted by path).
    pub fields: Vec<FieldDiff>,
    /// The kind of difference (see [`DiffKind`]).
    pub signature: String,
    /// When it was seen (RFC 3339).
    pub seen_at: String,
}

/// A kind of difference: the set of differing paths with object names
/// abstracted away (children keyed by `apiVersion/Kind` only), so 100
/// objects differing the same way are one kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiffKind {
    /// 1 for the first kind seen of this candidate, then 2, 3...: a reader
    /// that remembers the highest it reported knows which kinds are new.
    pub seq: u64,
    /// The abstracted paths joined by `, `.
    pub signature: String,
    /// Comparisons that ended in this kind (objects may repeat).
    pub occurrences: u64,
    /// The first diff of this kind.
    pub sample: ObjectDiff,
}

/// Shadow comparison counts of one candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowCounts {
    /// Comparisons made (same + differing).
    pub compared: u64,
    /// Comparisons whose answers agreed.
    pub same: u64,
    /// Comparisons whose answers differed.
    pub differing: u64,
    /// Candidate computations that failed (trap, timeout, failure, invalid
    /// output, refused plan); not comparisons.
    pub errors: u64,
    /// Reconciles not shadowed because `shadowConcurrency` candidate calls
    /// were already running.
    pub skipped: u64,
    /// Objects whose latest answers differ now.
    pub objects_differing: u64,
    /// Objects whose latest answers agree now.
    pub objects_agreeing: u64,
    /// Differing objects whose diff was not kept (past [`MAX_DIFFS`]).
    pub diffs_not_kept: u64,
    /// Differences of a new kind not kept (past [`MAX_KINDS`]).
    pub kinds_not_kept: u64,
}

/// The outcome of one shadow computation, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShadowOutcome {
    /// The answers agree.
    Same,
    /// The answers differ in these fields (sorted) of this signature.
    Differ {
        /// The differing fields.
        fields: Vec<FieldDiff>,
        /// Their kind of difference.
        signature: String,
    },
    /// The candidate failed: its reason and message.
    Error {
        /// The reason (a [`crate::contract::Reason`]), e.g. `PluginTimeout`.
        reason: String,
        /// What failed.
        message: String,
    },
}

/// Where a dry run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum DryRunState {
    /// Not started (the controller starts it when the candidate is set in
    /// [`super::Rollout::DryRun`] and the caches have synced).
    #[default]
    Pending,
    /// Objects are being computed.
    Running,
    /// Every object that existed at the start was computed.
    Finished,
}

/// An object the candidate would fail on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunFailure {
    /// The primary.
    pub object: ObjectName,
    /// The reason (a [`crate::contract::Reason`]), e.g. `PluginTrap`,
    /// `ReconcileFailed`, `CapabilityDenied` or `UpgradeFailed`.
    pub reason: String,
    /// What failed, as the stable reconcile would have reported it.
    pub message: String,
}

/// Progress and findings of a candidate's dry run.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DryRunReport {
    /// Where it stands.
    pub state: DryRunState,
    /// Primaries to compute (those that existed when it started).
    pub total: u64,
    /// Primaries computed so far (passed or failed).
    pub done: u64,
    /// Primaries the candidate failed on.
    pub failed: u64,
    /// The first [`MAX_DRY_RUN_FAILURES`] of them, sorted by object.
    pub failures: Vec<DryRunFailure>,
}

impl DryRunReport {
    /// True once finished without a failure.
    pub fn passed(&self) -> bool {
        self.state == DryRunState::Finished && self.failed == 0
    }
}

#[derive(Debug, Default)]
struct ShadowStore {
    counts: ShadowCounts,
    /// Per object UID: whether its latest answers agreed.
    agrees: BTreeMap<String, bool>,
    diffs: BTreeMap<String, ObjectDiff>,
    kinds: Vec<DiffKind>,
}

/// The shared blackboard of one rollout candidate: the controller records,
/// the canary analysis and the CLI read. Read with the accessors; every one
/// returns a copy taken under a short lock.
#[derive(Debug)]
pub struct CanaryObservations {
    stable: LoadedVersion,
    candidate: LoadedVersion,
    shadow: Mutex<ShadowStore>,
    dry_run: Mutex<DryRunReport>,
    permits: Mutex<(usize, Arc<Semaphore>)>,
    stop: CancellationToken,
}

impl CanaryObservations {
    /// Empty observations of `candidate` beside `stable`, allowing
    /// `shadow_concurrency` candidate computations at once.
    pub fn new(
        stable: LoadedVersion,
        candidate: LoadedVersion,
        shadow_concurrency: usize,
    ) -> CanaryObservations {
        let n = shadow_concurrency.max(1);
        CanaryObservations {
            stable,
            candidate,
            shadow: Mutex::default(),
            dry_run: Mutex::default(),
            permits: Mutex::new((n, Arc::new(Semaphore::new(n)))),
            stop: CancellationToken::new(),
        }
    }

    /// The stable version the candidate is compared with.
    pub fn stable(&self) -> &LoadedVersion {
        &self.stable
    }

    /// The candidate.
    pub fn candidate(&self) -> &LoadedVersion {
        &self.candidate
    }

    /// Shadow comparison counts.
    pub fn shadow_counts(&self) -> ShadowCounts {
        lock(&self.shadow).counts
    }

    /// The latest diff of every object whose latest answers differ (at most
    /// [`MAX_DIFFS`]), sorted by object.
    pub fn differing_objects(&self) -> Vec<ObjectDiff> {
        let mut out: Vec<ObjectDiff> = lock(&self.shadow).diffs.values().cloned().collect();
        out.sort_by(|a, b| a.object.cmp(&b.object));
        out
    }

    /// The latest diff of the object with `uid`, if its answers differ now.
    pub fn diff_of(&self, uid: &str) -> Option<ObjectDiff> {
        lock(&self.shadow).diffs.get(uid).cloned()
    }

    /// Whether the latest answers for the object with `uid` agreed; `None`
    /// when it was never compared.
    pub fn agrees(&self, uid: &str) -> Option<bool> {
        lock(&self.shadow).agrees.get(uid).copied()
    }

    /// The kinds of difference seen, in the order first seen (at most
    /// [`MAX_KINDS`]); see [`DiffKind::seq`].
    pub fn diff_kinds(&self) -> Vec<DiffKind> {
        lock(&self.shadow).kinds.clone()
    }

    /// The dry run's progress and findings.
    pub fn dry_run(&self) -> DryRunReport {
        lock(&self.dry_run).clone()
    }

    /// Fires when the candidate leaves its plugin's version set (dropped,
    /// replaced or promoted): background work on it stops.
    pub fn stopped(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops background work on this candidate.
    pub(crate) fn stop(&self) {
        self.stop.cancel();
    }

    /// A permit for one candidate computation, or `None` when
    /// `shadow_concurrency` already run (the caller skips, never waits).
    pub(crate) fn try_permit(&self) -> Option<OwnedSemaphorePermit> {
        let semaphore = lock(&self.permits).1.clone();
        semaphore.try_acquire_owned().ok()
    }

    /// A permit for one candidate computation, waiting for one (the dry run
    /// paces itself this way); `None` once stopped.
    pub(crate) async fn permit(&self) -> Option<OwnedSemaphorePermit> {
        let semaphore = lock(&self.permits).1.clone();
        tokio::select! {
            _ = self.stop.cancelled() => None,
            permit = semaphore.acquire_owned() => permit.ok(),
        }
    }

    /// Uses `n` concurrent computations from now on. Computations holding a
    /// permit of the old bound finish on it.
    pub(crate) fn set_concurrency(&self, n: usize) {
        let n = n.max(1);
        let mut permits = lock(&self.permits);
        if permits.0 != n {
            *permits = (n, Arc::new(Semaphore::new(n)));
        }
    }

    /// Counts a reconcile that was not shadowed (no permit free).
    pub(crate) fn record_skipped(&self) {
        lock(&self.shadow).counts.skipped += 1;
    }

    /// Records one shadow computation on `object` at `now` (RFC 3339).
    pub(crate) fn record_shadow(&self, object: ObjectName, outcome: ShadowOutcome, now: &str) {
        let mut store = lock(&self.shadow);
        let uid = object.uid.clone();
        let agrees = match outcome {
            ShadowOutcome::Error { .. } => {
                store.counts.errors += 1;
                return;
            }
            ShadowOutcome::Same => {
                store.counts.compared += 1;
                store.counts.same += 1;
                store.diffs.remove(&uid);
                true
            }
            ShadowOutcome::Differ { fields, signature } => {
                store.counts.compared += 1;
                store.counts.differing += 1;
                let diff = ObjectDiff {
                    object,
                    fields,
                    signature: signature.clone(),
                    seen_at: now.to_string(),
                };
                if let Some(kind) = store.kinds.iter_mut().find(|k| k.signature == signature) {
                    kind.occurrences += 1;
                } else if store.kinds.len() < MAX_KINDS {
                    let seq = store.kinds.len() as u64 + 1;
                    store.kinds.push(DiffKind {
                        seq,
                        signature,
                        occurrences: 1,
                        sample: diff.clone(),
                    });
                } else {
                    store.counts.kinds_not_kept += 1;
                }
                if store.diffs.contains_key(&uid) || store.diffs.len() < MAX_DIFFS {
                    store.diffs.insert(uid.clone(), diff);
                } else {
                    store.counts.diffs_not_kept += 1;
                }
                false
            }
        };
        if store.agrees.contains_key(&uid) || store.agrees.len() < MAX_OBJECTS {
            // Kept incrementally: one comparison is O(log n), whatever n.
            match store.agrees.insert(uid, agrees) {
                Some(true) => store.counts.objects_agreeing -= 1,
                Some(false) => store.counts.objects_differing -= 1,
                None => {}
            }
            if agrees {
                store.counts.objects_agreeing += 1;
            } else {
                store.counts.objects_differing += 1;
            }
        }
    }

    /// Starts a dry run over `total` objects (forgetting an earlier one).
    pub(crate) fn dry_run_started(&self, total: u64) {
        *lock(&self.dry_run) = DryRunReport {
            state: DryRunState::Running,
            total,
            ..DryRunReport::default()
        };
    }

    /// Records one object of the dry run: `None` when the candidate passed.
    pub(crate) fn dry_run_object(&self, failure: Option<DryRunFailure>) {
        let mut report = lock(&self.dry_run);
        report.done += 1;
        if let Some(failure) = failure {
            report.failed += 1;
            if report.failures.len() < MAX_DRY_RUN_FAILURES {
                report.failures.push(failure);
                report.failures.sort_by(|a, b| a.object.cmp(&b.object));
            }
        }
    }

    /// Marks the dry run finished.
    pub(crate) fn dry_run_finished(&self) {
        lock(&self.dry_run).state = DryRunState::Finished;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(v: &str) -> LoadedVersion {
        LoadedVersion {
            name: "webapp".into(),
            version: v.into(),
            digest: format!("sha256:{v}"),
            source: "file:/x".into(),
        }
    }

    fn object(i: usize) -> ObjectName {
        ObjectName {
            namespace: Some("ns".into()),
            name: format!("o{i}"),
            uid: format!("u{i}"),
        }
    }

    #[test]
    fn counts_latest_state_and_kinds() {
        let obs = CanaryObservations::new(version("1.0.0"), version("1.1.0"), 1);
        let differ = |path: &str| ShadowOutcome::Differ {
            fields: vec![FieldDiff {
                path: path.into(),
                stable: Some(json!(1)),
                candidate: Some(json!(2)),
            }],
            signature: path.into(),
        };
        obs.record_shadow(object(1), differ("spec.replicas"), "t1");
        obs.record_shadow(object(2), differ("spec.replicas"), "t1");
        obs.record_shadow(object(3), ShadowOutcome::Same, "t1");
        obs.record_shadow(object(2), differ("status.url"), "t2");
        obs.record_shadow(object(1), ShadowOutcome::Same, "t2");
        obs.record_shadow(
            object(4),
            ShadowOutcome::Error {
                reason: "PluginTimeout".into(),
                message: "slow".into(),
            },
            "t2",
        );
        obs.record_skipped();
        let counts = obs.shadow_counts();
        assert_eq!(
            (
                counts.compared,
                counts.same,
                counts.differing,
                counts.errors,
                counts.skipped
            ),
            (5, 2, 3, 1, 1)
        );
        assert_eq!((counts.objects_differing, counts.objects_agreeing), (1, 2));
        let diffs = obs.differing_objects();
        assert_eq!(diffs.len(), 1);
        assert_eq!(diffs[0].object.name, "o2");
        assert_eq!(diffs[0].signature, "status.url");
        let kinds = obs.diff_kinds();
        assert_eq!(
            kinds
                .iter()
                .map(|k| (k.seq, k.occurrences))
                .collect::<Vec<_>>(),
            [(1, 2), (2, 1)]
        );
        assert_eq!(kinds[0].sample.object.name, "o1");
        assert_eq!(obs.agrees("u1"), Some(true));
        assert_eq!(obs.agrees("u9"), None);
    }

    #[test]
    fn dry_run_report_is_bounded_and_sorted() {
        let obs = CanaryObservations::new(version("1.0.0"), version("1.1.0"), 1);
        obs.dry_run_started(MAX_DRY_RUN_FAILURES as u64 + 10);
        for i in (0..MAX_DRY_RUN_FAILURES + 5).rev() {
            obs.dry_run_object(Some(DryRunFailure {
                object: object(i),
                reason: "PluginFailed".into(),
                message: "no".into(),
            }));
        }
        obs.dry_run_object(None);
        obs.dry_run_finished();
        let report = obs.dry_run();
        assert_eq!(report.state, DryRunState::Finished);
        assert_eq!(
            (report.done, report.failed),
            (
                MAX_DRY_RUN_FAILURES as u64 + 6,
                MAX_DRY_RUN_FAILURES as u64 + 5
            )
        );
        assert_eq!(report.failures.len(), MAX_DRY_RUN_FAILURES);
        assert!(
            report
                .failures
                .windows(2)
                .all(|w| w[0].object <= w[1].object)
        );
        assert!(!report.passed());
    }
}
