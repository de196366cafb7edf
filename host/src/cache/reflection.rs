//! One running reflector: a watcher feeding a [`Store`], its index, and
//! one channel of [`CacheEvent`]s per subscriber.
//!
//! # Guarantees
//!
//! A subscriber sees every change, in order, exactly once: the channels are
//! unbounded, so a subscriber that falls behind (a controller busy with a
//! burst of 10,000 creates) is never resynced from the store, which would
//! re-announce every object (and re-trigger every primary) each time it
//! lagged, and would lose the deletions it missed. What a slow subscriber
//! costs is its queue: one pointer per change (the objects are the store's
//! `Arc`s).
//!
//! A relist (the watch was lost and restarted with a full list) announces
//! only what differs from the store before it: objects new or changed (a
//! different `resourceVersion` or UID) as [`CacheEvent::Applied`], objects
//! gone as [`CacheEvent::Deleted`]. Objects the relist shows unchanged are
//! not announced again: every subscriber already saw that version, and the
//! controllers' periodic resync covers drift the watches cannot see.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc;
use futures::{Stream, StreamExt, stream};
use kube::Client;
use kube::api::{Api, ApiResource};
use kube::runtime::reflector::{ObjectRef as StoreRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

use super::index::{ObjectIndex, Relisted};
use super::object::prepare_for_cache;
use super::{CacheEvent, CachedObject};

pub(super) struct Reflection {
    api_resource: ApiResource,
    store: Store<CachedObject>,
    /// The store's owner and namespace indexes, updated with it.
    index: ObjectIndex,
    subscribers: Subscribers,
    /// Serialises "update store + broadcast" against "subscribe + snapshot",
    /// so a new subscriber neither misses nor reorders a change.
    gate: Arc<Mutex<()>>,
    synced: Arc<AtomicBool>,
    /// Why the last list or watch failed as "not served" (the kind is gone,
    /// e.g. its CRD was deleted); `None` while the watch works. Reads then
    /// fail rather than answer from a store that no longer tracks the
    /// cluster.
    unserved: Arc<Mutex<Option<String>>>,
    /// The API server's message when the last list or watch was forbidden
    /// (403: the host's identity lacks RBAC for the kind); `None` once a
    /// list or watch succeeds again. It names the verb, the resource and
    /// the identity, e.g. `… is forbidden: User "system:serviceaccount:…"
    /// cannot list resource "staticsites" …`.
    forbidden: Arc<Mutex<Option<String>>>,
    task: JoinHandle<()>,
}

/// The API server's status of a failed list or watch, if it answered one.
fn api_status(error: &watcher::Error) -> Option<&kube::core::Status> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
        | watcher::Error::WatchError(status) => Some(status),
        _ => None,
    }
}

/// True when a watch error says the resource is not served (404).
fn not_served(error: &watcher::Error) -> bool {
    api_status(error).is_some_and(|status| status.code == 404)
}

/// The API server's message when a watch error is a 403 (RBAC refused the
/// list or watch), which names verb, resource and identity.
fn forbidden_message(error: &watcher::Error) -> Option<String> {
    api_status(error)
        .filter(|status| status.code == 403)
        .map(|status| status.message.clone())
}

impl Reflection {
    pub(super) fn start(client: Client, ar: ApiResource, namespace: Option<&str>) -> Reflection {
        let mut writer: Writer<CachedObject> = Writer::new(ar.clone());
        let store = writer.as_reader();
        let index = ObjectIndex::default();
        let subscribers = Subscribers::default();
        let gate = Arc::new(Mutex::new(()));
        let synced = Arc::new(AtomicBool::new(false));
        let unserved = Arc::new(Mutex::new(None));
        let forbidden = Arc::new(Mutex::new(None));
        let api: Api<CachedObject> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &ar),
            None => Api::all_with(client, &ar),
        };
        let task = {
            let (subscribers, gate, synced, unserved, store, index, kind, watched) = (
                subscribers.clone(),
                gate.clone(),
                synced.clone(),
                (unserved.clone(), forbidden.clone()),
                store.clone(),
                index.clone(),
                ar.kind.clone(),
                ar.clone(),
            );
            tokio::spawn(async move {
                let (unserved, forbidden) = unserved;
                let resource = watched.clone();
                let mut events = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .modify(move |object| prepare_for_cache(object, &watched))
                    .boxed();
                while let Some(event) = events.next().await {
                    let event = match event {
                        Ok(event) => {
                            *crate::util::lock(&unserved) = None;
                            *crate::util::lock(&forbidden) = None;
                            event
                        }
                        Err(error) => {
                            // The watcher retries with backoff by itself; the
                            // store keeps serving the last known state,
                            // unless the kind is not served any more.
                            tracing::warn!(kind = %kind, %error, "watch failed; retrying");
                            if not_served(&error) {
                                *crate::util::lock(&unserved) = Some(error.to_string());
                            }
                            // Kept until a list or watch succeeds: the
                            // watcher's retries heal it once RBAC is added.
                            if let Some(message) = forbidden_message(&error) {
                                *crate::util::lock(&forbidden) = Some(message);
                            }
                            continue;
                        }
                    };
                    let _guard = crate::util::lock(&gate);
                    // The store and the index change together under the
                    // index's lock: a lookup waits for the event being
                    // applied, never sees the index behind the store by more.
                    let mut filed = index.write();
                    writer.apply_watcher_event(&event);
                    match event {
                        watcher::Event::Apply(obj) => {
                            // The store's own `Arc`: the index and the
                            // subscribers share it rather than a second copy.
                            let key = StoreRef::from_obj_with(&obj, resource.clone());
                            let obj = store.get(&key).unwrap_or_else(|| Arc::new(obj));
                            filed.apply(obj.clone());
                            drop(filed);
                            subscribers.send(&CacheEvent::Applied(obj));
                        }
                        watcher::Event::Delete(obj) => {
                            filed.delete(&obj);
                            drop(filed);
                            subscribers.send(&CacheEvent::Deleted(Arc::new(obj)));
                        }
                        watcher::Event::InitDone => {
                            // A (re)list replaced the store: the index is
                            // rebuilt from it (once per relist, like the
                            // relist itself); subscribers are told about
                            // each object the relist dropped as a deletion
                            // (it was deleted while the watch was down, and
                            // its owner must hear of it like of any other
                            // deletion) and about each object new or changed
                            // since the store they saw (see the module).
                            let Relisted { dropped, changed } = filed.rebuild(store.state());
                            drop(filed);
                            synced.store(true, Ordering::Release);
                            for obj in dropped {
                                subscribers.send(&CacheEvent::Deleted(obj));
                            }
                            for obj in changed {
                                subscribers.send(&CacheEvent::Applied(obj));
                            }
                        }
                        watcher::Event::Init | watcher::Event::InitApply(_) => {}
                    }
                }
            })
        };
        Reflection {
            api_resource: ar,
            store,
            index,
            subscribers,
            gate,
            synced,
            unserved,
            forbidden,
            task,
        }
    }

    /// Why the kind is not served (its last list or watch answered 404), if so.
    pub(super) fn unserved(&self) -> Option<String> {
        crate::util::lock(&self.unserved).clone()
    }

    /// The API server's message when the last list or watch was forbidden
    /// (403), if so.
    pub(super) fn forbidden(&self) -> Option<String> {
        crate::util::lock(&self.forbidden).clone()
    }

    pub(super) fn api_resource(&self) -> &ApiResource {
        &self.api_resource
    }

    pub(super) fn store(&self) -> Store<CachedObject> {
        self.store.clone()
    }

    pub(super) fn index(&self) -> &ObjectIndex {
        &self.index
    }

    pub(super) fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub(super) fn stop(&self) {
        self.task.abort();
    }

    pub(super) fn subscribe(&self) -> impl Stream<Item = CacheEvent> + Send + use<> {
        let (rx, snapshot) = {
            let _guard = crate::util::lock(&self.gate);
            let rx = self.subscribers.add();
            let snapshot = if self.synced() {
                self.store.state()
            } else {
                Vec::new()
            };
            (rx, snapshot)
        };
        stream::iter(snapshot.into_iter().map(CacheEvent::Applied)).chain(rx)
    }
}

/// The subscribers' channels. Unbounded: see the module's guarantees.
#[derive(Clone, Default)]
struct Subscribers {
    senders: Arc<Mutex<Vec<mpsc::UnboundedSender<CacheEvent>>>>,
}

impl Subscribers {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<mpsc::UnboundedSender<CacheEvent>>> {
        // A push or a retain cannot leave the list half-changed.
        crate::util::lock(&self.senders)
    }

    fn add(&self) -> mpsc::UnboundedReceiver<CacheEvent> {
        let (tx, rx) = mpsc::unbounded();
        self.lock().push(tx);
        rx
    }

    /// Hands `event` to every subscriber; forgets those that went away.
    fn send(&self, event: &CacheEvent) {
        self.lock()
            .retain(|tx| tx.unbounded_send(event.clone()).is_ok());
    }
}

impl Drop for Reflection {
    fn drop(&mut self) {
        self.task.abort();
    }
}
