//! The object store: every object as JSON, one global resourceVersion, a bounded
//! event history for resuming watches, per-watcher channels for fan-out, and
//! optional SQLite persistence.
//!
//! All state sits behind one `std::sync::Mutex` that is never held across an
//! `.await`: handlers compute a new object (patches, admission, webhooks) outside
//! the lock and commit it with an optimistic resourceVersion check inside it.
//! Objects are indexed by resource type (`group/plural`), so a write costs
//! O(log n) in the objects of its own type.

mod persist;
pub mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::DevClusterError;
use crate::registry::Registry;
use crate::status::ApiError;

/// `(namespace, name)`; the namespace is empty for cluster-scoped objects.
pub type ObjKey = (String, String);

/// Capacity of one watcher's channel; a watcher that falls this far behind is closed.
pub const WATCH_BUFFER: usize = 16_384;

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object was changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventType {
    /// The watch event `type`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in history and sent to watchers.
#[derive(Debug)]
pub struct Change {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// Resource storage key (`group/plural`).
    pub resource: String,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for DELETED: its last state).
    pub object: Arc<Value>,
    /// The object before the change, for selector transitions.
    pub old: Option<Arc<Value>>,
}

struct Watcher {
    namespace: Option<String>,
    tx: mpsc::Sender<Arc<Change>>,
}

/// Everything guarded by the store lock.
pub struct State {
    /// The last resourceVersion handed out.
    pub rv: u64,
    objects: HashMap<String, BTreeMap<ObjKey, Arc<Value>>>,
    history: VecDeque<Arc<Change>>,
    /// Watches from resourceVersions below this answer 410 Gone.
    floor: u64,
    window: usize,
    watchers: HashMap<String, Vec<Watcher>>,
    /// Served resource types (changes with CRDs).
    pub registry: Registry,
    db: Option<persist::Db>,
    /// Set when something may need garbage collection.
    pub(crate) gc_pending: bool,
    /// How many live objects name each uid in their ownerReferences, so that
    /// removing an object triggers a garbage-collection pass only when something
    /// depends on it (a pass scans every object).
    owner_refs: HashMap<String, usize>,
}

fn owner_uids(obj: &Value) -> impl Iterator<Item = &str> {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["uid"].as_str())
}

/// The store: state behind one lock.
pub struct Store {
    state: Mutex<State>,
}

/// RFC 3339 with seconds precision, as the API server writes timestamps.
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The `(namespace, name)` of an object.
pub fn obj_key(obj: &Value) -> ObjKey {
    let m = &obj["metadata"];
    (
        m["namespace"].as_str().unwrap_or_default().to_string(),
        m["name"].as_str().unwrap_or_default().to_string(),
    )
}

/// The resourceVersion of an object as a number (0 when missing or malformed).
pub fn rv_of(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

impl Store {
    /// Opens the store: in memory, or backed by the SQLite file at `data`.
    pub fn open(data: Option<&Path>, window: usize) -> Result<Store, DevClusterError> {
        let mut state = State {
            rv: 0,
            objects: HashMap::new(),
            history: VecDeque::new(),
            floor: 0,
            window: window.max(1),
            watchers: HashMap::new(),
            registry: Registry::default(),
            db: None,
            gc_pending: false,
            owner_refs: HashMap::new(),
        };
        if let Some(path) = data {
            let (db, rv, rows) = persist::Db::open(path)?;
            state.rv = rv;
            for (resource, obj) in rows {
                let key = obj_key(&obj);
                if resource == "apiextensions.k8s.io/customresourcedefinitions" {
                    state.registry.set_crd(&obj);
                }
                state.count_owners(&obj, true);
                state
                    .objects
                    .entry(resource)
                    .or_default()
                    .insert(key, Arc::new(obj));
            }
            state.db = Some(db);
        }
        state.floor = state.rv;
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            if state.get("/namespaces", "", ns).is_none() {
                let obj = json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": ns, "uid": uuid::Uuid::new_v4().to_string(), "creationTimestamp": now(),
                                 "labels": {"kubernetes.io/metadata.name": ns}},
                    "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
                state
                    .put("/namespaces", obj, EventType::Added, None)
                    .map_err(|e| DevClusterError::Data {
                        path: data.map(Path::to_path_buf).unwrap_or_default(),
                        message: e.message,
                    })?;
            }
        }
        state.floor = state.rv;
        Ok(Store {
            state: Mutex::new(state),
        })
    }

    /// Locks the state. Never hold the guard across an `.await`.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends every open watch (their channels close).
    pub fn close_watches(&self) {
        self.lock().watchers.clear();
    }

    /// Forgets the history: watches from any older resourceVersion get 410.
    pub fn expire_history(&self) {
        let mut st = self.lock();
        st.history.clear();
        st.floor = st.rv;
    }
}

/// Opening a watch from a resourceVersion.
pub struct WatchStart {
    /// Events to send first (history replay, or ADDED for the current state).
    pub initial: Vec<Arc<Change>>,
    /// Further changes.
    pub rx: mpsc::Receiver<Arc<Change>>,
    /// The resourceVersion the initial events bring the watcher to.
    pub rv: u64,
}

impl State {
    /// The object `name` in `ns` of resource `resource`.
    pub fn get(&self, resource: &str, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.objects
            .get(resource)?
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Objects of `resource` (in `ns` when given), ordered by namespace then name.
    pub fn list(&self, resource: &str, ns: Option<&str>) -> Vec<Arc<Value>> {
        let Some(map) = self.objects.get(resource) else {
            return Vec::new();
        };
        match ns {
            None => map.values().cloned().collect(),
            Some(ns) => map
                .range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v.clone())
                .collect(),
        }
    }

    /// Every resource key that has objects.
    pub fn resources(&self) -> Vec<String> {
        self.objects
            .iter()
            .filter(|(_, m)| !m.is_empty())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Stores `obj` under a new resourceVersion, persists it, records and fans out the change.
    pub fn put(
        &mut self,
        resource: &str,
        mut obj: Value,
        kind: EventType,
        old: Option<Arc<Value>>,
    ) -> Result<Arc<Value>, ApiError> {
        let rv = self.rv + 1;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let key = obj_key(&obj);
        if let Some(db) = &mut self.db {
            db.put(resource, &key, &obj, rv)?;
        }
        self.rv = rv;
        self.count_owners(&obj, true);
        let obj = Arc::new(obj);
        if let Some(prev) = self
            .objects
            .entry(resource.to_string())
            .or_default()
            .insert(key, obj.clone())
        {
            self.count_owners(&prev, false);
        }
        self.record(Change {
            rv,
            resource: resource.to_string(),
            kind,
            object: obj.clone(),
            old,
        });
        Ok(obj)
    }

    /// Removes an object for good; the DELETED event carries a new resourceVersion.
    pub fn remove(
        &mut self,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<Value>>, ApiError> {
        let key = (ns.to_string(), name.to_string());
        let Some(old) = self
            .objects
            .get(resource)
            .and_then(|m| m.get(&key))
            .cloned()
        else {
            return Ok(None);
        };
        let rv = self.rv + 1;
        if let Some(db) = &mut self.db {
            db.delete(resource, &key, rv)?;
        }
        self.rv = rv;
        if let Some(m) = self.objects.get_mut(resource) {
            m.remove(&key);
        }
        self.count_owners(&old, false);
        let uid = old["metadata"]["uid"].as_str().unwrap_or_default();
        let in_terminating_ns = !ns.is_empty()
            && self
                .get("/namespaces", "", ns)
                .is_some_and(|n| n["metadata"]["deletionTimestamp"].is_string());
        if self.owner_refs.contains_key(uid) || in_terminating_ns {
            self.gc_pending = true;
        }
        let mut last = (*old).clone();
        last["metadata"]["resourceVersion"] = json!(rv.to_string());
        let last = Arc::new(last);
        self.record(Change {
            rv,
            resource: resource.to_string(),
            kind: EventType::Deleted,
            object: last.clone(),
            old: Some(old),
        });
        Ok(Some(last))
    }

    fn count_owners(&mut self, obj: &Value, add: bool) {
        for uid in owner_uids(obj) {
            if add {
                *self.owner_refs.entry(uid.to_string()).or_default() += 1;
            } else if let Some(n) = self.owner_refs.get_mut(uid) {
                *n -= 1;
                if *n == 0 {
                    self.owner_refs.remove(uid);
                }
            }
        }
    }

    fn record(&mut self, change: Change) {
        let change = Arc::new(change);
        self.history.push_back(change.clone());
        while self.history.len() > self.window {
            if let Some(c) = self.history.pop_front() {
                self.floor = c.rv;
            }
        }
        if let Some(ws) = self.watchers.get_mut(&change.resource) {
            let ns = change.object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default();
            // A watcher whose channel is full has fallen too far behind: close it, like
            // kube-apiserver does, so its client re-lists instead of missing events.
            ws.retain(|w| {
                if w.namespace.as_deref().is_some_and(|n| n != ns) {
                    return !w.tx.is_closed();
                }
                w.tx.try_send(change.clone()).is_ok()
            });
        }
    }

    fn register(&mut self, resource: &str, namespace: Option<&str>) -> mpsc::Receiver<Arc<Change>> {
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        let w = Watcher {
            namespace: namespace.map(String::from),
            tx,
        };
        self.watchers
            .entry(resource.to_string())
            .or_default()
            .push(w);
        rx
    }

    /// Starts a watch of the current state: ADDED for every object, then changes.
    pub fn watch_current(&mut self, resource: &str, namespace: Option<&str>) -> WatchStart {
        let initial = self
            .list(resource, namespace)
            .into_iter()
            .map(|o| {
                Arc::new(Change {
                    rv: rv_of(&o),
                    resource: resource.to_string(),
                    kind: EventType::Added,
                    object: o,
                    old: None,
                })
            })
            .collect();
        let rx = self.register(resource, namespace);
        WatchStart {
            initial,
            rx,
            rv: self.rv,
        }
    }

    /// Starts a watch of the changes after resourceVersion `from`, or 410 when compacted.
    pub fn watch_from(
        &mut self,
        resource: &str,
        namespace: Option<&str>,
        from: u64,
    ) -> Result<WatchStart, ApiError> {
        if from < self.floor {
            return Err(ApiError::expired(from, self.floor));
        }
        let initial = self
            .history
            .iter()
            .filter(|c| c.rv > from && c.resource == resource)
            .filter(|c| {
                namespace.is_none_or(|ns| c.object["metadata"]["namespace"].as_str() == Some(ns))
            })
            .cloned()
            .collect();
        let rx = self.register(resource, namespace);
        Ok(WatchStart {
            initial,
            rx,
            rv: self.rv,
        })
    }

    /// All objects in namespace `ns` across namespaced resources: `(resource, name)`.
    pub fn in_namespace(&self, ns: &str) -> Vec<(String, Arc<Value>)> {
        let mut out = Vec::new();
        for (res, map) in &self.objects {
            if res == "/namespaces" {
                continue;
            }
            for ((n, _), v) in map.range((ns.to_string(), String::new())..) {
                if n != ns {
                    break;
                }
                out.push((res.clone(), v.clone()));
            }
        }
        out
    }

    /// Every object with its resource key (for garbage collection).
    pub fn all_objects(&self) -> Vec<(String, Arc<Value>)> {
        self.objects
            .iter()
            .flat_map(|(r, m)| m.values().map(move |v| (r.clone(), v.clone())))
            .collect()
    }

    /// Drops every object of `resource` (a CRD went away), with DELETED events.
    pub fn drop_resource(&mut self, resource: &str) -> Result<(), ApiError> {
        let keys: Vec<ObjKey> = self
            .objects
            .get(resource)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for (ns, name) in keys {
            self.remove(resource, &ns, &name)?;
        }
        // kube-apiserver ends the watches of a resource that is no longer
        // served; the DELETED events above are delivered first.
        self.watchers.remove(resource);
        Ok(())
    }

    /// True when `from` can no longer be resumed.
    pub fn is_expired(&self, from: u64) -> bool {
        from < self.floor
    }

    /// The oldest resumable resourceVersion.
    pub fn floor(&self) -> u64 {
        self.floor
    }
}
