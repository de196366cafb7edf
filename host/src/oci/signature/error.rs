//! Why a plugin's signatures were not accepted, or could not be checked.

use serde::Serialize;

use super::PolicyError;
use crate::oci::OciError;

/// One rule of the policy that no signature satisfied, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleFailure {
    /// The rule: where it is in the policy and what it asks, e.g.
    /// `rules[0].publicKey "release" (sha256:…)`.
    pub rule: String,
    /// Why no signature satisfied it (each signature's reason).
    pub reason: String,
}

/// The refusal: the plugin at `reference`, manifest `digest`, does not
/// carry the signatures the policy asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error(
    "{reference} (manifest {digest}) is refused: signature not verified ({signatures} signature(s) found): {}; sign exactly this digest with a key or identity the policy names (e.g. `wasm-operator plugin push --sign KEY` or `cosign sign --key KEY {reference_base}@{digest}`), or change the verification policy",
    .failures.iter().map(|f| format!("{}: {}", f.rule, f.reason)).collect::<Vec<_>>().join("; ")
)]
pub struct SignatureNotVerified {
    /// The reference as given.
    pub reference: String,
    /// `REGISTRY/REPOSITORY` of the reference (for the hint).
    #[serde(skip)]
    pub reference_base: String,
    /// The manifest digest that was verified.
    pub digest: String,
    /// How many signatures of this digest were found (before any check).
    pub signatures: usize,
    /// Every failed rule, in policy order.
    pub failures: Vec<RuleFailure>,
}

/// Verifying or signing a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// The signatures do not satisfy the policy (the plugin is refused).
    #[error(transparent)]
    NotVerified(SignatureNotVerified),
    /// The policy is unusable.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The registry could not be read or written.
    #[error(transparent)]
    Registry(#[from] OciError),
    /// The signing key cannot be used.
    #[error(
        "cannot use the signing key {origin}: {reason}; give the private key of `cosign generate-key-pair` (cosign.key) and its password in COSIGN_PASSWORD"
    )]
    SigningKey {
        /// The key file (or `the key` when given as bytes).
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl SignatureError {
    /// True when retrying later may succeed (the registry was unreachable);
    /// false when the signatures, the policy or the key must change.
    pub fn is_transient(&self) -> bool {
        matches!(self, SignatureError::Registry(e) if e.is_transient())
    }
}
