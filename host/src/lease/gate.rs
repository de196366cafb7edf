//! The [`WriteGate`]: the one handle every write of the host consults right
//! before it is sent.
//!
//! Without leader election the gate is always open. With it, the elector
//! opens it when this replica acquires the Lease and keeps it open only
//! until a deadline it moves forward at every successful renewal (the start
//! of the renewing request plus the renew deadline). The deadline is read
//! from the local monotonic clock at every check, so a replica whose
//! renewals stall (a partition, a paused process, a hung API server) stops
//! writing on time even if its elector task cannot run: nothing has to
//! happen for the gate to close.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;

/// What the elector last decided about this replica, as the manager sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Leadership {
    /// This replica holds the Lease: controllers should run.
    pub leading: bool,
    /// The fencing token of the current term (the Lease's
    /// `leaseTransitions` when it was acquired); `None` while not leading.
    pub token: Option<u64>,
    /// The leader is handing over or shutting down: no new work is taken
    /// (controllers stop after their calls in flight), writes in flight may
    /// still finish while the lease is held.
    pub draining: bool,
}

/// Why a write was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this replica is not the leader (or its lease could not be renewed in time); the write was dropped, the leader writes instead"
)]
pub struct Fenced;

#[derive(Debug)]
struct State {
    /// `None`: no leader election, the gate never closes.
    open_until: Option<Option<Instant>>,
    leadership: Leadership,
    /// The manager stopped every controller after a drain began.
    drained: bool,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changes: watch::Sender<Leadership>,
}

/// Whether this replica may write now, and with which fencing token. Cheap
/// to clone; clones share the state.
#[derive(Debug, Clone)]
pub struct WriteGate {
    inner: Arc<Inner>,
}

impl Default for WriteGate {
    fn default() -> Self {
        WriteGate::always_open()
    }
}

impl WriteGate {
    fn with(open_until: Option<Option<Instant>>, leadership: Leadership) -> WriteGate {
        WriteGate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    open_until,
                    leadership,
                    drained: false,
                }),
                changes: watch::channel(leadership).0,
            }),
        }
    }

    /// A gate that never closes and carries no token: a single replica
    /// without leader election (and `wasm-operator dev`).
    pub fn always_open() -> WriteGate {
        WriteGate::with(
            None,
            Leadership {
                leading: true,
                token: None,
                draining: false,
            },
        )
    }

    /// A gate for leader election: closed until the elector opens it.
    pub fn leased() -> WriteGate {
        WriteGate::with(Some(None), Leadership::default())
    }

    /// A gate that is closed for good: a standby without leader election.
    pub fn closed() -> WriteGate {
        WriteGate::leased()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain values replaced whole: a poisoned lock still holds valid ones.
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// True when a write may be sent now.
    pub fn may_write(&self) -> bool {
        self.check().is_ok()
    }

    /// The fencing token to record on the objects written now, or
    /// [`Fenced`] when nothing may be written. `Ok(None)`: writes allowed,
    /// no leader election (no token).
    ///
    /// # Errors
    ///
    /// [`Fenced`] when this replica does not hold the Lease or its last
    /// renewal is older than the renew deadline.
    pub fn check(&self) -> Result<Option<u64>, Fenced> {
        let state = self.state();
        match state.open_until {
            None => Ok(None),
            Some(Some(until)) if Instant::now() < until && state.leadership.leading => {
                Ok(state.leadership.token)
            }
            Some(_) => Err(Fenced),
        }
    }

    /// The fencing token of the current term (`None` without leader
    /// election or while not leading).
    pub fn token(&self) -> Option<u64> {
        self.state().leadership.token
    }

    /// What the elector last decided.
    pub fn leadership(&self) -> Leadership {
        self.state().leadership
    }

    /// Every change of [`Leadership`], starting with the current one.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.inner.changes.subscribe()
    }

    /// True when this gate belongs to leader election (it may close).
    pub fn is_leased(&self) -> bool {
        self.state().open_until.is_some()
    }

    fn publish(&self, state: MutexGuard<'_, State>) {
        let leadership = state.leadership;
        drop(state);
        self.inner.changes.send_if_modified(|current| {
            let changed = *current != leadership;
            *current = leadership;
            changed
        });
    }

    /// Opens the gate for the term with `token` until `until` (or moves
    /// the deadline of the running term).
    pub(super) fn lead(&self, token: u64, until: Instant) {
        let mut state = self.state();
        if state.open_until.is_none() {
            return;
        }
        state.open_until = Some(Some(until));
        state.leadership.leading = true;
        state.leadership.token = Some(token);
        self.publish(state);
    }

    /// No new work: the term ends soon (handoff, shutdown). Writes stay
    /// allowed until [`WriteGate::close`] or the deadline.
    pub(super) fn drain(&self) {
        let mut state = self.state();
        if state.open_until.is_none() || !state.leadership.leading {
            return;
        }
        state.leadership.draining = true;
        self.publish(state);
    }

    /// Closes the gate at once: the term is over.
    pub(super) fn close(&self) {
        let mut state = self.state();
        if state.open_until.is_none() {
            return;
        }
        state.open_until = Some(None);
        state.leadership = Leadership::default();
        state.drained = false;
        self.publish(state);
    }

    /// The manager reports that, after a drain began, every controller has
    /// stopped (their calls in flight finished): the Lease may be released.
    pub fn report_drained(&self) {
        let mut state = self.state();
        if state.leadership.draining {
            state.drained = true;
        }
    }

    /// True once [`WriteGate::report_drained`] was called in this drain.
    pub fn drained(&self) -> bool {
        self.state().drained
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_unleased_gate_is_always_open_without_a_token() {
        let gate = WriteGate::always_open();
        assert_eq!(gate.check(), Ok(None));
        gate.close();
        assert_eq!(gate.check(), Ok(None));
        assert!(gate.leadership().leading);
    }

    #[test]
    fn a_leased_gate_opens_for_a_term_and_closes_at_its_deadline() {
        let gate = WriteGate::leased();
        assert_eq!(gate.check(), Err(Fenced));
        gate.lead(3, Instant::now() + Duration::from_secs(60));
        assert_eq!(gate.check(), Ok(Some(3)));
        // A deadline in the past closes it without anyone calling close.
        gate.lead(3, Instant::now() - Duration::from_millis(1));
        assert_eq!(gate.check(), Err(Fenced));
        gate.lead(4, Instant::now() + Duration::from_secs(60));
        gate.drain();
        assert_eq!(gate.check(), Ok(Some(4)));
        assert!(gate.leadership().draining);
        gate.close();
        assert_eq!(gate.check(), Err(Fenced));
        assert_eq!(gate.leadership(), Leadership::default());
    }

    #[test]
    fn subscribers_see_every_change_of_leadership() {
        let gate = WriteGate::leased();
        let mut changes = gate.subscribe();
        assert!(!changes.borrow_and_update().leading);
        gate.lead(0, Instant::now() + Duration::from_secs(60));
        assert!(changes.has_changed().unwrap());
        assert_eq!(changes.borrow_and_update().token, Some(0));
        // Moving the deadline is no change of leadership.
        gate.lead(0, Instant::now() + Duration::from_secs(61));
        assert!(!changes.has_changed().unwrap());
    }
}
