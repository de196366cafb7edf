//! Signed plugins: finding the signatures a registry holds for a plugin's
//! manifest digest, verifying them offline against a
//! [`VerificationPolicy`], and signing what `plugin push --sign` pushes.
//!
//! # Formats
//! * **Bundles** (cosign 3): a Sigstore bundle v0.3
//!   (`application/vnd.dev.sigstore.bundle.v0.3+json`) in an artifact whose
//!   `subject` is the manifest, found through the OCI referrers API
//!   (`GET /v2/REPO/referrers/DIGEST`) or, when the registry answers 404,
//!   the referrers tag schema (`REPO:sha256-HEX`, an image index). The
//!   bundle holds a DSSE envelope with an in-toto statement
//!   (`https://sigstore.dev/cosign/sign/v1`) whose subject is the digest.
//! * **Tag-based** (cosign 2, and cosign 3 without bundles): the manifest
//!   tagged `REPO:sha256-HEX.sig`, one layer per signature
//!   (`application/vnd.dev.cosign.simplesigning.v1+json`), the signature
//!   in the layer annotation `dev.cosignproject.cosign/signature`, an
//!   optional certificate and chain in `dev.sigstore.cosign/certificate`
//!   and `dev.sigstore.cosign/chain`.
//!
//! Whatever the format, the signed payload must name the manifest digest
//! being verified (`critical.image.docker-manifest-digest`, or the in-toto
//! subject's `sha256`); a signature of anything else is dismissed.
//!
//! # Offline
//! Nothing but the registry is contacted: no Rekor, no TUF, no Fulcio.
//! Keys and trust roots come from the policy. Transparency-log entries and
//! timestamps in bundles are ignored (neither required nor checked), so a
//! certificate is checked against the current time: a certificate that
//! expired since it signed (Fulcio's live ten minutes) does not verify
//! here; use a key or a long-lived certificate from your own CA.
//!
//! # Bounds
//! Referrer indexes and signature manifests are read under
//! [`MAX_MANIFEST_BYTES`](super::MAX_MANIFEST_BYTES), bundles and payloads
//! under [`MAX_SIGNATURE_BLOB_BYTES`], and at most [`MAX_SIGNATURES`]
//! signatures are considered per digest.

mod crypto;
mod discover;
mod error;
mod evaluate;
mod found;
mod payload;
mod pem;
mod policy;
mod sign;

pub use discover::{Discovered, discover};
pub use error::{RuleFailure, SignatureError, SignatureNotVerified};
pub use evaluate::{RuleMatch, Signer, Verified, evaluate, key_fingerprint};
pub use found::{Envelope, Format, FoundSignature};
pub use policy::{
    AnyOfRule, CertificateRule, KeyRule, PolicyError, Rule, SignerRule, VerificationPolicy,
};
pub use sign::{PASSWORD_ENV, Signed, SigningKey, sign};

use super::DockerConfig;

/// Media type of a Sigstore bundle v0.3 (cosign 3's referrer artifacts).
pub const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The older spelling of bundle media types (`…bundle+json;version=0.x`),
/// also accepted.
pub const BUNDLE_MEDIA_TYPE_PREFIX: &str = "application/vnd.dev.sigstore.bundle+json";
/// Media type of a cosign simple-signing payload layer (tag-based format).
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer annotation holding the base64 signature (tag-based format).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Layer annotation holding the signing certificate, PEM (tag-based format).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// Layer annotation holding the certificate chain, PEM (tag-based format).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
/// `critical.type` of a cosign image signature payload.
pub const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";
/// The in-toto predicate type cosign 3 signs images with.
pub const COSIGN_SIGN_PREDICATE_TYPE: &str = "https://sigstore.dev/cosign/sign/v1";
/// Largest bundle or payload blob read from a registry (1 MiB): a bundle
/// with a certificate chain is a few KiB.
pub const MAX_SIGNATURE_BLOB_BYTES: u64 = 1 << 20;
/// Most signatures considered for one digest (referrers and tag-based
/// layers together); the rest are ignored and the report says so.
pub const MAX_SIGNATURES: usize = 32;

/// Finds the signatures of manifest `digest` of `reference`'s repository
/// and evaluates `policy` over them: [`discover`] then [`evaluate`] at the
/// current time.
///
/// `reference` is the plugin's reference as written (`REGISTRY/REPO:TAG`,
/// `…@sha256:…`); only its registry and repository are used. `digest` is
/// the manifest digest that was pulled ([`Pulled::digest`](super::Pulled)):
/// verify exactly what was loaded, never what a tag points to later.
///
/// # Guarantees
/// `Ok` only when every rule of `policy` is satisfied by a signature whose
/// signed payload names `digest`. Only the registry is contacted, and every
/// read is bounded (see the [module docs](self)).
///
/// # Errors
/// * [`SignatureError::NotVerified`]: no signature, or none satisfying a
///   rule; it names the reference, the digest and every failed rule.
/// * [`SignatureError::Policy`]: the policy itself is unusable (a key or a
///   trust root that does not parse, `trustRootFile` outside a policy file).
/// * [`SignatureError::Registry`]: the registry could not be read.
pub async fn verify(
    reference: &str,
    digest: &str,
    pull_secret: Option<&DockerConfig>,
    policy: &VerificationPolicy,
) -> Result<Verified, SignatureError> {
    let prepared = policy.prepare()?;
    let discovered = discover(reference, digest, pull_secret).await?;
    evaluate::evaluate_prepared(
        &prepared,
        reference,
        digest,
        &discovered,
        std::time::SystemTime::now(),
    )
    .map_err(SignatureError::NotVerified)
}
