//! The indexes each reflector keeps beside its store, maintained as events
//! arrive (like controller-runtime's field indexers): controller-owner UID →
//! the objects it controls, and namespace → the objects in it. They turn
//! the per-reconcile questions "which children does this primary have?" and
//! "which objects are in this namespace?" into lookups costing the size of
//! the answer, where a walk of the store costs every object of the kind in
//! the cluster (and a full pass over N primaries O(N²)).
//!
//! The index holds the same `Arc`s as the store, so it costs a few pointers
//! and one key per object, never a copy of one.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use kube::ResourceExt;

use super::CachedObject;

/// Where an object lives: its namespace (`None`: cluster-scoped) and name,
/// the identity the store keys it by within one kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    namespace: Option<String>,
    name: String,
}

impl ObjectKey {
    fn of(obj: &CachedObject) -> ObjectKey {
        ObjectKey {
            namespace: obj.metadata.namespace.clone(),
            name: obj.name_any(),
        }
    }
}

/// Objects under one index value, by key (the key is shared between the
/// two indexes).
type Bucket = HashMap<Arc<ObjectKey>, Arc<CachedObject>>;

/// The UIDs of `obj`'s controller ownerReferences. The API server allows
/// one; every one is indexed, so a lookup finds exactly what a check of
/// "any controller reference with this UID" (`plan::is_owned_child`) would.
fn controllers(obj: &CachedObject) -> impl Iterator<Item = &str> {
    obj.metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

/// What a relist changed, as [`Index::rebuild`] finds it.
#[derive(Debug, Default)]
pub(super) struct Relisted {
    /// Objects indexed before and not listed: deleted while the watch was
    /// down, they get no delete event of their own.
    pub(super) dropped: Vec<Arc<CachedObject>>,
    /// Objects listed that were not indexed before, or in another version
    /// (resourceVersion or UID).
    pub(super) changed: Vec<Arc<CachedObject>>,
}

/// True when `a` and `b` are one version of one object: the same UID and
/// resourceVersion (both present).
fn same_version(a: &CachedObject, b: &CachedObject) -> bool {
    let (a, b) = (&a.metadata, &b.metadata);
    a.uid.is_some()
        && a.resource_version.is_some()
        && a.uid == b.uid
        && a.resource_version == b.resource_version
}

/// The two indexes of one kind's store. Pure data: the reflector applies
/// each watch event to it right after applying it to the store (see
/// `reflection.rs`), and rebuilds it when a relist replaces the store.
#[derive(Debug, Default)]
pub(super) struct Index {
    /// Every namespaced object, by namespace. With [`Index::cluster`] a
    /// partition of the store: it is also where an update finds the
    /// previous version of an object, to take it out of the owner index.
    by_namespace: HashMap<String, Bucket>,
    /// Every cluster-scoped object.
    cluster: Bucket,
    /// The objects with a controller ownerReference, by the owner's UID.
    by_owner: HashMap<String, Bucket>,
}

/// Removes `key` from `map[value]`, and the bucket once empty (so the maps
/// do not keep one entry per owner or namespace that ever existed).
fn take_out(map: &mut HashMap<String, Bucket>, value: &str, key: &ObjectKey) {
    if let Some(bucket) = map.get_mut(value) {
        bucket.remove(key);
        if bucket.is_empty() {
            map.remove(value);
        }
    }
}

impl Index {
    /// Files `obj` (created or changed), replacing its previous version:
    /// an update that changes or drops the controller owner moves it.
    pub(super) fn apply(&mut self, obj: Arc<CachedObject>) {
        let key = ObjectKey::of(&obj);
        let key = match self.remove(&key) {
            Some((key, _)) => key,
            None => Arc::new(key),
        };
        for uid in controllers(&obj) {
            self.by_owner
                .entry(uid.to_string())
                .or_default()
                .insert(key.clone(), obj.clone());
        }
        match &key.namespace {
            Some(ns) => self
                .by_namespace
                .entry(ns.clone())
                .or_default()
                .insert(key, obj),
            None => self.cluster.insert(key, obj),
        };
    }

    /// Forgets `obj` (deleted from the cluster).
    pub(super) fn delete(&mut self, obj: &CachedObject) {
        self.remove(&ObjectKey::of(obj));
    }

    /// Replaces the whole index with `objects`: what a relist does to the
    /// store, so nothing the relist dropped stays indexed. Returns what the
    /// relist changed ([`Relisted`]).
    pub(super) fn rebuild(
        &mut self,
        objects: impl IntoIterator<Item = Arc<CachedObject>>,
    ) -> Relisted {
        let mut fresh = Index::default();
        let mut changed = Vec::new();
        for obj in objects {
            let unchanged = self
                .get(&ObjectKey::of(&obj))
                .is_some_and(|old| same_version(old, &obj));
            if !unchanged {
                changed.push(obj.clone());
            }
            fresh.apply(obj);
        }
        let old = std::mem::replace(self, fresh);
        let dropped = old
            .by_namespace
            .into_values()
            .chain(std::iter::once(old.cluster))
            .flatten()
            .filter(|(key, _)| self.get(key).is_none())
            .map(|(_, obj)| obj)
            .collect();
        Relisted { dropped, changed }
    }

    fn get(&self, key: &ObjectKey) -> Option<&Arc<CachedObject>> {
        match &key.namespace {
            Some(ns) => self.by_namespace.get(ns)?.get(key),
            None => self.cluster.get(key),
        }
    }

    /// Takes the object at `key` out of both indexes; returns its shared key
    /// and the version that was filed.
    fn remove(&mut self, key: &ObjectKey) -> Option<(Arc<ObjectKey>, Arc<CachedObject>)> {
        let (shared, old) = match &key.namespace {
            Some(ns) => {
                let bucket = self.by_namespace.get_mut(ns)?;
                let entry = bucket.remove_entry(key)?;
                if bucket.is_empty() {
                    self.by_namespace.remove(ns);
                }
                entry
            }
            None => self.cluster.remove_entry(key)?,
        };
        for uid in controllers(&old) {
            take_out(&mut self.by_owner, uid, key);
        }
        Some((shared, old))
    }

    /// The objects with a controller ownerReference to `owner_uid`.
    pub(super) fn controlled_by(&self, owner_uid: &str) -> Vec<Arc<CachedObject>> {
        self.by_owner
            .get(owner_uid)
            .map(|bucket| bucket.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The objects in `namespace`.
    pub(super) fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedObject>> {
        self.by_namespace
            .get(namespace)
            .map(|bucket| bucket.values().cloned().collect())
            .unwrap_or_default()
    }

    /// How many objects are indexed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.cluster.len() + self.by_namespace.values().map(HashMap::len).sum::<usize>()
    }
}

/// A read handle on one reflector's [`Index`], cheap to clone (like
/// kube-runtime's `Store`): trigger mappers keep one without holding a
/// [`super::CacheLease`].
#[derive(Debug, Clone, Default)]
pub struct ObjectIndex {
    inner: Arc<RwLock<Index>>,
}

impl ObjectIndex {
    /// The index for writing; only the reflector's task writes.
    pub(super) fn write(&self) -> RwLockWriteGuard<'_, Index> {
        // Every update leaves the maps consistent before the next one starts
        // (a panic inside one would have come from the allocator), so a
        // poisoned lock still guards a usable index.
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// An index of `objects`, built as a reflector builds it after a list
    /// (for tests and benchmarks of code that reads one, and of what an
    /// index costs).
    pub fn of(objects: impl IntoIterator<Item = Arc<CachedObject>>) -> ObjectIndex {
        let index = ObjectIndex::default();
        index.write().rebuild(objects);
        index
    }

    fn read(&self) -> RwLockReadGuard<'_, Index> {
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached objects whose controller ownerReference names
    /// `owner_uid`, in no particular order. Costs the number of them, not
    /// the size of the store.
    pub fn controlled_by(&self, owner_uid: &str) -> Vec<Arc<CachedObject>> {
        self.read().controlled_by(owner_uid)
    }

    /// The cached objects in `namespace`, in no particular order. Costs the
    /// number of them, not the size of the store.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedObject>> {
        self.read().in_namespace(namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(namespace: Option<&str>, name: &str, owner: Option<&str>) -> Arc<CachedObject> {
        let owners: Vec<_> = owner
            .map(|uid| {
                json!({"apiVersion": "example.com/v1", "kind": "WebApp", "name": "p",
                       "uid": uid, "controller": true})
            })
            .into_iter()
            .collect();
        let mut metadata = json!({"name": name, "ownerReferences": owners});
        if let Some(ns) = namespace {
            metadata["namespace"] = json!(ns);
        }
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata,
            }))
            .expect("a ConfigMap"),
        )
    }

    fn names(objects: Vec<Arc<CachedObject>>) -> Vec<String> {
        let mut names: Vec<_> = objects.iter().map(|o| o.name_any()).collect();
        names.sort();
        names
    }

    #[test]
    fn applied_objects_are_found_by_controller_and_by_namespace() {
        let mut index = Index::default();
        index.apply(object(Some("a"), "web", Some("u1")));
        index.apply(object(Some("a"), "db", Some("u1")));
        index.apply(object(Some("b"), "other", Some("u2")));
        index.apply(object(Some("a"), "loose", None));
        index.apply(object(None, "cluster-wide", Some("u1")));
        assert_eq!(
            names(index.controlled_by("u1")),
            ["cluster-wide", "db", "web"]
        );
        assert_eq!(names(index.controlled_by("u2")), ["other"]);
        assert!(index.controlled_by("nobody").is_empty());
        assert_eq!(names(index.in_namespace("a")), ["db", "loose", "web"]);
        assert_eq!(names(index.in_namespace("b")), ["other"]);
        assert!(index.in_namespace("c").is_empty());
        assert_eq!(index.len(), 5);
    }

    #[test]
    fn a_non_controller_owner_reference_is_not_indexed() {
        let mut obj = (*object(Some("a"), "web", Some("u1"))).clone();
        if let Some(owners) = obj.metadata.owner_references.as_mut() {
            owners[0].controller = Some(false);
        }
        let mut index = Index::default();
        index.apply(Arc::new(obj));
        assert!(index.controlled_by("u1").is_empty());
        assert_eq!(names(index.in_namespace("a")), ["web"]);
    }

    #[test]
    fn an_update_that_changes_the_owner_moves_the_object() {
        let mut index = Index::default();
        index.apply(object(Some("a"), "web", Some("u1")));
        index.apply(object(Some("a"), "web", Some("u2")));
        assert!(index.controlled_by("u1").is_empty());
        assert_eq!(names(index.controlled_by("u2")), ["web"]);
        // Dropping the owner takes it out of the owner index only.
        index.apply(object(Some("a"), "web", None));
        assert!(index.controlled_by("u2").is_empty());
        assert_eq!(names(index.in_namespace("a")), ["web"]);
        assert_eq!(index.len(), 1);
        // No empty bucket is left behind for owners that are gone.
        assert!(index.by_owner.is_empty());
    }

    #[test]
    fn an_update_serves_the_new_version() {
        let mut index = Index::default();
        index.apply(object(Some("a"), "web", Some("u1")));
        let mut newer = (*object(Some("a"), "web", Some("u1"))).clone();
        newer.metadata.resource_version = Some("2".into());
        index.apply(Arc::new(newer));
        let found = index.controlled_by("u1");
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].resource_version().as_deref(), Some("2"));
        let found = index.in_namespace("a");
        assert_eq!(found[0].resource_version().as_deref(), Some("2"));
    }

    #[test]
    fn a_delete_forgets_the_object_everywhere() {
        let mut index = Index::default();
        index.apply(object(Some("a"), "web", Some("u1")));
        index.apply(object(Some("a"), "db", Some("u1")));
        index.delete(&object(Some("a"), "web", Some("u1")));
        assert_eq!(names(index.controlled_by("u1")), ["db"]);
        assert_eq!(names(index.in_namespace("a")), ["db"]);
        // The delete event may carry a stale version: the filed one decides
        // which owner entry goes.
        index.apply(object(Some("a"), "x", Some("u3")));
        index.delete(&object(Some("a"), "x", Some("u-stale")));
        assert!(index.controlled_by("u3").is_empty());
        // Deleting what is not there is a no-op.
        index.delete(&object(Some("z"), "ghost", None));
        assert_eq!(index.len(), 1);
        index.delete(&object(Some("a"), "db", None));
        assert_eq!(index.len(), 0);
        assert!(index.by_owner.is_empty() && index.by_namespace.is_empty());
        index.apply(object(None, "cluster-wide", Some("u4")));
        index.delete(&object(None, "cluster-wide", None));
        assert!(index.cluster.is_empty() && index.by_owner.is_empty());
    }

    #[test]
    fn a_relist_that_drops_objects_leaves_only_what_it_listed() {
        let mut index = Index::default();
        index.apply(object(Some("a"), "web", Some("u1")));
        index.apply(object(Some("a"), "gone", Some("u1")));
        index.apply(object(Some("b"), "gone-too", Some("u2")));
        let relisted = index.rebuild([
            object(Some("a"), "web", Some("u1")),
            object(Some("c"), "new", Some("u3")),
        ]);
        assert_eq!(names(relisted.dropped), ["gone", "gone-too"]);
        assert_eq!(names(index.controlled_by("u1")), ["web"]);
        assert!(index.controlled_by("u2").is_empty());
        assert_eq!(names(index.controlled_by("u3")), ["new"]);
        assert!(index.in_namespace("b").is_empty());
        assert_eq!(names(index.in_namespace("c")), ["new"]);
        assert_eq!(index.len(), 2);
    }

    fn versioned(name: &str, uid: &str, version: &str) -> Arc<CachedObject> {
        let mut obj = (*object(Some("a"), name, None)).clone();
        obj.metadata.uid = Some(uid.into());
        obj.metadata.resource_version = Some(version.into());
        Arc::new(obj)
    }

    #[test]
    fn a_relist_reports_only_what_changed_since_the_store_before_it() {
        let mut index = Index::default();
        for obj in [
            versioned("same", "1", "10"),
            versioned("updated", "2", "11"),
            versioned("recreated", "3", "12"),
            versioned("deleted", "4", "13"),
        ] {
            index.apply(obj);
        }
        let relisted = index.rebuild([
            versioned("same", "1", "10"),
            versioned("updated", "2", "20"),
            versioned("recreated", "5", "12"),
            versioned("created", "6", "21"),
        ]);
        assert_eq!(names(relisted.dropped), ["deleted"]);
        assert_eq!(names(relisted.changed), ["created", "recreated", "updated"]);
        assert_eq!(index.len(), 4);
        // The first list: everything is new.
        let mut empty = Index::default();
        let first = empty.rebuild([versioned("same", "1", "10")]);
        assert_eq!(names(first.changed), ["same"]);
    }

    #[test]
    fn same_name_in_two_namespaces_are_two_objects() {
        let mut index = Index::default();
        index.apply(object(Some("a"), "web", Some("u1")));
        index.apply(object(Some("b"), "web", Some("u1")));
        assert_eq!(index.controlled_by("u1").len(), 2);
        index.delete(&object(Some("a"), "web", None));
        let left = index.controlled_by("u1");
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].namespace().as_deref(), Some("b"));
    }
}
