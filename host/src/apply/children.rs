//! Children: finding the owned ones in the caches, server-side apply and
//! pruning.

use kube::ResourceExt;
use kube::api::{ApiResource, DeleteParams, Patch, PatchParams};

use super::{ApplyError, Writer};
use crate::cache::CacheLease;
use crate::plan::{ChildApply, ChildKey, OwnedChild, children::is_owned_child, field_manager};

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
            if is_owned_child(&obj, plugin, primary_uid) {
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
pub(super) async fn apply(
    writer: &Writer<'_>,
    key: &ChildKey,
    child: &ChildApply,
) -> Result<(), ApplyError> {
    let mut params = PatchParams::apply(&field_manager(writer.plugin));
    if child.exists {
        params = params.force();
    }
    match writer
        .api(&child.resource, key.namespace.as_deref())
        .patch(&key.name, &params, &Patch::Apply(&child.document))
        .await
    {
        Ok(_) => Ok(()),
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
