//! The host replicas under test: each a `wasm-operator run --leader-elect
//! --shards N` process talking to the API server through its own proxy,
//! started, killed, terminated and restarted by the storm, and sampled
//! (RSS, file descriptors, threads, its own metrics) while it runs.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use bench_scale::process::{Proc, spawn};

/// How every replica runs.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// The `wasm-operator` binary.
    pub binary: PathBuf,
    /// Shards.
    pub shards: usize,
    /// The namespace of the Leases.
    pub lease_namespace: String,
    /// `--lease-duration`, `--renew-deadline`, `--retry-period`.
    pub timings: [String; 3],
    /// Shared compile cache.
    pub cache_dir: PathBuf,
    /// Extra `RUST_LOG`-style verbosity (`-v N`), if any.
    pub verbosity: Option<u8>,
}

/// One sample of a replica.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Sample {
    /// Seconds since the storm's harness started.
    pub t: f64,
    /// Resident set, MiB.
    pub rss_mib: f64,
    /// Open file descriptors.
    pub fds: usize,
    /// OS threads.
    pub threads: usize,
    /// Reconciles running (`workqueue_depth`).
    pub running: f64,
    /// Reconciles so far in this process (`controller_runtime_reconcile_total`).
    pub reconciles: f64,
    /// Plan writes so far in this process (`wasm_operator_writes_total`).
    pub writes: f64,
    /// Shards held (`wasm_operator_shard_owned`).
    pub shards: f64,
}

/// The reconcile-time histogram of one process: cumulative counts by upper bound.
pub type Buckets = Vec<(f64, f64)>;

/// A replica.
pub struct Replica {
    /// Its index (its identity is `chaos-r<index>_…`).
    pub index: usize,
    proc_: Option<Proc>,
    kubeconfig: PathBuf,
    metrics_port: u16,
    log: PathBuf,
    /// Starts so far (the first included).
    pub starts: u32,
    /// Samples while it ran.
    pub samples: Vec<Sample>,
    /// The last reconcile histogram of each process it ran as.
    pub histograms: Vec<Buckets>,
}

impl Replica {
    /// A replica (not started) reaching the API server through `kubeconfig`.
    ///
    /// # Errors
    /// When no free port is found for its metrics.
    pub fn new(index: usize, kubeconfig: PathBuf, logs: &Path) -> anyhow::Result<Replica> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        Ok(Replica {
            index,
            proc_: None,
            kubeconfig,
            metrics_port: port,
            log: logs.join(format!("replica-{index}.log")),
            starts: 0,
            samples: Vec::new(),
            histograms: vec![Vec::new()],
        })
    }

    /// Whether its process runs.
    pub fn running(&mut self) -> bool {
        self.proc_.as_mut().is_some_and(|p| p.check_alive().is_ok())
    }

    /// Whether the harness started a process it has not stopped since.
    pub fn has_process(&self) -> bool {
        self.proc_.is_some()
    }

    /// Starts its process (a new identity: a restarted pod).
    ///
    /// # Errors
    /// When the process cannot start.
    pub fn start(&mut self, config: &ReplicaConfig) -> anyhow::Result<()> {
        let mut cmd = Command::new(&config.binary);
        cmd.arg("run")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--leader-elect", "--shards", &config.shards.to_string()])
            .args(["--leader-election-namespace", &config.lease_namespace])
            .args(["--leader-election-id", crate::LEASE_ID])
            .args(["--lease-duration", &config.timings[0]])
            .args(["--renew-deadline", &config.timings[1]])
            .args(["--retry-period", &config.timings[2]])
            .args([
                "--metrics-addr",
                &format!("127.0.0.1:{}", self.metrics_port),
            ])
            .arg("--cache-dir")
            .arg(&config.cache_dir)
            .env("POD_NAME", format!("chaos-r{}", self.index));
        if let Some(v) = config.verbosity {
            cmd.args(["-v", &v.to_string()]);
        }
        let what = format!("replica {}", self.index);
        // Appended: the log keeps every process the replica ran as.
        if let Ok(mut log) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
        {
            use std::io::Write as _;
            let _ = writeln!(
                log,
                "=== start {} at {}",
                self.starts + 1,
                crate::observe::system_time::format(&SystemTime::now())
            );
        }
        self.proc_ = Some(spawn(cmd, &what, &self.log)?);
        self.starts += 1;
        if self.histograms.last().is_some_and(|h| !h.is_empty()) {
            self.histograms.push(Vec::new());
        }
        Ok(())
    }

    /// `kill -9`.
    pub async fn kill(&mut self) {
        if let Some(p) = self.proc_.take() {
            p.stop().await;
        }
    }

    /// SIGTERM, then up to `grace` to exit (killed after).
    pub async fn terminate(&mut self, grace: Duration) {
        let Some(mut p) = self.proc_.take() else {
            return;
        };
        if let Ok(pid) = p.pid() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
            if tokio::time::timeout(grace, p.child.wait()).await.is_ok() {
                return;
            }
        }
        p.stop().await;
    }

    /// Samples the running process (nothing when it is not running).
    pub async fn sample(&mut self, t: f64) {
        let Some(pid) = self.proc_.as_ref().and_then(|p| p.pid().ok()) else {
            return;
        };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| -> f64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|d| d.count())
            .unwrap_or(0);
        let metrics = scrape(self.metrics_port).await.unwrap_or_default();
        let sum = |name: &str| -> f64 {
            metrics
                .lines()
                .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        self.samples.push(Sample {
            t,
            rss_mib: field("VmRSS:") / 1024.0,
            fds,
            threads: field("Threads:") as usize,
            running: sum("workqueue_depth"),
            reconciles: sum("controller_runtime_reconcile_total"),
            writes: sum("wasm_operator_writes_total"),
            shards: sum("wasm_operator_shard_owned"),
        });
        let buckets = histogram(&metrics, "controller_runtime_reconcile_time_seconds_bucket");
        if !buckets.is_empty()
            && let Some(last) = self.histograms.last_mut()
        {
            *last = buckets;
        }
    }
}

/// The text of `/metrics` on 127.0.0.1:`port`.
async fn scrape(port: u16) -> anyhow::Result<String> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await?;
        anyhow::Ok(text)
    };
    let text = tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .context("metrics did not answer within 5 s")??;
    Ok(text
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default())
}

/// A histogram's cumulative buckets summed over its label sets.
fn histogram(metrics: &str, name: &str) -> Buckets {
    let mut by_le: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for line in metrics.lines().filter(|l| l.starts_with(name)) {
        let Some(le) = line
            .split("le=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        let count: f64 = line
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        let entry = by_le.entry(le.to_owned()).or_insert((bound, 0.0));
        entry.1 += count;
    }
    let mut buckets: Buckets = by_le.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    buckets
}

/// The upper bound of the bucket holding quantile `q` of the merged
/// histograms (`None` when empty).
pub fn quantile(histograms: &[Buckets], q: f64) -> Option<f64> {
    let mut merged: std::collections::BTreeMap<u64, (f64, f64)> = Default::default();
    for h in histograms {
        for (bound, count) in h {
            let entry = merged.entry(bound.to_bits()).or_insert((*bound, 0.0));
            entry.1 += count;
        }
    }
    let mut buckets: Vec<(f64, f64)> = merged.into_values().collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    buckets
        .iter()
        .find(|(_, count)| *count >= q * total)
        .map(|(bound, _)| *bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_sum_over_labels_and_quantiles_take_the_bucket_bound() {
        let text = "x_bucket{controller=\"a\",le=\"0.1\"} 5\nx_bucket{controller=\"b\",le=\"0.1\"} 3\n\
                    x_bucket{controller=\"a\",le=\"1\"} 9\nx_bucket{controller=\"b\",le=\"1\"} 5\n\
                    x_bucket{controller=\"a\",le=\"+Inf\"} 10\nx_bucket{controller=\"b\",le=\"+Inf\"} 10\n";
        let h = histogram(text, "x_bucket");
        assert_eq!(h, vec![(0.1, 8.0), (1.0, 14.0), (f64::INFINITY, 20.0)]);
        assert_eq!(quantile(std::slice::from_ref(&h), 0.4), Some(0.1));
        assert_eq!(quantile(std::slice::from_ref(&h), 0.5), Some(1.0));
        assert_eq!(quantile(&[h], 0.99), Some(f64::INFINITY));
    }
}
