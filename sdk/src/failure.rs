//! Why a call did not produce a result.

/// Why a reconcile or finalize call failed. The host backs off on
/// [`Failure::Transient`] and waits for the object to change on
/// [`Failure::Permanent`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Worth retrying: the host backs off exponentially (5 s base, 300 s cap).
    #[error("transient failure: {0}")]
    Transient(String),
    /// Retrying will not help until the object changes (e.g. an invalid spec).
    #[error("permanent failure: {0}")]
    Permanent(String),
}

impl Failure {
    /// A failure worth retrying.
    pub fn transient(message: impl Into<String>) -> Self {
        Failure::Transient(message.into())
    }

    /// A failure that only a change of the object can fix.
    pub fn permanent(message: impl Into<String>) -> Self {
        Failure::Permanent(message.into())
    }

    /// The message, whatever the kind of failure.
    pub fn message(&self) -> &str {
        match self {
            Failure::Transient(m) | Failure::Permanent(m) => m,
        }
    }
}
