//! Per-version reconcile and failure counts of a plugin, kept by the registry
//! so a `WasmPlugin`'s status can show how each version it ran behaved.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Reconcile and failure counts of one plugin version since it was first
/// loaded into this registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionStats {
    /// The manifest's version.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// Finished reconciles (successful or not) served by this version.
    pub reconciles: u64,
    /// Reconciles of this version that failed.
    pub failures: u64,
}

/// The live counters of one version; shared by every [`super::ActiveVersion`]
/// of the same version and digest, so swapping back and forth keeps counting.
#[derive(Debug, Default)]
pub struct VersionCounters {
    reconciles: AtomicU64,
    failures: AtomicU64,
}

impl VersionCounters {
    /// Counts one finished reconcile.
    pub fn record(&self, failed: bool) {
        self.reconciles.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn snapshot(&self, version: &str, digest: &str) -> VersionStats {
        VersionStats {
            version: version.to_string(),
            digest: digest.to_string(),
            reconciles: self.reconciles.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
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

    /// A snapshot of every version's counts.
    pub(super) fn snapshot(&self) -> Vec<VersionStats> {
        self.versions
            .iter()
            .map(|(v, d, c)| c.snapshot(v, d))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_shared_per_version_and_digest() {
        let mut stats = PluginStats::default();
        stats.counters("1.0.0", "sha256:a").record(false);
        stats.counters("2.0.0", "sha256:b").record(true);
        stats.counters("1.0.0", "sha256:a").record(true);
        assert_eq!(
            stats.snapshot(),
            vec![
                VersionStats {
                    version: "1.0.0".into(),
                    digest: "sha256:a".into(),
                    reconciles: 2,
                    failures: 1
                },
                VersionStats {
                    version: "2.0.0".into(),
                    digest: "sha256:b".into(),
                    reconciles: 1,
                    failures: 1
                },
            ]
        );
    }
}
