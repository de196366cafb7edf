//! Carrying out a [`Plan`](crate::plan::Plan): server-side apply of children,
//! pruning, the finalizer, status, annotations and events.
//!
//! What to write is decided in [`crate::plan`]; this module only writes, in
//! the order [`execute`] documents, and skips every part the plan leaves
//! empty, so a plan that changes nothing makes no API write.

mod children;
pub mod events;
mod execute;
pub mod finalizer;
mod impersonation;
mod metadata;
mod status;

pub use children::owned_children;
pub use events::EventSink;
pub use execute::{Writer, execute};
pub use impersonation::impersonating;

use crate::contract::Reason;

/// Why carrying out a plan failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused or failed a write; retried with backoff.
    #[error(
        "{action} {target} failed: {source}; the host retries with backoff, check the API server and RBAC if it persists"
    )]
    Api {
        action: &'static str,
        target: String,
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// The condition/event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Api { .. } => Reason::ApplyFailed.as_str(),
        }
    }

    /// True when retrying cannot help. API failures are worth a retry: the
    /// server, RBAC or a conflicting writer may change.
    pub fn is_permanent(&self) -> bool {
        match self {
            ApplyError::Api { .. } => false,
        }
    }

    pub(crate) fn api(
        action: &'static str,
        target: impl Into<String>,
        source: kube::Error,
    ) -> ApplyError {
        ApplyError::Api {
            action,
            target: target.into(),
            source,
        }
    }
}
