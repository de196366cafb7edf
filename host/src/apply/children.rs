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
/// A read, not a write: it lives here because pruning acts on exactly this
/// set, so "owned" must mean the same in both places.
pub fn owned_children(leases: &[CacheLease], plugin: &str, primary_uid: &str) -> Vec<OwnedChild> {
    let mut out = Vec::new();
    for lease in leases {
        let resource = lease.api_resource();
        for obj in lease.store().state() {
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

/// Server-side apply of one child (force, field manager
/// `wasm-operator/<plugin>`).
pub(super) async fn apply(
    writer: &Writer<'_>,
    key: &ChildKey,
    child: &ChildApply,
) -> Result<(), ApplyError> {
    let params = PatchParams::apply(&field_manager(writer.plugin)).force();
    writer
        .api(&child.resource, key.namespace.as_deref())
        .patch(&key.name, &params, &Patch::Apply(&child.document))
        .await
        .map_err(|e| ApplyError::api("server-side apply of", key.to_string(), e))?;
    Ok(())
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
