//! The host's finalizer on primaries, as a contract.
//!
//! A plugin whose manifest says `finalizer: true` gets a last word before its
//! primary goes away: the host holds the object with [`FINALIZER`] until the
//! plugin's `finalize` answers `done`. This module decides; the executor
//! ([`crate::apply::finalizer`]) writes.
//!
//! # Expected Flow
//!
//! 1. A user creates a primary; its plugin's manifest asks for a finalizer.
//! 2. The reconcile plan says [`FinalizerChange::Add`] ([`on_reconcile`]); the
//!    executor adds [`FINALIZER`] before it applies any child, in one patch
//!    with the plan's version marks ([`super::MetadataWrites`]).
//! 3. Later reconciles see the finalizer and plan [`FinalizerChange::Unchanged`].
//! 4. The user deletes the primary; the API server sets `deletionTimestamp`
//!    and keeps the object while the finalizer is listed.
//! 5. [`on_deletion`] says [`DeletionStep::CallPlugin`]: the controller calls
//!    the plugin's `finalize` with the object and its children.
//! 6. `wait(ms)`: nothing is written, the plugin is called again after `ms`.
//! 7. `done`: the plan says [`FinalizerChange::Remove`] and records a
//!    `Finalized` event; the executor removes the entry.
//! 8. The API server deletes the primary; the garbage collector deletes the
//!    children through their controller ownerReferences.
//!
//! # Guarantees
//!
//! - When the plugin asks for a finalizer, no child is applied before the
//!   finalizer is on the primary (the executor writes it first), so anything
//!   the plugin created is finalized before the primary is gone.
//! - The version marks that go with the finalizer never overwrite what
//!   someone else changed meanwhile: a mark is removed only after a `test`
//!   of its observed value, and an annotation map created from nothing is
//!   guarded by a `test` of the observed `resourceVersion`.
//! - The host removes only its own entry (a JSON patch `test`s the entry at
//!   its index first), never another controller's, and never adds a second
//!   copy (the add `test`s the whole list it saw).
//! - A deleting primary without the host's finalizer is left alone: no plugin
//!   call, no write ([`DeletionStep::NotOurs`]).
//! - Deletion is never blocked by version checks: the finalize path runs
//!   whatever the object's version marks say.
//!
//! # Caveats
//!
//! - Deletes wait while no host serves the plugin, or while its `finalize`
//!   keeps failing or waiting. Removing the entry by hand releases the object.
//! - A plugin version that stops asking for a finalizer does not remove one an
//!   older version added while the object lives; on deletion the host releases
//!   it without calling the plugin ([`DeletionStep::Release`]).
//! - One name for every plugin: a primary kind is served by one plugin at a time.
//!
//! # Errors
//!
//! Writing the finalizer can fail (network, RBAC, or a concurrent change of
//! the list, which fails the `test`); the reconcile reports `ApplyFailed` and
//! retries with backoff on the newer object. Removing it from an object that
//! is already gone counts as success.

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::names::FINALIZER;
use crate::contract::Manifest;

/// What a plan does with the host's finalizer on the primary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FinalizerChange {
    /// No finalizer write.
    #[default]
    Unchanged,
    /// Add [`FINALIZER`]; the executor does it before any other write.
    Add,
    /// Remove [`FINALIZER`], releasing a deleting primary.
    Remove,
}

/// What deleting a primary needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeletionStep {
    /// The host's finalizer is not on the object: nothing to hold up, the
    /// garbage collector removes the children.
    NotOurs,
    /// Call the plugin's `finalize`, then release the object when it is done.
    CallPlugin,
    /// The serving version asks for no finalizer: release without a call.
    Release,
}

/// True when the host's finalizer is on the object.
pub fn holds(obj: &DynamicObject) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

/// The finalizer change of a reconcile (the object is not being deleted):
/// add it when the plugin asks for one and it is missing.
pub fn on_reconcile(obj: &DynamicObject, manifest: &Manifest) -> FinalizerChange {
    if manifest.finalizer && !holds(obj) {
        FinalizerChange::Add
    } else {
        FinalizerChange::Unchanged
    }
}

/// What to do with a deleting primary.
pub fn on_deletion(obj: &DynamicObject, manifest: &Manifest) -> DeletionStep {
    match (holds(obj), manifest.finalizer) {
        (false, _) => DeletionStep::NotOurs,
        (true, true) => DeletionStep::CallPlugin,
        (true, false) => DeletionStep::Release,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{manifest, primary, with_finalizers};
    use super::*;

    #[test]
    fn adds_only_when_asked_and_missing() {
        let m = manifest();
        assert_eq!(on_reconcile(&primary(), &m), FinalizerChange::Add);
        let held = with_finalizers(primary(), &["other", FINALIZER]);
        assert_eq!(on_reconcile(&held, &m), FinalizerChange::Unchanged);
        let no_finalizer = Manifest {
            finalizer: false,
            ..manifest()
        };
        assert_eq!(
            on_reconcile(&primary(), &no_finalizer),
            FinalizerChange::Unchanged
        );
    }

    #[test]
    fn deletion_steps() {
        let m = manifest();
        let no_finalizer = Manifest {
            finalizer: false,
            ..manifest()
        };
        let held = with_finalizers(primary(), &[FINALIZER]);
        let foreign = with_finalizers(primary(), &["someone.else/finalizer"]);
        assert_eq!(on_deletion(&foreign, &m), DeletionStep::NotOurs);
        assert_eq!(on_deletion(&held, &m), DeletionStep::CallPlugin);
        assert_eq!(on_deletion(&held, &no_finalizer), DeletionStep::Release);
    }
}
