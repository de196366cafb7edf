//! Consistent pagination: every page of one list shows the objects as they
//! were when its first page was served, as kube-apiserver's pages do (they
//! are read from etcd at the first page's revision).
//!
//! Without it a client that lists in pages and then watches from the
//! list's `resourceVersion` (kube-runtime's watcher, client-go's reflector)
//! saw an object's newer state on a later page and then, from the watch,
//! the older events the first page's version replays: its cache went
//! backwards for a moment. The chaos harness (`scripts/chaos.sh`) saw
//! fencing tokens go backwards that way after every relist.
//!
//! The first page keeps the rest of the list (shared `Arc`s of the stored
//! objects, no copies) under a snapshot id that its continue token names.
//!
//! # Limits
//! - A snapshot lives [`KEPT_FOR`] (kube-apiserver's compaction interval is
//!   five minutes) and at most [`MAX_SNAPSHOTS`] are kept; a continue token
//!   whose snapshot is gone is answered `410 Expired`, as kube-apiserver
//!   answers one older than its compaction: the client lists again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long the rest of a paged list is kept for its continue tokens.
pub const KEPT_FOR: Duration = Duration::from_secs(300);
/// The most paged lists in progress kept at once (the oldest go first).
pub const MAX_SNAPSHOTS: usize = 256;

struct Snapshot {
    resource_version: u64,
    items: Vec<Arc<Value>>,
    taken: Instant,
}

/// The rest of the paged lists in progress.
#[derive(Default)]
pub struct ListSnapshots {
    inner: Mutex<(u64, HashMap<u64, Snapshot>)>,
}

impl std::fmt::Debug for ListSnapshots {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListSnapshots").finish_non_exhaustive()
    }
}

/// One page read from a snapshot.
pub struct Page {
    /// The list's resourceVersion (its first page's).
    pub resource_version: u64,
    /// The page's objects.
    pub items: Vec<Arc<Value>>,
    /// Objects after this page.
    pub remaining: usize,
}

impl ListSnapshots {
    /// Keeps `items` (the objects after a first page) as of
    /// `resource_version`; returns the snapshot's id.
    pub fn keep(&self, resource_version: u64, items: Vec<Arc<Value>>) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        inner
            .1
            .retain(|_, s| now.saturating_duration_since(s.taken) < KEPT_FOR);
        while inner.1.len() >= MAX_SNAPSHOTS {
            let Some(oldest) = inner
                .1
                .iter()
                .min_by_key(|(_, s)| s.taken)
                .map(|(id, _)| *id)
            else {
                break;
            };
            inner.1.remove(&oldest);
        }
        inner.0 += 1;
        let id = inner.0;
        inner.1.insert(
            id,
            Snapshot {
                resource_version,
                items,
                taken: now,
            },
        );
        id
    }

    /// The page of `limit` objects at `offset` of snapshot `id`, or `None`
    /// when the snapshot is gone (expired, or the last page was served).
    /// The snapshot is dropped once its last page is served.
    pub fn page(&self, id: u64, offset: usize, limit: Option<usize>) -> Option<Page> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let snapshot = inner.1.get(&id)?;
        if snapshot.taken.elapsed() >= KEPT_FOR {
            inner.1.remove(&id);
            return None;
        }
        let rest = snapshot.items.get(offset..).unwrap_or_default();
        let take = limit.map_or(rest.len(), |l| l.min(rest.len()));
        let page = Page {
            resource_version: snapshot.resource_version,
            items: rest[..take].to_vec(),
            remaining: rest.len() - take,
        };
        if page.remaining == 0 {
            inner.1.remove(&id);
        }
        Some(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(n: usize) -> Vec<Arc<Value>> {
        (0..n)
            .map(|i| Arc::new(serde_json::json!({"i": i})))
            .collect()
    }

    #[test]
    fn pages_come_from_the_snapshot_and_the_last_one_drops_it() {
        let snapshots = ListSnapshots::default();
        let id = snapshots.keep(42, objects(5));
        let first = snapshots.page(id, 0, Some(2)).unwrap();
        assert_eq!(
            (first.resource_version, first.items.len(), first.remaining),
            (42, 2, 3)
        );
        assert_eq!(first.items[0]["i"], 0);
        let last = snapshots.page(id, 2, Some(10)).unwrap();
        assert_eq!((last.items.len(), last.remaining), (3, 0));
        assert!(
            snapshots.page(id, 5, Some(2)).is_none(),
            "dropped after its last page"
        );
    }

    #[test]
    fn the_oldest_snapshot_goes_when_too_many_are_kept() {
        let snapshots = ListSnapshots::default();
        let first = snapshots.keep(1, objects(1));
        for _ in 0..MAX_SNAPSHOTS {
            snapshots.keep(2, objects(1));
        }
        assert!(snapshots.page(first, 0, None).is_none());
    }
}
