//! Fault injection: closing watches, compacting history, failing requests, adding latency,
//! cutting one client off.
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

/// What happens to the requests of a client that is cut off
/// ([`Faults::cut_off_client`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFault {
    /// Every request answers this status (429, 500 or 503) at once.
    Fail(u16),
    /// Every request hangs, unanswered, until the client is restored (a
    /// partition or a hung server as the client sees it).
    Stall,
}

#[derive(Debug, Clone)]
struct ClientRule {
    /// Lower-case header name.
    header: String,
    value: String,
    fault: ClientFault,
}

#[derive(Debug, Default)]
struct Inner {
    rules: Vec<FailRule>,
    latency: Duration,
    clients: Vec<ClientRule>,
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

    /// Cuts off one client: every request carrying `header: value` (e.g.
    /// `authorization: Bearer replica-a`, or a `user-agent`) gets `fault`
    /// until [`Faults::restore_client`]. Other clients are served as usual.
    /// A second rule for the same header and value replaces the first.
    pub fn cut_off_client(&self, header: &str, value: &str, fault: ClientFault) {
        let header = header.to_ascii_lowercase();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .clients
            .retain(|r| !(r.header == header && r.value == value));
        inner.clients.push(ClientRule {
            header,
            value: value.to_string(),
            fault,
        });
    }

    /// Serves the client cut off by `header: value` again; its stalled
    /// requests proceed.
    pub fn restore_client(&self, header: &str, value: &str) {
        let header = header.to_ascii_lowercase();
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .clients
            .retain(|r| !(r.header == header && r.value == value));
    }

    /// The fault for a request whose headers `header_value` reads (by
    /// lower-case name), if its client is cut off.
    pub(crate) fn client_fault<'a>(
        &self,
        header_value: impl Fn(&str) -> Option<&'a str>,
    ) -> Option<ClientFault> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .clients
            .iter()
            .find(|r| header_value(&r.header).is_some_and(|v| v.trim() == r.value))
            .map(|r| r.fault)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn faults() -> Faults {
        Faults::new(Arc::new(Store::open(None, 100).expect("store")))
    }

    #[test]
    fn a_cut_off_client_is_matched_by_one_header_until_restored() {
        let faults = faults();
        let a = |name: &str| (name == "authorization").then_some("Bearer replica-a");
        let b = |name: &str| (name == "authorization").then_some("Bearer replica-b");
        assert_eq!(faults.client_fault(a), None);
        faults.cut_off_client("Authorization", "Bearer replica-a", ClientFault::Stall);
        assert_eq!(faults.client_fault(a), Some(ClientFault::Stall));
        assert_eq!(faults.client_fault(b), None);
        // A second rule for the same client replaces the first.
        faults.cut_off_client("authorization", "Bearer replica-a", ClientFault::Fail(503));
        assert_eq!(faults.client_fault(a), Some(ClientFault::Fail(503)));
        faults.restore_client("AUTHORIZATION", "Bearer replica-a");
        assert_eq!(faults.client_fault(a), None);
    }
}
