//! Per-object failure tracking and the retry delay of failing objects.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

/// First retry delay.
pub const BASE: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const CAP: Duration = Duration::from_secs(300);

/// Delay before retry number `failures` (1 = after the first failure):
/// `5 s * 2^(failures-1)`, capped at 300 s, with ±10 % jitter so objects that
/// failed together do not retry in lockstep.
pub fn delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let raw = BASE.as_secs_f64() * f64::from(1u32 << exp);
    let capped = raw.min(CAP.as_secs_f64());
    let jitter = rand::rng().random_range(0.9..=1.1);
    Duration::from_secs_f64((capped * jitter).min(CAP.as_secs_f64()))
}

/// Consecutive failures per object (keyed by uid), reset on success.
#[derive(Debug, Default)]
pub struct Failures {
    counts: Mutex<HashMap<String, u32>>,
}

impl Failures {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        crate::util::lock(&self.counts)
    }

    /// Consecutive failures of `key` so far.
    pub fn get(&self, key: &str) -> u32 {
        self.counts().get(key).copied().unwrap_or(0)
    }

    /// Records one more failure; returns the new count.
    pub fn record(&self, key: &str) -> u32 {
        let mut counts = self.counts();
        let n = counts.entry(key.to_string()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failures of `key` (success, or the object is gone).
    pub fn reset(&self, key: &str) {
        self.counts().remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_and_caps() {
        let within = |d: Duration, secs: f64| (d.as_secs_f64() - secs).abs() <= secs * 0.1 + 1e-9;
        assert!(within(delay(1), 5.0));
        assert!(within(delay(2), 10.0));
        assert!(within(delay(4), 40.0));
        assert!(delay(10) <= CAP);
        assert!(delay(u32::MAX) <= CAP);
        assert!(delay(10) >= Duration::from_secs(270));
    }

    #[test]
    fn counts_reset_on_success() {
        let f = Failures::default();
        assert_eq!(f.record("a"), 1);
        assert_eq!(f.record("a"), 2);
        f.reset("a");
        assert_eq!(f.get("a"), 0);
    }
}
