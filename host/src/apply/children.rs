//! Children: finding the owned ones in the caches, server-side apply and
//! pruning.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::ResourceExt;
use kube::api::{ApiResource, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;

use super::writer::Writer;
use super::{ApplyError, Executed};
use crate::cache::{CacheLease, CachedObject};
use crate::plan::unchanged::{LastApplied, digest};
use crate::plan::{ChildApply, ChildKey, OwnedChild, children::is_owned_child, field_manager};

/// Entries kept before the memory drops those of children the caches no
/// longer show.
const APPLIED_KEPT: usize = 4096;

/// What the host last applied to each child of one plugin: the memory
/// [`crate::plan::unchanged::skip`] decides with, filled from what
/// [`execute`](super::execute::execute) reports.
///
/// Losing an entry is always safe (the child is applied once more), so the
/// memory lives only in the process and is bounded: once it holds more than
/// [`APPLIED_KEPT`] entries (or twice what was kept at the last sweep) the
/// entries of children the caches no longer show (deleted, garbage
/// collected, or recreated with another UID) are dropped.
#[derive(Debug, Default)]
pub struct AppliedChildren {
    inner: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    entries: HashMap<ChildKey, LastApplied>,
    /// The size at which the next sweep runs.
    sweep_at: usize,
}

impl AppliedChildren {
    fn memory(&self) -> std::sync::MutexGuard<'_, Memory> {
        // Plain values: a panic elsewhere cannot leave them half-written.
        crate::util::lock(&self.inner)
    }

    /// What the host last applied to `key`, if it remembers.
    pub fn get(&self, key: &ChildKey) -> Option<LastApplied> {
        self.memory().entries.get(key).cloned()
    }

    /// Records what one execution applied and forgets what it pruned;
    /// `leases` are the owned kinds' caches, for the sweep.
    pub fn record(&self, executed: &Executed, leases: &[CacheLease]) {
        if executed.answers.is_empty() && executed.pruned.is_empty() {
            return;
        }
        let mut memory = self.memory();
        for key in &executed.pruned {
            memory.entries.remove(key);
        }
        for (key, last) in &executed.answers {
            memory.entries.insert(key.clone(), last.clone());
        }
        if memory.entries.len() > memory.sweep_at.max(APPLIED_KEPT) {
            memory
                .entries
                .retain(|key, last| cached_uid(leases, key).as_deref() == Some(last.uid.as_str()));
            memory.sweep_at = memory.entries.len().saturating_mul(2);
        }
    }
}

/// The child at `key` as the owned kinds' caches show it, if they do: a
/// lookup by key in the cache of its kind, no list.
pub fn cached_child(leases: &[CacheLease], key: &ChildKey) -> Option<Arc<CachedObject>> {
    let lease = leases.iter().find(|l| {
        let ar = l.api_resource();
        ar.api_version == key.api_version && ar.kind == key.kind
    })?;
    let mut reference = ObjectRef::new_with(&key.name, lease.api_resource().clone());
    if let Some(ns) = &key.namespace {
        reference = reference.within(ns);
    }
    lease.store().get(&reference)
}

/// The UID of the child at `key` in the owned kinds' caches, if shown there.
fn cached_uid(leases: &[CacheLease], key: &ChildKey) -> Option<String> {
    cached_child(leases, key)?.uid()
}

/// The children of `primary_uid` in the caches of the owned kinds (see
/// [`is_owned_child`]), sorted by kind, namespace and name.
///
/// Looked up in each cache's owner index ([`CacheLease::children_of`]): the
/// cost is this primary's children, however many objects of the owned kinds
/// the cluster holds (a walk of the stores made a full pass over N primaries
/// O(N²)).
///
/// A read, not a write: it lives here because pruning acts on exactly this
/// set, so "owned" must mean the same in both places.
pub fn owned_children(leases: &[CacheLease], plugin: &str, primary_uid: &str) -> Vec<OwnedChild> {
    let mut out = Vec::new();
    for lease in leases {
        let resource = lease.api_resource();
        for obj in lease.children_of(primary_uid) {
            if is_owned_child(obj.as_ref(), plugin, primary_uid) {
                out.push(OwnedChild {
                    resource: resource.clone(),
                    object: obj,
                });
            }
        }
    }
    out.sort_by_key(|c| {
        (
            c.resource.kind.clone(),
            c.object.namespace(),
            c.object.name_any(),
        )
    });
    out
}

/// Server-side apply of one child, field manager `wasm-operator/<plugin>`.
///
/// Forced only when the caches showed the child as this primary's
/// ([`ChildApply::exists`]): then it takes back fields another manager
/// changed. A child the caches did not show is applied without force, so if
/// it exists after all (created since the cache synced) and another manager
/// owns any field the host sets, the API server answers 409 and the child
/// is not taken over ([`ApplyError::Conflict`]). The window that remains:
/// an object created by someone else within one cache lag whose fields are
/// all disjoint from the child's (or equal to them) is co-owned: the apply
/// adds the host's labels and controller ownerReference to it, and from then
/// on it counts as this primary's child (and is pruned with it).
///
/// Returns what the apply answered, for [`AppliedChildren`] (`None` when
/// the answer lacks a UID or resourceVersion: nothing is then remembered).
pub(super) async fn apply(
    writer: &Writer<'_>,
    key: &ChildKey,
    child: &ChildApply,
) -> Result<Option<LastApplied>, ApplyError> {
    let mut params = PatchParams::apply(&field_manager(writer.plugin));
    if child.exists {
        params = params.force();
    }
    match writer
        .patch(
            &child.resource,
            key.namespace.as_deref(),
            None,
            &key.name,
            &params,
            &Patch::Apply(&child.document),
        )
        .await
    {
        Ok(answer) => Ok(answer
            .metadata
            .uid
            .zip(answer.metadata.resource_version)
            .map(|(uid, resource_version)| LastApplied {
                uid,
                digest: digest(&child.document),
                resource_version,
            })),
        Err(kube::Error::Api(status)) if status.code == 409 && !child.exists => {
            Err(ApplyError::Conflict {
                target: key.to_string(),
                message: status.message.clone(),
            })
        }
        Err(e) => Err(ApplyError::api("server-side apply of", key.to_string(), e)),
    }
}

/// Deletes one child (background propagation). Returns false when it was
/// already gone: the cache was a little behind.
pub(super) async fn prune(
    writer: &Writer<'_>,
    key: &ChildKey,
    resource: &ApiResource,
) -> Result<bool, ApplyError> {
    match writer
        .api(resource, key.namespace.as_deref())
        .delete(&key.name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
        Err(e) => Err(ApplyError::api("pruning", key.to_string(), e)),
    }
}
