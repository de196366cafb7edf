//! The host's own writes to primaries, remembered until the cache shows them.
//!
//! A reconcile's writes to its children come back as watch events that
//! trigger the owner again, often before the primary's cache has seen the
//! status the same reconcile wrote. kube-runtime runs that second reconcile
//! right away, on the stale primary: the plugin is called with the old
//! status and the plan writes the same status (and version marks) once more.
//! That was 0.5–0.6 extra status writes per object on every create and
//! update pass at 1,000 WebApps.
//!
//! [`PrimaryWrites`] remembers, per primary UID, the `resourceVersion` the
//! host's last write to it answered; [`PrimaryWrites::hold`] tells the
//! controller that the cache is still behind that write, so the reconcile
//! is put off for a moment instead of planning on an object the host knows
//! is outdated.
//!
//! # Guarantees
//!
//! - A reconcile is held only when both versions are numbers and the
//!   cached one is lower: `resourceVersion`s are opaque strings to clients,
//!   and anything else (another encoding, a missing version) holds nothing.
//! - A hold never lasts longer than [`HOLD_LIMIT`] after the write: a cache
//!   that stopped following (a broken watch, a relist in progress) delays
//!   the object's reconcile once by at most that, then reconciles it as it
//!   is, so nothing waits forever.
//! - The memory is only an optimisation: losing it (a restart, a sweep)
//!   costs at most the redundant write it exists to avoid.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::Resource;

/// How long after the host's write a reconcile may be held for the cache
/// to show it.
pub const HOLD_LIMIT: Duration = Duration::from_secs(5);

/// Entries kept before those past [`HOLD_LIMIT`] are dropped.
const KEPT: usize = 4096;

/// The host's last write to each primary: the `resourceVersion` it
/// answered and when. Filled from [`super::Executed`].
#[derive(Debug, Default)]
pub struct PrimaryWrites {
    inner: Mutex<HashMap<String, Written>>,
}

#[derive(Debug, Clone, Copy)]
struct Written {
    resource_version: u64,
    at: Instant,
}

/// Whether to reconcile a primary now, by [`PrimaryWrites::hold`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// The cache shows the host's last write (or there is none to wait
    /// for): reconcile.
    No,
    /// The cache is behind the host's own write to this primary: wait for
    /// it, at most the time left of [`HOLD_LIMIT`].
    Behind {
        /// The time left before the hold gives up.
        left: Duration,
    },
}

impl PrimaryWrites {
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        // Plain values: a panic elsewhere cannot leave them half-written.
        crate::util::lock(&self.inner)
    }

    /// Remembers that the host's write to the primary `uid` answered
    /// `resource_version` (a version that is not a number forgets the
    /// primary: there is nothing to compare the cache with).
    pub fn record(&self, uid: Option<&str>, resource_version: &str) {
        self.record_at(uid, resource_version, Instant::now());
    }

    fn record_at(&self, uid: Option<&str>, resource_version: &str, at: Instant) {
        let Some(uid) = uid else { return };
        let mut entries = self.entries();
        match resource_version.parse().ok() {
            Some(resource_version) => {
                if entries.len() >= KEPT {
                    entries.retain(|_, w| at.saturating_duration_since(w.at) < HOLD_LIMIT);
                }
                entries.insert(
                    uid.to_string(),
                    Written {
                        resource_version,
                        at,
                    },
                );
            }
            None => {
                entries.remove(uid);
            }
        }
    }

    /// Whether the reconcile of `cached` (the primary as the cache shows
    /// it) should wait for the cache to show the host's last write. An
    /// entry the cache has caught up with, or past its limit, is forgotten.
    pub fn hold(&self, cached: &impl Resource) -> Hold {
        self.hold_at(cached, Instant::now())
    }

    fn hold_at(&self, cached: &impl Resource, now: Instant) -> Hold {
        let meta = cached.meta();
        let Some(uid) = meta.uid.as_deref() else {
            return Hold::No;
        };
        let mut entries = self.entries();
        let Some(written) = entries.get(uid).copied() else {
            return Hold::No;
        };
        let seen = meta
            .resource_version
            .as_deref()
            .and_then(|rv| rv.parse::<u64>().ok());
        let left = HOLD_LIMIT.saturating_sub(now.saturating_duration_since(written.at));
        match seen {
            Some(seen) if seen < written.resource_version && !left.is_zero() => {
                Hold::Behind { left }
            }
            _ => {
                entries.remove(uid);
                Hold::No
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use kube::api::DynamicObject;
    use serde_json::json;

    use super::*;

    fn cached(uid: &str, resource_version: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a", "namespace": "ns", "uid": uid,
                "resourceVersion": resource_version},
        }))
        .unwrap()
    }

    #[test]
    fn a_cache_behind_the_hosts_write_holds_until_it_catches_up() {
        let writes = PrimaryWrites::default();
        let t0 = Instant::now();
        writes.record_at(Some("u1"), "120", t0);
        let soon = t0 + Duration::from_millis(10);
        assert_eq!(
            writes.hold_at(&cached("u1", "99"), soon),
            Hold::Behind {
                left: HOLD_LIMIT - Duration::from_millis(10)
            }
        );
        // Another object is not held.
        assert_eq!(writes.hold_at(&cached("u2", "99"), soon), Hold::No);
        // Caught up (or past, someone else wrote after the host): reconciled,
        // and the entry is gone.
        assert_eq!(writes.hold_at(&cached("u1", "120"), soon), Hold::No);
        assert_eq!(writes.hold_at(&cached("u1", "99"), soon), Hold::No);
    }

    #[test]
    fn a_hold_gives_up_at_its_limit() {
        let writes = PrimaryWrites::default();
        let t0 = Instant::now();
        writes.record_at(Some("u1"), "120", t0);
        assert_eq!(
            writes.hold_at(&cached("u1", "99"), t0 + HOLD_LIMIT),
            Hold::No
        );
        assert_eq!(
            writes.hold_at(&cached("u1", "99"), t0),
            Hold::No,
            "forgotten"
        );
    }

    #[test]
    fn versions_that_are_not_numbers_hold_nothing() {
        let writes = PrimaryWrites::default();
        let t0 = Instant::now();
        writes.record_at(Some("u1"), "abc", t0);
        assert_eq!(writes.hold_at(&cached("u1", "1"), t0), Hold::No);
        writes.record_at(Some("u1"), "120", t0);
        assert_eq!(writes.hold_at(&cached("u1", "xyz"), t0), Hold::No);
        // A later write without a usable version forgets the earlier one.
        writes.record_at(Some("u1"), "120", t0);
        writes.record_at(Some("u1"), "abc", t0);
        assert_eq!(writes.hold_at(&cached("u1", "1"), t0), Hold::No);
    }

    #[test]
    fn the_memory_drops_expired_entries_when_full() {
        let writes = PrimaryWrites::default();
        let t0 = Instant::now();
        for i in 0..KEPT {
            writes.record_at(Some(&format!("u{i}")), "5", t0);
        }
        writes.record_at(Some("fresh"), "5", t0 + HOLD_LIMIT);
        assert_eq!(writes.entries().len(), 1);
    }
}
