//! Why pulling or pushing a plugin failed. Every message names the reference
//! and says what to do.

/// An OCI registry operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The reference does not parse as `registry/repository[:tag][@sha256:…]`.
    #[error(
        "invalid OCI reference {reference:?}: {reason}; write it as REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:HEX"
    )]
    InvalidReference {
        /// The reference as given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A pinned digest is not of the form `sha256:<64 hex>`.
    #[error("invalid digest {digest:?} for {reference}: expected sha256:<64 hex digits>")]
    InvalidDigest {
        /// The reference being pulled.
        reference: String,
        /// The digest as given.
        digest: String,
    },
    /// The reference is pinned and the registry served something else.
    #[error(
        "{reference}: the registry serves manifest {actual}, but the plugin is pinned to {expected}; nothing else is accepted — pin the digest that was pushed (see `wasm-operator plugin push` output) or remove the pin to follow the tag"
    )]
    DigestMismatch {
        /// The reference being pulled.
        reference: String,
        /// The pinned digest.
        expected: String,
        /// The digest the registry served.
        actual: String,
    },
    /// A blob's content does not hash to its descriptor's digest.
    #[error(
        "{reference}: layer content hashes to {actual}, but the manifest says {expected}; the registry served corrupt or tampered content — re-push the plugin"
    )]
    LayerDigestMismatch {
        /// The reference being pulled.
        reference: String,
        /// The digest in the manifest's layer descriptor.
        expected: String,
        /// The digest of the bytes received.
        actual: String,
    },
    /// The registry announced or sent more bytes for a layer than its
    /// manifest descriptor says it has; the download stopped there.
    #[error(
        "{reference}: the manifest says layer {digest} is {size} bytes, but the registry {sent}; the download was stopped there and nothing was loaded. The registry serves corrupt or tampered content: re-push the plugin and pin the digest `wasm-operator plugin push` prints, or check that the reference names the registry you meant"
    )]
    BlobTooLarge {
        /// The reference being pulled.
        reference: String,
        /// The digest in the manifest's layer descriptor.
        digest: String,
        /// The size in the manifest's layer descriptor, in bytes.
        size: u64,
        /// What the registry announced or sent.
        sent: Excess,
    },
    /// The registry announced or sent a manifest larger than any Wasm
    /// artifact's manifest can be.
    #[error(
        "{reference}: the registry {sent} for the manifest; manifests are limited to {limit} bytes (a Wasm plugin's manifest is under 2 KiB), so nothing was parsed. Check that the reference names a plugin pushed with `wasm-operator plugin push` and the registry you meant"
    )]
    ManifestTooLarge {
        /// The reference being pulled.
        reference: String,
        /// The limit, in bytes.
        limit: u64,
        /// What the registry announced or sent.
        sent: Excess,
    },
    /// No TCP connection to the registry could be made.
    #[error(
        "registry {address} is unreachable while fetching {reference}: {message}; check the address and that the registry is running"
    )]
    Unreachable {
        /// The reference being pulled or pushed.
        reference: String,
        /// `host:port` of the registry.
        address: String,
        /// The underlying error.
        message: String,
    },
    /// The registry has no such repository, tag or digest.
    #[error(
        "{reference} not found in the registry: {message}; check the repository and tag, or push the plugin first"
    )]
    NotFound {
        /// The reference being pulled.
        reference: String,
        /// The registry's answer.
        message: String,
    },
    /// The registry refused the credentials (or there were none).
    #[error(
        "{reference}: the registry refused access ({message}); check the pull secret / credentials for {registry}"
    )]
    Unauthorized {
        /// The reference being pulled or pushed.
        reference: String,
        /// `host:port` of the registry.
        registry: String,
        /// The registry's answer.
        message: String,
    },
    /// The artifact is not a Wasm component in a layout we accept.
    #[error(
        "{reference} is not a Wasm plugin artifact: {reason}; publish it with `wasm-operator plugin push` (CNCF Wasm layout)"
    )]
    NotWasm {
        /// The reference being pulled.
        reference: String,
        /// What does not match the accepted layouts.
        reason: String,
    },
    /// A dockerconfigjson pull secret could not be read.
    #[error(
        "invalid docker config (pull secret): {0}; expected {{\"auths\": {{\"HOST:PORT\": {{\"auth\": base64(user:pass)}}}}}}"
    )]
    InvalidDockerConfig(String),
    /// The component to push could not be inspected.
    #[error("cannot publish {reference}: the file is not a loadable plugin component: {message}")]
    InvalidComponent {
        /// Where it was going to be pushed.
        reference: String,
        /// Why the engine rejected it.
        message: String,
    },
    /// Any other registry or transport failure.
    #[error("registry operation on {reference} failed: {message}")]
    Registry {
        /// The reference being pulled or pushed.
        reference: String,
        /// The underlying error.
        message: String,
    },
}

impl OciError {
    /// True when retrying later may succeed (network trouble, registry down),
    /// false when the artifact or the configuration must change first.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            OciError::Unreachable { .. } | OciError::Registry { .. }
        )
    }
}

/// How a registry's answer went past a bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Excess {
    /// Its `Content-Length` announced this many bytes; none were read.
    Announced(u64),
    /// It sent more than this many bytes (reading stopped at the bound).
    MoreThan(u64),
}

impl std::fmt::Display for Excess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Excess::Announced(bytes) => {
                write!(f, "announced {bytes} bytes (Content-Length)")
            }
            Excess::MoreThan(bytes) => write!(f, "sent more than {bytes} bytes"),
        }
    }
}
