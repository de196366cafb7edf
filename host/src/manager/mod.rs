//! The composition root: one [`Manager`] wires the host together for `run`
//! and `dev` alike. It owns the [`Registry`] (plugin versions), the
//! [`SharedCache`], the controllers, the telemetry endpoint and, when plugins
//! are deployed as WasmPlugin objects, the WasmPlugin controller.
//!
//! The registry starts nothing; it announces every change of a version set
//! and the manager applies it: a plugin's first version starts its
//! controller, a new version swaps under the running controller and queues
//! every primary again, a change of owned or watched kinds (of the stable
//! version or the candidate) or of concurrency restarts the controller
//! (after its calls in flight), an unload stops it. A canary change (a
//! candidate set, stepped, dropped or promoted) queues only the primaries
//! whose serving version changed, paced at the candidate's rollout rate,
//! and starts a `DryRun` candidate's dry run.
//!
//! # Writer and standby
//!
//! Some parts run on every replica, whatever its [`Role`]: fetching,
//! compiling and checking plugin versions (the registry), the caches, the
//! telemetry endpoint and webhooks, so a standby can take over without a
//! cold start. Other parts write to the API and run only where this
//! replica may write ([`Role::Writer`]): the plugins' controllers and the
//! WasmPlugin controller's writes (finalizers, status, events).
//!
//! Without leader election the role is fixed ([`ManagerOptions::role`]).
//! With it ([`ManagerOptions::leader_election`]) the role follows the
//! Lease: every replica starts as a standby; the one that acquires the
//! Lease starts the controllers of every serving plugin at once, and a
//! replica that loses it (or stops renewing in time) stops them. Every
//! write consults the [`WriteGate`] right before it is sent, so writes of
//! calls still in flight when leadership ends are dropped, not written. On
//! a handoff to a newer host the controllers stop after their calls in
//! flight, then the Lease is released.
//!
//! # Guarantees
//!
//! - Never two controllers on one plugin: a restart stops the old
//!   controller (its calls in flight finish) before the new one starts.
//! - [`Registry::activate`] and [`Registry::unload`] return once the manager
//!   has applied the change (controller started, swapped or stopped).
//! - [`Manager::shutdown`] stops the WasmPlugin controller first, then every
//!   plugin controller after its calls in flight, then telemetry.

use crate::util::lock;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::cache::{Discovery, SharedCache};
use crate::contract::HostObjects;
use crate::controller::{ControllerHandle, ControllerOptions, kinds_of};
use crate::lease::{
    ElectionReadiness, LeaderElectionConfig, LeaderElector, Leadership, ShardCoordinator,
    ShardGates, WriteGate, shard_lease_name,
};
use crate::registry::{
    Announcement, DEFAULT_ROLLOUT_RATE, DryRunState, Registry, RegistryError, RegistryOptions,
    Rollout, RolloutCandidate, ServingVersions, VersionChange, VersionSet,
};
use crate::telemetry::{self, Metrics, ReadinessCheck};
use crate::wasmplugin::{AuditRecord, WasmPluginController, WasmPluginError, WasmPluginOptions};
use crate::webhook::{ConversionWebhook, WebhookBoard, WebhookError, WebhookOptions};

/// What this replica may do to the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Role {
    /// This replica writes: plugin controllers run, WasmPlugin status is
    /// written. Without leader election, every replica's role.
    #[default]
    Writer,
    /// This replica only prepares: versions are loaded and caches kept warm,
    /// nothing is written.
    Standby,
}

impl Role {
    /// True when this replica may write to the API.
    pub fn may_write(self) -> bool {
        matches!(self, Role::Writer)
    }
}

/// How a [`Manager`] is set up.
#[derive(Debug, Clone)]
pub struct ManagerOptions {
    /// The registry's engine, default concurrency and metrics.
    pub registry: RegistryOptions,
    /// Whether this replica writes. With [`Role::Writer`] and
    /// `leader_election`, it writes only while it holds the Lease.
    pub role: Role,
    /// Elect the writer among replicas through a Lease; `None`: `role`
    /// decides alone (`wasm-operator dev`, a single replica).
    pub leader_election: Option<LeaderElectionConfig>,
    /// With leader election: split the primaries into this many shards,
    /// each guarded by its own Lease, spread over the replicas (1: one
    /// leader reconciles everything).
    pub shards: usize,
    /// Serve /metrics, /healthz and /readyz here (port 0 picks a free
    /// port); `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// How long a WasmPlugin's source must be quiet after a change before
    /// it is fetched (a file or ConfigMap change arrives as several
    /// notifications).
    pub source_settle: Duration,
    /// The verification policy of WasmPlugins with an OCI source and no
    /// `spec.verification` ([`WasmPluginOptions::verification`]).
    pub verification: Option<Arc<crate::oci::signature::VerificationPolicy>>,
    /// The host's own namespaces and objects: no plugin's grant reaches
    /// them unless it names the namespace exactly, and no child may be
    /// named like them. The default reserves nothing (an embedded
    /// manager); `wasm-operator run` fills it from the pod's namespace and
    /// its flags.
    pub host_objects: HostObjects,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            registry: RegistryOptions::default(),
            role: Role::default(),
            leader_election: None,
            shards: 1,
            metrics_addr: None,
            source_settle: WasmPluginOptions::default().source_settle,
            verification: None,
            host_objects: HostObjects::default(),
        }
    }
}

/// Why the manager could not start a part of the host.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The registry (its wasm engine) could not be created.
    #[error("cannot start the plugin registry: {0}")]
    Registry(#[source] RegistryError),
    /// The telemetry endpoint could not bind.
    #[error("cannot serve telemetry on {addr}: {source}; pick another --metrics-addr")]
    Telemetry {
        /// The `--metrics-addr`.
        addr: SocketAddr,
        /// Why binding failed (in use, not permitted...).
        #[source]
        source: std::io::Error,
    },
    /// The WasmPlugin controller could not start.
    #[error("cannot serve WasmPlugin objects: {0}")]
    WasmPlugins(#[source] WasmPluginError),
}

/// The running plugin controllers, by plugin name.
type Controllers = Arc<Mutex<HashMap<String, ControllerHandle>>>;

/// Every plugin's serving versions, by plugin name, whether its controller
/// runs or not: what a replica that becomes the leader starts.
type Serving = Arc<Mutex<HashMap<String, Arc<ServingVersions>>>>;

/// What starting a controller needs, shared with the task applying changes.
#[derive(Clone)]
struct ControllerDeps {
    client: kube::Client,
    cache: SharedCache,
    metrics: Metrics,
    /// Whether this replica may write cluster-wide work (WasmPlugin
    /// status, migrations): the leader's gate, or shard 0's when sharded.
    gate: WriteGate,
    /// The gate of each shard, consulted per object by the controllers
    /// (one shard, `gate`, without sharding).
    shards: ShardGates,
    controllers: Controllers,
    serving: Serving,
    /// The host's namespaces and objects, kept from every plugin.
    host_objects: Arc<HostObjects>,
}

impl ControllerDeps {
    /// True when controllers should run: this replica leads and is not
    /// handing over.
    fn runs_controllers(&self) -> bool {
        if self.shards.is_sharded() {
            return self.shards.takes_work();
        }
        let leadership = self.gate.leadership();
        leadership.leading && !leadership.draining
    }
}

struct Inner {
    client: kube::Client,
    registry: Registry,
    /// Between the conversion webhook and the WasmPlugin controller.
    webhook_board: WebhookBoard,
    deps: ControllerDeps,
    telemetry: Mutex<Option<JoinHandle<()>>>,
    telemetry_addr: Option<SocketAddr>,
    source_settle: Duration,
    verification: Option<Arc<crate::oci::signature::VerificationPolicy>>,
    applier: Mutex<Option<(CancellationToken, JoinHandle<()>)>>,
    wasmplugins: tokio::sync::Mutex<Option<WasmPluginController>>,
    /// The leader's elector, or one per shard.
    electors: tokio::sync::Mutex<Vec<LeaderElector>>,
    coordinator: tokio::sync::Mutex<Option<ShardCoordinator>>,
    /// What readiness reports about the election, when electing.
    election: Option<ElectionReadiness>,
}

/// The host's composition root. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("leadership", &self.inner.deps.gate.leadership())
            .field("registry", &self.inner.registry)
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// Creates the registry and caches, starts applying version changes and
    /// serves telemetry when asked to. No plugin serves yet: load them
    /// through [`Manager::registry`], or serve WasmPlugin objects with
    /// [`Manager::serve_wasmplugins`].
    ///
    /// # Errors
    ///
    /// [`ManagerError::Registry`] when the wasm engine cannot be created,
    /// [`ManagerError::Telemetry`] when the metrics address cannot be bound.
    ///
    /// # Examples
    ///
    /// What `wasm-operator run` does, in short: serve the cluster's
    /// WasmPlugins until asked to stop.
    ///
    /// ```no_run
    /// use wasm_operator::{Manager, ManagerOptions};
    ///
    /// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = kube::Client::try_default().await?;
    /// let manager = Manager::start(client, ManagerOptions::default()).await?;
    /// manager.serve_wasmplugins().await?;
    /// tokio::signal::ctrl_c().await?;
    /// manager.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(
        client: kube::Client,
        options: ManagerOptions,
    ) -> Result<Manager, ManagerError> {
        let metrics = options.registry.metrics.clone();
        let registry = Registry::new(options.registry).map_err(ManagerError::Registry)?;
        // Every version this host serves has its kinds checked against the
        // cluster's discovery before it serves.
        registry.use_discovery(Discovery::new(client.clone()));
        let sharded =
            options.shards > 1 && options.role == Role::Writer && options.leader_election.is_some();
        let (gate, shards) = if sharded {
            let shards = ShardGates::sharded(options.shards);
            (shards.gate(0).clone(), shards)
        } else {
            let gate = match (options.role, &options.leader_election) {
                (Role::Standby, _) => WriteGate::closed(),
                (Role::Writer, Some(_)) => WriteGate::leased(),
                (Role::Writer, None) => WriteGate::always_open(),
            };
            (gate.clone(), ShardGates::single(gate))
        };
        let deps = ControllerDeps {
            client: client.clone(),
            cache: SharedCache::new(client.clone()),
            metrics: metrics.clone(),
            gate: gate.clone(),
            shards: shards.clone(),
            controllers: Controllers::default(),
            serving: Serving::default(),
            host_objects: Arc::new(options.host_objects.clone()),
        };
        let mut electors = Vec::new();
        let mut coordinator = None;
        let mut election = None;
        if let (Role::Writer, Some(config)) = (options.role, options.leader_election) {
            if sharded {
                let wants: Vec<Arc<std::sync::atomic::AtomicBool>> =
                    (0..shards.count()).map(|_| Arc::default()).collect();
                for (shard, want) in wants.iter().enumerate() {
                    let shard_config = LeaderElectionConfig {
                        name: shard_lease_name(&config.name, shard),
                        ..config.clone()
                    };
                    electors.push(LeaderElector::start_shard(
                        client.clone(),
                        shard_config,
                        shards.gate(shard).clone(),
                        metrics.clone(),
                        shard,
                        want.clone(),
                    ));
                }
                let started = ShardCoordinator::start(client.clone(), &config, wants);
                election = Some(ElectionReadiness::sharded(
                    config.lease(),
                    shards.clone(),
                    &started,
                    &electors,
                ));
                coordinator = Some(started);
            } else {
                let elector =
                    LeaderElector::start(client.clone(), config, gate.clone(), metrics.clone());
                election = Some(ElectionReadiness::leader(&elector, gate.clone()));
                electors.push(elector);
            }
        }
        let (telemetry, telemetry_addr) = match options.metrics_addr {
            Some(addr) => {
                let controllers = deps.controllers.clone();
                let election = election.clone();
                let (bound, task) = telemetry::serve_checks(addr, metrics, move || {
                    let mut checks = readiness(&controllers);
                    if let Some(election) = &election {
                        checks.insert(1, election.check());
                    }
                    checks
                })
                .await
                .map_err(|source| ManagerError::Telemetry { addr, source })?;
                tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
                (Some(task), Some(bound))
            }
            None => (None, None),
        };
        let cancel = CancellationToken::new();
        let applier = tokio::spawn(apply_changes(
            registry.announcements(),
            shards.subscribe(),
            deps.clone(),
            cancel.clone(),
        ));
        Ok(Manager {
            inner: Arc::new(Inner {
                client,
                registry,
                webhook_board: WebhookBoard::new(),
                deps,
                telemetry: Mutex::new(telemetry),
                telemetry_addr,
                source_settle: options.source_settle,
                verification: options.verification.clone(),
                applier: Mutex::new(Some((cancel, applier))),
                wasmplugins: tokio::sync::Mutex::new(None),
                electors: tokio::sync::Mutex::new(electors),
                coordinator: tokio::sync::Mutex::new(coordinator),
                election,
            }),
        })
    }

    /// The plugin versions; loading and unloading through it starts and
    /// stops controllers.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The board this host's conversion webhook posts on and its WasmPlugin
    /// controller reads ([`Manager::serve_wasmplugins`] hands it over): the
    /// `spec.conversion` the webhook serves and where storage migrations
    /// stand. Start the webhook with it
    /// ([`ConversionWebhook::start_with`](crate::webhook::ConversionWebhook::start_with)).
    pub fn webhook_board(&self) -> &WebhookBoard {
        &self.inner.webhook_board
    }

    /// Starts this host's conversion webhook for its registry, posting on
    /// [`Manager::webhook_board`] so the WasmPlugin controller points CRDs
    /// at it and shows its storage migrations.
    ///
    /// # Errors
    ///
    /// Those of [`ConversionWebhook::start_with`].
    pub async fn start_webhook(
        &self,
        options: WebhookOptions,
    ) -> Result<ConversionWebhook, WebhookError> {
        let webhook = ConversionWebhook::start_with(
            self.inner.client.clone(),
            self.inner.registry.clone(),
            self.inner.webhook_board.clone(),
            options,
        )
        .await?;
        webhook.use_caches(self.inner.deps.cache.clone());
        Ok(webhook)
    }

    /// The shared caches (tests check that reflectors are shared).
    pub fn cache(&self) -> &SharedCache {
        &self.inner.deps.cache
    }

    /// Where the controllers and plugin calls record their metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.deps.metrics
    }

    /// Whether this replica writes now: a [`Role::Writer`] without leader
    /// election, or while it holds the Lease.
    pub fn role(&self) -> Role {
        let shards = &self.inner.deps.shards;
        let leading = if shards.is_sharded() {
            shards.leadership().iter().any(|l| l.leading)
        } else {
            self.inner.deps.gate.leadership().leading
        };
        if leading { Role::Writer } else { Role::Standby }
    }

    /// What every write consults: whether this replica may write now, and
    /// its fencing token.
    pub fn write_gate(&self) -> &WriteGate {
        &self.inner.deps.gate
    }

    /// The gate of each shard (the one gate of [`Manager::write_gate`]
    /// without sharding).
    pub fn shard_gates(&self) -> &ShardGates {
        &self.inner.deps.shards
    }

    /// The address telemetry is served on, if it is.
    pub fn telemetry_addr(&self) -> Option<SocketAddr> {
        self.inner.telemetry_addr
    }

    /// True when every controller's caches have synced (vacuously true
    /// without plugins). `/readyz` no longer waits for this: see
    /// [`Manager::readiness`].
    pub fn ready(&self) -> bool {
        all_synced(&self.inner.deps.controllers)
    }

    /// The checks `/readyz` reports: the host's own, which decides the
    /// status, and one per running plugin controller, which does not (one
    /// plugin whose caches never sync must not hold the host unready).
    pub fn readiness(&self) -> Vec<ReadinessCheck> {
        let mut checks = readiness(&self.inner.deps.controllers);
        if let Some(election) = &self.inner.election {
            checks.insert(1, election.check());
        }
        checks
    }

    /// Starts the WasmPlugin controller: the cluster's WasmPlugin objects
    /// decide which plugins serve. Its writes follow this replica's
    /// [`Role`] (through the [`WriteGate`], so they start and stop with
    /// leadership). Does nothing when it already runs.
    ///
    /// # Errors
    ///
    /// [`ManagerError::WasmPlugins`] when the CRD is not installed or
    /// WasmPlugins cannot be listed.
    pub async fn serve_wasmplugins(&self) -> Result<(), ManagerError> {
        let mut running = self.inner.wasmplugins.lock().await;
        if running.is_some() {
            return Ok(());
        }
        let controller = WasmPluginController::start_with(
            self.inner.client.clone(),
            self.inner.registry.clone(),
            WasmPluginOptions {
                writes: self.inner.deps.gate.clone(),
                source_settle: self.inner.source_settle,
                webhook: self.inner.webhook_board.clone(),
                verification: self.inner.verification.clone(),
            },
        )
        .await
        .map_err(ManagerError::WasmPlugins)?;
        tracing::info!("serving the plugins of WasmPlugin objects");
        *running = Some(controller);
        Ok(())
    }

    /// Every later transition the WasmPlugin controller records (loads,
    /// swaps, rejections, unloads); `None` when it does not run.
    pub async fn wasmplugin_transitions(&self) -> Option<broadcast::Receiver<AuditRecord>> {
        self.inner
            .wasmplugins
            .lock()
            .await
            .as_ref()
            .map(WasmPluginController::subscribe)
    }

    /// Stops the WasmPlugin controller (loaded plugins keep serving).
    pub async fn stop_wasmplugins(&self) {
        let controller = self.inner.wasmplugins.lock().await.take();
        if let Some(controller) = controller {
            controller.stop().await;
        }
    }

    /// Stops everything: the WasmPlugin controller, then every plugin
    /// controller (calls in flight finish, still under the Lease, which
    /// keeps being renewed meanwhile), then releases the Lease when this
    /// replica holds it (a successor takes over within its retry period),
    /// then telemetry. The registry is left empty. Calling it again does
    /// nothing.
    pub async fn shutdown(&self) {
        self.stop_wasmplugins().await;
        let applier = lock(&self.inner.applier).take();
        if let Some((cancel, task)) = applier {
            cancel.cancel();
            if let Err(error) = task.await
                && error.is_panic()
            {
                tracing::error!(%error, "the task applying version changes panicked");
            }
        }
        let running: Vec<ControllerHandle> = lock(&self.inner.deps.controllers)
            .drain()
            .map(|(_, c)| c)
            .collect();
        futures::future::join_all(running.into_iter().map(ControllerHandle::stop)).await;
        let electors: Vec<LeaderElector> = self.inner.electors.lock().await.drain(..).collect();
        futures::future::join_all(electors.into_iter().map(LeaderElector::release)).await;
        let coordinator = self.inner.coordinator.lock().await.take();
        if let Some(coordinator) = coordinator {
            coordinator.stop().await;
        }
        // Nobody listens any more: this only empties the registry.
        self.inner.registry.unload_all().await;
        let telemetry = lock(&self.inner.telemetry).take();
        if let Some(telemetry) = telemetry {
            telemetry.abort();
        }
    }
}

fn all_synced(controllers: &Controllers) -> bool {
    lock(controllers).values().all(ControllerHandle::synced)
}

/// The host check (it serves) and one check per plugin controller, sorted
/// by plugin name.
fn readiness(controllers: &Controllers) -> Vec<ReadinessCheck> {
    let mut plugins: Vec<ReadinessCheck> = lock(controllers)
        .iter()
        .map(|(name, controller)| {
            let unsynced = controller.unsynced();
            let forbidden = controller.forbidden();
            let mut detail = if unsynced.is_empty() {
                "ok".to_string()
            } else {
                format!("caches not synced yet: {}", unsynced.join(", "))
            };
            if !forbidden.is_empty() {
                // Said first: a cache that cannot sync because RBAC
                // forbids it waits for a fix, not for time.
                detail = format!(
                    "forbidden: {}; fix with `wasm-operator plugin rbac --wasm-plugin NAME`; {detail}",
                    forbidden.join("; ")
                );
            }
            ReadinessCheck {
                name: format!("plugin {name}"),
                plugin: Some(name.clone()),
                ready: unsynced.is_empty(),
                detail,
            }
        })
        .collect();
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    let mut checks = vec![ReadinessCheck {
        name: "host".to_string(),
        plugin: None,
        ready: true,
        detail: format!("ok ({} plugin controllers)", plugins.len()),
    }];
    checks.extend(plugins);
    checks
}

/// Applies the registry's announcements and this replica's changes of
/// leadership (of each shard), one at a time, until `cancel` fires.
async fn apply_changes(
    mut announcements: mpsc::UnboundedReceiver<Announcement>,
    mut leadership: tokio::sync::watch::Receiver<Vec<Leadership>>,
    deps: ControllerDeps,
    cancel: CancellationToken,
) {
    let mut watching = true;
    let mut previous = vec![Leadership::default(); deps.shards.count()];
    // The elector may have decided before this task subscribed: follow the
    // current leadership first.
    leadership.mark_changed();
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            next = announcements.recv() => match next {
                Some(announcement) => {
                    apply(&deps, &announcement.change).await;
                    announcement.acknowledge();
                }
                None => return,
            },
            changed = leadership.changed(), if watching => {
                if changed.is_err() {
                    watching = false;
                    continue;
                }
                let now = leadership.borrow_and_update().clone();
                if deps.shards.is_sharded() {
                    follow_shards(&deps, &previous, &now).await;
                } else if let Some(first) = now.first() {
                    follow_leadership(&deps, *first).await;
                }
                previous = now;
            }
        }
    }
}

/// Starts the controllers of every serving plugin when this replica leads,
/// stops them all when it does not (or hands over); after a handover's
/// stop, tells the elector it may release the Lease.
async fn follow_leadership(deps: &ControllerDeps, leadership: Leadership) {
    if leadership.leading && !leadership.draining {
        let started = start_serving(deps).len();
        tracing::info!(
            controllers = started,
            token = leadership.token.unwrap_or_default(),
            "leading: plugin controllers started"
        );
        return;
    }
    let stopped = stop_controllers(deps).await;
    if stopped > 0 {
        tracing::info!(
            controllers = stopped,
            draining = leadership.draining,
            "not leading: plugin controllers stopped"
        );
    }
    if leadership.draining {
        deps.gate.report_drained();
    }
}

/// Starts the controller of every serving plugin that has none; returns
/// their names.
fn start_serving(deps: &ControllerDeps) -> Vec<String> {
    let serving: Vec<Arc<ServingVersions>> = lock(&deps.serving).values().cloned().collect();
    let mut started = Vec::new();
    for versions in serving {
        let name = versions.current().plugin().to_string();
        if lock(&deps.controllers).contains_key(&name) {
            continue;
        }
        start_with_candidates(deps, &versions, None);
        started.push(name);
    }
    started
}

/// Stops every controller after its calls in flight; returns how many.
async fn stop_controllers(deps: &ControllerDeps) -> usize {
    let running: Vec<ControllerHandle> = lock(&deps.controllers).drain().map(|(_, c)| c).collect();
    let stopped = running.len();
    // Their calls in flight finish; whatever they would still write is
    // dropped by the gate once it closes.
    futures::future::join_all(running.into_iter().map(ControllerHandle::stop)).await;
    stopped
}

/// Sharded: the controllers start when this replica first takes work for
/// a shard and then keep running, holding shards or not. A shard gained
/// queues every primary again (the controller skips the other shards' at
/// once), so the gained shard's objects are reconciled here; a shard lost
/// or given up takes no new work (its reconciles in flight finish, their
/// writes dropped once its gate closes).
///
/// Why not stop them when the last shard goes: a replica whose renewals
/// run late (a loaded API server, a slow link) loses and regains its
/// shards every few seconds. Stopping the controllers threw their queue
/// away each time (retries and changes due), and every restart began the
/// same full pass in the same order, so under such flapping the objects
/// late in that order waited minutes (found by the chaos harness,
/// `scripts/chaos.sh`: a change's p99 of 139 s under API latency). A
/// running controller keeps its queue and only skips, at once, the
/// objects of shards it does not hold.
async fn follow_shards(deps: &ControllerDeps, previous: &[Leadership], now: &[Leadership]) {
    let works = |l: &Leadership| l.leading && !l.draining;
    let held: Vec<usize> = (0..now.len()).filter(|i| works(&now[*i])).collect();
    let gained: Vec<usize> = held
        .iter()
        .copied()
        .filter(|i| !previous.get(*i).is_some_and(works))
        .collect();
    let tokens: Vec<u64> = held
        .iter()
        .map(|i| now[*i].token.unwrap_or_default())
        .collect();
    if held.is_empty() {
        tracing::info!("holding no shard: every reconcile is skipped until a shard is gained");
        return;
    }
    let started = start_serving(deps);
    if !gained.is_empty() {
        for (name, controller) in lock(&deps.controllers).iter() {
            if !started.contains(name) {
                controller.reconcile_all();
            }
        }
    }
    tracing::info!(
        shards = ?held, ?tokens, gained = ?gained, started = started.len(),
        "holding shards {held:?} (fencing tokens {tokens:?})"
    );
}

/// Starts the controller of `versions` with its candidate's dry run or
/// shadow sweep when it has one (a new controller runs them again).
fn start_with_candidates(
    deps: &ControllerDeps,
    versions: &Arc<ServingVersions>,
    previous: Option<&VersionSet>,
) {
    let next = versions.current();
    let name = next.plugin().to_string();
    start_controller(deps, versions.clone(), next.concurrency);
    if let Some(candidate) = dry_run_to_start(previous, &next, true)
        && let Some(controller) = lock(&deps.controllers).get(&name)
    {
        controller.start_dry_run(candidate);
    }
    // A new controller compares a shadow candidate on every object again
    // (the old one's comparisons may have stopped).
    if let Some(candidate) = next
        .candidate
        .as_ref()
        .filter(|c| c.settings.rollout == Rollout::Shadow)
        && let Some(controller) = lock(&deps.controllers).get(&name)
    {
        controller.start_shadow_sweep(candidate.clone(), next.stable.clone());
    }
}

/// Starts, swaps, restarts or stops one plugin's controller.
async fn apply(deps: &ControllerDeps, change: &VersionChange) {
    match change {
        VersionChange::Activated { versions, previous } => {
            let next = versions.current();
            let name = next.plugin().to_string();
            lock(&deps.serving).insert(name.clone(), versions.clone());
            let restart = match previous {
                None => true,
                Some(previous) => needs_restart(previous, &next),
            };
            if !restart && let Some(controller) = lock(&deps.controllers).get(&name) {
                match previous {
                    // A canary change: only the objects that change version
                    // are reconciled again, at the rollout rate.
                    Some(previous) if previous.candidate.is_some() || next.candidate.is_some() => {
                        let rate = rollout_rate(previous, &next);
                        let moved = controller.reconcile_moved(previous, &next, rate);
                        tracing::info!(
                            plugin = %name, objects = moved, rate,
                            "reconciling the objects whose serving version changed"
                        );
                    }
                    _ => controller.reconcile_all(),
                }
                if let Some(candidate) = dry_run_to_start(previous.as_deref(), &next, false) {
                    controller.start_dry_run(candidate);
                }
                if let Some(previous) = previous
                    && let Some(candidate) = shadow_to_start(previous, &next)
                {
                    controller.start_shadow_sweep(candidate, next.stable.clone());
                }
                return;
            }
            let old = lock(&deps.controllers).remove(&name);
            if let Some(old) = old {
                // Never two controllers on one object: the old one's calls
                // in flight finish first.
                old.stop().await;
            }
            if deps.runs_controllers() {
                start_with_candidates(deps, versions, previous.as_deref());
            }
        }
        VersionChange::Unloaded { plugin } => {
            lock(&deps.serving).remove(plugin);
            let old = lock(&deps.controllers).remove(plugin);
            if let Some(old) = old {
                old.stop().await;
            }
        }
    }
}

fn start_controller(deps: &ControllerDeps, versions: Arc<ServingVersions>, concurrency: usize) {
    let name = versions.current().plugin().to_string();
    let controller = ControllerHandle::start(
        deps.client.clone(),
        &deps.cache,
        versions,
        deps.metrics.clone(),
        &ControllerOptions {
            concurrency,
            writes: deps.shards.clone(),
            host_objects: deps.host_objects.clone(),
        },
    );
    lock(&deps.controllers).insert(name, controller);
}

/// True when the controller must be started anew for `next`: it watches
/// other kinds (or another version of the primary), or runs another number of reconciles at once. Otherwise the
/// running controller keeps going and reads the new set per object.
fn needs_restart(previous: &VersionSet, next: &VersionSet) -> bool {
    // The controller watches the kinds of the stable version and the
    // candidate, and reads the grant's namespaces when it starts.
    // A new version of the primary (same group and kind) moves the
    // primary's watch and cache to that version.
    kinds_of(previous) != kinds_of(next)
        || previous.stable.plugin.manifest().primary != next.stable.plugin.manifest().primary
        || previous.concurrency != next.concurrency
        || previous.stable.grant != next.stable.grant
}

/// The candidate to compare with the stable version on every object now:
/// one in `Shadow` that was not in `Shadow` before (a new candidate, or a
/// change from DryRun or a split).
fn shadow_to_start(previous: &VersionSet, next: &VersionSet) -> Option<RolloutCandidate> {
    let candidate = next.candidate.as_ref()?;
    let was = previous.candidate.as_ref().is_some_and(|p| {
        Arc::ptr_eq(&p.observations, &candidate.observations)
            && p.settings.rollout == Rollout::Shadow
    });
    (candidate.settings.rollout == Rollout::Shadow && !was).then(|| candidate.clone())
}

/// The rate to move objects between versions at: the candidate's (the new
/// one's, else the dropped or promoted one's).
fn rollout_rate(previous: &VersionSet, next: &VersionSet) -> f64 {
    next.candidate
        .as_ref()
        .or(previous.candidate.as_ref())
        .map_or(DEFAULT_ROLLOUT_RATE, |c| c.settings.effective_rate())
}

/// The candidate whose dry run must start now: one in `DryRun` whose dry run
/// has not finished and does not run yet (a new candidate, a change into
/// `DryRun`, or a new controller after a restart).
fn dry_run_to_start(
    previous: Option<&VersionSet>,
    next: &VersionSet,
    restarted: bool,
) -> Option<RolloutCandidate> {
    let candidate = next.candidate.as_ref()?;
    let running = previous
        .and_then(|p| p.candidate.as_ref())
        .is_some_and(|p| {
            Arc::ptr_eq(&p.observations, &candidate.observations)
                && p.settings.rollout == Rollout::DryRun
        });
    starts_dry_run(
        &candidate.settings.rollout,
        candidate.observations.dry_run().state,
        running,
        restarted,
    )
    .then(|| candidate.clone())
}

/// Whether a candidate in `rollout` whose dry run is in `state` needs one
/// started: in `DryRun`, not finished, and not already running on this
/// controller (`running`: it was in `DryRun` before this change) unless
/// the controller was just `restarted` (the old one's dry run stopped
/// with it).
fn starts_dry_run(rollout: &Rollout, state: DryRunState, running: bool, restarted: bool) -> bool {
    *rollout == Rollout::DryRun && state != DryRunState::Finished && (restarted || !running)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dry_run_starts_once_per_candidate_and_again_after_a_restart() {
        use DryRunState::{Finished, Pending, Running};
        let dry = Rollout::DryRun;
        // A new candidate in DryRun, or a change into DryRun.
        assert!(starts_dry_run(&dry, Pending, false, false));
        // Still in DryRun after another change (e.g. the rate): it runs.
        assert!(!starts_dry_run(&dry, Running, true, false));
        // A new controller: the old one's dry run stopped with it.
        assert!(starts_dry_run(&dry, Running, true, true));
        // Finished is finished; other modes never run one.
        assert!(!starts_dry_run(&dry, Finished, false, true));
        assert!(!starts_dry_run(&Rollout::Shadow, Pending, false, false));
        let split = Rollout::Split { weight_percent: 5 };
        assert!(!starts_dry_run(&split, Pending, false, true));
    }

    #[test]
    fn only_a_writer_writes() {
        assert!(Role::Writer.may_write());
        assert!(!Role::Standby.may_write());
        assert_eq!(ManagerOptions::default().role, Role::Writer);
    }
}
