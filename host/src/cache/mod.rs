//! Shared caches: one kube-runtime reflector per resource kind and namespace
//! scope, shared by every controller that needs that kind and ref-counted so
//! it stops when the last user lets go.
//!
//! Each reflector keeps a [`Store`] and fans its changes out to subscribers
//! (controllers) as [`CacheEvent`]s. Unlike kube-runtime's own shared
//! streams, deletions are fanned out too: a child deleted by hand must
//! re-trigger its owner (one deleted while the watch was down too: the relist
//! that drops it announces it as a deletion).
//!
//! Beside its store each reflector keeps an [`ObjectIndex`] (controller
//! owner → children, namespace → objects), so that what a reconcile asks of
//! the caches costs the size of the answer, not the number of objects
//! cached.

mod cached;
pub(crate) mod discovery;
mod index;
mod namespaces;
mod object;
mod reflection;
mod selector;
mod view;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::Stream;
use kube::Client;
use kube::api::ApiResource;
use kube::runtime::reflector::Store;

use crate::contract::ResourceKind;
use reflection::Reflection;

pub use cached::CachedObject;
pub use discovery::{Discovery, DiscoveryError, KindProblem, KindRole};
pub use index::ObjectIndex;
pub use namespaces::{NamespaceGate, namespace_kind};
pub use object::{LAST_APPLIED_ANNOTATION, object_text, prepare_for_cache};
pub use selector::{LabelSelector, SelectorError};
pub use view::{CacheView, object_json};

/// One change seen by a reflector, as handed to subscribers.
#[derive(Debug, Clone)]
pub enum CacheEvent {
    /// The object was created or changed (or is part of a (re)list).
    Applied(Arc<CachedObject>),
    /// The object is gone from the cluster.
    Deleted(Arc<CachedObject>),
}

impl CacheEvent {
    /// The object the event is about.
    pub fn object(&self) -> &Arc<CachedObject> {
        match self {
            CacheEvent::Applied(o) | CacheEvent::Deleted(o) => o,
        }
    }
}

/// Identifies one reflector: a resource and the namespace it watches
/// (`None`: all). The resource is the resolved one, plural included: the
/// URL a reflector lists is its plural, so two manifests that name one kind
/// with different plurals never share a cache (a manifest that calls
/// Secrets' plural a ConfigMap is refused by discovery before it serves,
/// and even then could not be handed the real ConfigMaps' cache).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// CamelCase kind, e.g. `Deployment`.
    pub kind: String,
    /// Lower-case plural, the resource the reflector lists, e.g. `deployments`.
    pub plural: String,
    /// The one namespace watched; `None` watches the whole cluster.
    pub namespace: Option<String>,
}

impl CacheKey {
    /// The key of `kind`'s reflector in `namespace` (`None`: all).
    pub fn new(kind: &ResourceKind, namespace: Option<&str>) -> CacheKey {
        CacheKey {
            group: kind.group.clone(),
            version: kind.version.clone(),
            kind: kind.kind.clone(),
            plural: kind.plural.clone(),
            namespace: namespace.map(str::to_string),
        }
    }
}

/// The [`ApiResource`] (what kube's dynamic API needs) for a manifest kind.
pub fn api_resource(kind: &ResourceKind) -> ApiResource {
    ApiResource {
        group: kind.group.clone(),
        version: kind.version.clone(),
        api_version: kind.api_version(),
        kind: kind.kind.clone(),
        plural: kind.plural.clone(),
    }
}

struct Entry {
    reflection: Arc<Reflection>,
    refs: usize,
}

/// The set of running reflectors. Cheap to clone; clones share the set.
#[derive(Clone)]
pub struct SharedCache {
    client: Client,
    entries: Arc<Mutex<HashMap<CacheKey, Entry>>>,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("reflectors", &self.reflector_count())
            .finish()
    }
}

impl SharedCache {
    /// An empty cache that starts reflectors with `client` on demand.
    pub fn new(client: Client) -> SharedCache {
        SharedCache {
            client,
            entries: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<CacheKey, Entry>> {
        // A panic while holding this lock cannot leave the map half-updated
        // (every update is a single insert/remove), so poisoning is ignored.
        crate::util::lock(&self.entries)
    }

    /// A lease on the reflector for `kind` in `namespace` (`None`: all
    /// namespaces), starting it if nobody holds one yet. Must be called from
    /// within a tokio runtime.
    pub fn acquire(&self, kind: &ResourceKind, namespace: Option<&str>) -> CacheLease {
        let key = CacheKey::new(kind, namespace);
        let mut entries = self.entries();
        let entry = entries.entry(key.clone()).or_insert_with(|| Entry {
            reflection: Arc::new(Reflection::start(
                self.client.clone(),
                api_resource(kind),
                namespace,
            )),
            refs: 0,
        });
        entry.refs += 1;
        CacheLease {
            cache: self.clone(),
            key,
            reflection: entry.reflection.clone(),
        }
    }

    /// How many reflectors run (tests check sharing with it).
    pub fn reflector_count(&self) -> usize {
        self.entries().len()
    }

    /// The reflector that can answer for objects of the resource `kind`
    /// (group, version, kind and plural) in `namespace`: the cluster-wide
    /// one if any, else the one for exactly that namespace.
    fn find(&self, kind: &ResourceKind, namespace: Option<&str>) -> Option<Arc<Reflection>> {
        let entries = self.entries();
        if let Some(entry) = entries.get(&CacheKey::new(kind, None)) {
            return Some(entry.reflection.clone());
        }
        let namespace = namespace?;
        entries
            .get(&CacheKey::new(kind, Some(namespace)))
            .map(|entry| entry.reflection.clone())
    }

    fn release(&self, key: &CacheKey) {
        let mut entries = self.entries();
        if let Some(entry) = entries.get_mut(key) {
            entry.refs = entry.refs.saturating_sub(1);
            if entry.refs == 0
                && let Some(entry) = entries.remove(key)
            {
                entry.reflection.stop();
            }
        }
    }
}

/// A counted reference to one shared reflector; dropping the last lease of a
/// reflector stops it.
pub struct CacheLease {
    cache: SharedCache,
    key: CacheKey,
    reflection: Arc<Reflection>,
}

impl std::fmt::Debug for CacheLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheLease")
            .field("key", &self.key)
            .finish()
    }
}

impl CacheLease {
    /// The kind this reflector watches.
    pub fn api_resource(&self) -> &ApiResource {
        self.reflection.api_resource()
    }

    /// The reflector's read handle.
    pub fn store(&self) -> Store<CachedObject> {
        self.reflection.store()
    }

    /// The reflector's owner and namespace indexes (a cheap handle, for
    /// closures that outlive a borrow of the lease).
    pub fn index(&self) -> ObjectIndex {
        self.reflection.index().clone()
    }

    /// The cached objects of this kind controlled by (controller
    /// ownerReference to) the object with UID `owner_uid`, in no particular
    /// order. Costs the number of children, not the size of the store.
    pub fn children_of(&self, owner_uid: &str) -> Vec<Arc<CachedObject>> {
        self.reflection.index().controlled_by(owner_uid)
    }

    /// The cached objects of this kind in `namespace`, in no particular
    /// order. Costs the number of them, not the size of the store.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedObject>> {
        self.reflection.index().in_namespace(namespace)
    }

    /// True once the initial list has been loaded into the store.
    pub fn synced(&self) -> bool {
        self.reflection.synced()
    }

    /// The API server's message when the reflector's last list or watch
    /// was forbidden (403: RBAC lacks the verb for this resource), naming
    /// the verb, the resource and the identity; `None` while it works.
    ///
    /// # Guarantees
    ///
    /// Cleared as soon as a retried list or watch succeeds (RBAC added).
    pub fn forbidden(&self) -> Option<String> {
        self.reflection.forbidden()
    }

    /// Every change from now on, preceded by the current contents when the
    /// store has already synced (so a late subscriber sees existing objects).
    pub fn subscribe(&self) -> impl Stream<Item = CacheEvent> + Send + use<> {
        self.reflection.subscribe()
    }
}

impl Clone for CacheLease {
    /// Another counted reference to the same reflector.
    fn clone(&self) -> Self {
        if let Some(entry) = self.cache.entries().get_mut(&self.key) {
            entry.refs += 1;
        }
        CacheLease {
            cache: self.cache.clone(),
            key: self.key.clone(),
            reflection: self.reflection.clone(),
        }
    }
}

impl Drop for CacheLease {
    fn drop(&mut self) {
        self.cache.release(&self.key);
    }
}
