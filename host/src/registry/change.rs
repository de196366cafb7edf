//! The shapes of one change of a plugin's version set, between the
//! registry's steps: an activation that passed its checks and waits to be
//! committed, and what an edit of a running set decided.

use super::versions::{ActiveVersion, RolloutCandidate, VersionSet};

/// An activation that passed every check ([`super::Registry::activate_with`]'s
/// check step) and is not serving yet.
pub(super) struct CheckedActivation {
    /// The new stable version.
    pub(super) active: ActiveVersion,
    /// Reconciles of the plugin that may run at once.
    pub(super) concurrency: usize,
    /// The rollout candidate set in the same change, if any.
    pub(super) rollout: Option<RolloutCandidate>,
}

/// What an edit of a running plugin's version set decided.
pub(super) enum SetEdit<T> {
    /// Nothing changes; the operation returns the value.
    Keep(T),
    /// This set serves from now on (and the change is announced); the
    /// operation returns the value.
    Replace(VersionSet, T),
}
