//! The backup runner of one plugin: a task beside its controller that
//! sweeps the plugin's primaries, Backups and Restores whenever one of
//! them (or a Job) changes, and at the next schedule slot.
//!
//! A sweep is level-triggered: it reads everything from the shared caches
//! and moves each object one step ([`super::drive`], [`super::primary`],
//! [`super::restore`]), so a restart, a new leader or a missed event only
//! delays a step, never loses or repeats one (names are deterministic and
//! creation is idempotent).
//!
//! # Guarantees
//! - Only objects in the plugin's grant, of its primary kind, and of this
//!   replica's shards are touched.
//! - The plugin's `backup.plan` is called once per primary generation and
//!   serving version.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;

use super::context::{RunnerCaches, RunnerContext, RunnerDeps};
use super::drive::{self, Driven};
use super::primary;
use super::resources::{Backup, PRIMARY_UID_LABEL, Restore};
use super::restore;
use crate::cache::{CachedObject, SharedCache, api_resource};
use crate::contract::{ResourceKind, Scope};

/// The longest a runner sleeps without a change: a safety net for a lost
/// event (the deadlines of Jobs are the API server's, not ours).
const IDLE_SWEEP: Duration = Duration::from_secs(30);
/// How soon a step that asked to look again soon runs.
const SOON: Duration = Duration::from_secs(1);
/// Changes arriving together are handled in one sweep.
const DEBOUNCE: Duration = Duration::from_millis(100);

fn kind(group: &str, version: &str, kind: &str, plural: &str) -> ResourceKind {
    ResourceKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        scope: Scope::Namespaced,
    }
}

/// Runs the backup runner until `shutdown`.
pub async fn run(
    deps: RunnerDeps,
    cache: SharedCache,
    primary_kind: ResourceKind,
    shutdown: CancellationToken,
) {
    let group = super::resources::GROUP;
    let version = super::resources::VERSION;
    let caches = RunnerCaches {
        primaries: cache.acquire(&primary_kind, None),
        backups: cache.acquire(&kind(group, version, "Backup", "backups"), None),
        restores: cache.acquire(&kind(group, version, "Restore", "restores"), None),
        jobs: cache.acquire(&kind("batch", "v1", "Job", "jobs"), None),
    };
    debug_assert_eq!(
        caches.primaries.api_resource(),
        &api_resource(&primary_kind)
    );
    deps.metrics.backups_started(&deps.plugin);
    let ctx = Arc::new(RunnerContext::new(deps, caches));
    let mut changes = futures::stream::select_all(
        ctx.caches
            .all()
            .into_iter()
            .map(|lease| lease.subscribe().boxed()),
    );
    while !ctx.caches.all().iter().all(|lease| lease.synced()) {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    loop {
        let wake = sweep(&ctx).await;
        let sleep = wake
            .and_then(|at| (at - Utc::now()).to_std().ok())
            .unwrap_or(Duration::ZERO)
            .min(IDLE_SWEEP)
            .max(DEBOUNCE);
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(sleep) => {}
            change = changes.next() => {
                if change.is_none() {
                    return;
                }
                tokio::time::sleep(DEBOUNCE).await;
                // Everything that arrived meanwhile is in this sweep.
                while let Some(Some(_)) = changes.next().now_or_never() {}
            }
        }
    }
}

use futures::FutureExt as _;

/// One pass over every object; returns when to look again at the latest.
async fn sweep(ctx: &RunnerContext) -> Option<DateTime<Utc>> {
    let mut wake = Utc::now() + chrono::TimeDelta::from_std(IDLE_SWEEP).unwrap_or_default();
    let soon = || Utc::now() + chrono::TimeDelta::from_std(SOON).unwrap_or_default();
    let gate = &ctx.deps.gate;
    let backups: Vec<Backup> = ctx
        .caches
        .backups
        .store()
        .state()
        .iter()
        .filter(|b| gate.allows_object(b.as_ref()))
        .filter_map(|b| typed::<Backup>(b))
        .filter(|b| ctx.serves(&b.spec.primary))
        .collect();
    for backup in &backups {
        let shard_uid = backup
            .labels()
            .get(PRIMARY_UID_LABEL)
            .cloned()
            .or_else(|| backup.uid());
        if !ctx.may_write(shard_uid.as_deref()) {
            continue;
        }
        match drive::drive(ctx, backup).await {
            Driven::Idle => {}
            Driven::Moved | Driven::Soon => wake = wake.min(soon()),
        }
    }
    let restores: Vec<Restore> = ctx
        .caches
        .restores
        .store()
        .state()
        .iter()
        .filter(|r| gate.allows_object(r.as_ref()))
        .filter_map(|r| typed::<Restore>(r))
        .collect();
    let restoring: BTreeMap<Option<String>, BTreeSet<String>> = restores
        .iter()
        .filter(|r| !finished(r))
        .fold(BTreeMap::new(), |mut by, r| {
            by.entry(r.namespace())
                .or_default()
                .insert(r.spec.backup.clone());
            by
        });
    let primaries: Vec<Arc<CachedObject>> = ctx
        .caches
        .primaries
        .store()
        .state()
        .into_iter()
        .filter(|p| gate.allows_object(p.as_ref()))
        .collect();
    // Each primary's Backups, found once per sweep (by the uid label every
    // Backup gets when it starts).
    let mut by_primary: BTreeMap<String, Vec<&Backup>> = BTreeMap::new();
    for backup in &backups {
        if let Some(uid) = backup.labels().get(PRIMARY_UID_LABEL) {
            by_primary.entry(uid.clone()).or_default().push(backup);
        }
    }
    let present = primaries
        .iter()
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    ctx.forget_absent(&present);
    for object in &primaries {
        if !ctx.may_write(object.uid().as_deref()) {
            continue;
        }
        let none = BTreeSet::new();
        let restoring = restoring.get(&object.namespace()).unwrap_or(&none);
        let own = object
            .uid()
            .and_then(|uid| by_primary.get(&uid))
            .map_or(&[][..], Vec::as_slice);
        if let Some(at) = primary::handle(ctx, object, own, restoring).await {
            wake = wake.min(at);
        }
    }
    for item in &restores {
        if !ctx.may_write(item.uid().as_deref()) {
            continue;
        }
        let backup = restore::backup_of(ctx, item, &backups);
        let ours = backup.is_some()
            || !backups
                .iter()
                .any(|b| b.name_any() == item.spec.backup && b.namespace() == item.namespace());
        if ours && restore::drive(ctx, item, backup).await {
            wake = wake.min(soon());
        }
    }
    Some(wake)
}

/// True for a Restore that completed or failed.
fn finished(restore: &Restore) -> bool {
    matches!(
        restore.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Completed" | "Failed")
    )
}

/// A cached object as a typed resource (`None` for one that does not fit
/// the type: an object written around the schema).
fn typed<K: serde::de::DeserializeOwned>(object: &CachedObject) -> Option<K> {
    serde_json::to_value(object.to_dynamic())
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
}
