//! One reconcile: read the current plugin version, observe the object and
//! its children, call the plugin, turn its answer into a [`Plan`]
//! ([`crate::plan`], pure), execute the plan ([`crate::apply`]), and report
//! failures on the object the same way (a failure plan).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::Utc;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};

use super::backoff::{self, Failures};
use crate::apply::{self, ApplyError, EventSink, Writer};
use crate::cache::{CacheLease, CachedObject, NamespaceGate, object_text};
use crate::contract::ReconcileLimits;
use crate::contract::{CallContext, Failure, Reason};
use crate::engine::{CacheReader, CallError, CallFailure};
use crate::lease::{ShardGates, WriteGate};
use crate::migration::{self, MigrationError, UpgradeOutcome};
use crate::plan::{
    self, Admission, ChildKey, DeletionStep, EventAction, FailureReport, Limit,
    MANAGED_BY_VERSION_ANNOTATION, MIN_COMPATIBLE_VERSION_ANNOTATION, ObjectRates, Observed,
    OwnedChild, Plan, PlanContext, PlanError, Requeue, display_name,
};
use crate::registry::{ActiveVersion, RolloutCandidate, ServingVersions};
use crate::telemetry::{Metrics, ReconcileResult, WriteKind};

/// How often a healthy object is reconciled even if nothing changes, so drift
/// the watches cannot see is eventually corrected.
const RESYNC: Duration = Duration::from_secs(600);

/// Everything a reconcile of one plugin needs; shared by its calls.
pub(super) struct Context {
    /// Writes as the plugin (impersonating its grant's ServiceAccount, if any).
    pub client: Client,
    /// The host's own identity: releases its finalizer from primaries
    /// outside the grant.
    pub host_client: Client,
    pub plugin: String,
    pub versions: Arc<ServingVersions>,
    pub primary: ApiResource,
    pub owned: Vec<CacheLease>,
    pub cache: Arc<dyn CacheReader>,
    /// The namespaces of the plugin's grant.
    pub gate: NamespaceGate,
    pub events: EventSink,
    pub metrics: Metrics,
    /// Whether this replica may write now, and its fencing token: one
    /// gate per shard (one in all without sharding).
    pub writes: ShardGates,
    pub failures: Failures,
    /// Per-object rate-limit state (reconciles, events), by object key.
    pub rates: Mutex<HashMap<String, ObjectRates>>,
    /// What the host last applied to each child: unchanged children are
    /// not applied again ([`plan::unchanged`]).
    pub applied: apply::AppliedChildren,
    /// The host's last write to each primary: a reconcile waits for the
    /// cache to show it ([`apply::PrimaryWrites`]).
    pub primary_writes: apply::PrimaryWrites,
}

/// How soon a reconcile held for the cache to show the host's own write
/// ([`apply::Hold::Behind`]) looks again: watch events arrive within
/// milliseconds of the write.
const CACHE_CATCH_UP: Duration = Duration::from_millis(25);

/// Objects whose rate state is kept before idle entries are forgotten.
const RATES_KEPT: usize = 1024;

impl Context {
    /// The gate guarding writes to `obj`: its shard's.
    pub(super) fn writes_for(&self, obj: &DynamicObject) -> &WriteGate {
        self.writes.for_uid(obj.metadata.uid.as_deref())
    }

    /// Runs `f` on the rate state of the object `key` (created full).
    fn with_rates<R>(
        &self,
        key: &str,
        limits: &ReconcileLimits,
        f: impl FnOnce(&mut ObjectRates) -> R,
    ) -> R {
        let now = Utc::now();
        // The map holds plain values; a poisoned lock still holds valid ones.
        let mut rates = self
            .rates
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if rates.len() > RATES_KEPT {
            rates.retain(|_, r| !r.is_idle(limits, now));
        }
        let entry = rates
            .entry(key.to_string())
            .or_insert_with(|| ObjectRates::new(limits, now));
        f(entry)
    }
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The plugin call failed.
    #[error("{0}")]
    Call(#[from] CallError),
    /// The plugin's answer cannot be planned (a child it may not write or
    /// cannot own); nothing was written.
    #[error("{0}")]
    Plan(#[from] PlanError),
    /// Writing the plan failed.
    #[error("{0}")]
    Apply(#[from] ApplyError),
    /// Upgrading the object written by an older version failed.
    #[error("{0}")]
    Upgrade(#[from] MigrationError),
    /// The plan would write a child in a namespace outside the plugin's
    /// grant (possible under a cluster-scoped primary); nothing was written.
    #[error(
        "plugin {plugin} {version} returned children outside its granted namespaces ({granted}): {children}; nothing was written. The cluster operator can grant the namespaces (spec.permissions.namespaces), or the plugin must not write there"
    )]
    ChildOutsideGrant {
        plugin: String,
        version: String,
        children: String,
        granted: String,
    },
    /// A newer version declared the serving one unable to handle the object.
    #[error(
        "plugin {plugin} {version} may not reconcile {object}: version {managed_by} managed it and declared min-compatible-version {min_compatible}; nothing was written. Deploy {plugin} {min_compatible} or newer"
    )]
    Incompatible {
        plugin: String,
        version: String,
        object: String,
        managed_by: String,
        min_compatible: String,
    },
    /// The object carries a fencing token newer than this replica's term:
    /// a later leader wrote it, so this replica writes nothing to it.
    #[error(
        "plugin {plugin} will not write {object}: it carries fencing token {theirs}, newer than this replica's term {ours}; a later leader wrote it. Nothing was written; this replica should not be leading (check the Lease)"
    )]
    StaleTerm {
        plugin: String,
        object: String,
        theirs: u64,
        ours: u64,
    },
}

impl ReconcileError {
    /// True when the reconcile was stopped by fencing: nothing may be
    /// written for it, not even its failure.
    fn is_fenced(&self) -> bool {
        matches!(
            self,
            ReconcileError::StaleTerm { .. } | ReconcileError::Apply(ApplyError::Fenced { .. })
        )
    }

    /// The condition/event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::Call(e) => e.reason(),
            ReconcileError::Plan(e) => e.reason(),
            ReconcileError::Apply(e) => e.reason(),
            ReconcileError::Upgrade(MigrationError::Api { .. }) => Reason::ApplyFailed.as_str(),
            ReconcileError::Upgrade(_) => Reason::UpgradeFailed.as_str(),
            ReconcileError::Incompatible { .. } => Reason::IncompatibleVersion.as_str(),
            ReconcileError::ChildOutsideGrant { .. } => Reason::CapabilityDenied.as_str(),
            ReconcileError::StaleTerm { .. } => Reason::Fenced.as_str(),
        }
    }

    /// True when retrying cannot help until the object changes.
    pub fn is_permanent(&self) -> bool {
        match self {
            ReconcileError::Call(e) => e.is_permanent(),
            // The same answer is refused again: wait for the object to change.
            ReconcileError::Plan(_) => true,
            ReconcileError::Apply(e) => e.is_permanent(),
            // A failed upgrade may be the object's fault (fixed by a metadata
            // change, which does not trigger a reconcile): retry with backoff.
            ReconcileError::Upgrade(_) => false,
            // Only another plugin version can help; a swap reconciles all.
            ReconcileError::Incompatible { .. } => true,
            // The same answer is refused again: wait for a change.
            ReconcileError::ChildOutsideGrant { .. } => true,
            // Only a newer term helps; the new leader's controller runs.
            ReconcileError::StaleTerm { .. } => true,
        }
    }

    /// A message naming the plugin, its version and what to do.
    pub(super) fn message(&self, plugin: &str, version: &str) -> String {
        match self {
            ReconcileError::Call(CallError {
                failure: CallFailure::Failed(Failure::Transient(m)),
                ..
            }) => format!(
                "plugin {plugin} {version} reported a transient failure: {m}; the host retries with backoff (5 s doubling up to 300 s)"
            ),
            ReconcileError::Call(CallError {
                failure: CallFailure::Failed(Failure::Permanent(m)),
                ..
            }) => format!(
                "plugin {plugin} {version} reported a permanent failure: {m}; fix the object's spec (the host retries when it changes)"
            ),
            ReconcileError::Call(CallError {
                failure: CallFailure::Internal(m),
                ..
            }) => {
                format!(
                    "plugin {plugin} {version}: the host failed to run the call: {m}; the host retries with backoff, report it if it persists"
                )
            }
            ReconcileError::Apply(e) => {
                format!("plugin {plugin} {version}: {e}")
            }
            ReconcileError::Call(e) => e.with_remedy().to_string(),
            other => other.to_string(),
        }
    }
}

/// What a successful reconcile asks of the controller.
struct Outcome {
    action: Action,
    /// The plugin asked for a requeue (`controller_runtime_reconcile_total{result="requeue"}`).
    requeue: bool,
}

impl Outcome {
    fn after_ms(ms: u64) -> Outcome {
        Outcome {
            action: Action::requeue(Duration::from_millis(ms.max(1))),
            requeue: true,
        }
    }

    /// What the controller does after a plan was carried out.
    fn of(requeue: Requeue) -> Outcome {
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
}

fn failure_key(obj: &impl Resource) -> String {
    obj.uid()
        .unwrap_or_else(|| format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any()))
}

/// The writer of this controller's plans.
fn writer<'a>(ctx: &'a Context, obj: &DynamicObject) -> Writer<'a> {
    Writer {
        client: &ctx.client,
        primary: &ctx.primary,
        plugin: &ctx.plugin,
        events: &ctx.events,
        gate: ctx.writes_for(obj),
    }
}

/// What the host observed for one call: the owned children (for the plan)
/// and what the plugin gets to see, as JSON.
pub(super) struct Observation {
    pub owned: Vec<OwnedChild>,
    pub children: Vec<String>,
    pub object: String,
}

pub(super) fn observe(obj: &DynamicObject, ctx: &Context, active: &ActiveVersion) -> Observation {
    let uid = obj.uid().unwrap_or_default();
    let manifest = active.plugin.manifest();
    // The controller watches the owned kinds of both versions of a canary;
    // each version sees (and may prune) only children of kinds it owns.
    let owns = |lease: &CacheLease| {
        let ar = lease.api_resource();
        manifest
            .owns
            .iter()
            .any(|k| k.matches(&ar.api_version, &ar.kind))
    };
    let owned = if ctx.owned.iter().all(owns) {
        // Without a candidate of other kinds: no copy on the stable path.
        apply::owned_children(&ctx.owned, &manifest.name, &uid)
    } else {
        let leases: Vec<CacheLease> = ctx.owned.iter().filter(|l| owns(l)).cloned().collect();
        apply::owned_children(&leases, &manifest.name, &uid)
    };
    let children = owned.iter().map(|c| c.object.text(&c.resource)).collect();
    Observation {
        owned,
        children,
        object: object_text(obj, &ctx.primary),
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
        return Ok(outside_grant(&obj.to_dynamic(), &ctx).await);
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
            let label = if outcome.requeue {
                ReconcileResult::Requeue
            } else {
                ReconcileResult::Success
            };
            ctx.metrics.reconcile_finished(&ctx.plugin, label, seconds);
            active.counters.record(false, call);
            Ok(outcome.action)
        }
        Err(error) if error.is_fenced() => {
            // Not a failure of the plugin or of the object: nothing is
            // reported on it (it belongs to the leader), and the reconcile
            // is not counted as an error.
            ctx.metrics.fenced_write(&ctx.plugin);
            tracing::warn!(
                target: "audit", plugin = %ctx.plugin,
                object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
                reason = Reason::Fenced.as_str(), "{error}"
            );
            ctx.metrics
                .reconcile_finished(&ctx.plugin, ReconcileResult::Success, seconds);
            Ok(Action::await_change())
        }
        Err(error) => {
            ctx.failures.record(&key);
            report_failure(&obj, &ctx, &active, &error).await;
            ctx.metrics
                .reconcile_finished(&ctx.plugin, ReconcileResult::Error, seconds);
            active.counters.record(true, call);
            Err(error)
        }
    }
}

/// A primary outside the grant (e.g. queued by a reconcile-all, or a related
/// object's event): the plugin is never called and nothing is written to it,
/// not even a condition. One exception: a deleting primary that still holds
/// the host's finalizer (added before the grant narrowed) is released, with
/// the host's own identity and without calling `finalize` (the plugin may no
/// longer act there), so nothing is left Terminating.
async fn outside_grant(obj: &DynamicObject, ctx: &Context) -> Action {
    let name = display_name(obj.namespace().as_deref(), &obj.name_any());
    if !super::trigger::holds_host_finalizer_while_deleting(obj) {
        tracing::debug!(
            plugin = %ctx.plugin, object = %name, granted = %ctx.gate.describe(),
            "skipping a primary outside the plugin's granted namespaces"
        );
        return Action::await_change();
    }
    let api = match obj.namespace() {
        Some(ns) => {
            kube::Api::<DynamicObject>::namespaced_with(ctx.host_client.clone(), &ns, &ctx.primary)
        }
        None => kube::Api::<DynamicObject>::all_with(ctx.host_client.clone(), &ctx.primary),
    };
    match apply::finalizer::remove(&api, obj, plan::FINALIZER).await {
        Ok(_) => {
            tracing::warn!(
                target: "audit", plugin = %ctx.plugin, object = %name, granted = %ctx.gate.describe(),
                "released the host's finalizer from a deleting primary outside the plugin's grant; finalize was not called"
            );
            Action::await_change()
        }
        Err(error) => {
            tracing::warn!(plugin = %ctx.plugin, object = %name, %error, "cannot release the host's finalizer; retrying");
            Action::requeue(backoff::delay(1))
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
    if error.is_permanent() {
        return Action::await_change();
    }
    Action::requeue(backoff::delay(
        ctx.failures.get(&failure_key(obj.as_ref())).max(1),
    ))
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
    let ours = ctx.writes_for(obj).token();
    if let Some(theirs) = plan::annotations::newer_fencing_token(obj, ours) {
        return Err(ReconcileError::StaleTerm {
            plugin: ctx.plugin.clone(),
            object: display_name(obj.namespace().as_deref(), &obj.name_any()),
            theirs,
            ours: ours.unwrap_or_default(),
        });
    }
    if obj.metadata.deletion_timestamp.is_some() {
        return finalize(obj, ctx, active, attempt).await;
    }
    let upgraded = match prepare(obj, ctx, active, attempt).await? {
        Prepared::Ready(upgraded) => upgraded,
        Prepared::Retry => return Ok(Outcome::after_ms(RETRY_AFTER_CONFLICT_MS)),
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
        return Ok(hot_loop(obj, ctx, &limits, wait, first).await);
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
    let existing = existing(
        ctx,
        &plan::children::desired_keys(manifest, obj, &desired.children),
    );
    let observed = Observed {
        primary: obj,
        children: &owned,
        existing: &existing,
    };
    let plan_ctx = PlanContext {
        manifest,
        now: Utc::now(),
        limits,
        fencing_token: ctx.writes_for(obj).token(),
    };
    // A refused child means no plan, hence no write at all.
    // Planned on a copy, outside the lock (kube-runtime never reconciles
    // one object twice at once, so nothing else changes this entry).
    let mut rates = ctx.with_rates(&key, &limits, |r| r.clone());
    let mut plan =
        plan::reconcile(&observed, &desired, &plan_ctx, &mut rates).inspect_err(|error| {
            ctx.metrics.refusal(&ctx.plugin, error.reason());
            if let Some(limit) = error.limit() {
                ctx.metrics.limit_breach(&ctx.plugin, limit.as_str());
            }
        })?;
    // Children of a namespaced primary live in its (granted) namespace; a
    // cluster-scoped primary's namespaced children are what this catches.
    let outside = children_outside(plan.apply.keys(), &ctx.gate);
    if !outside.is_empty() {
        return Err(ReconcileError::ChildOutsideGrant {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            children: outside.join(", "),
            granted: ctx.gate.describe(),
        });
    }
    ctx.with_rates(&key, &limits, |r| *r = rates);
    let unchanged = plan::unchanged::skip(&mut plan, &owned, |child| ctx.applied.get(child));
    if !unchanged.is_empty() {
        tracing::trace!(plugin = %ctx.plugin, children = unchanged.len(), "unchanged children not applied");
    }
    for breach in &plan.breaches {
        ctx.metrics.limit_breach(&ctx.plugin, breach.limit.as_str());
    }
    let executed = execute(obj, ctx, &plan).await;
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

/// What the owned kinds' caches show at `keys` (the takeover check of
/// [`plan::reconcile`]): lookups by key, no list.
pub(super) fn existing(ctx: &Context, keys: &[ChildKey]) -> BTreeMap<ChildKey, Arc<CachedObject>> {
    keys.iter()
        .filter_map(|key| {
            let lease = ctx.owned.iter().find(|l| {
                let ar = l.api_resource();
                ar.api_version == key.api_version && ar.kind == key.kind
            })?;
            let mut reference = ObjectRef::new_with(&key.name, lease.api_resource().clone());
            if let Some(ns) = &key.namespace {
                reference = reference.within(ns);
            }
            lease.store().get(&reference).map(|obj| (key.clone(), obj))
        })
        .collect()
}

/// The object is reconciled more often than its rate limit allows: nothing
/// is called or written now, the reconcile waits for the next token. The
/// first delay of a streak records a `HotLoop` Warning event; the next
/// reconcile that runs reports the loop in `Degraded` ([`plan::reconcile`]).
async fn hot_loop(
    obj: &DynamicObject,
    ctx: &Context,
    limits: &ReconcileLimits,
    wait: Duration,
    first: bool,
) -> Outcome {
    ctx.metrics
        .limit_breach(&ctx.plugin, Limit::ReconcileRate.as_str());
    if first {
        let message = format!(
            "hot loop: plugin {} reconciled this object more than {} times in a row at more than one per {} ms; further reconciles are delayed. Look for a requeue-after loop or two writers fighting over the object or a child",
            ctx.plugin,
            limits.reconcile_burst,
            limits.reconcile_refill.as_millis()
        );
        tracing::warn!(
            plugin = %ctx.plugin,
            object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
            "{message}"
        );
        ctx.events
            .publish(
                &ctx.primary,
                obj,
                true,
                Reason::HotLoop.as_str(),
                &message,
                EventAction::Reconcile.as_str(),
            )
            .await;
        ctx.metrics.events(&ctx.plugin, 1, 0);
    }
    Outcome::after_ms(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
}

/// The children (as `Kind namespace/name`) in namespaces `gate` does not allow.
pub(super) fn children_outside<'a>(
    keys: impl Iterator<Item = &'a plan::ChildKey>,
    gate: &NamespaceGate,
) -> Vec<String> {
    keys.filter(|key| key.namespace.as_deref().is_some_and(|ns| !gate.allows(ns)))
        .map(ToString::to_string)
        .collect()
}

/// Carries out `plan`, logging what was written and counting it.
async fn execute(obj: &DynamicObject, ctx: &Context, plan: &Plan) -> Result<(), ApplyError> {
    let executed = apply::execute(&writer(ctx, obj), obj, plan).await?;
    ctx.applied.record(&executed, &ctx.owned);
    if let Some(resource_version) = &executed.primary_resource_version {
        ctx.primary_writes
            .record(obj.metadata.uid.as_deref(), resource_version);
    }
    let writes = executed.writes();
    let m = &ctx.metrics;
    m.writes(&ctx.plugin, WriteKind::Apply, writes.apply);
    m.writes(&ctx.plugin, WriteKind::Prune, writes.prune);
    m.writes(&ctx.plugin, WriteKind::Status, writes.status);
    // One count per request: a metadata patch that carries the finalizer
    // (and the marks with it) is a finalizer write; the rest carry marks.
    let finalizer = usize::from(executed.finalizer != plan::FinalizerChange::Unchanged);
    m.writes(&ctx.plugin, WriteKind::Finalizer, finalizer);
    m.writes(
        &ctx.plugin,
        WriteKind::Annotations,
        writes.metadata.saturating_sub(finalizer),
    );
    m.events(&ctx.plugin, executed.events, plan.events_dropped);
    tracing::debug!(
        plugin = %ctx.plugin,
        object = %display_name(obj.namespace().as_deref(), &obj.name_any()),
        writes = writes.objects(),
        events = writes.events,
        ?executed,
        "plan executed"
    );
    Ok(())
}

/// Requeue delay after the object changed under an upgrade: the change
/// itself is the next thing to reconcile, there is nothing to back off from.
const RETRY_AFTER_CONFLICT_MS: u64 = 200;

pub(super) fn call_context(
    obj: &DynamicObject,
    active: &ActiveVersion,
    attempt: u32,
) -> CallContext {
    CallContext {
        plugin_version: active.plugin.manifest().version.clone(),
        attempt,
        managed_by_version: obj
            .annotations()
            .get(MANAGED_BY_VERSION_ANNOTATION)
            .cloned(),
        config: active.config.clone(),
    }
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
        DeletionStep::NotOurs => return Ok(Outcome::of(Requeue::AwaitChange)),
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
    let plan_ctx = PlanContext {
        manifest,
        now: Utc::now(),
        limits: active.limits,
        fencing_token: ctx.writes_for(obj).token(),
    };
    let plan = plan::finalize(obj, answer, &plan_ctx);
    execute(obj, ctx, &plan).await?;
    Ok(Outcome::of(plan.requeue))
}

/// What the version checks decided before a reconcile.
enum Prepared {
    /// Reconcile; with the object as written when it was just upgraded.
    Ready(Option<Box<DynamicObject>>),
    /// The object changed during its upgrade; try again shortly.
    Retry,
}

/// The version checks before a reconcile: refuse objects a newer version
/// declared incompatible with this one, and upgrade objects an older version
/// managed when this version implements migration.
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
    if !manifest.implements.migration {
        // A newer version without an upgrade step just takes over; the marks
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
        &active.plugin,
        &call_ctx,
        ctx.cache.clone(),
    )
    .await;
    let object = display_name(obj.namespace().as_deref(), &obj.name_any());
    match result {
        Ok(UpgradeOutcome::Current(current)) => Ok(Prepared::Ready(Some(current))),
        Ok(UpgradeOutcome::Upgraded(written)) => {
            let message = format!(
                "{} upgraded this object from {from} to {}",
                manifest.name, manifest.version
            );
            tracing::info!(
                target: "audit", plugin = %manifest.name, from = %from, to = %manifest.version,
                digest = %active.info.digest, kind = %ctx.primary.kind, object = %object,
                "object upgraded"
            );
            ctx.events
                .publish(
                    &ctx.primary,
                    &written,
                    false,
                    Reason::Upgraded.as_str(),
                    &message,
                    EventAction::Upgrade.as_str(),
                )
                .await;
            Ok(Prepared::Ready(Some(written)))
        }
        Err(MigrationError::Conflict { .. }) => {
            tracing::debug!(plugin = %manifest.name, object = %object, "object changed during its upgrade; retrying");
            Ok(Prepared::Retry)
        }
        Err(error) => {
            tracing::warn!(
                target: "audit", plugin = %manifest.name, from = %from, to = %manifest.version,
                kind = %ctx.primary.kind, object = %object, %error, "object upgrade failed"
            );
            Err(error.into())
        }
    }
}

/// Puts a failure on the object: `Degraded=True` and `Ready=False` with the
/// failure's reason, and a Warning event with the same reason
/// ([`plan::failure`]). Best effort: a failure to report is logged, the
/// reconcile error still drives the retry.
async fn report_failure(
    obj: &DynamicObject,
    ctx: &Context,
    active: &ActiveVersion,
    error: &ReconcileError,
) {
    let (plugin, version) = (&active.info.name, &active.info.version);
    let limits = active.limits;
    let mut message = error.message(plugin, version);
    if message.len() > limits.max_condition_message_bytes {
        // A plugin's failure message is its own text: bounded like a
        // condition message before it reaches the object or the log.
        message = crate::util::truncate(&message, limits.max_condition_message_bytes);
        ctx.metrics
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
        ctx.metrics.plugin_failure(plugin, version, error.reason());
    }
    // The API server refused the plugin's output: a refusal like the plan's.
    if let ReconcileError::Apply(e @ (ApplyError::Rejected { .. } | ApplyError::Conflict { .. })) =
        error
    {
        ctx.metrics.refusal(plugin, e.reason());
    }
    let mut plan = plan::failure(obj, &report, Utc::now());
    let (events, dropped) = ctx.with_rates(&failure_key(obj), &limits, |rates| {
        rates.correlate(std::mem::take(&mut plan.events), &limits, Utc::now())
    });
    plan.events = events;
    plan.events_dropped = dropped;
    if dropped > 0 {
        ctx.metrics.limit_breach(plugin, Limit::EventRate.as_str());
    }
    if let Err(e) = execute(obj, ctx, &plan).await {
        tracing::warn!(plugin = %plugin, error = %e, "cannot write the failure status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_outside_the_granted_namespaces_are_named() {
        let key = |ns: Option<&str>, name: &str| plan::ChildKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.map(str::to_string),
            name: name.into(),
        };
        let keys = [
            key(Some("team-a"), "fine"),
            key(Some("kube-system"), "sneaky"),
            key(None, "cluster-wide"),
        ];
        let gate = NamespaceGate::new(Arc::default(), None);
        assert_eq!(
            children_outside(keys.iter(), &gate),
            ["ConfigMap kube-system/sneaky"]
        );
    }
}
