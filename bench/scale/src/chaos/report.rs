//! The report of a chaos run: figures computed from what was recorded
//! (pure functions), written as JSON (everything) and Markdown (the
//! tables people read).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::SystemTime;

use crate::check::{FinalState, StaleWrites};
use crate::faults::FaultKind;
use crate::observe::{Latency, TokenRegression, Write};
use crate::replicas::{Replica, Sample, quantile};
use crate::storm::Record;

/// p50, p99 and max of some seconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Spread {
    /// Samples.
    pub n: usize,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`.
    pub fn of(mut values: Vec<f64>) -> Spread {
        if values.is_empty() {
            return Spread::default();
        }
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Spread {
            n: values.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: values[values.len() - 1],
        }
    }
}

/// The figures of one fault kind.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KindSummary {
    /// The kind.
    pub kind: FaultKind,
    /// How many times it happened.
    pub count: usize,
    /// Injections that reported an error.
    pub errors: usize,
    /// Seconds the faults lasted (sum).
    pub seconds: f64,
    /// Write-to-status latency of the updates and creates made while a
    /// fault of this kind was in effect.
    pub during: Spread,
    /// The longest time, after a fault of this kind was lifted, until every
    /// change written before the lift showed in its object's status.
    pub recovery_s: f64,
}

/// Summarizes the faults by kind, with the latencies of the writes made
/// during each.
pub fn by_kind(records: &[Record], latencies: &[Latency]) -> Vec<KindSummary> {
    let mut out = Vec::new();
    for kind in FaultKind::ALL {
        let mine: Vec<&Record> = records.iter().filter(|r| r.kind == kind).collect();
        if mine.is_empty() {
            continue;
        }
        let mut during = Vec::new();
        let mut recovery: f64 = 0.0;
        for record in &mine {
            during.extend(
                latencies
                    .iter()
                    .filter(|l| l.sent >= record.start && l.sent <= record.end)
                    .map(Latency::seconds),
            );
            // Every change written before the lift, still pending at it.
            for l in latencies.iter().filter(|l| l.sent <= record.end) {
                let after = l
                    .observed
                    .duration_since(record.end)
                    .unwrap_or_default()
                    .as_secs_f64();
                recovery = recovery.max(after);
            }
        }
        out.push(KindSummary {
            kind,
            count: mine.len(),
            errors: mine.iter().filter(|r| r.error.is_some()).count(),
            seconds: mine.iter().map(|r| secs(r.start, r.end)).sum(),
            during: Spread::of(during),
            recovery_s: recovery,
        });
    }
    out
}

fn secs(from: SystemTime, to: SystemTime) -> f64 {
    to.duration_since(from).unwrap_or_default().as_secs_f64()
}

/// The figures of one replica.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReplicaSummary {
    /// Its index.
    pub index: usize,
    /// Processes it ran as (the first start included).
    pub starts: u32,
    /// Times it was found exited without the harness stopping it.
    pub crashes: u32,
    /// RSS, MiB: when the storm began (all objects converged), largest, last.
    pub rss_mib: [f64; 3],
    /// Largest count of open file descriptors.
    pub fds_max: usize,
    /// Largest count of threads.
    pub threads_max: usize,
    /// Largest count of reconciles running at once.
    pub running_max: f64,
    /// Reconciles over every process it ran as.
    pub reconciles: f64,
    /// Reconcile time p50 and p99, seconds (histogram bucket bounds).
    pub reconcile_p50_p99: [Option<f64>; 2],
    /// Writes per second to the API server (from the audit log, 10 s
    /// windows over the storm): mean and largest window.
    pub writes_per_s: [f64; 2],
    /// Requests answered 429 per second in the worst 10 s window.
    pub throttled_per_s_max: f64,
    /// RSS slope over the last 40 minutes, MiB per hour (runs of 45
    /// minutes or more without restarts in that window).
    pub rss_slope_mib_per_h: Option<f64>,
}

/// Sums a counter over samples, across the restarts that reset it.
fn counter_total(samples: &[Sample], value: impl Fn(&Sample) -> f64) -> f64 {
    let mut total = 0.0;
    let mut last = 0.0;
    for s in samples {
        let v = value(s);
        total += if v >= last { v - last } else { v };
        last = v;
    }
    total
}

/// Least-squares slope of (t seconds, MiB) in MiB per hour.
pub fn slope_per_hour(points: &[(f64, f64)]) -> Option<f64> {
    if points.len() < 3 {
        return None;
    }
    let n = points.len() as f64;
    let mean_t = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_m = points.iter().map(|p| p.1).sum::<f64>() / n;
    let cov: f64 = points.iter().map(|p| (p.0 - mean_t) * (p.1 - mean_m)).sum();
    let var: f64 = points.iter().map(|p| (p.0 - mean_t).powi(2)).sum();
    (var > 0.0).then(|| cov / var * 3600.0)
}

/// Writes per second between `from` and `to`: the mean, and the largest 10 s window.
fn rates(writes: &[&Write], from: SystemTime, to: SystemTime) -> [f64; 2] {
    let span = secs(from, to).max(1.0);
    let mut windows: BTreeMap<u64, usize> = BTreeMap::new();
    let mut within = 0usize;
    for w in writes {
        if w.received >= from && w.received <= to {
            within += 1;
            *windows
                .entry((secs(from, w.received) / 10.0) as u64)
                .or_default() += 1;
        }
    }
    let max = windows.values().copied().max().unwrap_or(0) as f64 / 10.0;
    // The mean over the same span as the windows (the storm), not the run.
    [within as f64 / span, max]
}

/// The summary of `replica`, its writes being those from `source`.
pub fn replica_summary(
    replica: &Replica,
    crashes: u32,
    writes: &[Write],
    source: &str,
    storm: (SystemTime, SystemTime),
    storm_t0: f64,
) -> ReplicaSummary {
    let samples = &replica.samples;
    let rss: Vec<f64> = samples.iter().map(|s| s.rss_mib).collect();
    let mine: Vec<&Write> = writes
        .iter()
        .filter(|w| w.source == source && w.resource != "leases" && w.code != 429)
        .collect();
    let throttled: Vec<&Write> = writes
        .iter()
        .filter(|w| w.source == source && w.code == 429)
        .collect();
    let end_t = samples.last().map(|s| s.t).unwrap_or(0.0);
    let window: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.t >= end_t - 2400.0)
        .map(|s| (s.t, s.rss_mib))
        .collect();
    let span = window.first().map(|w| end_t - w.0).unwrap_or(0.0);
    // A restart inside the window resets RSS: no slope then.
    let restarted = window.windows(2).any(|w| w[1].1 < w[0].1 * 0.5);
    ReplicaSummary {
        index: replica.index,
        starts: replica.starts,
        crashes,
        rss_mib: [
            samples
                .iter()
                .find(|s| s.t >= storm_t0)
                .map_or(0.0, |s| s.rss_mib),
            rss.iter().copied().fold(0.0, f64::max),
            rss.last().copied().unwrap_or(0.0),
        ],
        fds_max: samples.iter().map(|s| s.fds).max().unwrap_or(0),
        threads_max: samples.iter().map(|s| s.threads).max().unwrap_or(0),
        running_max: samples.iter().map(|s| s.running).fold(0.0, f64::max),
        reconciles: counter_total(samples, |s| s.reconciles),
        reconcile_p50_p99: [
            quantile(&replica.histograms, 0.5),
            quantile(&replica.histograms, 0.99),
        ],
        writes_per_s: rates(&mine, storm.0, storm.1),
        throttled_per_s_max: rates(&throttled, storm.0, storm.1)[1],
        rss_slope_mib_per_h: if span >= 2300.0 && !restarted {
            slope_per_hour(&window)
        } else {
            None
        },
    }
}

/// One invariant's verdict.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Invariant {
    /// Its name.
    pub name: &'static str,
    /// Whether it held.
    pub held: bool,
    /// The figures behind the verdict.
    pub figure: String,
}

/// The whole report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The command line's settings, for reproducing the run.
    pub settings: serde_json::Value,
    /// The seed.
    pub seed: u64,
    /// `/proc/loadavg` at the end.
    pub load: String,
    /// Seconds until the first N objects converged.
    pub initial_convergence_s: f64,
    /// Seconds from the end of the storm until everything converged (None: not within the timeout).
    pub final_convergence_s: Option<f64>,
    /// The verdicts.
    pub invariants: Vec<Invariant>,
    /// By fault kind.
    pub kinds: Vec<KindSummary>,
    /// Every fault.
    pub faults: Vec<Record>,
    /// Write-to-status latency of every change during the storm.
    pub latency: Spread,
    /// The churn.
    pub churn: serde_json::Value,
    /// The final state.
    pub final_state: FinalState,
    /// Replica writes judged against the terms.
    pub stale: StaleWrites,
    /// Fencing tokens that went backwards.
    pub regressions: Vec<TokenRegression>,
    /// Shard Lease changes the harness's watch skipped.
    pub skipped_terms: usize,
    /// Terms per shard.
    pub terms_per_shard: BTreeMap<usize, usize>,
    /// Per replica.
    pub replicas: Vec<ReplicaSummary>,
    /// Unmet expectations over time: (seconds into the run, count, age of the oldest in s).
    pub backlog: Vec<(f64, usize, f64)>,
    /// Every replica's samples.
    pub samples: Vec<Vec<Sample>>,
}

impl Report {
    /// Whether every invariant held.
    pub fn held(&self) -> bool {
        self.invariants.iter().all(|i| i.held)
    }

    /// The Markdown tables.
    pub fn markdown(&self) -> String {
        let mut md = String::new();
        let s = &self.settings;
        let _ = writeln!(
            md,
            "# Chaos run: {} objects, {} replicas, {} shards, {} backend, seed {}\n",
            s["objects"], s["replicas"], s["shards"], s["backend"], self.seed
        );
        let _ = writeln!(
            md,
            "Storm {} s with {} changes/s; leases {}; load average at the end {}.\n",
            s["storm_s"], s["churn"], s["lease"], self.load
        );
        let _ = writeln!(
            md,
            "## Invariants\n\n| invariant | held | figures |\n|---|---|---|"
        );
        for i in &self.invariants {
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                i.name,
                if i.held { "yes" } else { "**NO**" },
                i.figure
            );
        }
        let _ = writeln!(
            md,
            "\nInitial convergence of the {} objects: {:.1} s. After the storm: {}.\n",
            s["objects"],
            self.initial_convergence_s,
            self.final_convergence_s
                .map(|t| format!("converged {t:.1} s after the last fault was lifted"))
                .unwrap_or_else(|| "**not converged within the timeout**".to_owned())
        );
        let _ = writeln!(
            md,
            "## By fault kind\n\nLatency: from a change's write to its status showing the generation, for changes made while a fault of the kind was in effect. Recovery: the longest time after such a fault was lifted until every change written before the lift showed (a fault that follows within that time adds to it). The harness's own writes fail during 503/429 bursts and restarts, so those rows have few changes of their own.\n\n| fault | times | errors | total s | changes | p50 s | p99 s | max s | recovery s |\n|---|---|---|---|---|---|---|---|---|"
        );
        for k in &self.kinds {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0} | {} | {:.2} | {:.2} | {:.2} | {:.1} |",
                k.kind.name(),
                k.count,
                k.errors,
                k.seconds,
                k.during.n,
                k.during.p50,
                k.during.p99,
                k.during.max,
                k.recovery_s
            );
        }
        let l = &self.latency;
        let _ = writeln!(
            md,
            "| (whole storm) | | | | {} | {:.2} | {:.2} | {:.2} | |",
            l.n, l.p50, l.p99, l.max
        );
        let _ = writeln!(
            md,
            "\n## Replicas\n\n| replica | starts | crashes | RSS MiB storm start/peak/last | fds max | threads max | running max | reconciles | reconcile p50/p99 s | writes/s mean/max | 429/s max | RSS slope MiB/h |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
        );
        for r in &self.replicas {
            let q = |v: Option<f64>| v.map(|v| format!("{v}")).unwrap_or_else(|| "-".into());
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.0}/{:.0}/{:.0} | {} | {} | {:.0} | {:.0} | {}/{} | {:.1}/{:.1} | {:.1} | {} |",
                r.index,
                r.starts,
                r.crashes,
                r.rss_mib[0],
                r.rss_mib[1],
                r.rss_mib[2],
                r.fds_max,
                r.threads_max,
                r.running_max,
                r.reconciles,
                q(r.reconcile_p50_p99[0]),
                q(r.reconcile_p50_p99[1]),
                r.writes_per_s[0],
                r.writes_per_s[1],
                r.throttled_per_s_max,
                r.rss_slope_mib_per_h
                    .map(|v| format!("{v:+.1}"))
                    .unwrap_or_else(|| "-".into())
            );
        }
        let backlog_max = self.backlog.iter().map(|b| b.1).max().unwrap_or(0);
        let oldest = self.backlog.iter().map(|b| b.2).fold(0.0, f64::max);
        let _ = writeln!(
            md,
            "\nBacklog (changes written but not yet in status): largest {backlog_max}, oldest {oldest:.1} s."
        );
        let _ = writeln!(
            md,
            "\n## Faults\n\n| at | fault | what | error |\n|---|---|---|---|"
        );
        let t0 = self.faults.first().map(|f| f.start);
        for f in &self.faults {
            let at = t0.map(|t| secs(t, f.start)).unwrap_or(0.0);
            let _ = writeln!(
                md,
                "| {at:.0} s | {} | {} | {} |",
                f.kind.name(),
                f.detail,
                f.error.as_deref().unwrap_or("")
            );
        }
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_and_slopes() {
        let s = Spread::of((1..=100).map(f64::from).collect());
        assert_eq!((s.n, s.p50, s.max), (100, 51.0, 100.0));
        let flat: Vec<(f64, f64)> = (0..100).map(|i| (f64::from(i) * 10.0, 50.0)).collect();
        assert_eq!(slope_per_hour(&flat), Some(0.0));
        let growing: Vec<(f64, f64)> = (0..100)
            .map(|i| (f64::from(i) * 36.0, f64::from(i)))
            .collect();
        assert!((slope_per_hour(&growing).unwrap() - 100.0).abs() < 1e-6);
    }

    #[test]
    fn counters_add_up_across_restarts() {
        let samples: Vec<Sample> = [5.0, 10.0, 3.0, 7.0]
            .iter()
            .map(|v| Sample {
                reconciles: *v,
                ..Sample::default()
            })
            .collect();
        assert_eq!(counter_total(&samples, |s| s.reconciles), 17.0);
    }
}
