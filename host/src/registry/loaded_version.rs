//! One loaded plugin version as reported to people and tools.

use serde::Serialize;

/// One loaded plugin version, as reported to people and tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedVersion {
    /// The manifest's name.
    pub name: String,
    /// The manifest's (semantic) version.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// Where it came from, e.g. `file:/path/webapp.wasm`.
    pub source: String,
}
