//! One running reflector: a watcher feeding a [`Store`] and a broadcast
//! channel of [`CacheEvent`]s.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt, stream};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::CacheEvent;
use super::object::prepare_for_cache;

/// How many changes a slow subscriber may fall behind before it is resynced
/// from the store (it then sees every object once more; nothing is lost).
const FANOUT_BUFFER: usize = 1024;

pub(super) struct Reflection {
    api_resource: ApiResource,
    store: Store<DynamicObject>,
    tx: broadcast::Sender<CacheEvent>,
    /// Serialises "update store + broadcast" against "subscribe + snapshot",
    /// so a new subscriber neither misses nor reorders a change.
    gate: Arc<Mutex<()>>,
    synced: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Reflection {
    pub(super) fn start(client: Client, ar: ApiResource, namespace: Option<&str>) -> Reflection {
        let mut writer: Writer<DynamicObject> = Writer::new(ar.clone());
        let store = writer.as_reader();
        let (tx, _) = broadcast::channel(FANOUT_BUFFER);
        let gate = Arc::new(Mutex::new(()));
        let synced = Arc::new(AtomicBool::new(false));
        let api: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client, ns, &ar),
            None => Api::all_with(client, &ar),
        };
        let task = {
            let (tx, gate, synced, store, kind, watched) = (
                tx.clone(),
                gate.clone(),
                synced.clone(),
                store.clone(),
                ar.kind.clone(),
                ar.clone(),
            );
            tokio::spawn(async move {
                let mut events = watcher(api, watcher::Config::default())
                    .default_backoff()
                    .modify(move |object| prepare_for_cache(object, &watched))
                    .boxed();
                while let Some(event) = events.next().await {
                    let event = match event {
                        Ok(event) => event,
                        Err(error) => {
                            // The watcher retries with backoff by itself; the
                            // store keeps serving the last known state.
                            tracing::warn!(kind = %kind, %error, "watch failed; retrying");
                            continue;
                        }
                    };
                    let _guard = gate
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    writer.apply_watcher_event(&event);
                    // `send` fails only without subscribers, which is fine.
                    match event {
                        watcher::Event::Apply(obj) => {
                            let _ = tx.send(CacheEvent::Applied(Arc::new(obj)));
                        }
                        watcher::Event::Delete(obj) => {
                            let _ = tx.send(CacheEvent::Deleted(Arc::new(obj)));
                        }
                        watcher::Event::InitDone => {
                            synced.store(true, Ordering::Release);
                            // A (re)list may have replaced anything: tell
                            // subscribers about every object once.
                            for obj in store.state() {
                                let _ = tx.send(CacheEvent::Applied(obj));
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
            tx,
            gate,
            synced,
            task,
        }
    }

    pub(super) fn api_resource(&self) -> &ApiResource {
        &self.api_resource
    }

    pub(super) fn store(&self) -> Store<DynamicObject> {
        self.store.clone()
    }

    pub(super) fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub(super) fn stop(&self) {
        self.task.abort();
    }

    pub(super) fn subscribe(&self) -> impl Stream<Item = CacheEvent> + Send + 'static {
        let (rx, snapshot) = {
            let _guard = self
                .gate
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let rx = self.tx.subscribe();
            let snapshot = if self.synced() {
                self.store.state()
            } else {
                Vec::new()
            };
            (rx, snapshot)
        };
        let store = self.store.clone();
        let live = stream::unfold((rx, store), |(mut rx, store)| async move {
            match rx.recv().await {
                Ok(event) => Some((vec![event], (rx, store))),
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "cache subscriber lagged; resyncing from the store");
                    let all = store.state().into_iter().map(CacheEvent::Applied).collect();
                    Some((all, (rx, store)))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
        .flat_map(stream::iter);
        stream::iter(snapshot.into_iter().map(CacheEvent::Applied)).chain(live)
    }
}

impl Drop for Reflection {
    fn drop(&mut self) {
        self.task.abort();
    }
}
