//! Canary rollouts, the per-object side: comparing a shadow candidate's
//! answers with the stable version's ([`diff`], pure). The controller runs
//! the candidate and records what this module computes into the
//! candidate's [`crate::registry::CanaryObservations`].

pub mod diff;
