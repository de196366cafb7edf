//! Deciding with the limits per reconcile ([`ReconcileLimits`], whose rustdoc
//! states the rule): truncation, the per-object rate limits (a token bucket
//! for reconciles, client-go's event correlator for events), and the
//! breaches a plan reports.
//!
//! Pure like the rest of [`crate::plan`]: the per-object state
//! ([`ObjectRates`]) is a value the controller keeps between reconciles and
//! hands in, and the time is passed in.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::PlannedEvent;
use crate::contract::ReconcileLimits;
use crate::contract::limits::{AGGREGATE_AFTER, AGGREGATE_WINDOW};

/// Which limit a breach is of: the `limit` label of
/// `wasm_operator_limit_breaches_total` (the engine's log limit counts there
/// as `logBytes`, recorded from its call reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Limit {
    /// Children per answer (a refusal).
    Children,
    /// Size of the status patch (a refusal).
    StatusSize,
    /// Length of a condition or failure message (truncated).
    ConditionMessage,
    /// Events per reconcile (the rest dropped).
    EventsPerReconcile,
    /// Events per object over time (dropped by the spam filter).
    EventRate,
    /// The shortest requeue-after (delayed to it).
    RequeueAfter,
    /// Reconciles per object over time (a hot loop; delayed).
    ReconcileRate,
    /// Children a plugin creates, at once and in all (the rest left out).
    Creations,
}

impl Limit {
    /// The metric label and the name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Children => "children",
            Limit::StatusSize => "statusSize",
            Limit::ConditionMessage => "conditionMessage",
            Limit::EventsPerReconcile => "eventsPerReconcile",
            Limit::EventRate => "eventRate",
            Limit::RequeueAfter => "requeueAfter",
            Limit::ReconcileRate => "reconcileRate",
            Limit::Creations => "creations",
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One clamp a plan made: which limit, and what happened, for the
/// `LimitExceeded` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breach {
    /// The limit.
    pub limit: Limit,
    /// What was clamped, e.g. `30 events, 20 recorded`.
    pub detail: String,
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.limit, self.detail)
    }
}

/// The creations a plugin may still make, over all its primaries: a token
/// bucket (`creation_burst`, one more every `creation_refill`) and a total
/// (`max_creations`) since its controller started. A reconcile takes what
/// its new children need before planning ([`CreationBudget::take`]) and
/// gives back what the plan did not use ([`CreationBudget::refund`]), so
/// reconciles running at once never overdraw it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CreationBudget {
    bucket: TokenBucket,
    created: u64,
}

impl CreationBudget {
    /// A full budget.
    pub fn new(limits: &ReconcileLimits, now: DateTime<Utc>) -> CreationBudget {
        CreationBudget {
            bucket: TokenBucket::full(limits.creation_burst, now),
            created: 0,
        }
    }

    /// Takes up to `wanted` creations; returns how many were granted.
    pub fn take(&mut self, wanted: usize, limits: &ReconcileLimits, now: DateTime<Utc>) -> usize {
        let mut granted = 0;
        while granted < wanted
            && self.created < limits.max_creations
            && self
                .bucket
                .take(limits.creation_burst, limits.creation_refill, now)
                .is_ok()
        {
            granted += 1;
            self.created += 1;
        }
        granted
    }

    /// Gives back `unused` creations [`CreationBudget::take`] granted.
    pub fn refund(&mut self, unused: usize, limits: &ReconcileLimits) {
        let unused_count = u64::try_from(unused).unwrap_or(u64::MAX);
        self.created = self.created.saturating_sub(unused_count);
        self.bucket.tokens =
            (self.bucket.tokens + unused_count as f64).min(f64::from(limits.creation_burst.max(1)));
    }

    /// True when the total (`max_creations`) is spent: no refill helps.
    pub fn spent(&self, limits: &ReconcileLimits) -> bool {
        self.created >= limits.max_creations
    }

    /// Children created so far.
    #[cfg(test)]
    fn created(&self) -> u64 {
        self.created
    }
}

/// A token bucket: `burst` tokens, one more every `refill`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    at: DateTime<Utc>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(burst: u32, now: DateTime<Utc>) -> TokenBucket {
        TokenBucket {
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes one token; `Err(wait)` until one is available.
    pub fn take(
        &mut self,
        burst: u32,
        refill: Duration,
        now: DateTime<Utc>,
    ) -> Result<(), Duration> {
        let elapsed = (now - self.at).to_std().unwrap_or_default();
        let refill_secs = refill.as_secs_f64().max(f64::EPSILON);
        self.tokens =
            (self.tokens + elapsed.as_secs_f64() / refill_secs).min(f64::from(burst.max(1)));
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - self.tokens) * refill_secs))
    }

    /// True when the bucket would be full at `now`: nothing to remember.
    pub fn is_full(&self, burst: u32, refill: Duration, now: DateTime<Utc>) -> bool {
        let elapsed = (now - self.at).to_std().unwrap_or_default();
        self.tokens + elapsed.as_secs_f64() / refill.as_secs_f64().max(f64::EPSILON)
            >= f64::from(burst)
    }
}

/// The state of one object's rate limits, kept by the controller between
/// reconciles (keyed by the object's uid).
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectRates {
    reconciles: TokenBucket,
    events: TokenBucket,
    /// (warning, reason) → (similar events in the window, window start).
    similar: HashMap<(bool, String), (u32, DateTime<Utc>)>,
    /// Reconciles delayed by the rate limit since the last one that ran.
    throttled: u32,
    /// The primary's `metadata.resourceVersion` at the last admitted
    /// reconcile.
    version: Option<String>,
}

/// What [`ObjectRates::admit_reconcile`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Reconcile now.
    Run,
    /// A hot loop: wait this long; `first` for the first delay of a streak
    /// (the one to report with a `HotLoop` event).
    Delay {
        /// How long until the next token.
        wait: Duration,
        /// The first delay since the last reconcile that ran.
        first: bool,
    },
}

impl ObjectRates {
    /// Fresh state: full buckets.
    pub fn new(limits: &ReconcileLimits, now: DateTime<Utc>) -> ObjectRates {
        ObjectRates {
            reconciles: TokenBucket::full(limits.reconcile_burst, now),
            events: TokenBucket::full(limits.event_burst, now),
            similar: HashMap::new(),
            throttled: 0,
            version: None,
        }
    }

    /// The per-object reconcile rate limit. A hot loop is an object
    /// reconciled over and over *without changing*: a reconcile of an
    /// object whose `resourceVersion` changed since the last one (someone
    /// edited it, or the last reconcile wrote its status) always runs and
    /// takes no token; the others (requeues, children changing under a
    /// fight, resyncs of an unchanged object) take one. A plugin that writes
    /// a different status on every call is therefore never a hot loop here:
    /// its object changes every time.
    pub fn admit_reconcile(
        &mut self,
        limits: &ReconcileLimits,
        now: DateTime<Utc>,
        version: Option<&str>,
    ) -> Admission {
        if version.is_some() && version != self.version.as_deref() {
            self.version = version.map(str::to_string);
            return Admission::Run;
        }
        match self
            .reconciles
            .take(limits.reconcile_burst, limits.reconcile_refill, now)
        {
            Ok(()) => Admission::Run,
            Err(wait) => {
                self.throttled = self.throttled.saturating_add(1);
                Admission::Delay {
                    wait,
                    first: self.throttled == 1,
                }
            }
        }
    }

    /// Reconciles delayed since the last one that ran; resets the count
    /// (the reconcile that runs now reports them).
    pub fn take_throttled(&mut self) -> u32 {
        std::mem::take(&mut self.throttled)
    }

    /// client-go's event correlator for one object: the eleventh and later
    /// similar events (same type and reason) within ten minutes are
    /// aggregated (their message says so), and every event takes a token of
    /// the per-object bucket (burst 25, one per 5 minutes by default);
    /// without one it is dropped. Returns the events to record and how many
    /// were dropped.
    pub fn correlate(
        &mut self,
        events: Vec<PlannedEvent>,
        limits: &ReconcileLimits,
        now: DateTime<Utc>,
    ) -> (Vec<PlannedEvent>, usize) {
        let window = chrono::Duration::from_std(AGGREGATE_WINDOW).unwrap_or(chrono::Duration::MAX);
        self.similar.retain(|_, (_, start)| now - *start < window);
        let mut kept = Vec::with_capacity(events.len());
        let mut dropped = 0;
        for mut event in events {
            let entry = self
                .similar
                .entry((event.warning, event.reason.clone()))
                .or_insert((0, now));
            entry.0 = entry.0.saturating_add(1);
            if entry.0 > AGGREGATE_AFTER {
                event.message = format!("(combined from similar events): {}", event.message);
            }
            match self
                .events
                .take(limits.event_burst, limits.event_refill, now)
            {
                Ok(()) => kept.push(event),
                Err(_) => dropped += 1,
            }
        }
        (kept, dropped)
    }

    /// True when nothing about the object needs remembering at `now`.
    pub fn is_idle(&self, limits: &ReconcileLimits, now: DateTime<Utc>) -> bool {
        self.throttled == 0
            && self.similar.is_empty()
            && self
                .reconciles
                .is_full(limits.reconcile_burst, limits.reconcile_refill, now)
            && self
                .events
                .is_full(limits.event_burst, limits.event_refill, now)
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::super::EventAction;
    use super::*;

    fn t(secs: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 1, 1, 0, 0, 0).single().unwrap()
            + chrono::Duration::seconds(secs)
    }

    #[test]
    fn the_bucket_refills_up_to_its_burst() {
        let refill = Duration::from_secs(3);
        let mut b = TokenBucket::full(2, t(0));
        assert_eq!(b.take(2, refill, t(0)), Ok(()));
        assert_eq!(b.take(2, refill, t(0)), Ok(()));
        assert_eq!(b.take(2, refill, t(0)), Err(Duration::from_secs(3)));
        assert_eq!(b.take(2, refill, t(3)), Ok(()));
        // A long pause refills to the burst, never beyond.
        assert!(b.is_full(2, refill, t(100)));
        assert_eq!(b.take(2, refill, t(100)), Ok(()));
        assert_eq!(b.take(2, refill, t(100)), Ok(()));
        assert!(b.take(2, refill, t(100)).is_err());
    }

    #[test]
    fn a_hot_loop_is_delayed_and_reported_once_per_streak() {
        let limits = ReconcileLimits {
            reconcile_burst: 2,
            reconcile_refill: Duration::from_secs(3),
            ..ReconcileLimits::default()
        };
        let mut rates = ObjectRates::new(&limits, t(0));
        // The first sight of a version is a change: no token taken.
        assert_eq!(
            rates.admit_reconcile(&limits, t(0), Some("1")),
            Admission::Run
        );
        assert_eq!(
            rates.admit_reconcile(&limits, t(0), Some("1")),
            Admission::Run
        );
        assert_eq!(
            rates.admit_reconcile(&limits, t(0), Some("1")),
            Admission::Run
        );
        let Admission::Delay { wait, first: true } =
            rates.admit_reconcile(&limits, t(0), Some("1"))
        else {
            panic!("not delayed")
        };
        assert_eq!(wait, limits.reconcile_refill);
        assert!(matches!(
            rates.admit_reconcile(&limits, t(1), Some("1")),
            Admission::Delay { first: false, .. }
        ));
        assert_eq!(
            rates.admit_reconcile(&limits, t(4), Some("1")),
            Admission::Run
        );
        assert_eq!(rates.take_throttled(), 2);
        // An edit runs even with an empty bucket.
        assert!(matches!(
            rates.admit_reconcile(&limits, t(4), Some("1")),
            Admission::Delay { .. }
        ));
        assert_eq!(
            rates.admit_reconcile(&limits, t(4), Some("2")),
            Admission::Run
        );
        rates.take_throttled();
        assert_eq!(rates.take_throttled(), 0);
        assert!(!rates.is_idle(&limits, t(4)));
        assert!(rates.is_idle(&limits, t(1000)));
    }

    fn event(reason: &str) -> PlannedEvent {
        PlannedEvent::new(true, reason, "m".into(), EventAction::Reconcile)
    }

    #[test]
    fn the_correlator_aggregates_repeats_and_drops_beyond_the_burst() {
        let limits = ReconcileLimits::default();
        let mut rates = ObjectRates::new(&limits, t(0));
        let (kept, dropped) = rates.correlate(vec![event("Boom"); 12], &limits, t(0));
        assert_eq!((kept.len(), dropped), (12, 0));
        assert_eq!(kept[9].message, "m");
        assert_eq!(kept[10].message, "(combined from similar events): m");
        let (kept, dropped) = rates.correlate(vec![event("Other"); 20], &limits, t(1));
        assert_eq!((kept.len(), dropped), (13, 7));
        assert_eq!(kept[0].message, "m", "another reason is not similar");
        // Five minutes later one more token.
        let (kept, dropped) = rates.correlate(vec![event("Other"); 2], &limits, t(301));
        assert_eq!((kept.len(), dropped), (1, 1));
        // Ten minutes after the first, the window starts again.
        let (kept, _) = rates.correlate(vec![event("Boom")], &limits, t(601));
        assert_eq!(kept[0].message, "m");
    }

    #[test]
    fn the_creation_budget_grants_a_burst_then_the_refill_and_never_past_the_total() {
        let limits = ReconcileLimits {
            creation_burst: 3,
            creation_refill: Duration::from_secs(1),
            max_creations: 5,
            ..ReconcileLimits::default()
        };
        let start = Utc::now();
        let mut budget = CreationBudget::new(&limits, start);
        assert_eq!(budget.take(2, &limits, start), 2);
        assert_eq!(budget.take(2, &limits, start), 1);
        assert_eq!(budget.take(1, &limits, start), 0);
        // What a plan did not use comes back.
        budget.refund(1, &limits);
        assert_eq!(budget.created(), 2);
        assert_eq!(budget.take(5, &limits, start), 1);
        // The refill grants more, up to the total.
        let later = start + chrono::Duration::seconds(10);
        assert_eq!(budget.take(10, &limits, later), 2);
        assert_eq!(budget.created(), 5);
        assert!(budget.spent(&limits));
        let much_later = start + chrono::Duration::seconds(1000);
        assert_eq!(budget.take(10, &limits, much_later), 0);
    }
}
