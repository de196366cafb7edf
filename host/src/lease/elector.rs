//! The elector: one task per replica that reads the Lease every retry
//! period, decides ([`super::decide`]) and writes the decision with
//! optimistic concurrency (a `PUT` carrying the `resourceVersion` it read,
//! so two replicas never both win a race), then opens, extends or closes
//! the [`WriteGate`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Resource, ResourceExt};
use semver::Version;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::decision::{
    Candidate, HANDOFF_ANNOTATION, HOST_VERSION_ANNOTATION, HandoffRequest, LeaseRecord, Step,
    decide,
};
use super::gate::WriteGate;
use crate::contract::HostObject;
use crate::telemetry::Metrics;

/// The reporting controller of the Lease's events.
pub const REPORTER: &str = "wasm-operator/leader-election";

/// How leader election runs: client-go's settings and this replica's
/// identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace.
    pub namespace: String,
    /// The Lease's name.
    pub name: String,
    /// This replica's holder identity (unique per process).
    pub identity: String,
    /// This host's version, recorded on the Lease and compared for the
    /// handoff.
    pub version: Version,
    /// How long a Lease nobody renews stays held (client-go: 15 s).
    pub lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal
    /// (client-go: 10 s); shorter than the lease duration, so it stops
    /// before anyone else may take over.
    pub renew_deadline: Duration,
    /// The pause between tries (client-go: 2 s).
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// The settings with client-go's defaults for `namespace`/`name`.
    pub fn new(namespace: &str, name: &str, identity: String, version: Version) -> Self {
        LeaderElectionConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity,
            version,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// `namespace/name` of the Lease, for logs.
    pub fn lease(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// Checks client-go's ordering: lease duration > renew deadline >
    /// retry period > 0.
    ///
    /// # Errors
    ///
    /// [`super::LeaseError::Settings`] naming the flags to fix.
    pub fn validate(&self) -> Result<(), super::LeaseError> {
        if self.retry_period.is_zero()
            || self.renew_deadline <= self.retry_period
            || self.lease_duration <= self.renew_deadline
        {
            return Err(super::LeaseError::Settings {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            });
        }
        Ok(())
    }
}

/// What the elector last saw, for `/readyz?verbose`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectionStatus {
    /// The holder last observed (`None`: released or not read yet).
    pub holder: Option<String>,
    /// The holder's host version last observed.
    pub holder_version: Option<String>,
    /// A Lease at the host's name that the host did not create: why this
    /// replica neither takes nor waits on it, and what to do.
    pub squatter: Option<String>,
}

/// A running elector. [`LeaderElector::release`] stops it and gives the
/// Lease up; dropping it stops it without releasing (the Lease then
/// expires).
pub struct LeaderElector {
    config: LeaderElectionConfig,
    cancel: CancellationToken,
    task: Option<JoinHandle<Elector>>,
    status: Arc<Mutex<ElectionStatus>>,
}

impl std::fmt::Debug for LeaderElector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderElector")
            .field("lease", &self.config.lease())
            .field("identity", &self.config.identity)
            .finish_non_exhaustive()
    }
}

impl LeaderElector {
    /// Starts electing: the first try runs at once.
    pub fn start(
        client: kube::Client,
        config: LeaderElectionConfig,
        gate: WriteGate,
        metrics: Metrics,
    ) -> LeaderElector {
        LeaderElector::start_with(client, config, gate, metrics, None)
    }

    /// Starts electing for one shard's Lease: like
    /// [`LeaderElector::start`], but the Lease is only taken while `want`
    /// is set, and given up cleanly (no new work, reconciles in flight
    /// finish, then the release) when it is cleared while held.
    pub fn start_shard(
        client: kube::Client,
        config: LeaderElectionConfig,
        gate: WriteGate,
        metrics: Metrics,
        shard: usize,
        want: Arc<AtomicBool>,
    ) -> LeaderElector {
        LeaderElector::start_with(client, config, gate, metrics, Some((shard, want)))
    }

    fn start_with(
        client: kube::Client,
        config: LeaderElectionConfig,
        gate: WriteGate,
        metrics: Metrics,
        shard: Option<(usize, Arc<AtomicBool>)>,
    ) -> LeaderElector {
        let status = Arc::new(Mutex::new(ElectionStatus::default()));
        let cancel = CancellationToken::new();
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.to_string(),
                instance: Some(config.identity.clone()),
            },
        );
        metrics.leader_status(&config.name, false);
        if let Some((index, _)) = &shard {
            metrics.shard_owned(*index, false);
        }
        let elector = Elector {
            shard,
            api: Api::namespaced(client, &config.namespace),
            me: Candidate {
                identity: config.identity.clone(),
                version: config.version.clone(),
                lease_duration: config.lease_duration,
            },
            config: config.clone(),
            gate,
            metrics,
            recorder,
            status: status.clone(),
            observed: None,
            last_renewed: None,
            drain_started: None,
            asked: false,
            squatter: None,
        };
        let task = tokio::spawn(elector.run(cancel.clone()));
        tracing::info!(
            lease = %config.lease(), identity = %config.identity, version = %config.version,
            lease_duration_ms = millis(config.lease_duration),
            renew_deadline_ms = millis(config.renew_deadline),
            retry_period_ms = millis(config.retry_period),
            "leader election started"
        );
        LeaderElector {
            config,
            cancel,
            task: Some(task),
            status,
        }
    }

    /// The settings it runs with.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    /// What it last saw of the Lease.
    pub fn status(&self) -> ElectionStatus {
        crate::util::lock(&self.status).clone()
    }

    /// A function reading what it last saw of the Lease (for the
    /// readiness checks, which outlive borrows of the elector).
    pub fn status_handle(&self) -> impl Fn() -> ElectionStatus + Send + Sync + 'static {
        let status = self.status.clone();
        move || crate::util::lock(&status).clone()
    }

    /// Stops electing and, when this replica holds the Lease, releases it
    /// (client-go's `ReleaseOnCancel`: holder cleared, duration 1 s) so a
    /// successor takes over within its retry period instead of waiting for
    /// expiry. The gate is closed first: nothing is written after this.
    pub async fn release(mut self) {
        self.cancel.cancel();
        let Some(task) = self.task.take() else {
            return;
        };
        match task.await {
            Ok(mut elector) => elector.release().await,
            Err(error) if error.is_panic() => {
                tracing::error!(%error, "the leader election task panicked; the Lease expires by itself");
            }
            Err(_) => {}
        }
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The Lease as last observed, and when this replica saw it change.
struct Observation {
    lease: Lease,
    record: LeaseRecord,
    changed_at: Instant,
}

struct Elector {
    /// For a shard's Lease: its index, and whether the shard plan wants
    /// this replica to hold it.
    shard: Option<(usize, Arc<AtomicBool>)>,
    api: Api<Lease>,
    me: Candidate,
    config: LeaderElectionConfig,
    gate: WriteGate,
    metrics: Metrics,
    recorder: Recorder,
    status: Arc<Mutex<ElectionStatus>>,
    observed: Option<Observation>,
    /// When the request of the last successful renewal started.
    last_renewed: Option<Instant>,
    /// When this leader started handing over.
    drain_started: Option<Instant>,
    /// A handoff request was written for the current holder.
    asked: bool,
    /// The Lease at this name was not created by the host: why.
    squatter: Option<String>,
}

/// The outcome of one try.
enum Outcome {
    /// This replica holds the Lease with `token`.
    Leading { token: u64 },
    /// Someone else holds it.
    Following,
    /// The leader handed over and released.
    Released,
    /// The Lease at the host's name was not created by the host (a
    /// squatter): neither taken nor waited on.
    Squatted { message: String },
}

fn record_of(lease: &Lease, default_duration: Duration) -> LeaseRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    let annotations = lease.annotations();
    LeaseRecord {
        holder: spec.holder_identity.filter(|h| !h.is_empty()),
        lease_duration: spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map_or(default_duration, Duration::from_secs),
        transitions: spec
            .lease_transitions
            .and_then(|t| u64::try_from(t).ok())
            .unwrap_or(0),
        holder_version: annotations
            .get(HOST_VERSION_ANNOTATION)
            .and_then(|v| Version::parse(v).ok()),
        handoff: annotations
            .get(HANDOFF_ANNOTATION)
            .and_then(|v| HandoffRequest::parse(v)),
    }
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

fn token_of(transitions: u64) -> i32 {
    i32::try_from(transitions).unwrap_or(i32::MAX)
}

impl Elector {
    async fn run(mut self, cancel: CancellationToken) -> Elector {
        loop {
            let started = Instant::now();
            let budget = self.try_budget(started);
            let attempt = tokio::select! {
                () = cancel.cancelled() => None,
                result = tokio::time::timeout(budget, self.try_once(started)) => Some(result),
            };
            let Some(attempt) = attempt else {
                return self;
            };
            match attempt {
                Ok(Ok(Outcome::Leading { token })) => self.leading(token, started).await,
                Ok(Ok(Outcome::Following)) => self.following().await,
                Ok(Ok(Outcome::Released)) => {}
                Ok(Ok(Outcome::Squatted { message })) => self.squatted(message).await,
                Ok(Err(error)) => self.failed(&error.to_string()).await,
                Err(_) => self.failed("the request timed out").await,
            }
            tokio::select! {
                () = cancel.cancelled() => return self,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    /// How long one try may take: half the renew deadline, and for a
    /// leader never past its renew deadline, so a hung API server cannot
    /// keep the loop from noticing (and reporting) the end of its term.
    /// The gate closes at the deadline by itself either way.
    fn try_budget(&self, now: Instant) -> Duration {
        let half = self.config.renew_deadline / 2;
        match self.last_renewed {
            Some(at) if self.gate.leadership().leading => half
                .min((at + self.config.renew_deadline).saturating_duration_since(now))
                .max(Duration::from_millis(1)),
            _ => half,
        }
    }

    fn publish_status(&self) {
        let status = ElectionStatus {
            holder: self.observed.as_ref().and_then(|o| o.record.holder.clone()),
            holder_version: self
                .observed
                .as_ref()
                .and_then(|o| o.record.holder_version.as_ref().map(ToString::to_string)),
            squatter: self.squatter.clone(),
        };
        *crate::util::lock(&self.status) = status;
    }

    /// Remembers `lease`; the clock of expiry restarts when it changed.
    fn observe(&mut self, lease: Lease) {
        let record = record_of(&lease, self.config.lease_duration);
        let changed = self.observed.as_ref().is_none_or(|o| {
            o.lease.resource_version() != lease.resource_version() || o.record != record
        });
        let changed_at = match &self.observed {
            Some(o) if !changed => o.changed_at,
            _ => Instant::now(),
        };
        self.observed = Some(Observation {
            lease,
            record,
            changed_at,
        });
        self.publish_status();
    }

    async fn try_once(&mut self, started: Instant) -> Result<Outcome, kube::Error> {
        let found = self.api.get_opt(&self.config.name).await?;
        if let Some(message) = self.squatter_at(found.as_ref()) {
            self.observed = None;
            return Ok(Outcome::Squatted { message });
        }
        if self.squatter.take().is_some() {
            tracing::info!(lease = %self.config.lease(), "the planted Lease is gone; electing again");
        }
        match found {
            Some(lease) => self.observe(lease),
            None => self.observed = None,
        }
        let unchanged_for = self
            .observed
            .as_ref()
            .map_or(Duration::ZERO, |o| o.changed_at.elapsed());
        let step = decide(
            &self.me,
            self.observed.as_ref().map(|o| &o.record),
            unchanged_for,
        );
        let step = match step {
            // A shard this replica should not hold: never taken, and
            // given up cleanly when held (as a handoff, to nobody).
            Step::Create | Step::Acquire { .. } | Step::RequestHandoff if !self.wanted() => {
                return Ok(Outcome::Following);
            }
            // Once begun, a give-up completes even if the plan changes its
            // mind: the shard is taken back at a later try.
            Step::Renew
                if !self.wanted() || (self.shard.is_some() && self.drain_started.is_some()) =>
            {
                return self.give_up(started).await;
            }
            step => step,
        };
        match step {
            Step::Create => {
                let lease = self.lease_for_me(None, 0);
                let created = self.api.create(&PostParams::default(), &lease).await?;
                self.observe(created);
                Ok(Outcome::Leading { token: 0 })
            }
            Step::Renew => {
                let token = self.observed.as_ref().map_or(0, |o| o.record.transitions);
                let renewed = self.write_mine(token, false).await?;
                self.observe(renewed);
                Ok(Outcome::Leading { token })
            }
            Step::Acquire { token } => {
                let acquired = self.write_mine(token, true).await?;
                self.observe(acquired);
                Ok(Outcome::Leading { token })
            }
            Step::RequestHandoff => {
                self.request_handoff().await?;
                Ok(Outcome::Following)
            }
            Step::HandOver { to } => self.hand_over(&to, started).await,
            Step::Wait { .. } => Ok(Outcome::Following),
        }
    }

    /// Which of the host's Leases this elector's is.
    fn role(&self) -> HostObject {
        if self.shard.is_some() {
            HostObject::ShardLease
        } else {
            HostObject::LeaderLease
        }
    }

    /// Why `found` (the Lease at this elector's name) is a squatter the host
    /// did not create, or `None` when it is the host's (or absent).
    fn squatter_at(&self, found: Option<&Lease>) -> Option<String> {
        let lease = found?;
        (!self.role().created_by_host(lease.metadata.labels.as_ref())).then(|| {
            self.role()
                .squatter_message("Lease", &self.config.namespace, &self.config.name)
        })
    }

    /// A squatter holds the host's Lease name: stop writing if leading,
    /// report it (once per squatter) and try again at the next retry.
    async fn squatted(&mut self, message: String) {
        if self.gate.leadership().leading {
            self.lose("the Lease was replaced by one the host did not create")
                .await;
        }
        if self.squatter.as_ref() != Some(&message) {
            tracing::error!(
                lease = %self.config.lease(), identity = %self.config.identity,
                "{message}; this replica does not lead until it is gone"
            );
            self.squatter = Some(message);
            self.publish_status();
        }
    }

    /// The Lease held by this replica with `transitions`, based on
    /// `current` (its metadata, resourceVersion included).
    fn lease_for_me(&self, current: Option<&Lease>, transitions: u64) -> Lease {
        let now = now_micro();
        let mut metadata = current.map_or_else(
            || ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(self.role().labels()),
                ..ObjectMeta::default()
            },
            |l| l.metadata.clone(),
        );
        let annotations = metadata.annotations.get_or_insert_with(BTreeMap::new);
        annotations.insert(
            HOST_VERSION_ANNOTATION.to_string(),
            self.config.version.to_string(),
        );
        let spec = current.and_then(|l| l.spec.clone()).unwrap_or_default();
        let acquire_time = match &spec.holder_identity {
            Some(holder) if *holder == self.config.identity => spec.acquire_time.clone(),
            _ => Some(now.clone()),
        };
        Lease {
            metadata,
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(seconds(self.config.lease_duration)),
                acquire_time,
                renew_time: Some(now),
                lease_transitions: Some(token_of(transitions)),
                ..spec
            }),
        }
    }

    /// Renews (`acquire`: takes) the observed Lease: a PUT with the
    /// resourceVersion read, so a concurrent writer makes it fail (409).
    async fn write_mine(&self, transitions: u64, acquire: bool) -> Result<Lease, kube::Error> {
        let current = self.observed.as_ref().map(|o| &o.lease);
        let mut lease = self.lease_for_me(current, transitions);
        if acquire && let Some(annotations) = lease.metadata.annotations.as_mut() {
            // The request is answered: whoever takes the Lease ends it.
            annotations.remove(HANDOFF_ANNOTATION);
        }
        self.api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
    }

    async fn request_handoff(&mut self) -> Result<(), kube::Error> {
        let Some(observed) = &self.observed else {
            return Ok(());
        };
        let mut lease = observed.lease.clone();
        let request = HandoffRequest {
            identity: self.config.identity.clone(),
            version: self.config.version.clone(),
        };
        lease
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(HANDOFF_ANNOTATION.to_string(), request.to_string());
        let holder = observed.record.holder.clone().unwrap_or_default();
        let holder_version = observed
            .record
            .holder_version
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let written = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await?;
        self.observe(written);
        if !self.asked {
            self.asked = true;
            let message = format!(
                "{} (host {}) asked {holder} (host {holder_version}) to hand over Lease {}",
                self.config.identity,
                self.config.version,
                self.config.lease()
            );
            self.audit("HandoffRequested", &message).await;
        }
        Ok(())
    }

    /// Hands over to a newer host: first no new work (the manager stops the
    /// controllers after their calls in flight) while this replica keeps
    /// renewing, then, once drained (or after one lease duration at most),
    /// the release.
    async fn hand_over(
        &mut self,
        to: &HandoffRequest,
        started: Instant,
    ) -> Result<Outcome, kube::Error> {
        let token = self.observed.as_ref().map_or(0, |o| o.record.transitions);
        let drain_started = *self.drain_started.get_or_insert_with(Instant::now);
        if !self.gate.leadership().draining {
            self.gate.drain();
            let message = format!(
                "{} (host {}) hands Lease {} over to {to}: no new work, finishing the reconciles in flight",
                self.config.identity,
                self.config.version,
                self.config.lease()
            );
            self.audit("HandingOver", &message).await;
        }
        let drained = self.gate.drained() || drain_started.elapsed() >= self.config.lease_duration;
        if !drained {
            let renewed = self.write_mine(token, false).await?;
            self.observe(renewed);
            self.leading(token, started).await;
            return Ok(Outcome::Leading { token });
        }
        self.release().await;
        Ok(Outcome::Released)
    }

    fn wanted(&self) -> bool {
        self.shard
            .as_ref()
            .is_none_or(|(_, want)| want.load(Ordering::SeqCst))
    }

    /// A shard held beyond this replica's share (another replica joined):
    /// no new work for it while the Lease is renewed, then, once its
    /// reconciles in flight finished (or after one lease duration), the
    /// release, so another replica takes it at its next try.
    async fn give_up(&mut self, started: Instant) -> Result<Outcome, kube::Error> {
        let token = self.observed.as_ref().map_or(0, |o| o.record.transitions);
        let drain_started = *self.drain_started.get_or_insert_with(Instant::now);
        if !self.gate.leadership().draining {
            self.gate.drain();
            tracing::info!(
                target: "audit", lease = %self.config.lease(), identity = %self.config.identity,
                "{} gives Lease {} up to rebalance the shards: no new work, finishing the reconciles in flight",
                self.config.identity, self.config.lease()
            );
        }
        let drained = self.gate.drained() || drain_started.elapsed() >= self.config.lease_duration;
        if !drained {
            let renewed = self.write_mine(token, false).await?;
            self.observe(renewed);
            self.leading(token, started).await;
            return Ok(Outcome::Leading { token });
        }
        self.release().await;
        Ok(Outcome::Released)
    }

    fn shard_metrics(&self, owned: bool, transition: &str) {
        if let Some((index, _)) = &self.shard {
            self.metrics.shard_owned(*index, owned);
            self.metrics.shard_transition(*index, transition);
        }
    }

    async fn leading(&mut self, token: u64, started: Instant) {
        let was = self.gate.leadership();
        self.last_renewed = Some(started);
        self.asked = false;
        // The Lease held is the one just observed; its uid tells a
        // recreated Lease of the same name apart.
        let uid = self
            .observed
            .as_ref()
            .and_then(|o| o.lease.metadata.uid.as_deref())
            .unwrap_or_default();
        self.gate.identify(&super::lease_identity(
            &self.config.namespace,
            &self.config.name,
            uid,
        ));
        self.gate.lead(token, started + self.config.renew_deadline);
        if !was.leading {
            self.metrics.leader_status(&self.config.name, true);
            self.metrics
                .leader_transition(&self.config.name, "acquired");
            self.shard_metrics(true, "acquired");
            let message = format!(
                "{} (host {}) acquired Lease {}; fencing token {token}",
                self.config.identity,
                self.config.version,
                self.config.lease()
            );
            self.audit("LeaderElected", &message).await;
        }
    }

    async fn following(&mut self) {
        if self.gate.leadership().leading {
            self.lose("another replica holds the Lease").await;
        }
    }

    async fn failed(&mut self, why: &str) {
        let leading = self.gate.leadership().leading;
        tracing::warn!(
            lease = %self.config.lease(), identity = %self.config.identity, leading,
            "cannot read or write Lease {}: {why}; retrying in {} ms (check the API server and the RBAC for coordination.k8s.io leases)",
            self.config.lease(), millis(self.config.retry_period)
        );
        if leading
            && self
                .last_renewed
                .is_none_or(|at| at.elapsed() >= self.config.renew_deadline)
        {
            self.lose(&format!(
                "no renewal succeeded within the renew deadline ({} ms): {why}",
                millis(self.config.renew_deadline)
            ))
            .await;
        }
    }

    async fn lose(&mut self, why: &str) {
        self.gate.close();
        self.drain_started = None;
        self.metrics.leader_status(&self.config.name, false);
        self.metrics.leader_transition(&self.config.name, "lost");
        self.shard_metrics(false, "lost");
        let message = format!(
            "{} (host {}) lost Lease {}: {why}; every write stopped",
            self.config.identity,
            self.config.version,
            self.config.lease()
        );
        self.audit("LeaderLost", &message).await;
    }

    /// Gives the Lease up when this replica holds it: holder cleared,
    /// duration 1 s, transitions and the handoff request kept (the
    /// requester's reservation). The gate closes first.
    async fn release(&mut self) {
        let was_leading = self.gate.leadership().leading;
        self.gate.close();
        self.drain_started = None;
        if !was_leading {
            return;
        }
        self.metrics.leader_status(&self.config.name, false);
        self.metrics
            .leader_transition(&self.config.name, "released");
        self.shard_metrics(false, "released");
        let attempt = tokio::time::timeout(self.config.renew_deadline, async {
            let lease = self.api.get(&self.config.name).await?;
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
            if holder.as_deref() != Some(self.config.identity.as_str()) {
                return Ok(None);
            }
            let mut released = lease;
            let spec = released.spec.get_or_insert_with(LeaseSpec::default);
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(now_micro());
            self.api
                .replace(&self.config.name, &PostParams::default(), &released)
                .await
                .map(Some)
        })
        .await;
        let message = match attempt {
            Ok(Ok(Some(lease))) => {
                self.observe(lease);
                format!(
                    "{} (host {}) released Lease {}",
                    self.config.identity,
                    self.config.version,
                    self.config.lease()
                )
            }
            Ok(Ok(None)) => format!(
                "{} (host {}) stopped leading Lease {}, which another replica already holds",
                self.config.identity,
                self.config.version,
                self.config.lease()
            ),
            Ok(Err(error)) => format!(
                "{} (host {}) stopped leading but could not release Lease {}: {error}; it expires by itself",
                self.config.identity,
                self.config.version,
                self.config.lease()
            ),
            Err(_) => format!(
                "{} (host {}) stopped leading but releasing Lease {} timed out; it expires by itself",
                self.config.identity,
                self.config.version,
                self.config.lease()
            ),
        };
        self.audit("LeaderReleased", &message).await;
    }

    /// An audit log line and a best-effort Event on the Lease.
    async fn audit(&self, reason: &str, message: &str) {
        tracing::info!(
            target: "audit", lease = %self.config.lease(), identity = %self.config.identity,
            version = %self.config.version, transition = reason, "{message}"
        );
        let Some(observed) = &self.observed else {
            return;
        };
        let reference = observed.lease.object_ref(&());
        let event = Event {
            type_: if reason == "LeaderLost" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            note: Some(message.chars().take(1000).collect()),
            action: "LeaderElection".to_string(),
            secondary: None,
        };
        // Bounded: an API server that does not answer must not hold the
        // elector past its next try.
        let publish = self.recorder.publish(&event, &reference);
        match tokio::time::timeout(self.config.retry_period, publish).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::debug!(%error, reason, "cannot record the Lease event");
            }
            Err(_) => tracing::debug!(reason, "recording the Lease event timed out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_lease_record() {
        let lease: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "wasm-operator", "namespace": "ops", "annotations": {
                HOST_VERSION_ANNOTATION: "0.3.0",
                HANDOFF_ANNOTATION: "pod-b_1a2b@0.4.0",
            }},
            "spec": {"holderIdentity": "pod-a_9f", "leaseDurationSeconds": 15, "leaseTransitions": 7},
        }))
        .unwrap();
        let record = record_of(&lease, Duration::from_secs(3));
        assert_eq!(record.holder.as_deref(), Some("pod-a_9f"));
        assert_eq!(record.lease_duration, Duration::from_secs(15));
        assert_eq!(record.transitions, 7);
        assert_eq!(record.holder_version, Version::parse("0.3.0").ok());
        assert_eq!(
            record.handoff.map(|r| r.to_string()).as_deref(),
            Some("pod-b_1a2b@0.4.0")
        );
        let empty: Lease = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "x"}, "spec": {"holderIdentity": ""},
        }))
        .unwrap();
        let record = record_of(&empty, Duration::from_secs(3));
        assert_eq!(record.holder, None);
        assert_eq!(record.lease_duration, Duration::from_secs(3));
    }

    #[test]
    fn settings_follow_client_gos_ordering() {
        let version = Version::new(1, 0, 0);
        let config = LeaderElectionConfig::new("ns", "n", "me".into(), version);
        assert!(config.validate().is_ok());
        let wrong = LeaderElectionConfig {
            renew_deadline: Duration::from_secs(20),
            ..config
        };
        let error = wrong.validate().unwrap_err().to_string();
        assert!(error.contains("--renew-deadline"), "{error}");
    }
}
