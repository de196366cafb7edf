//! The namespaces a plugin's grant allows, decided against the shared
//! cache's Namespace objects when the grant selects namespaces by label.

use std::sync::Arc;

use kube::runtime::reflector::{ObjectRef as StoreRef, Store};
use kube::{Resource, ResourceExt};

use super::{CachedObject, api_resource};
use crate::contract::{Grant, HostObjects, ResourceKind, Scope};

/// v1 Namespace, the kind a grant's `namespaceSelector` selects.
pub fn namespace_kind() -> ResourceKind {
    ResourceKind {
        group: String::new(),
        version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
        scope: Scope::Cluster,
    }
}

/// Answers "is this namespace granted?" for one plugin: its [`Grant`] and,
/// when the grant has a `namespaceSelector`, the shared cache's store of
/// Namespace objects (a namespace not in it yet is not selected: fail
/// closed, and it is re-checked on the next event). The host's own
/// namespaces ([`HostObjects`]) are allowed only when the grant names them.
#[derive(Clone)]
pub struct NamespaceGate {
    grant: Arc<Grant>,
    namespaces: Option<Store<CachedObject>>,
    host: Arc<HostObjects>,
}

impl std::fmt::Debug for NamespaceGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceGate")
            .field("namespaces", &self.grant.describe_namespaces())
            .finish_non_exhaustive()
    }
}

impl NamespaceGate {
    /// A gate for `grant`; `namespaces` is the Namespace store, needed when
    /// [`Grant::needs_namespace_labels`].
    pub fn new(grant: Arc<Grant>, namespaces: Option<Store<CachedObject>>) -> NamespaceGate {
        NamespaceGate {
            grant,
            namespaces,
            host: Arc::default(),
        }
    }

    /// The same gate, keeping the plugin out of the host's namespaces
    /// unless its grant names them exactly.
    #[must_use]
    pub fn reserving(mut self, host: Arc<HostObjects>) -> NamespaceGate {
        self.host = host;
        self
    }

    /// The host's namespaces and objects this gate keeps the plugin from.
    pub fn host(&self) -> &HostObjects {
        &self.host
    }

    /// True when objects in `namespace` are granted.
    pub fn allows(&self, namespace: &str) -> bool {
        let labels = self.namespaces.as_ref().and_then(|store| {
            store
                .get(&StoreRef::new_with(
                    namespace,
                    api_resource(&namespace_kind()),
                ))
                .map(|ns| ns.labels().clone())
        });
        self.host
            .grants_namespace(&self.grant, namespace, labels.as_ref())
    }

    /// True when `obj` is in a granted namespace; cluster-scoped objects
    /// are not bounded by namespaces (their kinds need `clusterScoped`).
    pub fn allows_object(&self, obj: &impl Resource) -> bool {
        obj.meta()
            .namespace
            .as_deref()
            .is_none_or(|ns| self.allows(ns))
    }

    /// The grant's namespaces, for messages.
    pub fn describe(&self) -> String {
        let mut granted = self.grant.describe_namespaces();
        if let crate::contract::WatchScope::Namespaces(_) = self.host.scope() {
            granted = format!(
                "{granted}, narrowed to the host's {} (run -n)",
                self.host.scope().describe()
            );
        }
        if self.host.namespaces().next().is_none() {
            return granted;
        }
        format!(
            "{granted}; the host's own namespaces ({}) only when named in spec.permissions.namespaces",
            self.host.describe_namespaces()
        )
    }
}
