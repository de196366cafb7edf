//! Deciding what to write: a plugin's answer plus the observed state become a
//! [`Plan`], a plain value the executor ([`crate::apply`]) carries out.
//!
//! Everything here is pure: no client, no I/O, the current time passed in as
//! a value. That is what lets a plan be unit-tested without a cluster, logged,
//! and compared with another plan (two plugin versions answering for the same
//! object in shadow mode): every part of a [`Plan`] is keyed or ordered
//! deterministically, so `==` and `Debug` diffs are meaningful.
//!
//! Three plans answer a plugin call or its failure:
//! - [`reconcile`]: the plugin answered `reconcile`: children to apply and to
//!   prune, status, events, version marks, the finalizer, the requeue;
//! - [`finalize`]: the primary is being deleted ([`finalizer`] documents the
//!   contract);
//! - [`failure`]: a reconcile failed: `Degraded=True`, `Ready=False` and a
//!   Warning event with the failure's reason.
//!
//! The host's own plans ([`host`]: the hot-loop and upgrade reports, the
//! release of a primary outside the grant) and the limits [`reconcile`]
//! applies (`clamps`, one function each) live in their own files.

pub mod annotations;
pub mod children;
mod clamps;
pub mod finalizer;
pub mod host;
pub mod limits;
pub mod marks;
pub mod names;
pub mod status;
pub mod unchanged;
pub mod validate;
pub mod workloads;

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};

pub use annotations::AnnotationChanges;
pub use children::{ChildApply, ChildKey, ChildPrune};
pub use clamps::status_size;
pub use finalizer::{DeletionStep, FinalizerChange};
pub use limits::{Admission, Breach, CreationBudget, Limit, ObjectRates};
pub use names::{
    FINALIZER, MANAGED_BY_VERSION_ANNOTATION, MIGRATION_STATE_ANNOTATION,
    MIN_COMPATIBLE_VERSION_ANNOTATION, MigrationState, display_name, field_manager,
};
pub use status::{build_status, without_host_fields};

use crate::cache::CachedObject;
use crate::contract::{Condition, Desired, Finalized, Grant, Manifest, Reason, ReconcileLimits};

/// A child of the primary as a cache shows it.
#[derive(Debug, Clone)]
pub struct OwnedChild {
    /// The child's kind.
    pub resource: ApiResource,
    /// The child as the cache holds it.
    pub object: Arc<CachedObject>,
}

/// What the host observed before the plugin call.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The primary as the plugin saw it (after an upgrade, as written).
    pub primary: &'a DynamicObject,
    /// Its owned children in the caches.
    pub children: &'a [OwnedChild],
    /// What the owned kinds' caches show at the keys the answer desires
    /// (see [`children::desired_keys`]), owned by this primary or not: the
    /// takeover check. A child created since the cache last synced is
    /// missing here; the executor closes that window by creating children
    /// the cache does not show without forcing (see `apply`).
    pub existing: &'a BTreeMap<ChildKey, Arc<CachedObject>>,
}

/// What a plan is computed for, besides the observed state.
#[derive(Debug, Clone, Copy)]
pub struct PlanContext<'a> {
    /// The serving plugin version's manifest.
    pub manifest: &'a Manifest,
    /// The serving version's grant: what the pods of its children may run
    /// as ([`workloads`]).
    pub grant: &'a Grant,
    /// The current time: `lastTransitionTime` of conditions that change.
    pub now: DateTime<Utc>,
    /// The serving version's limits per reconcile.
    pub limits: ReconcileLimits,
    /// The fencing token of this replica's leader-election term, recorded
    /// on the primary ([`annotations::fencing_mark`]); `None` without
    /// leader election.
    pub fencing_token: Option<&'a crate::lease::FencingToken>,
    /// A fencing token on the primary that its Lease never issued
    /// ([`crate::lease::LaterTerm::Forged`]): the plan overwrites it and
    /// reports it ([`annotations::forged_report`]).
    pub forged_fencing_token: Option<&'a crate::lease::ForgedTerm>,
    /// New children (not shown by the caches) this plan may create: what
    /// the plugin's [`CreationBudget`] granted; `usize::MAX` when unbounded
    /// (plans that are never written, tests).
    pub creations_allowed: usize,
}

impl PlanContext<'_> {
    fn timestamp(&self) -> String {
        self.now.to_rfc3339_opts(SecondsFormat::Secs, true)
    }
}

/// What the host was doing when it records an event (the event's `action`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventAction {
    /// Reporting a reconcile: the plugin's events and failures.
    Reconcile,
    /// Deleting a child no longer desired.
    Prune,
    /// Releasing a deleting primary.
    Finalize,
    /// Upgrading an object an older plugin version wrote.
    Upgrade,
}

impl EventAction {
    /// The `action` field of the event.
    pub fn as_str(self) -> &'static str {
        match self {
            EventAction::Reconcile => "Reconcile",
            EventAction::Prune => "Prune",
            EventAction::Finalize => "Finalize",
            EventAction::Upgrade => "Upgrade",
        }
    }
}

/// One event to record on the primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedEvent {
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// Searchable CamelCase reason.
    pub reason: String,
    /// The note; the recorder truncates it to the API's 1 kB.
    pub message: String,
    /// What the host was doing.
    pub action: EventAction,
    /// Record the event only when the executor really deleted this child: a
    /// child the cache still showed but that was already gone made no change
    /// worth an event.
    pub only_if_pruned: Option<ChildKey>,
}

impl PlannedEvent {
    fn new(warning: bool, reason: &str, message: String, action: EventAction) -> PlannedEvent {
        PlannedEvent {
            warning,
            reason: reason.to_string(),
            message,
            action,
            only_if_pruned: None,
        }
    }
}

/// When the controller looks at the object again after the plan was carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// The periodic resync only (drift the watches cannot see).
    Resync,
    /// The plugin asked to be called again after this many milliseconds.
    AfterMs(u64),
    /// Only when the object changes.
    AwaitChange,
    /// A failure report: the controller's error policy decides the retry.
    Backoff,
}

/// What a failed reconcile reports on the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureReport {
    /// Searchable reason, e.g. `PluginTrap`.
    pub reason: String,
    /// Names the plugin, its version and what to do.
    pub message: String,
}

/// Every write one reconcile makes, as a value.
///
/// An empty part means no write: a plan for an object that already shows
/// everything the plugin wants is [`Plan::is_noop`] apart from its children.
/// [`reconcile`] plans an apply of every desired child; the controller then
/// leaves out those the host applied before and that are unchanged
/// ([`unchanged::skip`], which says when a child counts as unchanged and
/// why fields another manager changed are still taken back).
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Children to server-side apply, complete documents by identity.
    pub apply: BTreeMap<ChildKey, ChildApply>,
    /// Owned children no longer desired: deleted.
    pub prune: BTreeMap<ChildKey, ChildPrune>,
    /// The `.status` merge patch; `None` when the status is unchanged.
    pub status: Option<serde_json::Value>,
    /// The conditions the status patch was built from (incl. the host's
    /// `Ready` / `Degraded` defaults), for logs and diffs.
    pub conditions: Vec<Condition>,
    /// Events to record on the primary, in order.
    pub events: Vec<PlannedEvent>,
    /// Annotation changes on the primary (the version marks).
    pub annotations: AnnotationChanges,
    /// The host's finalizer on the primary.
    pub finalizer: FinalizerChange,
    /// When to look at the object again.
    pub requeue: Requeue,
    /// The clamps this plan made (each also in the `LimitExceeded`
    /// condition), for the breach metric.
    pub breaches: Vec<Breach>,
    /// Events the limits dropped (beyond the per-reconcile limit or the
    /// object's event rate), for the event metric.
    pub events_dropped: usize,
}

impl Plan {
    /// A plan that writes nothing.
    pub fn idle(requeue: Requeue) -> Plan {
        Plan {
            apply: BTreeMap::new(),
            prune: BTreeMap::new(),
            status: None,
            conditions: Vec::new(),
            events: Vec::new(),
            annotations: AnnotationChanges::new(),
            finalizer: FinalizerChange::Unchanged,
            requeue,
            breaches: Vec::new(),
            events_dropped: 0,
        }
    }

    /// The patches of the primary's metadata this plan makes (the host's
    /// finalizer and the version marks), grouped into the fewest requests
    /// that keep their order; see [`MetadataWrites`].
    pub fn metadata_writes(&self) -> MetadataWrites {
        let annotations = || self.annotations.clone();
        match self.finalizer {
            // The finalizer must be on the object before any child exists;
            // the marks ride along in the same patch instead of a request of
            // their own at the end.
            FinalizerChange::Add => MetadataWrites {
                first: Some(MetadataWrite {
                    finalizer: FinalizerChange::Add,
                    annotations: annotations(),
                }),
                last: None,
            },
            change => MetadataWrites {
                first: None,
                last: (change != FinalizerChange::Unchanged || !self.annotations.is_empty()).then(
                    || MetadataWrite {
                        finalizer: change,
                        annotations: annotations(),
                    },
                ),
            },
        }
    }

    /// True when carrying the plan out makes no API write at all.
    pub fn is_noop(&self) -> bool {
        self.apply.is_empty()
            && self.prune.is_empty()
            && self.status.is_none()
            && self.events.is_empty()
            && self.annotations.is_empty()
            && self.finalizer == FinalizerChange::Unchanged
    }
}

/// Changes to the primary's own metadata that the executor sends together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataWrite {
    /// The host's finalizer.
    pub finalizer: FinalizerChange,
    /// The version marks (empty: none).
    pub annotations: AnnotationChanges,
}

/// Where a plan's metadata changes are written, as [`Plan::metadata_writes`]
/// groups them.
///
/// - Adding the finalizer goes `first`, before any child is applied (see
///   [`finalizer`]); the version marks of the same plan go with it, in one
///   patch. That is the first reconcile of an object (or the first under a
///   version that asks for a finalizer): the marks then record the version
///   that took the object on, written before its children. A later write of
///   that reconcile can still fail; the retry plans no marks (they are
///   already there) and writes the rest.
/// - Otherwise the marks go `last`, after the status: they say this version
///   reconciled the object. Removing the finalizer is last too (it may
///   release the object); the executor removes it after writing the marks of
///   the same plan, if any (no planner makes both today).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataWrites {
    /// Written before any child.
    pub first: Option<MetadataWrite>,
    /// Written after the status.
    pub last: Option<MetadataWrite>,
}

/// Why a plugin's answer cannot be planned. Nothing is written for it; the
/// answer itself is wrong, so retrying the same answer cannot help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The plugin returned children of kinds its manifest does not own.
    #[error(
        "plugin {plugin} {version} returned children of kinds it does not own: {kinds}; nothing was written. Add the kinds to the manifest's `owns` or stop returning them"
    )]
    CapabilityDenied {
        plugin: String,
        version: String,
        kinds: String,
    },
    /// A child is unusable as returned (e.g. in another namespace than its owner).
    #[error(
        "plugin {plugin} {version} returned an invalid child {child}: {problem}; fix the plugin"
    )]
    InvalidChild {
        plugin: String,
        version: String,
        child: String,
        problem: String,
    },
    /// A desired child exists and is not controlled by this primary.
    #[error(
        "plugin {plugin} {version} desires children that exist and are not this object's: {conflicts}; nothing was written and they are never pruned. Rename the children in the plugin or delete the existing objects"
    )]
    ChildConflict {
        plugin: String,
        version: String,
        conflicts: String,
    },
    /// More children than the limit.
    #[error(
        "plugin {plugin} {version} desires {count} children, more than its limit of {limit}; nothing was written. Raise spec.limits.maxChildren of the WasmPlugin or fix the plugin"
    )]
    TooManyChildren {
        plugin: String,
        version: String,
        count: usize,
        limit: usize,
    },
    /// A pod-creating child whose pods would run beyond the grant: as a
    /// ServiceAccount or with Secrets it does not name, or beyond its Pod
    /// Security level.
    #[error(
        "plugin {plugin} {version} returned workloads whose pods would run beyond its grant: {violations}; nothing was written. Fix the plugin's pod templates, or, if the cluster operator agrees, widen the grant (WasmPlugin spec.permissions.workloads, or `run --grant FILE`)"
    )]
    WorkloadDenied {
        plugin: String,
        version: String,
        violations: String,
    },
    /// The status patch is larger than the limit.
    #[error(
        "plugin {plugin} {version} answered a status of {size} bytes, more than its limit of {limit}; nothing was written. Raise spec.limits.maxStatusSize of the WasmPlugin or fix the plugin"
    )]
    StatusTooLarge {
        plugin: String,
        version: String,
        size: usize,
        limit: usize,
    },
}

impl PlanError {
    /// The condition/event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::CapabilityDenied { .. } | PlanError::WorkloadDenied { .. } => {
                Reason::CapabilityDenied.as_str()
            }
            PlanError::InvalidChild { .. } => Reason::PluginInvalidOutput.as_str(),
            PlanError::ChildConflict { .. } => Reason::ChildConflict.as_str(),
            PlanError::TooManyChildren { .. } => Reason::TooManyChildren.as_str(),
            PlanError::StatusTooLarge { .. } => Reason::StatusTooLarge.as_str(),
        }
    }

    /// The limit a refusal is of, for the breach metric.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            PlanError::TooManyChildren { .. } => Some(Limit::Children),
            PlanError::StatusTooLarge { .. } => Some(Limit::StatusSize),
            _ => None,
        }
    }
}

fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        kind: kind.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
    }
}

/// The plan for a plugin's `reconcile` answer.
///
/// Children are completed, validated and checked against the manifest and
/// against what exists ([`PlanError::ChildConflict`]); observed owned
/// children missing from the answer are pruned (each with a `ChildPruned`
/// event), the plugin's conditions get the host's `Ready=True` and
/// `Degraded=False` defaults unless it set them, and the status, version
/// marks and finalizer are written only when they change.
///
/// The limits ([`ReconcileLimits`] states the rule) are applied here, one
/// clamp at a time:
/// refusals are errors, clamps are [`Plan::breaches`] and a
/// `Degraded=True`/`LimitExceeded` condition. `rates` is the object's
/// per-object state (events are correlated through it; a hot loop it
/// recorded is reported by this plan).
///
/// # Errors
///
/// [`PlanError`] when the answer names a child the plugin may not write,
/// cannot own or that is not its to write, or breaks a refusing limit; no
/// plan at all, so nothing is written.
pub fn reconcile(
    observed: &Observed<'_>,
    desired: &Desired,
    ctx: &PlanContext<'_>,
    rates: &mut ObjectRates,
) -> Result<Plan, PlanError> {
    let manifest = ctx.manifest;
    let limits = &ctx.limits;
    let primary = observed.primary;
    clamps::children_count(manifest, limits, desired.children.len())?;
    let apply = planned_children(observed, manifest, ctx.grant, &desired.children)?;
    let prune = children::unwanted(observed.children, &apply);
    let mut breaches = Vec::new();
    let (apply, breach) = clamps::creations(apply, ctx.creations_allowed, limits);
    breaches.extend(breach);
    // Rate state changes only with a plan: a refused answer records nothing
    // and takes no event tokens.
    let mut next = rates.clone();

    let mut events = clamps::prune_events(&prune, manifest);
    let (asked, breach) = clamps::plugin_events(&desired.events, limits);
    breaches.extend(breach);
    events.extend(asked);
    let (mut events, dropped, breach) = clamps::event_rate(events, &mut next, limits, ctx.now);
    breaches.extend(breach);
    let events_dropped = dropped
        + desired
            .events
            .len()
            .saturating_sub(limits.max_events_per_reconcile);

    let mut conditions = desired.conditions.clone();
    breaches.extend(clamps::condition_messages(&mut conditions, limits));
    let (requeue, breach) = clamps::requeue_after(desired.requeue_after_ms, limits);
    breaches.extend(breach);
    let (requeue, breach) = clamps::hot_loop(next.take_throttled(), requeue, limits);
    breaches.extend(breach);
    clamps::host_conditions(&mut conditions, &breaches, manifest);
    if let Some(forged) = ctx.forged_fencing_token {
        let (degraded, event) = annotations::forged_report(forged, ctx.fencing_token);
        conditions.retain(|c| c.kind != "Degraded");
        conditions.push(degraded);
        events.push(event);
    }
    let status = build_status(
        primary,
        desired.status.as_ref(),
        &conditions,
        &ctx.timestamp(),
    );
    clamps::status_size(status.as_ref(), manifest, limits)?;

    *rates = next;
    Ok(Plan {
        apply,
        prune,
        status,
        conditions,
        events,
        annotations: {
            let mut marks = annotations::version_marks(primary, manifest);
            marks.extend(annotations::fencing_mark(primary, ctx.fencing_token));
            marks
        },
        finalizer: finalizer::on_reconcile(primary, manifest),
        requeue,
        breaches,
        events_dropped,
    })
}

/// The desired children completed and checked: refused when a workload's
/// pods would run beyond `grant` ([`workloads::check`]) or one is not this
/// primary's to write ([`PlanError::ChildConflict`]), each marked whether
/// it exists (the caches show it, owned or not).
fn planned_children(
    observed: &Observed<'_>,
    manifest: &Manifest,
    grant: &Grant,
    desired: &[serde_json::Value],
) -> Result<BTreeMap<ChildKey, ChildApply>, PlanError> {
    let primary = observed.primary;
    let mut apply = children::complete(manifest, primary, desired)?;
    workloads::check(manifest, grant, &apply)?;
    let conflicts = children::conflicts(
        &apply,
        observed.existing,
        &primary.uid().unwrap_or_default(),
    );
    if !conflicts.is_empty() {
        return Err(PlanError::ChildConflict {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            conflicts: conflicts.join("; "),
        });
    }
    let owned: std::collections::BTreeSet<ChildKey> = observed
        .children
        .iter()
        .map(|c| ChildKey::of(&c.resource, c.object.as_ref()))
        .collect();
    for (key, child) in &mut apply {
        child.exists = observed.existing.contains_key(key) || owned.contains(key);
    }
    Ok(apply)
}

/// The size in bytes of `value` as compact JSON, counted without building
/// the text (this runs on every reconcile that writes a status).
fn json_size(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A `Value` always serializes; were it not to, the limit refuses it.
    serde_json::to_writer(&mut count, value).map_or(usize::MAX, |()| count.0)
}

/// The plan for a deleting primary, after the plugin's `finalize` answered
/// (`None` when it was not called: [`DeletionStep::Release`]).
///
/// Without the host's finalizer there is nothing to do; `wait` writes nothing
/// and asks to be called again; otherwise the finalizer is removed and a
/// `Finalized` event recorded. See [`finalizer`] for the whole contract.
pub fn finalize(primary: &DynamicObject, answer: Option<Finalized>, ctx: &PlanContext<'_>) -> Plan {
    if !finalizer::holds(primary) {
        return Plan::idle(Requeue::AwaitChange);
    }
    if let Some(Finalized::Wait(ms)) = answer {
        return Plan::idle(Requeue::AfterMs(ms));
    }
    let manifest = ctx.manifest;
    Plan {
        events: vec![PlannedEvent::new(
            false,
            Reason::Finalized.as_str(),
            format!(
                "plugin {} {} finalized the object",
                manifest.name, manifest.version
            ),
            EventAction::Finalize,
        )],
        finalizer: FinalizerChange::Remove,
        ..Plan::idle(Requeue::AwaitChange)
    }
}

/// The plan that reports a failed reconcile: `Degraded=True` and
/// `Ready=False` with the failure's reason and message (the status written
/// only if it changes), and a Warning event with the same reason.
pub fn failure(primary: &DynamicObject, report: &FailureReport, now: DateTime<Utc>) -> Plan {
    let conditions = vec![
        condition("Degraded", "True", &report.reason, &report.message),
        condition("Ready", "False", &report.reason, &report.message),
    ];
    let timestamp = now.to_rfc3339_opts(SecondsFormat::Secs, true);
    Plan {
        status: build_status(primary, None, &conditions, &timestamp),
        conditions,
        events: vec![PlannedEvent::new(
            true,
            &report.reason,
            report.message.clone(),
            EventAction::Reconcile,
        )],
        ..Plan::idle(Requeue::Backoff)
    }
}

/// Objects the unit tests of this module and its children share.
#[cfg(test)]
pub(crate) mod test_support {
    use kube::api::DynamicObject;
    use serde_json::json;

    use crate::contract::{Manifest, OptionalInterfaces, ResourceKind, Scope};

    fn kind(group: &str, kind: &str, plural: &str) -> ResourceKind {
        ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            scope: Scope::Namespaced,
        }
    }

    /// `webapp` 1.2.0: owns Services and ConfigMaps, asks for a finalizer.
    pub fn manifest() -> Manifest {
        Manifest {
            name: "webapp".into(),
            version: "1.2.0".into(),
            description: String::new(),
            primary: kind("example.com", "WebApp", "webapps"),
            owns: vec![
                kind("", "Service", "services"),
                kind("", "ConfigMap", "configmaps"),
            ],
            watches: vec![],
            finalizer: true,
            implements: OptionalInterfaces::default(),
            min_compatible_version: None,
        }
    }

    /// A fresh WebApp `prod/shop`, generation 1, no status.
    pub fn primary() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1", "generation": 1},
        }))
        .unwrap()
    }

    pub fn with_finalizers(mut obj: DynamicObject, finalizers: &[&str]) -> DynamicObject {
        obj.metadata.finalizers = Some(finalizers.iter().map(ToString::to_string).collect());
        obj
    }

    pub fn with_annotations(mut obj: DynamicObject, annotations: &[(&str, &str)]) -> DynamicObject {
        let map = obj
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in annotations {
            map.insert(k.to_string(), v.to_string());
        }
        obj
    }
}

#[cfg(test)]
mod tests;
