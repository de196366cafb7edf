//! A prepared version: compiled once, its manifest read, and the checks that
//! decide whether it may replace what serves under its name. The checks live
//! here and nowhere else; [`super::Registry::prepare`] runs them for an early
//! verdict, [`super::Registry::activate`] again under its lock, against what
//! serves at that moment.

use crate::contract::{Grant, Manifest};
use crate::engine::LoadedPlugin;

use super::error::{PermissionDenial, PrimaryKindChange, RegistryError};
use super::versions::ActiveVersion;

/// A compiled, validated component that is not serving yet. Make it serve
/// with [`super::Registry::activate`].
#[derive(Clone)]
pub struct Candidate {
    pub(super) plugin: LoadedPlugin,
    pub(super) source: String,
    /// The plugin this candidate must be a new version of (a WasmPlugin's
    /// serving plugin), when the caller deploys one specific plugin.
    pub(super) replaces: Option<String>,
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candidate")
            .field("name", &self.name())
            .field("version", &self.manifest().version)
            .field("digest", &self.digest())
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Candidate {
    /// The manifest's plugin name.
    pub fn name(&self) -> &str {
        &self.manifest().name
    }

    /// The compiled component, e.g. for checks a caller runs before
    /// activating it (the conversion round-trip gate).
    pub fn plugin(&self) -> &LoadedPlugin {
        &self.plugin
    }

    /// The component's manifest.
    pub fn manifest(&self) -> &Manifest {
        self.plugin.manifest()
    }

    /// `sha256:<hex>` of the component.
    pub fn digest(&self) -> &str {
        self.plugin.digest()
    }

    /// Where the component came from, e.g. `file:/plugins/webapp.wasm`.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The name whose serving version this candidate is checked against:
    /// the plugin it must replace, else its own name.
    pub(super) fn target(&self) -> &str {
        self.replaces.as_deref().unwrap_or(self.name())
    }

    /// Whether this candidate may replace `running` (what serves under
    /// [`Candidate::target`] now; `None` when nothing does). In order: the
    /// same primary group and kind (its version may move to another version
    /// the CRD serves), the expected plugin name, and no rollback below the
    /// running version's `min_compatible_version`.
    ///
    /// # Errors
    ///
    /// [`RegistryError::PrimaryKindChanged`], [`RegistryError::PluginNameChanged`]
    /// or [`RegistryError::RollbackRefused`].
    pub(super) fn admit(&self, running: Option<&ActiveVersion>) -> Result<(), RegistryError> {
        let new = self.manifest();
        if let Some(running) = running {
            let old = &running.plugin.manifest().primary;
            // Another served version of the same group and kind reads the
            // same objects (the CRD converts or shares the schema), so the
            // primary's version may move; whether the cluster serves it is
            // checked against discovery (`Registry::check_kinds`).
            if old.group != new.primary.group || old.kind != new.primary.kind {
                return Err(self.primary_change(running));
            }
        }
        if let Some(expected) = &self.replaces
            && *expected != new.name
        {
            return Err(RegistryError::PluginNameChanged {
                source_name: self.source.clone(),
                expected: expected.clone(),
                name: new.name.clone(),
                version: new.version.clone(),
            });
        }
        match running {
            Some(running) => rollback_refusal(running.plugin.manifest(), new).map_or(Ok(()), Err),
            None => Ok(()),
        }
    }
}

impl Candidate {
    /// The refusal of this candidate as a change of `running`'s primary
    /// kind: [`RegistryError::PrimaryKindChanged`].
    pub(super) fn primary_change(&self, running: &ActiveVersion) -> RegistryError {
        let new = self.manifest();
        let old = running.plugin.manifest();
        RegistryError::PrimaryKindChanged(Box::new(PrimaryKindChange {
            name: new.name.clone(),
            source_name: self.source.clone(),
            new_version: new.version.clone(),
            new_kind: kind_of(new),
            running_name: old.name.clone(),
            running_version: old.version.clone(),
            running_kind: kind_of(old),
        }))
    }

    /// Whether the manifest stays within `grant` (see
    /// [`Grant::check`]); `running` is what serves under the candidate's
    /// name, named in the refusal as what keeps serving.
    ///
    /// # Errors
    ///
    /// [`RegistryError::PermissionDenied`] naming every excess.
    pub fn check_grant(
        &self,
        grant: &Grant,
        running: Option<&ActiveVersion>,
    ) -> Result<(), RegistryError> {
        let excesses = grant.check(self.manifest());
        if excesses.is_empty() {
            return Ok(());
        }
        let new = self.manifest();
        Err(RegistryError::PermissionDenied(Box::new(
            PermissionDenial {
                name: new.name.clone(),
                version: new.version.clone(),
                source_name: self.source.clone(),
                excesses,
                serving: running.map(|r| r.info.version.clone()),
            },
        )))
    }
}

/// `apiVersion Kind` of a manifest's primary, for messages.
fn kind_of(manifest: &Manifest) -> String {
    format!(
        "{} {}",
        manifest.primary.api_version(),
        manifest.primary.kind
    )
}

/// Why `running` may not be replaced by `new`: `new` is older than the
/// running manifest's `min_compatible_version`. Versions were checked to be
/// semver when loaded; an unparsable one (cannot happen) never refuses.
fn rollback_refusal(running: &Manifest, new: &Manifest) -> Option<RegistryError> {
    let min = running.min_compatible_version.as_deref()?;
    let min_v = semver::Version::parse(min).ok()?;
    let new_v = semver::Version::parse(&new.version).ok()?;
    let running_v = semver::Version::parse(&running.version).ok()?;
    (new_v < running_v && new_v < min_v).then(|| RegistryError::RollbackRefused {
        name: running.name.clone(),
        running_version: running.version.clone(),
        new_version: new.version.clone(),
        min_compatible: min.to_string(),
    })
}
