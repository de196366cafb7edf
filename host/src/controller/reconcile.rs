//! One reconcile: read the current plugin version, observe the object and
//! its children, call the plugin, turn its answer into a [`Plan`]
//! ([`crate::plan`], pure), execute the plan ([`crate::apply`]), and report
//! failures on the object the same way (a failure plan).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::context::{
    Context, Observation, call_context, children_refusal, existing, host_writer, observe, writer,
};
use super::error::ReconcileError;
use super::writes::{Memory, Outcome, Prepared, Shell, after_failure};
use crate::apply::{self, ApplyError, Writer};
use crate::cache::{CachedObject, NamespaceGate};
use crate::contract::Desired;
use crate::lease::{self, FencingToken, ForgedTerm, LaterTerm};
use crate::migration;
use crate::plan::{
    self, Admission, DeletionStep, MANAGED_BY_VERSION_ANNOTATION,
    MIN_COMPATIBLE_VERSION_ANNOTATION, ObjectRates, Observed, Plan, PlanContext, display_name,
};
use crate::registry::{ActiveVersion, RolloutCandidate};
use crate::telemetry::ReconcileResult;

/// How soon a reconcile held for the cache to show the host's own write
/// ([`apply::Hold::Behind`]) looks again: watch events arrive within
/// milliseconds of the write.
const CACHE_CATCH_UP: Duration = Duration::from_millis(25);

/// The key of `obj`'s failure count and rate state.
fn failure_key(obj: &impl Resource) -> String {
    obj.uid()
        .unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

/// The shell that writes `obj`'s plans through `writer`, remembering what
/// was written in `ctx`.
fn shell<'a>(ctx: &'a Context, writer: Writer<'a>) -> Shell<'a, Writer<'a>> {
    Shell {
        writer,
        plugin: &ctx.plugin,
        metrics: &ctx.metrics,
        memory: Some(Memory {
            applied: &ctx.applied,
            owned: &ctx.owned,
            primary_writes: &ctx.primary_writes,
        }),
    }
}

/// The reconcile function handed to kube-runtime.
pub(super) async fn reconcile(
    cached: Arc<CachedObject>,
    ctx: Arc<Context>,
) -> Result<Action, ReconcileError> {
    let obj = cached.as_ref();
    // Sharded: only primaries of the shards this replica holds (and is
    // not giving up) are reconciled here; the others belong to other
    // replicas, and are requeued here when this replica gains their shard.
    let _in_flight = if ctx.writes.is_sharded() {
        let shard = ctx.writes.shard_of(obj.metadata.uid.as_deref());
        let Some(in_flight) = ctx.writes.gate(shard).enter() else {
            return Ok(Action::await_change());
        };
        ctx.metrics.shard_reconcile(&ctx.plugin, shard);
        Some(in_flight)
    } else {
        None
    };
    if !ctx.gate.allows_object(obj) {
        let obj = obj.to_dynamic();
        let granted = ctx.gate.describe();
        return Ok(shell(&ctx, host_writer(&ctx, &obj))
            .outside_grant(&obj, &granted)
            .await);
    }
    // A Restore runs into this object: nothing is reconciled until its Job
    // completed and it removed the hold (which triggers this again), so
    // the plugin never recreates children over data being restored.
    if obj.metadata.deletion_timestamp.is_none()
        && let Some(restore) = obj
            .annotations()
            .get(crate::backup::RESTORE_HOLD_ANNOTATION)
    {
        tracing::debug!(plugin = %ctx.plugin, object = %obj.name_any(), %restore, "reconcile held by a restore");
        return Ok(Action::await_change());
    }
    // Triggered again (by the events of its own children's writes) before
    // the cache shows the status this object's last reconcile wrote:
    // planning now would call the plugin with that stale status and write
    // the same status again.
    if let apply::Hold::Behind { left } = ctx.primary_writes.hold(obj) {
        tracing::trace!(plugin = %ctx.plugin, object = %obj.name_any(), "waiting for the cache to show the host's own write");
        return Ok(Action::requeue(CACHE_CATCH_UP.min(left)));
    }
    // The body is parsed here, once per reconcile that runs: the cache
    // keeps it as text (see `cache::CachedObject`).
    let obj = obj.to_dynamic();
    let started = Instant::now();
    ctx.metrics.reconcile_started(&ctx.plugin);
    let set = ctx.versions.current();
    let active = set.serving_for(&obj);
    // A shadow candidate computes beside the reconciles the stable version
    // serves (a split candidate's objects have no stable answer to compare).
    let shadow = set
        .shadow()
        .filter(|_| Arc::ptr_eq(&active, &set.stable))
        .cloned();
    let key = failure_key(&obj);
    let attempt = ctx.failures.get(&key).saturating_add(1);
    let mut call = None;
    let result = run(&obj, &ctx, &active, attempt, shadow.as_ref(), &mut call).await;
    let seconds = started.elapsed().as_secs_f64();
    match result {
        Ok(outcome) => {
            ctx.failures.reset(&key);
            ctx.versions.access().write_allowed(&key);
            let label = if outcome.requeue {
                ReconcileResult::Requeue
            } else {
                ReconcileResult::Success
            };
            ctx.metrics.reconcile_finished(&ctx.plugin, label, seconds);
            active.counters.record(false, call);
            Ok(outcome.action)
        }
        Err(error) => {
            // A fenced reconcile is not a failure of the plugin or of the
            // object: it is not counted as an error.
            let fenced = error.is_fenced();
            // A write RBAC refused shows on the WasmPlugin until a later
            // reconcile of this object writes.
            if let ReconcileError::Apply(apply) = &error
                && let Some(message) = apply.forbidden()
            {
                ctx.versions.access().write_forbidden(&key, message);
            }
            if !fenced {
                ctx.failures.record(&key);
            }
            let limits = active.limits;
            let settled = shell(&ctx, writer(&ctx, &obj))
                .fail(
                    &obj,
                    (&active.info.name, &active.info.version),
                    &limits,
                    error,
                    |events| {
                        ctx.with_rates(&key, &limits, |rates| {
                            rates.correlate(events, &limits, Utc::now())
                        })
                    },
                )
                .await;
            let result = if fenced {
                ReconcileResult::Success
            } else {
                ReconcileResult::Error
            };
            ctx.metrics.reconcile_finished(&ctx.plugin, result, seconds);
            if !fenced {
                active.counters.record(true, call);
            }
            settled
        }
    }
}

/// kube-runtime's error policy: permanent failures wait for the object to
/// change, everything else backs off per object.
pub(super) fn error_policy(
    obj: Arc<CachedObject>,
    error: &ReconcileError,
    ctx: Arc<Context>,
) -> Action {
    after_failure(error, ctx.failures.get(&failure_key(obj.as_ref())))
}

/// One reconcile by `active`. `shadow` is the candidate that computes
/// beside it (handed the same inputs once `active` answered); `call`
/// receives how long the `reconcile` call took.
async fn run(
    obj: &DynamicObject,
    ctx: &Arc<Context>,
    active: &ActiveVersion,
    attempt: u32,
    shadow: Option<&RolloutCandidate>,
    call: &mut Option<Duration>,
) -> Result<Outcome, ReconcileError> {
    let manifest = active.plugin.manifest();
    // Fencing: an object a later leader wrote is not this replica's to
    // write (checked before the plugin call, which it would waste).
    let ours = ctx.writes_for(obj).fencing_token();
    let forged = match (
        plan::annotations::newer_fencing_token(obj, ours.as_ref()),
        ours.as_ref(),
    ) {
        (Some(theirs), Some(token)) => Some(judge_later_term(obj, ctx, token, theirs).await?),
        _ => None,
    };
    if obj.metadata.deletion_timestamp.is_some() {
        return finalize(obj, ctx, active, attempt).await;
    }
    let upgraded = match prepare(obj, ctx, active, attempt).await? {
        Prepared::Ready(upgraded) => upgraded,
        Prepared::Retry => return Ok(Outcome::retry_after_conflict()),
    };
    let obj = upgraded.as_deref().unwrap_or(obj);
    let key = failure_key(obj);
    let limits = active.limits;
    if let Admission::Delay { wait, first } = ctx.with_rates(&key, &limits, |r| {
        r.admit_reconcile(
            &limits,
            Utc::now(),
            obj.metadata.resource_version.as_deref(),
        )
    }) {
        return Ok(shell(ctx, writer(ctx, obj))
            .hot_loop(obj, &limits, wait, first)
            .await);
    }
    let Observation {
        owned,
        children,
        object,
    } = observe(obj, ctx, active);
    let call_ctx = call_context(obj, active, attempt);
    // Copied only when a candidate shadows: the stable path pays nothing
    // otherwise.
    let shadow_children = shadow.map(|_| children.clone());
    let started = Instant::now();
    let desired = active
        .plugin
        .reconcile(&call_ctx, object, children, ctx.cache.clone())
        .await;
    *call = Some(started.elapsed());
    let desired = desired?;
    // The shadow starts once the stable version's writes are done, so it
    // never competes with them; its inputs are the ones captured above.
    let shadow_job = shadow
        .zip(shadow_children)
        .map(|(candidate, children)| (candidate, children, desired.clone()));
    let desired_keys = plan::children::desired_keys(manifest, obj, &desired.children);
    let existing = existing(ctx, &desired_keys);
    // New children need the plugin's creation budget: taken before the
    // plan, what it does not use given back after.
    let wanted = desired_keys
        .iter()
        .filter(|key| !existing.contains_key(*key))
        .count();
    let granted = ctx.take_creations(wanted, &limits);
    let observed = Observed {
        primary: obj,
        children: &owned,
        existing: &existing,
    };
    let fencing_token = ctx.writes_for(obj).fencing_token();
    let plan_ctx = PlanContext {
        manifest,
        grant: &active.grant,
        now: Utc::now(),
        limits,
        fencing_token: fencing_token.as_ref(),
        forged_fencing_token: forged.as_ref(),
        creations_allowed: granted,
    };
    // A refused child means no plan, hence no write at all.
    // Planned on a copy, outside the lock (kube-runtime never reconciles
    // one object twice at once, so nothing else changes this entry).
    let mut rates = ctx.with_rates(&key, &limits, |r| r.clone());
    let mut plan = plan_answer(&observed, &desired, &plan_ctx, &mut rates, &ctx.gate).inspect_err(
        |error| {
            ctx.refund_creations(granted, &limits);
            if let ReconcileError::Plan(error) = error {
                ctx.metrics.refusal(&ctx.plugin, error.reason());
                if let Some(limit) = error.limit() {
                    ctx.metrics.limit_breach(&ctx.plugin, limit.as_str());
                }
            }
        },
    )?;
    ctx.with_rates(&key, &limits, |r| *r = rates);
    let creating = plan.apply.values().filter(|child| !child.exists).count();
    ctx.refund_creations(granted.saturating_sub(creating), &limits);
    if let Some(wait) = ctx.creations_wait(&plan, &limits) {
        plan.requeue = wait;
    }
    let unchanged = plan::unchanged::skip(&mut plan, &owned, |child| ctx.applied.get(child));
    if !unchanged.is_empty() {
        tracing::trace!(plugin = %ctx.plugin, children = unchanged.len(), "unchanged children not applied");
    }
    for breach in &plan.breaches {
        ctx.metrics.limit_breach(&ctx.plugin, breach.limit.as_str());
    }
    let executed = shell(ctx, writer(ctx, obj)).write(obj, &plan).await;
    if let Some((candidate, children, desired)) = shadow_job {
        super::shadow::spawn(
            ctx,
            candidate,
            &active.info.version,
            obj.clone(),
            children,
            desired,
            attempt,
        );
    }
    executed?;
    Ok(Outcome::of(plan.requeue))
}

/// Judges `theirs`, a later term of this replica's Lease found on `obj`,
/// against what the Lease has issued (read now): a term the Lease issued is
/// a later leader's, so nothing may be written ([`ReconcileError::StaleTerm`]);
/// a term above all it issued is forged, counted and logged here, and
/// returned for the plan to overwrite and report.
async fn judge_later_term(
    obj: &DynamicObject,
    ctx: &Context,
    ours: &FencingToken,
    theirs: u64,
) -> Result<ForgedTerm, ReconcileError> {
    let object = display_name(obj.namespace().as_deref(), &obj.name_any());
    // The host's own identity reads its Lease (a plugin's impersonated one may not).
    let issued = lease::issued_term(&ctx.host_client, ours).await;
    match ours.judge_later_term(theirs, issued) {
        LaterTerm::Forged(forged) => {
            ctx.metrics.forged_fencing_token(&ctx.plugin);
            tracing::warn!(
                plugin = %ctx.plugin,
                %object,
                "it carries fencing token {theirs}, newer than this replica's term {}, but Lease {} has issued terms up to {} only: the token is forged, and this leader overwrites it (ForgedFencingToken)",
                ours.term,
                forged.lease,
                forged.issued
            );
            Ok(forged)
        }
        LaterTerm::Issued(theirs) => Err(ReconcileError::StaleTerm {
            plugin: ctx.plugin.clone(),
            object,
            theirs,
            ours: ours.term,
        }),
    }
}

/// The plan for the plugin's answer `desired` ([`plan::reconcile`]), refused
/// when it would write a child outside the plugin's grant `gate` (possible
/// under a cluster-scoped primary: children of a namespaced primary live in
/// its granted namespace) or named like one of the host's own objects.
/// `rates` changes only with a plan.
///
/// # Errors
///
/// [`ReconcileError::Plan`], [`ReconcileError::ChildOutsideGrant`] or
/// [`ReconcileError::HostObjectChild`]: the
/// answer is refused, nothing may be written for it.
fn plan_answer(
    observed: &Observed<'_>,
    desired: &Desired,
    plan_ctx: &PlanContext<'_>,
    rates: &mut ObjectRates,
    gate: &NamespaceGate,
) -> Result<Plan, ReconcileError> {
    let mut next = rates.clone();
    let plan = plan::reconcile(observed, desired, plan_ctx, &mut next)?;
    if let Some(refusal) = children_refusal(plan.apply.keys(), gate, plan_ctx.manifest) {
        return Err(refusal);
    }
    *rates = next;
    Ok(plan)
}

/// A primary being deleted: let the plugin finalize (if it asked for a
/// finalizer), then release it ([`plan::finalizer`] documents the contract).
/// Runs whatever the version marks say: deletion must never be blocked by a
/// version mismatch.
async fn finalize(
    obj: &DynamicObject,
    ctx: &Context,
    active: &ActiveVersion,
    attempt: u32,
) -> Result<Outcome, ReconcileError> {
    let manifest = active.plugin.manifest();
    let answer = match plan::finalizer::on_deletion(obj, manifest) {
        // Not ours to hold up: garbage collection removes the children.
        DeletionStep::NotOurs => return Ok(Outcome::of(plan::Requeue::AwaitChange)),
        DeletionStep::Release => None,
        DeletionStep::CallPlugin => {
            let Observation {
                children, object, ..
            } = observe(obj, ctx, active);
            let call_ctx = call_context(obj, active, attempt);
            Some(
                active
                    .plugin
                    .finalize(&call_ctx, object, children, ctx.cache.clone())
                    .await?,
            )
        }
    };
    let fencing_token = ctx.writes_for(obj).fencing_token();
    let plan_ctx = PlanContext {
        manifest,
        grant: &active.grant,
        now: Utc::now(),
        limits: active.limits,
        fencing_token: fencing_token.as_ref(),
        forged_fencing_token: None,
        creations_allowed: usize::MAX,
    };
    let plan = plan::finalize(obj, answer, &plan_ctx);
    shell(ctx, writer(ctx, obj)).write(obj, &plan).await?;
    Ok(Outcome::of(plan.requeue))
}

/// The version checks before a reconcile: refuse objects a newer version
/// declared incompatible with this one, and upgrade objects an older version
/// managed when this version implements `migration.upgrade`.
async fn prepare(
    obj: &DynamicObject,
    ctx: &Context,
    active: &ActiveVersion,
    attempt: u32,
) -> Result<Prepared, ReconcileError> {
    let manifest = active.plugin.manifest();
    let annotations = obj.annotations();
    let managed_by = annotations.get(MANAGED_BY_VERSION_ANNOTATION);
    let min_compatible = annotations.get(MIN_COMPATIBLE_VERSION_ANNOTATION);
    if migration::is_incompatible(min_compatible.map(String::as_str), &manifest.version) {
        return Err(ReconcileError::Incompatible {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            object: format!(
                "{} {}",
                ctx.primary.kind,
                display_name(obj.namespace().as_deref(), &obj.name_any())
            ),
            managed_by: managed_by
                .cloned()
                .unwrap_or_else(|| "a newer version".into()),
            min_compatible: min_compatible.cloned().unwrap_or_default(),
        });
    }
    if !manifest.implements.upgrade {
        // A newer version without an upgrade step (no `migration.upgrade`,
        // e.g. a plugin that only converts) just takes over; the marks
        // follow after a successful reconcile.
        return Ok(Prepared::Ready(None));
    }
    let Some(from) = migration::upgrade_from(managed_by.map(String::as_str), &manifest.version)
    else {
        return Ok(Prepared::Ready(None));
    };
    // The upgrade walk writes the object: only while this replica leads.
    if ctx.writes_for(obj).check().is_err() {
        return Err(ReconcileError::Apply(ApplyError::Fenced {
            target: format!(
                "{} {}",
                ctx.primary.kind,
                display_name(obj.namespace().as_deref(), &obj.name_any())
            ),
        }));
    }
    let call_ctx = call_context(obj, active, attempt);
    let result = migration::upgrade_object(
        &ctx.client,
        &ctx.primary,
        obj,
        &from,
        active,
        &call_ctx,
        ctx.cache.clone(),
    )
    .await;
    let object = display_name(obj.namespace().as_deref(), &obj.name_any());
    shell(ctx, writer(ctx, obj))
        .upgrade(
            result,
            manifest,
            &from,
            &active.info.digest,
            (&ctx.primary.kind, &object),
        )
        .await
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::apply::Recording;
    use crate::contract::ReconcileLimits;
    use crate::plan::test_support::{manifest, primary};
    use crate::telemetry::Metrics;

    fn no_rate(events: Vec<plan::PlannedEvent>) -> (Vec<plan::PlannedEvent>, usize) {
        (events, 0)
    }

    #[tokio::test]
    async fn a_refused_answer_writes_only_its_failure_report_and_waits_for_a_change() {
        let obj = primary();
        let manifest = manifest();
        let existing = BTreeMap::new();
        let observed = Observed {
            primary: &obj,
            children: &[],
            existing: &existing,
        };
        // A kind the manifest does not own: invalid output.
        let desired = Desired {
            children: vec![json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "shop"},
            })],
            ..Desired::default()
        };
        let limits = ReconcileLimits::default();
        let grant = crate::contract::Grant::default();
        let plan_ctx = PlanContext {
            manifest: &manifest,
            grant: &grant,
            now: Utc::now(),
            limits,
            fencing_token: None,
            forged_fencing_token: None,
            creations_allowed: usize::MAX,
        };
        let now = Utc::now();
        let mut rates = ObjectRates::new(&limits, now);
        let before = rates.clone();
        let gate = NamespaceGate::new(Arc::default(), None);
        let error = plan_answer(&observed, &desired, &plan_ctx, &mut rates, &gate)
            .expect_err("a child of a kind it does not own is refused");
        assert_eq!(error.reason(), "CapabilityDenied");
        assert_eq!(rates, before, "a refused answer takes no tokens");

        let metrics = Metrics::new();
        let shell = Shell {
            writer: Recording::new(),
            plugin: "webapp",
            metrics: &metrics,
            memory: None,
        };
        let failed = shell
            .fail(&obj, ("webapp", "1.2.0"), &limits, error, no_rate)
            .await;
        let error = failed.expect_err("a refusal is a failure");
        assert_eq!(after_failure(&error, 1), Action::await_change());
        let written = shell.writer.written();
        assert_eq!(written.len(), 1, "the failure report alone");
        let plan = &written[0].plan;
        assert!(plan.apply.is_empty() && plan.prune.is_empty());
        assert_eq!(plan.events.len(), 1);
        assert!(plan.events[0].warning);
        assert_eq!(plan.events[0].reason, "CapabilityDenied");
        let ready = plan
            .conditions
            .iter()
            .find(|c| c.kind == "Ready")
            .expect("a Ready condition");
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "CapabilityDenied")
        );
    }

    #[test]
    fn an_accepted_answer_takes_its_event_tokens() {
        let obj = primary();
        let manifest = manifest();
        let existing = BTreeMap::new();
        let observed = Observed {
            primary: &obj,
            children: &[],
            existing: &existing,
        };
        let desired = Desired {
            events: vec![crate::contract::Event {
                warning: false,
                reason: "Scaled".into(),
                message: "up".into(),
            }],
            ..Desired::default()
        };
        let limits = ReconcileLimits::default();
        let grant = crate::contract::Grant::default();
        let plan_ctx = PlanContext {
            manifest: &manifest,
            grant: &grant,
            now: Utc::now(),
            limits,
            fencing_token: None,
            forged_fencing_token: None,
            creations_allowed: usize::MAX,
        };
        let mut rates = ObjectRates::new(&limits, plan_ctx.now);
        let before = rates.clone();
        let plan = plan_answer(
            &observed,
            &desired,
            &plan_ctx,
            &mut rates,
            &NamespaceGate::new(Arc::default(), None),
        )
        .expect("a plan");
        assert_eq!(plan.events.len(), 1);
        assert_ne!(rates, before);
    }
}
