//! Fault injection: closing watches, compacting history, failing requests, adding latency.
//!
//! Every end-to-end failure-mode test of the project uses these to make the
//! server misbehave the way a real API server does under load or upgrades.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::Store;

#[derive(Debug, Clone)]
struct FailRule {
    prefix: String,
    remaining: usize,
    status: u16,
}

#[derive(Debug, Default)]
struct Inner {
    rules: Vec<FailRule>,
    latency: Duration,
}

/// A handle to the fault injection of one cluster (cheap clone).
#[derive(Clone)]
pub struct Faults {
    store: Arc<Store>,
    inner: Arc<Mutex<Inner>>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults").finish_non_exhaustive()
    }
}

impl Faults {
    pub(crate) fn new(store: Arc<Store>) -> Self {
        Self {
            store,
            inner: Arc::new(Mutex::new(Inner::default())),
        }
    }

    /// Ends every open watch stream; clients must re-watch.
    pub fn close_watches(&self) {
        self.store.close_watches();
    }

    /// Compacts the event history: the next watch from any older resourceVersion
    /// gets a 410 Gone (`Expired`) ERROR event.
    pub fn expire_history(&self) {
        self.store.expire_history();
    }

    /// The next `count` requests whose path starts with `path_prefix` answer
    /// `status` (429, 500 or 503) with a Status body; 429 carries `Retry-After: 1`.
    /// A count of 0 cancels pending failures for that prefix.
    pub fn fail_next(&self, path_prefix: &str, count: usize, status: u16) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if count == 0 {
            inner.rules.retain(|r| r.prefix != path_prefix);
            return;
        }
        inner.rules.push(FailRule {
            prefix: path_prefix.to_string(),
            remaining: count,
            status,
        });
    }

    /// Adds `latency` to every request (zero removes it).
    pub fn set_latency(&self, latency: Duration) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).latency = latency;
    }

    pub(crate) fn latency(&self) -> Duration {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).latency
    }

    /// Consumes one failure for `path` if a rule matches; returns the status to answer.
    pub(crate) fn take_failure(&self, path: &str) -> Option<u16> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let idx = inner
            .rules
            .iter()
            .position(|r| r.remaining > 0 && path.starts_with(&r.prefix))?;
        let rule = &mut inner.rules[idx];
        rule.remaining -= 1;
        let status = rule.status;
        if rule.remaining == 0 {
            inner.rules.remove(idx);
        }
        Some(status)
    }
}
