//! Carrying out a [`Plan`](crate::plan::Plan): server-side apply of children,
//! pruning, the finalizer, status, annotations and events.
//!
//! What to write is decided in [`crate::plan`]; this module only writes, in
//! the order [`execute::execute`] documents, and skips every part the plan leaves
//! empty, so a plan that changes nothing makes no API write.

mod children;
pub mod correlator;
pub mod events;
mod execute;
pub mod finalizer;
mod impersonation;
mod metadata;
mod primary_writes;
pub mod pruned;
#[cfg(test)]
mod recording;
mod status;
mod writer;

pub use children::{AppliedChildren, cached_child, owned_children};
pub use events::EventSink;
pub use execute::{Executed, WritePlan};
pub use impersonation::impersonating;
pub use primary_writes::{Hold, PrimaryWrites};
#[cfg(test)]
pub use recording::Recording;
pub use writer::Writer;

use crate::contract::Reason;

/// Why carrying out a plan failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server failed a write in a way a retry may fix (5xx, 429,
    /// a 409 on an update, a connection error); retried with backoff.
    #[error(
        "{action} {target} failed: {source}; the host retries with backoff, check the API server and RBAC if it persists"
    )]
    Api {
        action: &'static str,
        target: String,
        #[source]
        source: kube::Error,
    },
    /// The API server refused a write with a 4xx status that a retry of the
    /// same request cannot fix (400, 403, 404, 405, 413, 415, 422).
    #[error(
        "{action} {target} was refused by the API server ({code} {status}): {message}; the host does not retry until the object changes. {hint}"
    )]
    Rejected {
        action: &'static str,
        target: String,
        code: u16,
        status: String,
        message: String,
        /// The likely fix, by what was written ([`rejection_hint`]).
        hint: &'static str,
    },
    /// A child the caches did not show already existed with fields another
    /// manager owns: it was created by someone else (the cache had not
    /// seen it yet), so it was not taken over.
    #[error(
        "{target} already exists and its fields are owned by someone else ({message}); it was not taken over and will never be pruned. Rename the child in the plugin or delete the existing object"
    )]
    Conflict { target: String, message: String },
    /// This replica stopped leading (or could not renew its lease in time)
    /// before the write: the rest of the plan was dropped, unwritten. The
    /// leader reconciles the object instead.
    #[error(
        "the writes for {target} were dropped: this replica no longer leads (its lease was lost or not renewed in time); the leader reconciles it"
    )]
    Fenced { target: String },
}

/// What [`status::write`] calls its action; a refusal of it is a status
/// the CRD's schema does not accept.
pub(crate) const WRITING_STATUS: &str = "writing the status of";

/// The likely fix of a refused write: a refused status is most often a CRD
/// whose status schema does not match what the plugin answers (a field of
/// another type, or one the schema lacks under strict validation).
fn rejection_hint(action: &str) -> &'static str {
    if action == WRITING_STATUS {
        "Check the CRD's status schema (`kubectl explain <kind>.status`; a field of another type than the plugin answers is the usual cause) and fix the schema or the plugin's status output"
    } else {
        "Fix the plugin's output or the host's permissions"
    }
}

/// Statuses that are the request's fault: the same request is refused again.
const PERMANENT_CODES: [u16; 7] = [400, 403, 404, 405, 413, 415, 422];

impl ApplyError {
    /// The condition/event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Api { .. } => Reason::ApplyFailed.as_str(),
            ApplyError::Rejected { .. } => Reason::ApplyRejected.as_str(),
            ApplyError::Conflict { .. } => Reason::ChildConflict.as_str(),
            ApplyError::Fenced { .. } => Reason::Fenced.as_str(),
        }
    }

    /// The API server's message when it refused the write as forbidden
    /// (403: RBAC lacks the verb), naming the verb, resource and identity,
    /// prefixed by the write (`patch v1 ConfigMap default/a: …`).
    pub fn forbidden(&self) -> Option<String> {
        match self {
            ApplyError::Rejected {
                action,
                target,
                code: 403,
                message,
                ..
            } => Some(format!("{action} {target}: {message}")),
            _ => None,
        }
    }

    /// True when retrying cannot help until the object changes. API
    /// failures in general are worth a retry (the server, RBAC or a
    /// conflicting writer may change); a refusal of the request itself is
    /// not.
    pub fn is_permanent(&self) -> bool {
        match self {
            ApplyError::Api { .. } => false,
            ApplyError::Rejected { .. }
            | ApplyError::Conflict { .. }
            | ApplyError::Fenced { .. } => true,
        }
    }

    /// True for the API server's refusal of a status write: the status
    /// the plugin answered does not fit the CRD's status schema.
    pub fn is_status_refusal(&self) -> bool {
        matches!(self, ApplyError::Rejected { action, .. } if *action == WRITING_STATUS)
    }

    /// Classifies a failed write by its HTTP status (never by its text).
    pub(crate) fn api(
        action: &'static str,
        target: impl Into<String>,
        source: kube::Error,
    ) -> ApplyError {
        match source {
            kube::Error::Api(status) if PERMANENT_CODES.contains(&status.code) => {
                ApplyError::Rejected {
                    action,
                    target: target.into(),
                    code: status.code,
                    status: status.reason.clone(),
                    message: status.message.clone(),
                    hint: rejection_hint(action),
                }
            }
            source => ApplyError::Api {
                action,
                target: target.into(),
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "message": format!("the server says {code}"),
            "reason": "Invalid", "code": code,
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn refusals_of_the_request_are_permanent_the_rest_is_retried() {
        for code in [400, 403, 404, 422] {
            let e = ApplyError::api("server-side apply of", "ConfigMap a/b", status(code));
            assert!(e.is_permanent(), "{code}");
            assert_eq!(e.reason(), "ApplyRejected");
            assert!(
                e.to_string().contains(&format!("the server says {code}")),
                "{e}"
            );
        }
        let refused = ApplyError::api(WRITING_STATUS, "WebApp a/b", status(422));
        assert!(refused.is_status_refusal());
        assert!(
            refused.to_string().contains("the CRD's status schema"),
            "{refused}"
        );
        let child = ApplyError::api("server-side apply of", "ConfigMap a/b", status(422));
        assert!(!child.is_status_refusal());
        assert!(!child.to_string().contains("status schema"), "{child}");
        for code in [409, 429, 500, 503] {
            let e = ApplyError::api("server-side apply of", "ConfigMap a/b", status(code));
            assert!(!e.is_permanent(), "{code}");
            assert_eq!(e.reason(), "ApplyFailed");
        }
    }

    #[test]
    fn only_a_403_is_forbidden_and_names_the_write() {
        let e = ApplyError::api("server-side apply of", "ConfigMap a/b", status(403));
        assert_eq!(
            e.forbidden().as_deref(),
            Some("server-side apply of ConfigMap a/b: the server says 403")
        );
        for code in [400, 404, 500] {
            let e = ApplyError::api("server-side apply of", "ConfigMap a/b", status(code));
            assert_eq!(e.forbidden(), None, "{code}");
        }
    }
}
