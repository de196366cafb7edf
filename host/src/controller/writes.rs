//! The writing half of a reconcile: every plan it makes goes through one
//! [`WritePlan`] (the kube-backed [`crate::apply::Writer`], or a recording
//! one in tests), and what the controller does next follows from what was
//! decided and written. Nothing here calls a plugin or reads a cache, so
//! each branch of the shell (outside the grant, hot loop, upgrade, fenced,
//! refused) is tested without a cluster.

use std::time::Duration;

use chrono::Utc;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;

use super::backoff;
use super::error::ReconcileError;
use crate::apply::{AppliedChildren, ApplyError, Executed, PrimaryWrites, WritePlan};
use crate::cache::CacheLease;
use crate::contract::{Manifest, Reason, ReconcileLimits};
use crate::migration::{MigrationError, UpgradeOutcome};
use crate::plan::{self, FailureReport, Limit, Plan, PlannedEvent, Requeue, display_name};
use crate::telemetry::{Metrics, WriteKind};

/// How often a healthy object is reconciled even if nothing changes, so drift
/// the watches cannot see is eventually corrected.
const RESYNC: Duration = Duration::from_secs(600);

/// Requeue delay after the object changed under an upgrade: the change
/// itself is the next thing to reconcile, there is nothing to back off from.
const RETRY_AFTER_CONFLICT_MS: u64 = 200;

/// What a successful reconcile asks of the controller.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Outcome {
    pub action: Action,
    /// The plugin asked for a requeue (`controller_runtime_reconcile_total{result="requeue"}`).
    pub requeue: bool,
}

impl Outcome {
    fn after_ms(ms: u64) -> Outcome {
        Outcome {
            action: Action::requeue(Duration::from_millis(ms.max(1))),
            requeue: true,
        }
    }

    /// What the controller does after a plan was carried out.
    pub(super) fn of(requeue: Requeue) -> Outcome {
        match requeue {
            Requeue::AfterMs(ms) => Outcome::after_ms(ms),
            Requeue::Resync => Outcome {
                action: Action::requeue(RESYNC),
                requeue: false,
            },
            // `Backoff` belongs to failure plans, which never get here: the
            // error policy decides their retry. Waiting is the safe reading.
            Requeue::AwaitChange | Requeue::Backoff => Outcome {
                action: Action::await_change(),
                requeue: false,
            },
        }
    }

    /// The object changed during its upgrade: look again shortly.
    pub(super) fn retry_after_conflict() -> Outcome {
        Outcome::after_ms(RETRY_AFTER_CONFLICT_MS)
    }
}

/// What the version checks decided before a reconcile.
#[derive(Debug)]
pub(super) enum Prepared {
    /// Reconcile; with the object as written when it was just upgraded.
    Ready(Option<Box<DynamicObject>>),
    /// The object changed during its upgrade; try again shortly.
    Retry,
}

/// How long a reconcile whose writes were dropped at a closed gate waits
/// before it looks again.
pub(super) const FENCED_RETRY: Duration = Duration::from_secs(5);

/// What follows a fenced reconcile. An object a later term wrote
/// ([`ReconcileError::StaleTerm`]) is that term's leader's: wait for a
/// change. Writes dropped because this replica's gate was closed (a
/// renewal late or lost) are looked at again after [`FENCED_RETRY`]: the
/// gate may reopen without the shard ever changing hands (the next renewal
/// succeeds), and then nothing else would trigger the object (found by the
/// chaos harness under API latency). If the shard did move, the retry is
/// skipped at once by the entry check.
pub(super) fn after_fenced(error: &ReconcileError) -> Action {
    match error {
        ReconcileError::StaleTerm { .. } => Action::await_change(),
        _ => Action::requeue(FENCED_RETRY),
    }
}

/// kube-runtime's error policy for `error` after `failures` failures in a
/// row: permanent failures wait for the object to change, everything else
/// backs off per object.
pub(super) fn after_failure(error: &ReconcileError, failures: u32) -> Action {
    if error.is_permanent() {
        return Action::await_change();
    }
    Action::requeue(backoff::delay(failures.max(1)))
}

/// What the host remembers of its writes: the children it applied and its
/// last write to each primary.
#[derive(Clone, Copy)]
pub(super) struct Memory<'a> {
    pub applied: &'a AppliedChildren,
    /// The owned kinds' caches, for [`AppliedChildren::record`]'s sweep.
    pub owned: &'a [CacheLease],
    pub primary_writes: &'a PrimaryWrites,
}

/// Writes one reconcile's plans through `writer`, counting them in
/// `metrics` for `plugin`.
pub(super) struct Shell<'a, W> {
    pub writer: W,
    pub plugin: &'a str,
    pub metrics: &'a Metrics,
    /// `None` in tests: nothing to remember.
    pub memory: Option<Memory<'a>>,
}

impl<W: WritePlan> Shell<'_, W> {
    /// Carries out `plan`, remembering what was written, logging and
    /// counting it.
    ///
    /// # Errors
    ///
    /// The writer's: the plan stopped at the first failing write.
    pub(super) async fn write(&self, obj: &DynamicObject, plan: &Plan) -> Result<(), ApplyError> {
        let executed = self.writer.write_plan(obj, plan).await?;
        if let Some(memory) = self.memory {
            memory.applied.record(&executed, memory.owned);
            if let Some(resource_version) = &executed.primary_resource_version {
                memory
                    .primary_writes
                    .record(obj.metadata.uid.as_deref(), resource_version);
            }
        }
        self.count(obj, plan, &executed);
        Ok(())
    }

    fn count(&self, obj: &DynamicObject, plan: &Plan, executed: &Executed) {
        let writes = executed.writes();
        let (m, plugin) = (self.metrics, self.plugin);
        m.writes(plugin, WriteKind::Apply, writes.apply);
        m.writes(plugin, WriteKind::Prune, writes.prune);
        m.writes(plugin, WriteKind::Status, writes.status);
        // One count per request: a metadata patch that carries the finalizer
        // (and the marks with it) is a finalizer write; the rest carry marks.
        let finalizer = usize::from(executed.finalizer != plan::FinalizerChange::Unchanged);
        m.writes(plugin, WriteKind::Finalizer, finalizer);
        m.writes(
            plugin,
            WriteKind::Annotations,
            writes.metadata.saturating_sub(finalizer),
        );
        m.events(plugin, executed.events, plan.events_dropped);
        tracing::debug!(
            plugin = %plugin,
            object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
            writes = writes.objects(),
            events = writes.events,
            ?executed,
            "plan executed"
        );
    }

    /// A primary outside the grant (e.g. queued by a reconcile-all, or a
    /// related object's event): the plugin is never called and nothing is
    /// written to it, not even a condition. One exception: a deleting
    /// primary that still holds the host's finalizer (added before the grant
    /// narrowed) is released ([`plan::host::outside_grant`]; `self.writer`
    /// writes as the host, since the plugin may no longer act there), so
    /// nothing is left Terminating. `granted` describes the grant.
    pub(super) async fn outside_grant(&self, obj: &DynamicObject, granted: &str) -> Action {
        let name = display_name(obj.namespace().as_deref(), &obj.name_any());
        let plugin = self.plugin;
        let release = plan::host::outside_grant(obj);
        if release.is_noop() {
            tracing::debug!(
                plugin = %plugin, object = %name, granted = %granted,
                "skipping a primary outside the plugin's granted namespaces"
            );
            return Action::await_change();
        }
        // Not counted with the plugin's writes: the host releases its own
        // finalizer, as itself.
        match self.writer.write_plan(obj, &release).await {
            Ok(_) => {
                tracing::warn!(
                    target: "audit", plugin = %plugin, object = %name, granted = %granted,
                    "released the host's finalizer from a deleting primary outside the plugin's grant; finalize was not called"
                );
                Action::await_change()
            }
            Err(error) => {
                tracing::warn!(plugin = %plugin, object = %name, %error, "cannot release the host's finalizer; retrying");
                Action::requeue(backoff::delay(1))
            }
        }
    }

    /// The object is reconciled more often than its rate limit allows:
    /// nothing is called or written now, the reconcile waits `wait` for the
    /// next token. The `first` delay of a streak records a `HotLoop` Warning
    /// event ([`plan::host::hot_loop`]); the next reconcile that runs reports
    /// the loop in `Degraded` ([`plan::reconcile`]).
    pub(super) async fn hot_loop(
        &self,
        obj: &DynamicObject,
        limits: &ReconcileLimits,
        wait: Duration,
        first: bool,
    ) -> Outcome {
        self.metrics
            .limit_breach(self.plugin, Limit::ReconcileRate.as_str());
        let plan = plan::host::hot_loop(self.plugin, limits, wait, first);
        if let Some(event) = plan.events.first() {
            tracing::warn!(
                plugin = %self.plugin,
                object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
                "{}", event.message
            );
        }
        if !plan.is_noop()
            && let Err(error) = self.write(obj, &plan).await
        {
            // Events are best effort; only a closed gate stops this one.
            tracing::debug!(plugin = %self.plugin, %error, "the hot-loop event was not recorded");
        }
        Outcome::of(plan.requeue)
    }

    /// What an upgrade walk's `result` means for the reconcile of the object
    /// `manifest`'s version upgrades from `from`: an upgraded object is
    /// reported by an `Upgraded` event ([`plan::host::upgraded`]) and
    /// reconciled as written; a conflict retries shortly; any other failure
    /// fails the reconcile. `digest`, `kind` and `object` (its display
    /// name) are for the log.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Upgrade`] when the walk failed other than by a
    /// conflict.
    pub(super) async fn upgrade(
        &self,
        result: Result<UpgradeOutcome, MigrationError>,
        manifest: &Manifest,
        from: &str,
        digest: &str,
        (kind, object): (&str, &str),
    ) -> Result<Prepared, ReconcileError> {
        match result {
            Ok(UpgradeOutcome::Current(current)) => Ok(Prepared::Ready(Some(current))),
            Ok(UpgradeOutcome::Upgraded(written)) => {
                tracing::info!(
                    target: "audit", plugin = %manifest.name, from = %from, to = %manifest.version,
                    digest = %digest, kind = %kind, object = %object,
                    "object upgraded"
                );
                // Best effort, and not counted with the reconcile's events
                // (the upgrade is the walk's write, reported here).
                if let Err(error) = self
                    .writer
                    .write_plan(&written, &plan::host::upgraded(manifest, from))
                    .await
                {
                    tracing::debug!(plugin = %manifest.name, %error, "the upgrade event was not recorded");
                }
                Ok(Prepared::Ready(Some(written)))
            }
            Err(MigrationError::Conflict { .. }) => {
                tracing::debug!(plugin = %manifest.name, object = %object, "object changed during its upgrade; retrying");
                Ok(Prepared::Retry)
            }
            Err(error) => {
                tracing::warn!(
                    target: "audit", plugin = %manifest.name, from = %from, to = %manifest.version,
                    kind = %kind, object = %object, %error, "object upgrade failed"
                );
                Err(error.into())
            }
        }
    }

    /// A failed reconcile of `obj` by `version` (of `plugin`, with `limits`).
    /// Fenced (a later leader wrote the object, or the gate closed): nothing
    /// is written, not even the failure ([`after_fenced`] says when to look
    /// again). Otherwise the failure is reported on the object and `error`
    /// returned for the error policy; `correlate` passes the report's events
    /// through the object's event rate.
    ///
    /// # Errors
    ///
    /// `error` itself unless fenced.
    pub(super) async fn fail(
        &self,
        obj: &DynamicObject,
        (plugin, version): (&str, &str),
        limits: &ReconcileLimits,
        error: ReconcileError,
        correlate: impl FnOnce(Vec<PlannedEvent>) -> (Vec<PlannedEvent>, usize),
    ) -> Result<Action, ReconcileError> {
        if error.is_fenced() {
            // Not a failure of the plugin or of the object: nothing is
            // reported on it (it belongs to the leader).
            self.metrics.fenced_write(self.plugin);
            tracing::warn!(
                target: "audit", plugin = %self.plugin,
                object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
                reason = Reason::Fenced.as_str(), "{error}"
            );
            return Ok(after_fenced(&error));
        }
        self.report_failure(obj, (plugin, version), limits, &error, correlate)
            .await;
        Err(error)
    }

    /// Puts a failure on the object: `Degraded=True` and `Ready=False` with
    /// the failure's reason, and a Warning event with the same reason
    /// ([`plan::failure`]). Best effort: a failure to report is logged, the
    /// reconcile error still drives the retry.
    async fn report_failure(
        &self,
        obj: &DynamicObject,
        (plugin, version): (&str, &str),
        limits: &ReconcileLimits,
        error: &ReconcileError,
        correlate: impl FnOnce(Vec<PlannedEvent>) -> (Vec<PlannedEvent>, usize),
    ) {
        let mut message = error.message(plugin, version);
        if message.len() > limits.max_condition_message_bytes {
            // A plugin's failure message is its own text: bounded like a
            // condition message before it reaches the object or the log.
            message = crate::util::truncate(&message, limits.max_condition_message_bytes);
            self.metrics
                .limit_breach(plugin, Limit::ConditionMessage.as_str());
        }
        let report = FailureReport {
            reason: error.reason().to_string(),
            message,
        };
        tracing::warn!(
            plugin = %plugin, version = %version, reason = %report.reason,
            object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
            "{}", report.message
        );
        // API write failures are not the plugin's; everything else is.
        if !matches!(error, ReconcileError::Apply(ApplyError::Api { .. })) {
            self.metrics.plugin_failure(plugin, version, error.reason());
        }
        // The API server refused the plugin's output: a refusal like the plan's.
        if let ReconcileError::Apply(
            e @ (ApplyError::Rejected { .. } | ApplyError::Conflict { .. }),
        ) = error
        {
            self.metrics.refusal(plugin, e.reason());
        }
        let status_refused = matches!(error, ReconcileError::Apply(e) if e.is_status_refusal());
        if status_refused && shows_failure(obj, &report) {
            // Already on the object for this generation: the reconcile ran
            // again for another cause (a child changed), not a retry the
            // message promised not to make; report the refusal once.
            return;
        }
        let mut plan = plan::failure(obj, &report, Utc::now());
        if status_refused && let Some(status) = plan.status.as_mut().and_then(|s| s.as_object_mut())
        {
            // This generation's status was never written: `observedGeneration`
            // stays where the last accepted status put it (a merge patch
            // without it leaves it as it is).
            status.remove("observedGeneration");
        }
        let (events, dropped) = correlate(std::mem::take(&mut plan.events));
        plan.events = events;
        plan.events_dropped = dropped;
        if dropped > 0 {
            self.metrics.limit_breach(plugin, Limit::EventRate.as_str());
        }
        if let Err(e) = self.write(obj, &plan).await {
            tracing::warn!(plugin = %plugin, error = %e, "cannot write the failure status");
        }
    }
}

/// True when `obj` already shows `report` as its `Degraded` condition for
/// its current generation (the cache shows the host's earlier report).
fn shows_failure(obj: &DynamicObject, report: &FailureReport) -> bool {
    let conditions = obj
        .data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array);
    conditions.into_iter().flatten().any(|c| {
        let text = |field: &str| c.get(field).and_then(serde_json::Value::as_str);
        text("type") == Some("Degraded")
            && text("status") == Some("True")
            && text("reason") == Some(report.reason.as_str())
            && text("message") == Some(report.message.as_str())
            && c.get("observedGeneration")
                .and_then(serde_json::Value::as_i64)
                == obj.metadata.generation
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    use super::*;
    use crate::apply::Recording;
    use crate::plan::test_support::{manifest, primary};
    use crate::plan::{EventAction, FINALIZER, FinalizerChange};

    fn shell(writer: Recording, metrics: &Metrics) -> Shell<'_, Recording> {
        Shell {
            writer,
            plugin: "webapp",
            metrics,
            memory: None,
        }
    }

    fn fenced() -> ApplyError {
        ApplyError::Fenced {
            target: "WebApp prod/shop".into(),
        }
    }

    fn deleting_with_the_finalizer() -> DynamicObject {
        let mut obj = primary();
        obj.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
        obj.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        obj
    }

    fn limits() -> ReconcileLimits {
        ReconcileLimits {
            reconcile_burst: 5,
            reconcile_refill: Duration::from_millis(200),
            ..ReconcileLimits::default()
        }
    }

    /// `action` is the retry after `failures` failures: the backoff's delay,
    /// within its ±10 % jitter.
    fn assert_backs_off(action: &Action, failures: u32) {
        let nominal = backoff::BASE.as_secs_f64() * f64::from(1u32 << (failures - 1));
        let debug = format!("{action:?}");
        let seconds: f64 = debug
            .split("Some(")
            .nth(1)
            .and_then(|rest| rest.split("s)").next())
            .and_then(|secs| secs.parse().ok())
            .unwrap_or_else(|| panic!("a requeue in seconds, got {debug}"));
        assert!(
            (nominal * 0.9..=nominal * 1.1).contains(&seconds),
            "{seconds} s is not the backoff after {failures} failures"
        );
    }

    /// Lets every event through, dropping none.
    fn no_rate(events: Vec<PlannedEvent>) -> (Vec<PlannedEvent>, usize) {
        (events, 0)
    }

    #[tokio::test]
    async fn outside_the_grant_nothing_is_written_to_a_live_primary() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let mut holding = primary();
        holding.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
        for obj in [primary(), holding] {
            let action = shell.outside_grant(&obj, "team-a").await;
            assert_eq!(action, Action::await_change());
        }
        assert!(shell.writer.written().is_empty());
    }

    #[tokio::test]
    async fn outside_the_grant_a_deleting_primary_is_released_by_one_finalizer_write() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let action = shell
            .outside_grant(&deleting_with_the_finalizer(), "team-a")
            .await;
        assert_eq!(action, Action::await_change());
        let written = shell.writer.written();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].object, "prod/shop");
        let plan = &written[0].plan;
        assert_eq!(plan.finalizer, FinalizerChange::Remove);
        assert!(plan.events.is_empty() && plan.status.is_none() && plan.apply.is_empty());
        // Not one of the plugin's writes.
        assert!(
            !metrics
                .encode()
                .contains("wasm_operator_writes_total{plugin")
        );
    }

    #[tokio::test]
    async fn a_release_outside_the_grant_that_fails_is_retried() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new().then(Err(fenced())), &metrics);
        let action = shell
            .outside_grant(&deleting_with_the_finalizer(), "team-a")
            .await;
        assert_backs_off(&action, 1);
        assert_eq!(shell.writer.written().len(), 1);
    }

    #[tokio::test]
    async fn the_first_delay_of_a_hot_loop_records_its_event_and_the_rest_write_nothing() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let obj = primary();
        let first = shell
            .hot_loop(&obj, &limits(), Duration::from_millis(150), true)
            .await;
        let again = shell
            .hot_loop(&obj, &limits(), Duration::from_millis(90), false)
            .await;
        assert_eq!(
            first,
            Outcome {
                action: Action::requeue(Duration::from_millis(150)),
                requeue: true
            }
        );
        assert_eq!(again.action, Action::requeue(Duration::from_millis(90)));
        let written = shell.writer.written();
        assert_eq!(written.len(), 1, "only the first delay writes");
        let plan = &written[0].plan;
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].reason, "HotLoop");
        assert!(plan.events[0].warning);
        assert!(plan.status.is_none() && plan.annotations.is_empty());
        assert_eq!(plan.finalizer, FinalizerChange::Unchanged);
    }

    #[tokio::test]
    async fn a_hot_loop_event_the_gate_refuses_still_delays_the_reconcile() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new().then(Err(fenced())), &metrics);
        let outcome = shell
            .hot_loop(&primary(), &limits(), Duration::from_millis(150), true)
            .await;
        assert_eq!(outcome.action, Action::requeue(Duration::from_millis(150)));
        assert_eq!(shell.writer.written().len(), 1);
    }

    fn upgraded_object() -> DynamicObject {
        let mut obj = primary();
        obj.metadata.resource_version = Some("42".into());
        obj
    }

    #[tokio::test]
    async fn an_upgraded_object_is_reported_on_the_object_as_written() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let written = upgraded_object();
        let prepared = shell
            .upgrade(
                Ok(UpgradeOutcome::Upgraded(Box::new(written.clone()))),
                &manifest(),
                "1.1.0",
                "sha256:abc",
                ("WebApp", "prod/shop"),
            )
            .await;
        match prepared {
            Ok(Prepared::Ready(Some(obj))) => assert_eq!(*obj, written),
            other => panic!("expected the written object, got {other:?}"),
        }
        let recorded = shell.writer.written();
        assert_eq!(recorded.len(), 1);
        let events = &recorded[0].plan.events;
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "Upgraded");
        assert_eq!(events[0].action, EventAction::Upgrade);
        assert_eq!(
            events[0].message,
            "webapp upgraded this object from 1.1.0 to 1.2.0"
        );
        assert!(!events[0].warning);
    }

    #[tokio::test]
    async fn an_upgrade_that_met_a_change_is_retried_shortly_without_a_write() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let prepared = shell
            .upgrade(
                Err(MigrationError::Conflict {
                    plugin: "webapp".into(),
                    object: "WebApp prod/shop".into(),
                }),
                &manifest(),
                "1.1.0",
                "sha256:abc",
                ("WebApp", "prod/shop"),
            )
            .await;
        assert!(matches!(prepared, Ok(Prepared::Retry)), "{prepared:?}");
        assert_eq!(
            Outcome::retry_after_conflict(),
            Outcome {
                action: Action::requeue(Duration::from_millis(200)),
                requeue: true
            }
        );
        // An object already current is reconciled as stored, unreported.
        let current = shell
            .upgrade(
                Ok(UpgradeOutcome::Current(Box::new(upgraded_object()))),
                &manifest(),
                "1.1.0",
                "sha256:abc",
                ("WebApp", "prod/shop"),
            )
            .await;
        assert!(matches!(current, Ok(Prepared::Ready(Some(_)))));
        assert!(shell.writer.written().is_empty());
    }

    #[tokio::test]
    async fn a_failed_upgrade_fails_the_reconcile_and_is_retried_with_backoff() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let error = shell
            .upgrade(
                Err(MigrationError::UpgradeFailed {
                    plugin: "webapp".into(),
                    object: "WebApp prod/shop".into(),
                    from: "1.1.0".into(),
                    to: "1.2.0".into(),
                    message: "no".into(),
                }),
                &manifest(),
                "1.1.0",
                "sha256:abc",
                ("WebApp", "prod/shop"),
            )
            .await
            .expect_err("the upgrade failed");
        assert_eq!(error.reason(), "UpgradeFailed");
        assert_backs_off(&after_failure(&error, 2), 2);
        assert!(shell.writer.written().is_empty());
        // Its report is the one write of the failure.
        let failed = shell
            .fail(&primary(), ("webapp", "1.2.0"), &limits(), error, no_rate)
            .await;
        assert!(matches!(failed, Err(ReconcileError::Upgrade(_))));
        let written = shell.writer.written();
        assert_eq!(written.len(), 1);
        assert_eq!(written[0].plan.events[0].reason, "UpgradeFailed");
    }

    #[tokio::test]
    async fn an_object_a_later_leader_wrote_gets_no_write_at_all() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let error = ReconcileError::StaleTerm {
            plugin: "webapp".into(),
            object: "prod/shop".into(),
            theirs: 9,
            ours: 7,
        };
        let action = shell
            .fail(&primary(), ("webapp", "1.2.0"), &limits(), error, no_rate)
            .await
            .expect("fencing is no failure");
        assert_eq!(action, Action::await_change());
        assert!(shell.writer.written().is_empty());
    }

    #[tokio::test]
    async fn a_plan_the_write_gate_refuses_is_not_reported_and_is_looked_at_again() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new().then(Err(fenced())), &metrics);
        let obj = primary();
        let plan = Plan {
            status: Some(json!({"ready": true})),
            ..Plan::idle(Requeue::Resync)
        };
        let error = shell
            .write(&obj, &plan)
            .await
            .expect_err("the gate is closed");
        let action = shell
            .fail(&obj, ("webapp", "1.2.0"), &limits(), error.into(), no_rate)
            .await
            .expect("fencing is no failure");
        // The gate may reopen without the shard changing hands: look again.
        assert_eq!(action, Action::requeue(FENCED_RETRY));
        let written = shell.writer.written();
        assert_eq!(written.len(), 1, "the refused plan, and no report");
        assert_eq!(written[0].plan, plan);
    }

    #[tokio::test]
    async fn a_failure_report_goes_through_the_object_event_rate() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let error = ReconcileError::Call(crate::engine::CallError {
            site: crate::engine::CallSite {
                plugin: "webapp".into(),
                version: "1.2.0".into(),
                function: "reconcile".into(),
            },
            failure: crate::engine::CallFailure::Failed(crate::contract::Failure::Transient(
                "busy".into(),
            )),
        });
        let failed = shell
            .fail(
                &primary(),
                ("webapp", "1.2.0"),
                &limits(),
                error,
                |events| (Vec::new(), events.len()),
            )
            .await;
        let error = failed.expect_err("a failure");
        assert_backs_off(&after_failure(&error, 1), 1);
        let written = shell.writer.written();
        assert_eq!(written.len(), 1);
        let plan = &written[0].plan;
        assert!(plan.events.is_empty());
        assert_eq!(plan.events_dropped, 1);
        assert_eq!(plan.requeue, Requeue::Backoff);
        assert!(plan.conditions.iter().any(|c| c.kind == "Degraded"
            && c.status == "True"
            && c.message.contains("transient failure: busy")));
    }

    fn status_refusal() -> ReconcileError {
        let status: kube::core::Status = serde_json::from_value(json!({
            "status": "Failure", "reason": "Invalid", "code": 422,
            "message": "WebApp.example.com \"shop\" is invalid: status.replicas: Invalid value: \"string\": must be integer",
        }))
        .unwrap();
        ReconcileError::Apply(ApplyError::api(
            crate::apply::WRITING_STATUS,
            "WebApp prod/shop",
            kube::Error::Api(Box::new(status)),
        ))
    }

    #[tokio::test]
    async fn a_refused_status_is_reported_once_and_keeps_the_observed_generation() {
        let metrics = Metrics::new();
        let shell = shell(Recording::new(), &metrics);
        let mut obj = primary();
        obj.metadata.generation = Some(2);
        obj.data = json!({"status": {"observedGeneration": 1}});
        let error = shell
            .fail(
                &obj,
                ("webapp", "1.2.0"),
                &limits(),
                status_refusal(),
                no_rate,
            )
            .await
            .expect_err("a failure");
        assert_eq!(after_failure(&error, 1), Action::await_change());
        assert!(
            error
                .message("webapp", "1.2.0")
                .contains("the CRD's status schema")
        );
        let written = shell.writer.written();
        assert_eq!(written.len(), 1, "one report");
        let status = written[0].plan.status.clone().expect("a failure status");
        assert!(status.get("observedGeneration").is_none(), "{status}");
        assert_eq!(written[0].plan.events.len(), 1);

        // The cache shows the report; the reconcile runs again (a child
        // changed) and meets the same refusal: nothing more is written.
        let mut reported = obj.clone();
        reported.data = json!({"status": status});
        let _ = shell
            .fail(
                &reported,
                ("webapp", "1.2.0"),
                &limits(),
                status_refusal(),
                no_rate,
            )
            .await;
        assert_eq!(shell.writer.written().len(), 1, "reported once");
    }
}
