//! Per-version figures of a plugin, kept by the registry so a `WasmPlugin`'s
//! status can show how each version it ran behaved, and so a canary's
//! analysis can compare a candidate with the stable version over a window.
//!
//! Every figure is a monotonic counter (the latency histogram too, with
//! fixed buckets), so two [`CounterSnapshot`]s subtract
//! ([`CounterSnapshot::since`]) into the figures of the window between them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Upper bounds (seconds) of the call latency buckets; a last, open bucket
/// holds slower calls. Fixed: snapshots of different times subtract.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Number of histogram slots: the bounded buckets and the open one.
const SLOTS: usize = LATENCY_BUCKETS.len() + 1;

/// Where a version stands in its plugin's version set now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VersionRole {
    /// It serves every object no candidate claims.
    Stable,
    /// It is the plugin's rollout candidate.
    Candidate,
}

/// Figures of one plugin version since it was first loaded into this
/// registry.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct VersionStats {
    /// The manifest's version.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// Finished reconciles (successful or not) served by this version,
    /// and shadow computations of a candidate.
    pub reconciles: u64,
    /// Those that failed.
    pub failures: u64,
    /// What the version is now; `None` for a version that no longer serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<VersionRole>,
    /// 95th percentile of its `reconcile` call latency in milliseconds (the
    /// upper bound of the histogram bucket holding it); `None` before the
    /// first call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p95_millis: Option<f64>,
    /// Shadow comparisons with the stable version (a candidate's).
    #[serde(skip_serializing_if = "is_zero")]
    pub shadow_compared: u64,
    /// Those whose answers differed.
    #[serde(skip_serializing_if = "is_zero")]
    pub shadow_differing: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A fixed-bucket latency histogram (see [`LATENCY_BUCKETS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LatencyHistogram {
    /// Calls per bucket; the last slot holds calls slower than every bound.
    pub counts: [u64; SLOTS],
}

impl LatencyHistogram {
    /// Calls counted.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0 to 1) in seconds: the upper bound of the bucket
    /// holding it (`f64::INFINITY` in the open bucket); `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: ceil(q × total), at least 1.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (slot, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Some(LATENCY_BUCKETS.get(slot).copied().unwrap_or(f64::INFINITY));
            }
        }
        Some(f64::INFINITY)
    }

    /// The 95th percentile in seconds (see [`LatencyHistogram::quantile`]).
    pub fn p95(&self) -> Option<f64> {
        self.quantile(0.95)
    }

    /// The calls of this histogram not in `earlier` (bucket by bucket).
    pub fn since(&self, earlier: &LatencyHistogram) -> LatencyHistogram {
        let mut counts = [0; SLOTS];
        for (i, slot) in counts.iter_mut().enumerate() {
            *slot = self.counts[i].saturating_sub(earlier.counts[i]);
        }
        LatencyHistogram { counts }
    }
}

/// The figures of one version at one moment; subtract two with
/// [`CounterSnapshot::since`] to judge a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CounterSnapshot {
    /// Reconciles served (or, for a shadow candidate, computed).
    pub calls: u64,
    /// Those that failed (call error, refused plan, failed write).
    pub failures: u64,
    /// Latency of the `reconcile` calls.
    pub latency: LatencyHistogram,
    /// Shadow comparisons with the stable version.
    pub shadow_compared: u64,
    /// Those whose answers differed.
    pub shadow_differing: u64,
}

impl CounterSnapshot {
    /// The figures of the window from `earlier` to this snapshot.
    pub fn since(&self, earlier: &CounterSnapshot) -> CounterSnapshot {
        CounterSnapshot {
            calls: self.calls.saturating_sub(earlier.calls),
            failures: self.failures.saturating_sub(earlier.failures),
            latency: self.latency.since(&earlier.latency),
            shadow_compared: self.shadow_compared.saturating_sub(earlier.shadow_compared),
            shadow_differing: self
                .shadow_differing
                .saturating_sub(earlier.shadow_differing),
        }
    }

    /// failures ÷ calls; `None` without calls.
    pub fn failure_ratio(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.failures as f64 / self.calls as f64)
    }

    /// differing ÷ compared; `None` without comparisons.
    pub fn diff_ratio(&self) -> Option<f64> {
        (self.shadow_compared > 0)
            .then(|| self.shadow_differing as f64 / self.shadow_compared as f64)
    }

    /// 95th percentile of the call latency in seconds; `None` without calls.
    pub fn p95(&self) -> Option<f64> {
        self.latency.p95()
    }
}

/// The live counters of one version; shared by every [`super::ActiveVersion`]
/// of the same version and digest, so swapping back and forth keeps counting.
#[derive(Debug, Default)]
pub struct VersionCounters {
    reconciles: AtomicU64,
    failures: AtomicU64,
    latency: [AtomicU64; SLOTS],
    shadow_compared: AtomicU64,
    shadow_differing: AtomicU64,
}

impl VersionCounters {
    /// Counts one finished reconcile (or shadow computation); `call` is how
    /// long its `reconcile` call took, when the plugin was called.
    pub fn record(&self, failed: bool, call: Option<std::time::Duration>) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(call) = call {
            let seconds = call.as_secs_f64();
            let slot = LATENCY_BUCKETS
                .iter()
                .position(|bound| seconds <= *bound)
                .unwrap_or(LATENCY_BUCKETS.len());
            self.latency[slot].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Counts one shadow comparison with the stable version.
    pub fn record_shadow(&self, differs: bool) {
        self.shadow_compared.fetch_add(1, Ordering::Relaxed);
        if differs {
            self.shadow_differing.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The figures now.
    pub fn snapshot(&self) -> CounterSnapshot {
        let mut counts = [0; SLOTS];
        for (slot, counter) in counts.iter_mut().zip(&self.latency) {
            *slot = counter.load(Ordering::Relaxed);
        }
        CounterSnapshot {
            calls: self.reconciles.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            latency: LatencyHistogram { counts },
            shadow_compared: self.shadow_compared.load(Ordering::Relaxed),
            shadow_differing: self.shadow_differing.load(Ordering::Relaxed),
        }
    }

    fn stats(&self, version: &str, digest: &str) -> VersionStats {
        let now = self.snapshot();
        VersionStats {
            version: version.to_string(),
            digest: digest.to_string(),
            reconciles: now.calls,
            failures: now.failures,
            role: None,
            p95_millis: now.p95().map(|s| s * 1000.0),
            shadow_compared: now.shadow_compared,
            shadow_differing: now.shadow_differing,
        }
    }
}

/// The counters of every version a plugin ran, in the order first loaded.
#[derive(Debug, Default)]
pub(super) struct PluginStats {
    versions: Vec<(String, String, Arc<VersionCounters>)>,
}

impl PluginStats {
    /// The counters of `version`/`digest`, created on first use.
    pub(super) fn counters(&mut self, version: &str, digest: &str) -> Arc<VersionCounters> {
        if let Some((_, _, c)) = self
            .versions
            .iter()
            .find(|(v, d, _)| v == version && d == digest)
        {
            return c.clone();
        }
        let counters = Arc::new(VersionCounters::default());
        self.versions
            .push((version.to_string(), digest.to_string(), counters.clone()));
        counters
    }

    /// A snapshot of every version's figures (roles unset).
    pub(super) fn snapshot(&self) -> Vec<VersionStats> {
        self.versions
            .iter()
            .map(|(v, d, c)| c.stats(v, d))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counters_are_shared_per_version_and_digest() {
        let mut stats = PluginStats::default();
        stats.counters("1.0.0", "sha256:a").record(false, None);
        stats.counters("2.0.0", "sha256:b").record(true, None);
        stats.counters("1.0.0", "sha256:a").record(true, None);
        let snapshot = stats.snapshot();
        assert_eq!(
            snapshot
                .iter()
                .map(|s| (s.version.as_str(), s.reconciles, s.failures))
                .collect::<Vec<_>>(),
            vec![("1.0.0", 2, 1), ("2.0.0", 1, 1)]
        );
    }

    #[test]
    fn windows_subtract_and_p95_is_a_bucket_bound() {
        let counters = VersionCounters::default();
        for _ in 0..10 {
            counters.record(false, Some(Duration::from_micros(800)));
        }
        let before = counters.snapshot();
        assert_eq!(before.p95(), Some(0.001));
        for i in 0..20 {
            // 19 fast calls and one slow failure: p95 stays fast.
            let slow = i == 0;
            counters.record(
                slow,
                Some(Duration::from_millis(if slow { 300 } else { 3 })),
            );
        }
        counters.record_shadow(true);
        counters.record_shadow(false);
        let window = counters.snapshot().since(&before);
        assert_eq!(window.calls, 20);
        assert_eq!(window.failures, 1);
        assert_eq!(window.failure_ratio(), Some(0.05));
        assert_eq!(window.latency.total(), 20);
        assert_eq!(window.p95(), Some(0.005));
        assert_eq!(window.latency.quantile(1.0), Some(0.5));
        assert_eq!(window.diff_ratio(), Some(0.5));
        assert_eq!(CounterSnapshot::default().p95(), None);
        let slow = VersionCounters::default();
        slow.record(false, Some(Duration::from_secs(60)));
        assert_eq!(slow.snapshot().p95(), Some(f64::INFINITY));
    }
}
