//! The executor: one plan, written in a fixed order.

use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, ResourceExt};

use super::finalizer::{self, FinalizerWrite};
use super::{ApplyError, EventSink, children, metadata, status};
use crate::plan::{ChildKey, FINALIZER, FinalizerChange, Plan, display_name};

/// Who writes: the client, the primary kind and the plugin whose field
/// manager and event reporter the writes use.
#[derive(Clone, Copy)]
pub struct Writer<'a> {
    /// Every write goes through this client.
    pub client: &'a Client,
    /// The primary's kind.
    pub primary: &'a ApiResource,
    /// The plugin's name: field manager `wasm-operator/<plugin>`.
    pub plugin: &'a str,
    /// Records the plan's events as `wasm-operator/<plugin>`.
    pub events: &'a EventSink,
}

impl std::fmt::Debug for Writer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client has no Debug of its own; what it writes is what counts.
        f.debug_struct("Writer")
            .field("primary", &self.primary.kind)
            .field("plugin", &self.plugin)
            .finish_non_exhaustive()
    }
}

impl Writer<'_> {
    /// The API of `resource` in `namespace` (`None`: cluster-scoped).
    pub(super) fn api(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }
}

/// What [`execute`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Executed {
    /// Children server-side applied.
    pub applied: usize,
    /// Children deleted (a child already gone is not listed).
    pub pruned: Vec<ChildKey>,
    /// Events recorded.
    pub events: usize,
    /// The status patch was written.
    pub status_written: bool,
    /// The annotation patch was written.
    pub annotated: bool,
    /// The finalizer write made, [`FinalizerChange::Unchanged`] for none.
    pub finalizer: FinalizerChange,
}

impl Executed {
    /// API requests that changed (or tried to change) something.
    pub fn api_writes(&self) -> usize {
        self.applied
            + self.pruned.len()
            + self.events
            + usize::from(self.status_written)
            + usize::from(self.annotated)
            + usize::from(self.finalizer != FinalizerChange::Unchanged)
    }
}

/// Carries out `plan` for the primary `obj` (as observed: the finalizer
/// patches test its finalizer list).
///
/// # Order
///
/// 1. Finalizer add: before any child exists, so a deletion cannot skip the
///    plugin's `finalize` for something it created.
/// 2. Server-side apply of every child in the plan (always sent: it is
///    idempotent and takes back fields another manager changed).
/// 3. Pruning of children no longer desired.
/// 4. Events, best effort: `ChildPruned` only for children step 3 really
///    deleted, then the plugin's (or the failure's, or `Finalized`). Before
///    the status, so a failure report's event is recorded even when its
///    status write fails; before the release, after which the object may be
///    gone.
/// 5. The status patch, if the plan has one.
/// 6. The annotation patch (version marks), if any: last of the reconcile's
///    writes, since the marks say this version reconciled successfully.
/// 7. Finalizer removal: releases a deleting primary; nothing follows it.
///
/// # Errors
///
/// The first failing write stops the execution with [`ApplyError::Api`];
/// later steps are not attempted (the reconcile is retried with backoff and
/// plans them again). A status write or finalizer removal on an object that
/// is already gone is no error.
pub async fn execute(
    writer: &Writer<'_>,
    obj: &DynamicObject,
    plan: &Plan,
) -> Result<Executed, ApplyError> {
    let mut done = Executed::default();
    if plan.is_noop() {
        return Ok(done);
    }
    let primary_api = writer.api(writer.primary, obj.namespace().as_deref());
    let name = obj.name_any();
    let target = format!(
        "{} {}",
        writer.primary.kind,
        display_name(obj.namespace().as_deref(), &name)
    );

    if plan.finalizer == FinalizerChange::Add {
        let write = finalizer::add(&primary_api, obj, FINALIZER)
            .await
            .map_err(|e| ApplyError::api("adding the finalizer to", target.as_str(), e))?;
        if write == FinalizerWrite::Written {
            done.finalizer = FinalizerChange::Add;
        }
    }
    for (key, child) in &plan.apply {
        children::apply(writer, key, child).await?;
        done.applied += 1;
    }
    for (key, prune) in &plan.prune {
        if children::prune(writer, key, &prune.resource).await? {
            done.pruned.push(key.clone());
        }
    }
    for event in &plan.events {
        if let Some(child) = &event.only_if_pruned
            && !done.pruned.contains(child)
        {
            continue;
        }
        writer
            .events
            .publish(
                writer.primary,
                obj,
                event.warning,
                &event.reason,
                &event.message,
                event.action.as_str(),
            )
            .await;
        done.events += 1;
    }
    if let Some(body) = &plan.status {
        done.status_written = status::write(&primary_api, &name, &target, body).await?;
    }
    if !plan.annotations.is_empty() {
        metadata::annotate(
            &primary_api,
            &name,
            &target,
            writer.plugin,
            &plan.annotations,
        )
        .await?;
        done.annotated = true;
    }
    if plan.finalizer == FinalizerChange::Remove {
        let write = finalizer::remove(&primary_api, obj, FINALIZER)
            .await
            .map_err(|e| ApplyError::api("removing the finalizer from", target.as_str(), e))?;
        if write == FinalizerWrite::Written {
            done.finalizer = FinalizerChange::Remove;
        }
    }
    Ok(done)
}
