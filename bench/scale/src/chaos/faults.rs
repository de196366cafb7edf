//! The fault schedule: which fault happens when, to whom, for how long, as
//! a pure function of a seed ([`schedule`]), so a run is reproducible from
//! its seed (the faults and their order and timing; what the replicas do in
//! between is the system under test).

use std::time::Duration;

/// SplitMix64: a small, portable generator whose sequence never changes
/// with a dependency's version (the seed must reproduce a run for years).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// A duration uniform in `low..=high` (millisecond steps).
    pub fn duration(&mut self, low: Duration, high: Duration) -> Duration {
        let ms = self.between(
            u64::try_from(low.as_millis()).unwrap_or(u64::MAX),
            u64::try_from(high.as_millis()).unwrap_or(u64::MAX),
        );
        Duration::from_millis(ms)
    }

    /// A uniform index below `len` (0 when empty).
    pub fn index(&mut self, len: usize) -> usize {
        if len == 0 {
            return 0;
        }
        usize::try_from(self.next_u64() % len as u64).unwrap_or(0)
    }
}

/// A kind of fault.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// `kill -9` of a replica; restarted after a pause.
    Kill,
    /// SIGTERM of a replica (it drains and releases); restarted after a pause.
    Term,
    /// The holder of shard 0 (the cluster-wide writer) cut off from the API
    /// server for longer than the lease.
    PartitionLeader,
    /// The holder of another shard cut off for longer than the lease.
    PartitionShardHolder,
    /// One replica's link delays every chunk.
    SlowLink,
    /// Every request of every client delayed by the API server (real: every
    /// replica's link).
    ApiLatency,
    /// The API server answers 503 to a burst of requests (devcluster only).
    Api5xx,
    /// The API server answers 429 with Retry-After to a burst (devcluster only).
    Api429,
    /// The API server restarted (devcluster: killed and started on its
    /// data; real: kube-apiserver stopped and started).
    ApiRestart,
    /// The plugin's version swapped (WasmPlugin `spec.source`).
    HotSwap,
    /// A Split canary of the other version, promoted by hand mid-storm.
    CanaryPromotion,
}

impl FaultKind {
    /// Every kind, in report order.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Kill,
        FaultKind::Term,
        FaultKind::PartitionLeader,
        FaultKind::PartitionShardHolder,
        FaultKind::SlowLink,
        FaultKind::ApiLatency,
        FaultKind::Api5xx,
        FaultKind::Api429,
        FaultKind::ApiRestart,
        FaultKind::HotSwap,
        FaultKind::CanaryPromotion,
    ];

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill -9",
            FaultKind::Term => "SIGTERM",
            FaultKind::PartitionLeader => "partition of shard 0's holder",
            FaultKind::PartitionShardHolder => "partition of a shard holder",
            FaultKind::SlowLink => "slow link (one replica)",
            FaultKind::ApiLatency => "API latency (every client)",
            FaultKind::Api5xx => "API 503 burst",
            FaultKind::Api429 => "API 429 burst",
            FaultKind::ApiRestart => "API server restart",
            FaultKind::HotSwap => "plugin hot swap",
            FaultKind::CanaryPromotion => "canary promotion",
        }
    }

    /// Whether it moves every object to another plugin version.
    pub fn changes_version(self) -> bool {
        matches!(self, FaultKind::HotSwap | FaultKind::CanaryPromotion)
    }

    /// Whether the backend can inject it (`real`: no 5xx/429 injection).
    pub fn available(self, real: bool) -> bool {
        !(real && matches!(self, FaultKind::Api5xx | FaultKind::Api429))
    }
}

/// One fault of the schedule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Planned {
    /// Offset from the storm's start.
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
    /// The replica it hits (for the kinds that hit one; partitions pick
    /// the holder when they start, this is the fallback).
    pub replica: usize,
    /// How long the fault lasts (a replica's time down, a partition's
    /// length, a burst's length…).
    pub length: Duration,
    /// Kind-specific: the latency in ms, or the shard.
    pub param: u64,
}

/// The schedule's shape.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The storm's length: no fault starts after it (minus its length).
    pub storm: Duration,
    /// The Lease duration: partitions last longer.
    pub lease: Duration,
    /// The pause between faults, drawn in this range.
    pub gap: (Duration, Duration),
    /// Replicas.
    pub replicas: usize,
    /// Shards.
    pub shards: usize,
    /// The kinds to use (in rounds: each round uses each kind once, in a
    /// seeded order).
    pub kinds: Vec<FaultKind>,
}

/// The faults of a storm from `seed`: in rounds, every kind once per
/// round in a shuffled order, one fault at a time with a seeded pause
/// between, until the storm's length. The version changes (a hot swap, a
/// canary promotion) come in the first round only: each moves every object
/// to another version (a metadata write per object), which at thousands of
/// objects is minutes of work, and a storm of them measures that work
/// rather than the faults.
pub fn schedule(seed: u64, shape: &Shape) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    if shape.kinds.is_empty() {
        return out;
    }
    let mut at = shape.gap.0;
    let mut first = true;
    loop {
        let mut round: Vec<FaultKind> = shape
            .kinds
            .iter()
            .copied()
            .filter(|k| first || !k.changes_version())
            .collect();
        first = false;
        if round.is_empty() {
            return out;
        }
        // Fisher-Yates.
        for i in (1..round.len()).rev() {
            let j = rng.index(i + 1);
            round.swap(i, j);
        }
        for kind in round {
            let (length, param) = match kind {
                FaultKind::Kill | FaultKind::Term => (
                    rng.duration(Duration::from_secs(1), Duration::from_secs(5)),
                    0,
                ),
                FaultKind::PartitionLeader => (
                    shape.lease + rng.duration(Duration::from_secs(2), Duration::from_secs(5)),
                    0,
                ),
                FaultKind::PartitionShardHolder => (
                    shape.lease + rng.duration(Duration::from_secs(2), Duration::from_secs(5)),
                    rng.between(1, shape.shards.saturating_sub(1).max(1) as u64),
                ),
                FaultKind::SlowLink => (
                    rng.duration(Duration::from_secs(5), Duration::from_secs(10)),
                    rng.between(300, 1500),
                ),
                FaultKind::ApiLatency => (
                    rng.duration(Duration::from_secs(5), Duration::from_secs(10)),
                    rng.between(100, 500),
                ),
                FaultKind::Api5xx | FaultKind::Api429 => (
                    rng.duration(Duration::from_secs(2), Duration::from_secs(5)),
                    0,
                ),
                FaultKind::ApiRestart => (Duration::from_secs(1), 0),
                FaultKind::HotSwap => (Duration::from_secs(2), 0),
                FaultKind::CanaryPromotion => (Duration::from_secs(5), 0),
            };
            if at + length > shape.storm {
                return out;
            }
            out.push(Planned {
                at,
                kind,
                replica: rng.index(shape.replicas),
                length,
                param,
            });
            at += length + rng.duration(shape.gap.0, shape.gap.1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            storm: Duration::from_secs(600),
            lease: Duration::from_secs(5),
            gap: (Duration::from_secs(2), Duration::from_secs(6)),
            replicas: 3,
            shards: 6,
            kinds: FaultKind::ALL.to_vec(),
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        assert_eq!(schedule(7, &shape()), schedule(7, &shape()));
        assert_ne!(schedule(7, &shape()), schedule(8, &shape()));
    }

    #[test]
    fn every_kind_comes_once_per_round_and_faults_do_not_overlap() {
        let plan = schedule(42, &shape());
        let first: std::collections::BTreeSet<_> = plan
            .iter()
            .take(FaultKind::ALL.len())
            .map(|p| p.kind)
            .collect();
        assert_eq!(first.len(), FaultKind::ALL.len());
        for pair in plan.windows(2) {
            assert!(pair[0].at + pair[0].length < pair[1].at);
        }
        let last = plan.last().unwrap();
        assert!(last.at + last.length <= shape().storm);
        for p in &plan {
            assert!(p.replica < 3);
            if p.kind == FaultKind::PartitionShardHolder {
                assert!((1..6).contains(&p.param));
            }
            if matches!(
                p.kind,
                FaultKind::PartitionLeader | FaultKind::PartitionShardHolder
            ) {
                assert!(p.length > shape().lease);
            }
        }
    }

    #[test]
    fn version_changes_come_once() {
        let plan = schedule(42, &shape());
        assert!(plan.len() > 2 * FaultKind::ALL.len());
        for kind in [FaultKind::HotSwap, FaultKind::CanaryPromotion] {
            assert_eq!(plan.iter().filter(|p| p.kind == kind).count(), 1);
        }
    }

    #[test]
    fn splitmix_is_pinned() {
        // The published first output of SplitMix64 seeded with 0.
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }
}
