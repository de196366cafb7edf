//! The executor: one plan, written in a fixed order.

use std::future::Future;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::finalizer::{self, FinalizerWrite};
use super::writer::Writer;
use super::{ApplyError, children, metadata, status};
use crate::plan::unchanged::LastApplied;
use crate::plan::{ChildKey, FINALIZER, FinalizerChange, Plan, display_name};

/// What [`execute`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Executed {
    /// Children server-side applied.
    pub applied: usize,
    /// What each apply answered (the child's UID and resourceVersion) with
    /// the digest of the document sent: what [`super::AppliedChildren`]
    /// remembers.
    pub answers: Vec<(ChildKey, LastApplied)>,
    /// Children deleted (a child already gone is not listed).
    pub pruned: Vec<ChildKey>,
    /// Events recorded.
    pub events: usize,
    /// The status patch was written.
    pub status_written: bool,
    /// Patches of the primary's metadata written: the finalizer and the
    /// version marks, one patch carrying both on a first reconcile.
    pub metadata_patches: usize,
    /// The version marks were written (alone or with the finalizer).
    pub annotated: bool,
    /// The finalizer write made, [`FinalizerChange::Unchanged`] for none.
    pub finalizer: FinalizerChange,
    /// The primary's `resourceVersion` in the answer of the host's last
    /// write to it (metadata or status; the finalizer removal that
    /// releases it aside): what [`super::PrimaryWrites`] remembers.
    pub primary_resource_version: Option<String>,
}

/// API writes of one execution, by kind: one count per request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteCounts {
    /// Server-side applies of children.
    pub apply: usize,
    /// Deletions of children.
    pub prune: usize,
    /// Status patches.
    pub status: usize,
    /// Patches of the primary's metadata (finalizer and/or version marks).
    pub metadata: usize,
    /// Events recorded (writes too, to the events API, best effort).
    pub events: usize,
}

impl WriteCounts {
    /// Writes of the primary and its children: everything but events.
    pub fn objects(&self) -> usize {
        self.apply + self.prune + self.status + self.metadata
    }
}

impl Executed {
    /// The writes made, by kind.
    pub fn writes(&self) -> WriteCounts {
        WriteCounts {
            apply: self.applied,
            prune: self.pruned.len(),
            status: usize::from(self.status_written),
            metadata: self.metadata_patches,
            events: self.events,
        }
    }
}

/// Carries out `plan` for the primary `obj` (as observed: the metadata
/// patches test what they saw of it).
///
/// # Order
///
/// 1. The `first` metadata write ([`Plan::metadata_writes`]): adding the
///    finalizer, before any child exists, so a deletion cannot skip the
///    plugin's `finalize` for something it created; the version marks of the
///    same plan go in the same JSON patch (one request instead of two).
/// 2. Server-side apply of every child in the plan (forced for children
///    the caches show, so it takes back fields another manager changed;
///    the plan already left out children that are unchanged, see
///    [`crate::plan::unchanged`]).
/// 3. Pruning of children no longer desired.
/// 4. Events, best effort: `ChildPruned` only for children step 3 really
///    deleted, then the plugin's (or the failure's, or `Finalized`). Before
///    the status, so a failure report's event is recorded even when its
///    status write fails; before the release, after which the object may be
///    gone.
/// 5. The status patch, if the plan has one.
/// 6. The `last` metadata write: the version marks, if not written in step
///    1, last of the reconcile's writes since they say this version
///    reconciled successfully; then the finalizer removal, which releases a
///    deleting primary (nothing follows it).
///
/// A fresh object with a finalizer-asking plugin of two children thus costs
/// four object writes (metadata, two applies, status) plus its events.
///
/// # Errors
///
/// [`ApplyError::Fenced`] when the gate closed (this replica stopped
/// leading) before a write: the writes not yet sent are dropped.
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
    let namespace = obj.namespace();
    let namespace = namespace.as_deref();
    let name = obj.name_any();
    let target = format!(
        "{} {}",
        writer.primary.kind,
        display_name(obj.namespace().as_deref(), &name)
    );
    let metadata = plan.metadata_writes();

    writer.may_write(&target)?;
    if let Some(first) = &metadata.first
        && let Some(answer) = metadata::write_first(writer, obj, &target, first).await?
    {
        done.primary_resource_version = answer.metadata.resource_version;
        done.metadata_patches += 1;
        done.finalizer = first.finalizer;
        done.annotated = !first.annotations.is_empty();
    }
    for (key, child) in &plan.apply {
        writer.may_write(&target)?;
        if let Some(answer) = children::apply(writer, key, child).await? {
            done.answers.push((key.clone(), answer));
        }
        done.applied += 1;
    }
    for (key, prune) in &plan.prune {
        writer.may_write(&target)?;
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
        writer.may_write(&target)?;
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
        writer.may_write(&target)?;
        if let Some(answer) = status::write(writer, namespace, &name, &target, body).await? {
            status::report_pruned(writer, obj, body, &answer).await;
            done.status_written = true;
            done.primary_resource_version = answer.metadata.resource_version;
        }
    }
    let Some(last) = &metadata.last else {
        return Ok(done);
    };
    if !last.annotations.is_empty() {
        writer.may_write(&target)?;
        let answer =
            metadata::annotate(writer, namespace, &name, &target, &last.annotations).await?;
        done.primary_resource_version = answer.metadata.resource_version;
        done.metadata_patches += 1;
        done.annotated = true;
    }
    if last.finalizer == FinalizerChange::Remove {
        writer.may_write(&target)?;
        let primary_api = writer.api(writer.primary, namespace);
        let write = finalizer::remove(&primary_api, obj, FINALIZER)
            .await
            .map_err(|e| ApplyError::api("removing the finalizer from", target.as_str(), e))?;
        if write == FinalizerWrite::Written {
            done.metadata_patches += 1;
            done.finalizer = FinalizerChange::Remove;
        }
    }
    Ok(done)
}

/// Carries out plans: what the reconcile shell writes through.
///
/// [`Writer`] writes to the API server ([`execute`]); tests use
/// [`Recording`](super::Recording), which keeps every plan it is asked to
/// write and answers with scripted outcomes.
pub trait WritePlan: Sync {
    /// Carries out `plan` for the primary `obj`.
    ///
    /// # Errors
    ///
    /// As [`execute`]: [`ApplyError::Fenced`] when the write gate closed
    /// before a write, else the first failing write's error.
    fn write_plan(
        &self,
        obj: &DynamicObject,
        plan: &Plan,
    ) -> impl Future<Output = Result<Executed, ApplyError>> + Send;
}

impl WritePlan for Writer<'_> {
    async fn write_plan(&self, obj: &DynamicObject, plan: &Plan) -> Result<Executed, ApplyError> {
        execute(self, obj, plan).await
    }
}

#[cfg(test)]
mod tests {
    use kube::Client;
    use kube::api::{ApiResource, GroupVersionKind};

    use super::*;
    use crate::apply::EventSink;
    use crate::lease::WriteGate;
    use crate::plan::Requeue;

    /// A client of an address nobody listens on: any request it sent
    /// would fail with a connection error, not with `Fenced`.
    fn unreachable_client() -> Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URI"));
        Client::try_from(config).expect("a client")
    }

    #[tokio::test]
    async fn a_closed_gate_sends_nothing_and_says_why() {
        let client = unreachable_client();
        let primary = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "WebApp"),
            "webapps",
        );
        let events = EventSink::new(client.clone(), "webapp");
        let gate = WriteGate::leased();
        let writer = Writer {
            client: &client,
            primary: &primary,
            plugin: "webapp",
            events: &events,
            gate: &gate,
        };
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "prod"},
        }))
        .expect("an object");
        let plan = Plan {
            status: Some(serde_json::json!({"ready": true})),
            ..Plan::idle(Requeue::Resync)
        };
        match execute(&writer, &obj, &plan).await {
            Err(ApplyError::Fenced { target }) => assert_eq!(target, "WebApp prod/shop"),
            other => panic!("expected Fenced, got {other:?}"),
        }
        // A plan that writes nothing needs no gate.
        let idle = Plan::idle(Requeue::Resync);
        assert_eq!(
            execute(&writer, &obj, &idle).await.ok(),
            Some(Executed::default())
        );
    }
}
