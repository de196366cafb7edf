//! Executes the fault schedule against the rig: one fault at a time, each
//! lifted before the next, every one recorded with when it started and
//! ended and what it did.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use tokio::sync::Mutex;

use bench_scale::process::resource;

use crate::api::ApiServer;
use crate::faults::{FaultKind, Planned};
use crate::observe::{Shared, system_time};
use crate::proxy::{Link, Proxy};
use crate::replicas::{Replica, ReplicaConfig};

/// A plugin version the storm swaps to and from.
#[derive(Debug, Clone)]
pub struct Version {
    /// Its file.
    pub path: std::path::PathBuf,
    /// Its semver.
    pub version: String,
}

/// Everything a fault acts on.
pub struct Rig {
    /// The API server.
    pub api: ApiServer,
    /// The harness's client (direct, no proxy).
    pub client: Client,
    /// One per replica.
    pub proxies: Vec<Proxy>,
    /// The replicas (shared with the sampler).
    pub replicas: Arc<Mutex<Vec<Replica>>>,
    /// How replicas run.
    pub config: ReplicaConfig,
    /// Observations (for the current shard holders).
    pub shared: Shared,
    /// The two plugin versions; `serving` indexes the one serving.
    pub versions: [Version; 2],
    /// Which of `versions` serves.
    pub serving: usize,
}

/// A fault as it happened.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Record {
    /// Its kind.
    pub kind: FaultKind,
    /// What it hit and how, for people.
    pub detail: String,
    /// When it started.
    #[serde(with = "system_time")]
    pub start: SystemTime,
    /// When it was lifted (the replica started again, the link restored…).
    #[serde(with = "system_time")]
    pub end: SystemTime,
    /// What went wrong injecting or lifting it (the harness's problem, or
    /// the system's: a canary that never promoted).
    pub error: Option<String>,
}

/// The name of the WasmPlugin the replicas serve.
pub const PLUGIN: &str = "webapp";

/// The WasmPlugin's API.
pub fn wasm_plugins(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource("wasm-operator.dev", "v1alpha1", "WasmPlugin", "wasmplugins"),
    )
}

impl Rig {
    /// The replica holding `shard` as last seen, else `fallback`.
    fn holder(&self, shard: usize, fallback: usize) -> usize {
        self.shared
            .lock()
            .terms
            .get(&shard)
            .and_then(|t| t.last())
            .and_then(|t| t.replica)
            .filter(|r| *r < self.proxies.len())
            .unwrap_or(fallback)
    }

    /// Injects `fault`, waits its length, lifts it.
    pub async fn inject(&mut self, fault: &Planned) -> Record {
        let start = SystemTime::now();
        let result = self.run(fault).await;
        let (detail, error) = match result {
            Ok(detail) => (detail, None),
            Err((detail, e)) => (detail, Some(format!("{e:#}"))),
        };
        Record {
            kind: fault.kind,
            detail,
            start,
            end: SystemTime::now(),
            error,
        }
    }

    async fn run(&mut self, fault: &Planned) -> Result<String, (String, anyhow::Error)> {
        let length = fault.length;
        let r = fault.replica;
        match fault.kind {
            FaultKind::Kill => {
                self.replicas.lock().await[r].kill().await;
                tokio::time::sleep(length).await;
                let detail = format!("replica {r} killed, down {:.1} s", length.as_secs_f64());
                self.replicas.lock().await[r]
                    .start(&self.config)
                    .map_err(|e| (detail.clone(), e))?;
                Ok(detail)
            }
            FaultKind::Term => {
                let began = Instant::now();
                self.replicas.lock().await[r]
                    .terminate(Duration::from_secs(30))
                    .await;
                let drained = began.elapsed();
                tokio::time::sleep(length).await;
                let detail = format!(
                    "replica {r} terminated (exited after {:.1} s), down {:.1} s",
                    drained.as_secs_f64(),
                    length.as_secs_f64()
                );
                self.replicas.lock().await[r]
                    .start(&self.config)
                    .map_err(|e| (detail.clone(), e))?;
                Ok(detail)
            }
            FaultKind::PartitionLeader | FaultKind::PartitionShardHolder => {
                let shard = if fault.kind == FaultKind::PartitionLeader {
                    0
                } else {
                    usize::try_from(fault.param).unwrap_or(1)
                };
                let holder = self.holder(shard, r);
                self.proxies[holder].set(Link::Cut);
                tokio::time::sleep(length).await;
                self.proxies[holder].set(Link::Open);
                Ok(format!(
                    "replica {holder} (holder of shard {shard}) cut off {:.1} s",
                    length.as_secs_f64()
                ))
            }
            FaultKind::SlowLink => {
                let latency = Duration::from_millis(fault.param);
                self.proxies[r].set(Link::Slow(latency));
                tokio::time::sleep(length).await;
                self.proxies[r].set(Link::Open);
                Ok(format!(
                    "replica {r}'s link +{} ms for {:.1} s",
                    fault.param,
                    length.as_secs_f64()
                ))
            }
            FaultKind::ApiLatency => {
                let detail = format!(
                    "+{} ms on every request for {:.1} s",
                    fault.param,
                    length.as_secs_f64()
                );
                if self.api.is_dev() {
                    self.dev_fault("latency", json!({"millis": fault.param}), &detail)
                        .await?;
                    tokio::time::sleep(length).await;
                    self.dev_fault("latency", json!({"millis": 0}), &detail)
                        .await?;
                } else {
                    for proxy in &self.proxies {
                        proxy.set(Link::Slow(Duration::from_millis(fault.param)));
                    }
                    tokio::time::sleep(length).await;
                    for proxy in &self.proxies {
                        proxy.set(Link::Open);
                    }
                }
                Ok(detail)
            }
            FaultKind::Api5xx | FaultKind::Api429 => {
                let status = if fault.kind == FaultKind::Api5xx {
                    503
                } else {
                    429
                };
                let detail = format!(
                    "every request answered {status} for {:.1} s",
                    length.as_secs_f64()
                );
                self.dev_fault(
                    "fail-next",
                    json!({"pathPrefix": "/", "count": 1_000_000, "status": status}),
                    &detail,
                )
                .await?;
                tokio::time::sleep(length).await;
                self.dev_fault("fail-next", json!({"pathPrefix": "/", "count": 0}), &detail)
                    .await?;
                Ok(detail)
            }
            FaultKind::ApiRestart => {
                let what = if self.api.is_dev() {
                    "devcluster killed and started on its data"
                } else {
                    "kube-apiserver restarted (SIGUSR1 to realcluster up)"
                };
                let took = self
                    .api
                    .restart(&self.client)
                    .await
                    .map_err(|e| (what.to_owned(), e))?;
                Ok(format!(
                    "{what}; answering again after {:.1} s",
                    took.as_secs_f64()
                ))
            }
            FaultKind::HotSwap => {
                let next = 1 - self.serving;
                let to = self.versions[next].clone();
                let from = self.versions[self.serving].version.clone();
                let detail = format!("spec.source {from} → {}", to.version);
                let patch = json!({"spec": {"source": {"file": {"path": to.path}}}});
                self.patch_plugin(&patch)
                    .await
                    .map_err(|e| (detail.clone(), e))?;
                let took = self
                    .wait_serving(&to.version, Duration::from_secs(60))
                    .await
                    .map_err(|e| (detail.clone(), e))?;
                self.serving = next;
                Ok(format!(
                    "{detail}, serving after {:.1} s",
                    took.as_secs_f64()
                ))
            }
            FaultKind::CanaryPromotion => {
                let result = self.canary().await;
                if result.is_err() {
                    // Leave no canary behind: the next swap starts clean.
                    let _ = self.patch_plugin(&json!({"spec": {"canary": null}})).await;
                }
                result
            }
        }
    }

    async fn dev_fault(
        &self,
        action: &str,
        body: serde_json::Value,
        detail: &str,
    ) -> Result<(), (String, anyhow::Error)> {
        self.api
            .fault(&self.client, action, body)
            .await
            .map_err(|e| (detail.to_owned(), e))
    }

    async fn patch_plugin(&self, patch: &serde_json::Value) -> anyhow::Result<()> {
        wasm_plugins(&self.client)
            .patch(PLUGIN, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// Waits until the WasmPlugin's `status.version` is `version`.
    async fn wait_serving(&self, version: &str, timeout: Duration) -> anyhow::Result<Duration> {
        self.wait_status(timeout, |wp| wp.data["status"]["version"] == version)
            .await
            .map_err(|e| e.context(format!("waiting for version {version} to serve")))
    }

    async fn wait_status(
        &self,
        timeout: Duration,
        done: impl Fn(&DynamicObject) -> bool,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let mut last = None;
        while started.elapsed() < timeout {
            match wasm_plugins(&self.client).get(PLUGIN).await {
                Ok(wp) if done(&wp) => return Ok(started.elapsed()),
                Ok(wp) => last = Some(wp.data["status"].clone()),
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        anyhow::bail!(
            "not within {} s; the WasmPlugin's status: {}",
            timeout.as_secs(),
            last.map(|s| s.to_string()).unwrap_or_default()
        )
    }

    /// A Split canary of the other version at 50 %, promoted by hand once it
    /// serves, then moved into `spec.source`.
    async fn canary(&mut self) -> Result<String, (String, anyhow::Error)> {
        let next = 1 - self.serving;
        let to = self.versions[next].clone();
        let from = self.versions[self.serving].version.clone();
        let detail = format!(
            "Split canary {from} → {} at 50 %, promoted by hand",
            to.version
        );
        let fail = |e: anyhow::Error| (detail.clone(), e);
        let canary = json!({"spec": {"canary": {
            "source": {"file": {"path": to.path}},
            "mode": "Split",
            "weight": 50,
            "promotion": "Manual",
            "skipDryRun": true,
            "rolloutRate": 200,
            // The storm is what is tested, not the candidate: its latency
            // under a loaded machine must not roll it back.
            "analysis": {"interval": "1s", "minCalls": 1, "maxLatencyRatio": 1000, "maxFailureRatio": 1},
        }}});
        self.patch_plugin(&canary).await.map_err(fail)?;
        let serving_share = self
            .wait_status(Duration::from_secs(60), |wp| {
                matches!(
                    wp.data["status"]["canary"]["phase"].as_str(),
                    Some("Progressing" | "Paused" | "RolledBack" | "Failed")
                )
            })
            .await
            .map_err(|e| fail(e.context("waiting for the canary to serve its share")))?;
        let phase = wasm_plugins(&self.client)
            .get(PLUGIN)
            .await
            .map(|wp| wp.data["status"]["canary"]["phase"].clone())
            .unwrap_or_default();
        if matches!(phase.as_str(), Some("RolledBack" | "Failed")) {
            return Err(fail(anyhow::anyhow!(
                "the canary ended {phase} before its promotion"
            )));
        }
        // Let it serve its share under the storm for a moment.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let promote =
            json!({"metadata": {"annotations": {"wasm-operator.dev/canary-action": "promote"}}});
        self.patch_plugin(&promote).await.map_err(fail)?;
        let promoted = self
            .wait_serving(&to.version, Duration::from_secs(60))
            .await
            .map_err(fail)?;
        let settle = json!({"spec": {"source": {"file": {"path": to.path}}, "canary": null}});
        self.patch_plugin(&settle).await.map_err(fail)?;
        self.serving = next;
        Ok(format!(
            "{detail}: serving its share after {:.1} s, promoted {:.1} s after the annotation",
            serving_share.as_secs_f64(),
            promoted.as_secs_f64()
        ))
    }

    /// Lifts whatever may still be in effect (after the storm, or a fault
    /// that failed half-way): links open, no latency or failures, every
    /// replica running.
    ///
    /// # Errors
    /// When a replica cannot start.
    pub async fn restore(&mut self) -> anyhow::Result<()> {
        for proxy in &self.proxies {
            proxy.set(Link::Open);
        }
        if self.api.is_dev() {
            let _ = self
                .api
                .fault(&self.client, "latency", json!({"millis": 0}))
                .await;
            let _ = self
                .api
                .fault(
                    &self.client,
                    "fail-next",
                    json!({"pathPrefix": "/", "count": 0}),
                )
                .await;
        }
        let mut replicas = self.replicas.lock().await;
        for replica in replicas.iter_mut() {
            if !replica.running() {
                replica.start(&self.config)?;
            }
        }
        Ok(())
    }
}
