//! Plugins in OCI registries: pulling a component (for `WasmPlugin`
//! `spec.source.oci`), checking which digest a tag points to (polling), and
//! publishing one (`wasm-operator plugin push`).
//!
//! # Accepted artifacts
//! * the CNCF Wasm artifact layout: config `application/vnd.wasm.config.v0+json`,
//!   exactly one layer `application/wasm` (what [`push`] writes);
//! * the older wasm-to-oci layout: config `application/vnd.wasm.config.v1+json`,
//!   one layer `application/vnd.wasm.content.layer.v1+wasm`.
//!
//! Anything else (container images, several layers, image indexes) is
//! refused with [`OciError::NotWasm`]. The layer's sha256 and size are checked
//! against the manifest's descriptor.
//!
//! # Bounds
//! Nothing a registry sends is held past a bound fixed before reading: a
//! manifest at most [`MAX_MANIFEST_BYTES`] ([`OciError::ManifestTooLarge`]),
//! a layer at most its descriptor's size, itself at most
//! [`MAX_COMPONENT_BYTES`] ([`OciError::BlobTooLarge`] the moment the
//! registry announces or sends more), hashed while it arrives.
//!
//! # Pinning
//! A source is pinned by `@sha256:…` in the reference or by
//! [`OciSource::digest`]. When pinned, the manifest the registry serves must
//! hash to exactly that digest, otherwise the pull fails with
//! [`OciError::DigestMismatch`]; a reference with both a tag and a pin is
//! fetched by tag, so a tag moved away from the pin is reported rather than
//! ignored.
//!
//! # Transport
//! Registries are spoken to over HTTPS. Loopback registries (`localhost`,
//! `127.0.0.0/8`, `[::1]`) use plain HTTP: a registry on the node itself or in
//! a test has no certificate, and traffic never leaves the machine.
//! `plugin push --insecure` allows plain HTTP to one other registry.

mod auth;
mod client;
mod error;
mod fetch;
mod pull;
mod push;
pub mod signature;

pub use auth::DockerConfig;
pub use error::{Excess, OciError};
pub use pull::{pull, resolve_digest};
pub use push::{PushOptions, PushStep, Pushed, push};

/// Config media type of the CNCF Wasm artifact layout.
pub const CNCF_WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Layer media type of the CNCF Wasm artifact layout.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Config media type of the older wasm-to-oci layout.
pub const LEGACY_WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v1+json";
/// Layer media type of the older wasm-to-oci layout.
pub const LEGACY_WASM_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";
/// Manifest annotation carrying the plugin's version.
pub const VERSION_ANNOTATION: &str = "org.opencontainers.image.version";
/// Manifest annotation carrying the plugin's name.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";
/// Largest component accepted from a registry (256 MiB): far above any real
/// plugin, low enough that a wrong reference cannot fill the host's memory.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// Largest manifest accepted from a registry (4 MiB): the size the OCI
/// distribution spec asks every registry to accept and the limit containerd
/// enforces; a Wasm plugin's manifest is under 2 KiB.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Where to pull a plugin from (`WasmPlugin` `spec.source.oci`).
#[derive(Debug, Clone, Default)]
pub struct OciSource {
    /// `REGISTRY/REPOSITORY:TAG`, `REGISTRY/REPOSITORY@sha256:…` or both.
    pub reference: String,
    /// A pin (`sha256:…`) in addition to, or instead of, one in the reference.
    pub digest: Option<String>,
    /// Credentials from a dockerconfigjson pull secret.
    pub pull_secret: Option<DockerConfig>,
}

/// A component pulled from a registry.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component bytes, verified against the layer descriptor.
    pub bytes: Vec<u8>,
    /// `sha256:…` of the manifest: what a tag points to and what pins name.
    pub digest: String,
    /// `sha256:…` of the component bytes (the engine's plugin digest).
    pub layer_digest: String,
    /// The reference as given.
    pub reference: String,
    /// The `org.opencontainers.image.version` annotation, when present.
    pub version: Option<String>,
}
