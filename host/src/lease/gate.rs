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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::watch;

use super::FencingToken;

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
    /// The identity of the Lease this gate's terms come from
    /// ([`super::lease_identity`]), once the elector has seen it.
    lease: Option<Arc<str>>,
}

#[derive(Debug)]
struct Inner {
    state: Mutex<State>,
    changes: watch::Sender<Leadership>,
    /// A shard's gate: drained once no reconcile of the shard is in flight
    /// (the controllers keep running for the other shards).
    shard: bool,
    /// Reconciles of this shard in flight ([`WriteGate::enter`]).
    in_flight: AtomicUsize,
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
                    lease: None,
                }),
                changes: watch::channel(leadership).0,
                shard: false,
                in_flight: AtomicUsize::new(0),
            }),
        }
    }

    /// The gate of one shard's Lease: closed until its elector opens it;
    /// drained (may be released) once no reconcile of the shard that
    /// [`WriteGate::enter`]ed is in flight.
    pub fn shard() -> WriteGate {
        let leadership = Leadership::default();
        WriteGate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    open_until: Some(None),
                    leadership,
                    drained: false,
                    lease: None,
                }),
                changes: watch::channel(leadership).0,
                shard: true,
                in_flight: AtomicUsize::new(0),
            }),
        }
    }

    /// Admits one reconcile of this gate's objects: `None` when this
    /// replica does not hold the Lease or is giving it up (no new work);
    /// otherwise a guard counting the reconcile as in flight until dropped.
    pub fn enter(&self) -> Option<InFlight> {
        let leadership = self.leadership();
        if !leadership.leading || leadership.draining {
            return None;
        }
        self.inner.in_flight.fetch_add(1, Ordering::SeqCst);
        Some(InFlight { gate: self.clone() })
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
        crate::util::lock(&self.inner.state)
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

    /// The fencing token of the current term, naming its Lease (`None`
    /// without leader election, while not leading, or before the elector
    /// has seen the Lease's identity).
    pub fn fencing_token(&self) -> Option<FencingToken> {
        let state = self.state();
        Some(FencingToken {
            lease: state.lease.clone()?,
            term: state.leadership.token?,
        })
    }

    /// Records the identity of the Lease this gate's terms come from
    /// (`<namespace>/<name>/<uid>`); a recreated Lease has a new one.
    pub(super) fn identify(&self, lease: &str) {
        let mut state = self.state();
        if state.lease.as_deref() != Some(lease) {
            state.lease = Some(Arc::from(lease));
        }
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

    /// True once [`WriteGate::report_drained`] was called in this drain
    /// (for a shard's gate: once no reconcile of it is in flight).
    pub fn drained(&self) -> bool {
        let state = self.state();
        state.drained
            || (self.inner.shard
                && state.leadership.draining
                && self.inner.in_flight.load(Ordering::SeqCst) == 0)
    }
}

/// A reconcile admitted by [`WriteGate::enter`], in flight until dropped.
#[derive(Debug)]
pub struct InFlight {
    gate: WriteGate,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.gate.inner.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The write gates of the shards: one per shard Lease, or the one gate of
/// the leader (or of a single replica) when there is one shard. Cheap to
/// clone; clones share the gates.
#[derive(Debug, Clone)]
pub struct ShardGates {
    gates: Arc<[WriteGate]>,
}

impl ShardGates {
    /// One shard guarded by `gate`: every object is its.
    pub fn single(gate: WriteGate) -> ShardGates {
        ShardGates {
            gates: Arc::from(vec![gate]),
        }
    }

    /// `count` shards (at least one), each with its own closed gate.
    pub fn sharded(count: usize) -> ShardGates {
        ShardGates {
            gates: (0..count.max(1)).map(|_| WriteGate::shard()).collect(),
        }
    }

    /// How many shards there are.
    pub fn count(&self) -> usize {
        self.gates.len()
    }

    /// True with more than one shard.
    pub fn is_sharded(&self) -> bool {
        self.gates.len() > 1
    }

    /// The shard of the primary with `uid` ([`super::shard_of`]).
    pub fn shard_of(&self, uid: Option<&str>) -> usize {
        super::assign::shard_of(uid, self.gates.len())
    }

    /// The gate of `shard` (shard 0's beyond the count).
    pub fn gate(&self, shard: usize) -> &WriteGate {
        self.gates.get(shard).unwrap_or(&self.gates[0])
    }

    /// The gate guarding the primary with `uid`.
    pub fn for_uid(&self, uid: Option<&str>) -> &WriteGate {
        self.gate(self.shard_of(uid))
    }

    /// Every gate, by shard.
    pub fn gates(&self) -> &[WriteGate] {
        &self.gates
    }

    /// Every shard's [`Leadership`] now, by shard.
    pub fn leadership(&self) -> Vec<Leadership> {
        self.gates.iter().map(WriteGate::leadership).collect()
    }

    /// True when this replica takes new work for at least one shard.
    pub fn takes_work(&self) -> bool {
        self.gates.iter().any(|g| {
            let leadership = g.leadership();
            leadership.leading && !leadership.draining
        })
    }

    /// Every change of any shard's [`Leadership`], as the list by shard,
    /// starting with the current one. Needs a tokio runtime (a task merges
    /// the gates' changes; it ends when the receiver is dropped).
    pub fn subscribe(&self) -> watch::Receiver<Vec<Leadership>> {
        let (sender, receiver) = watch::channel(self.leadership());
        let gates = self.gates.clone();
        let mut changes: Vec<watch::Receiver<Leadership>> =
            gates.iter().map(WriteGate::subscribe).collect();
        tokio::spawn(async move {
            loop {
                let next =
                    futures::future::select_all(changes.iter_mut().map(|c| Box::pin(c.changed())));
                tokio::select! {
                    () = sender.closed() => return,
                    (result, _, _) = next => if result.is_err() { return },
                }
                let now: Vec<Leadership> =
                    changes.iter_mut().map(|c| *c.borrow_and_update()).collect();
                sender.send_if_modified(|current| {
                    let changed = *current != now;
                    *current = now;
                    changed
                });
            }
        });
        receiver
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

    #[test]
    fn a_shard_gate_admits_work_only_while_held_and_drains_when_none_is_in_flight() {
        let gate = WriteGate::shard();
        assert!(gate.enter().is_none(), "not held: no work");
        gate.lead(2, Instant::now() + Duration::from_secs(60));
        let first = gate.enter().expect("held: work admitted");
        gate.drain();
        assert!(gate.enter().is_none(), "giving it up: no new work");
        assert!(!gate.drained(), "a reconcile is still in flight");
        assert_eq!(gate.check(), Ok(Some(2)), "its writes still go out");
        drop(first);
        assert!(gate.drained());
        gate.close();
        assert_eq!(gate.check(), Err(Fenced));
        // The leader's gate drains only when the manager says so.
        let leader = WriteGate::leased();
        leader.lead(0, Instant::now() + Duration::from_secs(60));
        leader.drain();
        assert!(!leader.drained());
        leader.report_drained();
        assert!(leader.drained());
    }

    #[tokio::test]
    async fn shard_gates_give_each_object_its_shards_gate_and_merge_their_changes() {
        let single = ShardGates::single(WriteGate::always_open());
        assert!(!single.is_sharded());
        assert_eq!(single.for_uid(Some("any")).check(), Ok(None));
        let shards = ShardGates::sharded(4);
        assert_eq!(shards.count(), 4);
        let uid = "5f0c2a9e-7b1d-4c3e-8f6a-0d9b8c7a6e5f";
        let shard = shards.shard_of(Some(uid));
        assert_eq!(shard, super::super::shard_of(Some(uid), 4));
        let mut changes = shards.subscribe();
        assert!(!shards.takes_work());
        shards
            .gate(shard)
            .lead(5, Instant::now() + Duration::from_secs(60));
        assert_eq!(shards.for_uid(Some(uid)).check(), Ok(Some(5)));
        let other = (shard + 1) % 4;
        assert_eq!(shards.gate(other).check(), Err(Fenced));
        assert!(shards.takes_work());
        tokio::time::timeout(Duration::from_secs(5), changes.changed())
            .await
            .expect("a change is merged")
            .expect("the merge task runs");
        assert!(changes.borrow()[shard].leading);
        assert!(!changes.borrow()[other].leading);
    }
}
