//! Limits per reconcile: how much one answer of a plugin may make the host
//! write, and how often one object may be reconciled or evented. They bound
//! what a hostile or buggy plugin can do to the API server through the host.
//!
//! The values live here (before the engine and the registry in the data
//! flow) so a WasmPlugin's spec can set them and every version carries them;
//! `plan::limits` decides with them.
//!
//! # The rule
//!
//! - **Refusals**: an answer with more children than
//!   [`ReconcileLimits::max_children`], or whose status patch is larger than
//!   [`ReconcileLimits::max_status_bytes`], is refused whole: nothing is
//!   written, the object shows `Degraded=True` with reason `TooManyChildren`
//!   or `StatusTooLarge`, and the host waits for the object to change.
//! - **Clamps**: a condition message longer than
//!   [`ReconcileLimits::max_condition_message_bytes`] is truncated, events
//!   beyond [`ReconcileLimits::max_events_per_reconcile`] are dropped, a
//!   requeue sooner than [`ReconcileLimits::min_requeue`] is delayed, the
//!   per-object event and reconcile rates are limited. The write proceeds,
//!   and the object shows `Degraded=True` with reason `LimitExceeded` and a
//!   message naming each limit (it replaces the plugin's own `Degraded` for
//!   that reconcile: a breach is never silent).
//! - Both count in `wasm_operator_limit_breaches_total{plugin,limit}`.

use std::time::Duration;

/// Limits applied to every reconcile of one plugin version. The defaults
/// are what an experienced operator author would accept; a WasmPlugin's
/// `spec.limits` overrides them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconcileLimits {
    /// Children one answer may desire. Default 500.
    pub max_children: usize,
    /// Largest `.status` patch (the plugin's fields and the conditions,
    /// serialized) in bytes. Default 256 KiB.
    pub max_status_bytes: usize,
    /// Longest condition message in bytes; longer ones are truncated, as
    /// event notes are. Default 32 KiB.
    pub max_condition_message_bytes: usize,
    /// Events one answer may record; the rest are dropped. Default 20.
    pub max_events_per_reconcile: usize,
    /// Events one object may receive in a burst (client-go's spam filter:
    /// 25). Default 25.
    pub event_burst: u32,
    /// One more event token per this interval (client-go: 5 min).
    pub event_refill: Duration,
    /// Shortest requeue-after the host honours. Default 1 s.
    pub min_requeue: Duration,
    /// Reconciles of one object that did not change since the last one
    /// (same `resourceVersion`) in a burst before it counts as a hot loop. Default 50 (a rollout's
    /// children changing, version swaps and a few requeues stay below it).
    pub reconcile_burst: u32,
    /// One more reconcile token per this interval. Default 2 s (30 a minute
    /// sustained: a requeue every second is a hot loop).
    pub reconcile_refill: Duration,
    /// Children the plugin may create at once, over all its primaries (a
    /// token bucket; applies to existing children are not creations).
    /// Default 1000.
    pub creation_burst: u32,
    /// One more creation token per this interval. Default 100 ms (600 a
    /// minute sustained).
    pub creation_refill: Duration,
    /// Children the plugin may create in all while this replica's
    /// controller of it runs. Default 100,000. Beyond a bound, new children
    /// are left out of the plan (`LimitExceeded`, limit `creations`) and
    /// created by a later reconcile once the budget allows.
    pub max_creations: u64,
}

/// Similar events (same type and reason) on one object within
/// [`AGGREGATE_WINDOW`] after which further ones are aggregated, as
/// client-go's event correlator does.
pub const AGGREGATE_AFTER: u32 = 10;

/// The window of [`AGGREGATE_AFTER`] (client-go: 10 minutes).
pub const AGGREGATE_WINDOW: Duration = Duration::from_secs(600);

impl Default for ReconcileLimits {
    fn default() -> Self {
        ReconcileLimits {
            max_children: 500,
            max_status_bytes: 256 << 10,
            max_condition_message_bytes: 32 << 10,
            max_events_per_reconcile: 20,
            event_burst: 25,
            event_refill: Duration::from_secs(300),
            min_requeue: Duration::from_secs(1),
            reconcile_burst: 50,
            reconcile_refill: Duration::from_secs(2),
            creation_burst: 1000,
            creation_refill: Duration::from_millis(100),
            max_creations: 100_000,
        }
    }
}
