//! Why a reconcile failed: [`ReconcileError`], its reason, whether a retry
//! can help, and the message that names the plugin and what to do.

use crate::apply::ApplyError;
use crate::contract::{Failure, Reason};
use crate::engine::{CallError, CallFailure};
use crate::migration::MigrationError;
use crate::plan::PlanError;

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
    /// Upgrading the object written by an older version failed (boxed: it
    /// is the largest variant, and every reconcile returns this type).
    #[error("{0}")]
    Upgrade(Box<MigrationError>),
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
    /// The plan would write a child named like one of the host's own
    /// objects (its Leases, its webhook certificate Secret, a canary diffs
    /// ConfigMap), whatever the grant; nothing was written.
    #[error(
        "plugin {plugin} {version} returned children named like the host's own objects: {children}; nothing was written. The host keeps these for itself whatever the grant: the plugin must name its children otherwise"
    )]
    HostObjectChild {
        plugin: String,
        version: String,
        children: String,
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

impl From<MigrationError> for ReconcileError {
    fn from(error: MigrationError) -> Self {
        ReconcileError::Upgrade(Box::new(error))
    }
}

impl ReconcileError {
    /// True when the reconcile was stopped by fencing: nothing may be
    /// written for it, not even its failure.
    pub(super) fn is_fenced(&self) -> bool {
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
            ReconcileError::Upgrade(error) if matches!(**error, MigrationError::Api { .. }) => {
                Reason::ApplyFailed.as_str()
            }
            ReconcileError::Upgrade(_) => Reason::UpgradeFailed.as_str(),
            ReconcileError::Incompatible { .. } => Reason::IncompatibleVersion.as_str(),
            ReconcileError::ChildOutsideGrant { .. } | ReconcileError::HostObjectChild { .. } => {
                Reason::CapabilityDenied.as_str()
            }
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
            ReconcileError::ChildOutsideGrant { .. } | ReconcileError::HostObjectChild { .. } => {
                true
            }
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
