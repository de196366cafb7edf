//! A canary candidate computing beside the stable version: shadow
//! comparisons of the stable version's reconciles, and the pre-flight dry
//! run over every primary. Nothing the candidate returns is ever written:
//! no apply, prune, status, condition, event, finalizer, annotation or
//! migration mark. An `upgrade` the candidate needs first is computed
//! ([`crate::migration::plan::finish`]) and handed to its `reconcile`, never
//! written.
//!
//! # Guarantees
//!
//! - Off the stable path: a shadow computation is a spawned task holding one
//!   of the candidate's `shadowConcurrency` permits; a stable reconcile never
//!   waits for it. When every permit is taken the comparison is skipped and
//!   counted (`result="skipped"`), never queued.
//! - The candidate runs with its own call limits (a looping candidate is
//!   stopped by its deadline; its permit is held meanwhile, so at most
//!   `shadowConcurrency` such calls run).
//! - Work on a candidate stops when it leaves the version set
//!   ([`crate::registry::CanaryObservations::stopped`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use kube::api::DynamicObject;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

use super::context::{Context, call_context, children_refusal, existing, observe};
use super::error::ReconcileError;
use super::shadow_diff as diff;
use crate::cache::{CachedObject, object_json, object_text};
use crate::contract::{Desired, Reason};
use crate::migration;
use crate::plan::{
    self, MANAGED_BY_VERSION_ANNOTATION, MIN_COMPATIBLE_VERSION_ANNOTATION, ObjectRates, Observed,
    PlanContext,
};
use crate::registry::{
    ActiveVersion, CanaryObservations, DryRunFailure, ObjectName, RolloutCandidate, ShadowOutcome,
};
use crate::telemetry::ShadowResult;

/// Why the candidate would fail on an object: the reason and message the
/// stable path would have reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CandidateFailure {
    pub reason: String,
    pub message: String,
}

impl CandidateFailure {
    fn of(error: &ReconcileError, version: &ActiveVersion) -> CandidateFailure {
        CandidateFailure {
            reason: error.reason().to_string(),
            message: error.message(&version.info.name, &version.info.version),
        }
    }
}

/// What a candidate computed for one object.
pub(super) struct Computed {
    pub answer: Result<Desired, CandidateFailure>,
    /// How long its `reconcile` call took, when it was called.
    pub call: Option<Duration>,
}

fn name_of(obj: &impl Resource) -> ObjectName {
    ObjectName {
        namespace: obj.namespace(),
        name: obj.name_any(),
        uid: obj.uid().unwrap_or_default(),
    }
}

/// The candidate's answer for `obj`, exactly as it would serve it (refuse
/// an incompatible object, upgrade one an older version managed, reconcile,
/// plan), writing nothing. `children` are the children the stable version
/// was shown (`None`: observed here).
pub(super) async fn compute(
    ctx: &Context,
    version: &ActiveVersion,
    obj: &DynamicObject,
    children: Option<Vec<String>>,
    attempt: u32,
) -> Computed {
    let manifest = version.plugin.manifest();
    let fail = |error: ReconcileError| Computed {
        answer: Err(CandidateFailure::of(&error, version)),
        call: None,
    };
    let annotations = obj.annotations();
    let min_compatible = annotations.get(MIN_COMPATIBLE_VERSION_ANNOTATION);
    if migration::is_incompatible(min_compatible.map(String::as_str), &manifest.version) {
        return fail(ReconcileError::Incompatible {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            object: format!(
                "{} {}",
                ctx.primary.kind,
                plan::display_name(obj.namespace().as_deref(), &obj.name_any())
            ),
            managed_by: annotations
                .get(MANAGED_BY_VERSION_ANNOTATION)
                .cloned()
                .unwrap_or_else(|| "a newer version".into()),
            min_compatible: min_compatible.cloned().unwrap_or_default(),
        });
    }
    let from = manifest
        .implements
        .upgrade
        .then(|| {
            migration::upgrade_from(
                annotations
                    .get(MANAGED_BY_VERSION_ANNOTATION)
                    .map(String::as_str),
                &manifest.version,
            )
        })
        .flatten();
    let (upgraded, children) = match from {
        None => (None, children),
        Some(from) => match upgrade(ctx, version, obj, &from, attempt).await {
            Ok(upgraded) => (Some(upgraded), None),
            Err(message) => {
                return Computed {
                    answer: Err(CandidateFailure {
                        reason: Reason::UpgradeFailed.as_str().to_string(),
                        message,
                    }),
                    call: None,
                };
            }
        },
    };
    let obj = upgraded.as_ref().unwrap_or(obj);
    let observation = observe(obj, ctx, version);
    let children = children.unwrap_or(observation.children);
    let call_ctx = call_context(obj, version, attempt);
    let started = Instant::now();
    let answer = version
        .plugin
        .reconcile(&call_ctx, observation.object, children, ctx.cache.clone())
        .await;
    let call = Some(started.elapsed());
    let desired = match answer {
        Ok(desired) => desired,
        Err(error) => {
            return Computed {
                answer: Err(CandidateFailure::of(&ReconcileError::Call(error), version)),
                call,
            };
        }
    };
    // The plan is computed for its refusals only (a child the candidate may
    // not write, a breached limit); it is never executed.
    let existing = existing(
        ctx,
        &plan::children::desired_keys(manifest, obj, &desired.children),
    );
    let observed = Observed {
        primary: obj,
        children: &observation.owned,
        existing: &existing,
    };
    let now = Utc::now();
    let fencing_token = ctx.writes_for(obj).fencing_token();
    let plan_ctx = PlanContext {
        manifest,
        grant: &version.grant,
        now,
        limits: version.limits,
        // The stable version's plan carries the same mark: no difference.
        fencing_token: fencing_token.as_ref(),
        forged_fencing_token: None,
        creations_allowed: usize::MAX,
    };
    let mut rates = ObjectRates::new(&version.limits, now);
    let refused = match plan::reconcile(&observed, &desired, &plan_ctx, &mut rates) {
        Err(error) => Some(ReconcileError::Plan(error)),
        Ok(plan) => children_refusal(plan.apply.keys(), &ctx.gate, manifest),
    };
    Computed {
        answer: match refused {
            Some(error) => Err(CandidateFailure::of(&error, version)),
            None => Ok(desired),
        },
        call,
    }
}

/// The object as `version`'s `upgrade` from `from` would leave it (spec,
/// labels, annotations, status and the marks), computed, never written.
async fn upgrade(
    ctx: &Context,
    version: &ActiveVersion,
    obj: &DynamicObject,
    from: &str,
    attempt: u32,
) -> Result<DynamicObject, String> {
    let manifest = version.plugin.manifest();
    let call_ctx = call_context(obj, version, attempt);
    let answer = version
        .plugin
        .upgrade(
            &call_ctx,
            object_text(obj, &ctx.primary),
            from,
            ctx.cache.clone(),
        )
        .await
        .map_err(|e| {
            format!(
                "plugin {} {} cannot upgrade this object from {from}: {e}",
                manifest.name, manifest.version
            )
        })?;
    let write = migration::plan::finish(
        &object_json(obj, &ctx.primary),
        &answer,
        manifest,
        &version.limits,
    )
    .map_err(|problem| {
        format!(
            "plugin {} {} returned an invalid upgrade from {from}: {problem}",
            manifest.name, manifest.version
        )
    })?;
    let mut object = write.object;
    if let Some(status) = write.status {
        object.data["status"] = status;
    }
    Ok(object)
}

/// Shadows one stable reconcile of `obj`: when a permit is free, spawns the
/// candidate's computation on the same inputs and records the comparison
/// with `stable_answer`; otherwise counts it skipped. Returns at once.
pub(super) fn spawn(
    ctx: &Arc<Context>,
    candidate: &RolloutCandidate,
    stable_version: &str,
    obj: DynamicObject,
    children: Vec<String>,
    stable_answer: Desired,
    attempt: u32,
) {
    let observations = candidate.observations.clone();
    let version = candidate.version.clone();
    let Some(permit) = observations.try_permit() else {
        observations.record_skipped();
        ctx.metrics.shadow_comparison(
            &ctx.plugin,
            stable_version,
            &version.info.version,
            ShadowResult::Skipped,
        );
        return;
    };
    let ctx = ctx.clone();
    let stable_version = stable_version.to_string();
    let stop = observations.stopped();
    let shadow = async move {
        let _permit = permit;
        let computed = tokio::select! {
            _ = stop.cancelled() => return,
            computed = compute(&ctx, &version, &obj, Some(children), attempt) => computed,
        };
        record(
            &ctx,
            &version,
            &observations,
            &stable_version,
            &obj,
            &stable_answer,
            computed,
        );
    };
    // On a thread of the blocking pool, not on a runtime worker: the
    // candidate's call and the comparison never hold a worker the stable
    // reconciles need (on a multi-threaded runtime the engine's call runs
    // in place on whatever thread drives it). Measured by `benches/shadow.rs`.
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(shadow));
}

/// Records one shadow computation of `version` on `obj` beside the stable
/// version's `stable_answer`: the candidate's counters, the comparison
/// (counts, diff, kind of difference) and the metric.
fn record(
    ctx: &Context,
    version: &ActiveVersion,
    observations: &CanaryObservations,
    stable_version: &str,
    obj: &DynamicObject,
    stable_answer: &Desired,
    computed: Computed,
) {
    version
        .counters
        .record(computed.answer.is_err(), computed.call);
    let (outcome, result) = match computed.answer {
        Err(failure) => (
            ShadowOutcome::Error {
                reason: failure.reason,
                message: failure.message,
            },
            ShadowResult::Error,
        ),
        Ok(answer) => {
            let fields = diff::diff(stable_answer, &answer, obj.namespace().as_deref());
            version.counters.record_shadow(!fields.is_empty());
            if fields.is_empty() {
                (ShadowOutcome::Same, ShadowResult::Same)
            } else {
                let signature = diff::signature(&fields);
                (
                    ShadowOutcome::Differ { fields, signature },
                    ShadowResult::Differ,
                )
            }
        }
    };
    ctx.metrics
        .shadow_comparison(&ctx.plugin, stable_version, &version.info.version, result);
    observations.record_shadow(name_of(obj), outcome, &Utc::now().to_rfc3339());
}

/// How often a sweep waiting for the caches looks again.
const SYNC_POLL: Duration = Duration::from_millis(100);

/// What a sweep over every primary does with each.
#[derive(Clone)]
pub(super) enum Sweep {
    /// The pre-flight dry run: the candidate computes each object; failures
    /// are recorded in the dry-run report.
    DryRun,
    /// The first comparison of a new shadow candidate: the stable version
    /// and the candidate compute each object (neither writes), and the
    /// answers are compared, so every object is compared once without
    /// waiting for a change or the resync.
    Compare(Arc<ActiveVersion>),
}

/// Runs `candidate` over every primary in `store` (once the caches in
/// `synced` have synced) as `sweep` says, at most `shadowConcurrency` at
/// once (waiting for a permit, never skipping), writing nothing. Stops
/// early when the candidate leaves the version set or `shutdown` fires.
pub(super) async fn sweep(
    ctx: Arc<Context>,
    candidate: RolloutCandidate,
    sweep: Sweep,
    store: Store<CachedObject>,
    synced: impl Fn() -> bool,
    shutdown: CancellationToken,
) {
    let observations = candidate.observations.clone();
    let stop = observations.stopped();
    while !synced() {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SYNC_POLL) => {}
        }
    }
    let mut objects: Vec<Arc<CachedObject>> = store
        .state()
        .into_iter()
        .filter(|o| o.metadata.deletion_timestamp.is_none() && ctx.gate.allows_object(o.as_ref()))
        .collect();
    objects.sort_by_key(|o| name_of(o.as_ref()));
    let what = match &sweep {
        Sweep::DryRun => {
            observations.dry_run_started(objects.len() as u64);
            "canary dry run"
        }
        Sweep::Compare(_) => "canary shadow comparison of every object",
    };
    tracing::info!(
        target: "audit", plugin = %ctx.plugin, candidate = %candidate.version.info.version,
        objects = objects.len(), "{what} started"
    );
    let mut running = tokio::task::JoinSet::new();
    for obj in objects {
        let permit = tokio::select! {
            _ = shutdown.cancelled() => return,
            permit = observations.permit() => match permit {
                Some(permit) => permit,
                None => return,
            },
        };
        let (ctx, version, observations, sweep) = (
            ctx.clone(),
            candidate.version.clone(),
            observations.clone(),
            sweep.clone(),
        );
        running.spawn(async move {
            let _permit = permit;
            let obj = obj.to_dynamic();
            match sweep {
                Sweep::DryRun => {
                    let computed = compute(&ctx, &version, &obj, None, 1).await;
                    observations.dry_run_object(computed.answer.err().map(|failure| {
                        DryRunFailure {
                            object: name_of(&obj),
                            reason: failure.reason,
                            message: failure.message,
                        }
                    }));
                }
                Sweep::Compare(stable) => {
                    // An object the stable version fails on has no answer
                    // to compare with; its failing reconciles say so.
                    let Ok(stable_answer) = compute(&ctx, &stable, &obj, None, 1).await.answer
                    else {
                        return;
                    };
                    let computed = compute(&ctx, &version, &obj, None, 1).await;
                    record(
                        &ctx,
                        &version,
                        &observations,
                        &stable.info.version,
                        &obj,
                        &stable_answer,
                        computed,
                    );
                }
            }
        });
        // Reap finished computations as we go (bounded memory).
        while running.try_join_next().is_some() {}
    }
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = shutdown.cancelled() => return,
            next = running.join_next() => if next.is_none() { break },
        }
    }
    if matches!(sweep, Sweep::DryRun) {
        observations.dry_run_finished();
        let report = observations.dry_run();
        tracing::info!(
            target: "audit", plugin = %ctx.plugin, candidate = %candidate.version.info.version,
            objects = report.total, failed = report.failed, "canary dry run finished"
        );
    }
}
