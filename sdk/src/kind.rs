//! Resource kinds, derived from `k8s_openapi` types or spelled out for CRDs.

use std::fmt;

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Objects live in a namespace (Deployment, Service, most CRDs).
    Namespaced,
    /// Objects are cluster-wide (Namespace, ClusterRole).
    Cluster,
}

/// Maps a `k8s_openapi` scope marker to [`Scope`]. Sub-resources have no kind
/// of their own, so they deliberately do not implement this trait: a plugin
/// cannot declare that it owns `Scale`.
pub trait KnownScope {
    /// The scope the marker stands for.
    const SCOPE: Scope;
}

impl KnownScope for k8s_openapi::NamespaceResourceScope {
    const SCOPE: Scope = Scope::Namespaced;
}

impl KnownScope for k8s_openapi::ClusterResourceScope {
    const SCOPE: Scope = Scope::Cluster;
}

/// A Kubernetes resource kind, fully identified (the WIT `resource-kind`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Kind {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// Lower-case plural used in URLs, e.g. `deployments`.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
}

impl Kind {
    /// Spells out a kind, typically a CRD's.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
        plural: impl Into<String>,
        scope: Scope,
    ) -> Self {
        Kind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            scope,
        }
    }

    /// A namespaced kind, the common case for CRDs.
    pub fn namespaced(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
        plural: impl Into<String>,
    ) -> Self {
        Kind::new(group, version, kind, plural, Scope::Namespaced)
    }

    /// The kind of a `k8s_openapi` type (or of any type implementing
    /// [`k8s_openapi::Resource`]), so authors never type group/version/plural.
    pub fn of<T>() -> Self
    where
        T: k8s_openapi::Resource,
        T::Scope: KnownScope,
    {
        Kind::new(
            T::GROUP,
            T::VERSION,
            T::KIND,
            T::URL_PATH_SEGMENT,
            <T::Scope as KnownScope>::SCOPE,
        )
    }

    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}
