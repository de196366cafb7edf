//! The plugin manifest: what a plugin is and what it may touch.

use crate::kind::{Kind, KnownScope};

/// What a plugin is and what it may touch. The host reads it once per loaded
/// version and enforces it on every call: a plugin may write only the kinds it
/// [`owns`](Manifest::owns) and read only the primary, owned and
/// [`watched`](Manifest::watches) kinds.
///
/// ```
/// use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
/// use wasm_operator_sdk::{Kind, Manifest};
///
/// let manifest = Manifest::new("webapp", "1.0.0")
///     .description("Runs a web application as a Deployment and a Service")
///     .primary(Kind::namespaced("example.com", "v1", "WebApp", "webapps"))
///     .owns::<Deployment>()
///     .owns::<Service>()
///     .finalizer(true);
/// assert_eq!(manifest.owns[0].plural, "deployments");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Stable plugin name, e.g. `webapp` (field manager `wasm-operator/<name>`).
    pub name: String,
    /// Semantic version of this build; usually `env!("CARGO_PKG_VERSION")`.
    pub version: String,
    /// One line for humans.
    pub description: String,
    /// The kind this plugin reconciles. The host refuses a manifest whose
    /// primary kind was never set (empty kind).
    pub primary: Kind,
    /// Kinds the plugin creates as children.
    pub owns: Vec<Kind>,
    /// Kinds the plugin may read through the cache without owning them.
    pub watches: Vec<Kind>,
    /// Ask the host for a finalizer and a `finalize` call before deletion.
    pub finalizer: bool,
    /// `upgrade` and `convert` are real implementations (both).
    pub implements_migration: bool,
    /// `convert` is a real implementation (also implied by
    /// `implements_migration`).
    pub implements_convert: bool,
    /// `upgrade` is a real implementation (also implied by
    /// `implements_migration`).
    pub implements_upgrade: bool,
    /// `plan` and `restore` are real implementations.
    pub implements_backup: bool,
    /// `validate` is a real implementation (admission).
    pub implements_validate: bool,
    /// `defaults` is a real implementation (admission).
    pub implements_defaults: bool,
    /// Oldest plugin version allowed to serve objects this version reconciled.
    pub min_compatible_version: Option<String>,
}

impl Manifest {
    /// A manifest with a name and version and nothing else declared yet.
    pub fn new(name: impl Into<String>, version: impl Into<String>) -> Self {
        Manifest {
            name: name.into(),
            version: version.into(),
            description: String::new(),
            primary: Kind::new("", "", "", "", crate::Scope::Namespaced),
            owns: Vec::new(),
            watches: Vec::new(),
            finalizer: false,
            implements_migration: false,
            implements_convert: false,
            implements_upgrade: false,
            implements_backup: false,
            implements_validate: false,
            implements_defaults: false,
            min_compatible_version: None,
        }
    }

    /// Sets the one-line description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Sets the kind this plugin reconciles.
    pub fn primary(mut self, kind: Kind) -> Self {
        self.primary = kind;
        self
    }

    /// Declares that the plugin creates children of type `T`.
    pub fn owns<T>(self) -> Self
    where
        T: k8s_openapi::Resource,
        T::Scope: KnownScope,
    {
        self.owns_kind(Kind::of::<T>())
    }

    /// Declares an owned kind that has no `k8s_openapi` type (e.g. another CRD).
    pub fn owns_kind(mut self, kind: Kind) -> Self {
        self.owns.push(kind);
        self
    }

    /// Declares that the plugin reads objects of type `T` through the cache.
    pub fn watches<T>(self) -> Self
    where
        T: k8s_openapi::Resource,
        T::Scope: KnownScope,
    {
        self.watches_kind(Kind::of::<T>())
    }

    /// Declares a watched kind that has no `k8s_openapi` type.
    pub fn watches_kind(mut self, kind: Kind) -> Self {
        self.watches.push(kind);
        self
    }

    /// Asks the host to add a finalizer and call `finalize` before deletion.
    pub fn finalizer(mut self, finalizer: bool) -> Self {
        self.finalizer = finalizer;
        self
    }

    /// Declares that `upgrade` and `convert` are implemented (both; see
    /// [`Manifest::implements_convert`] and [`Manifest::implements_upgrade`]
    /// to declare one).
    pub fn implements_migration(mut self) -> Self {
        self.implements_migration = true;
        self
    }

    /// Declares that `convert` is implemented: the host serves the CRD's
    /// conversion webhook with it. Without
    /// [`Manifest::implements_upgrade`] the host never calls `upgrade`.
    pub fn implements_convert(mut self) -> Self {
        self.implements_convert = true;
        self
    }

    /// Declares that `upgrade` is implemented: the host passes objects
    /// managed by older versions through it before reconciling them.
    pub fn implements_upgrade(mut self) -> Self {
        self.implements_upgrade = true;
        self
    }

    /// Declares that `plan` and `restore` are implemented.
    pub fn implements_backup(mut self) -> Self {
        self.implements_backup = true;
        self
    }

    /// Declares that `validate` is implemented: the host may serve the
    /// primary kind's validating admission webhook with it.
    pub fn implements_validate(mut self) -> Self {
        self.implements_validate = true;
        self
    }

    /// Declares that `defaults` is implemented: the host may serve the
    /// primary kind's mutating admission webhook with it.
    pub fn implements_defaults(mut self) -> Self {
        self.implements_defaults = true;
        self
    }

    /// Whether `convert` is real (declared alone or with `upgrade`).
    pub fn converts(&self) -> bool {
        self.implements_migration || self.implements_convert
    }

    /// Whether `upgrade` is real (declared alone or with `convert`).
    pub fn upgrades(&self) -> bool {
        self.implements_migration || self.implements_upgrade
    }

    /// Refuses rollbacks of objects this version reconciled to versions older
    /// than `version`.
    pub fn min_compatible_version(mut self, version: impl Into<String>) -> Self {
        self.min_compatible_version = Some(version.into());
        self
    }
}
