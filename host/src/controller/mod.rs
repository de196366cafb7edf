//! One kube-runtime `Controller` per plugin, over its primary kind, fed by
//! the shared caches: the primary (generation-filtered), the owned kinds
//! (mapped to their controller owner) and the watched kinds (mapped to the
//! primaries of the same namespace). Which version serves an object is read
//! per reconcile from the plugin's [`ServingVersions`]; who starts and stops
//! controllers is the manager's business.
//!
//! The serving version's grant bounds the controller to its namespaces
//! (read once at start; the manager restarts the controller when the grant
//! changes): primaries elsewhere never enter the trigger stream and are
//! never reconciled (nothing is written to them, no finalizer, no
//! annotation), and the plugin's cache reads answer only for granted
//! namespaces. With a `namespaceSelector`, the Namespace objects come from
//! the shared cache, and a Namespace change re-triggers its primaries.

mod access;
mod backoff;
mod context;
mod error;
mod reconcile;
mod shadow;
mod shadow_diff;
mod trigger;
mod writes;

use std::sync::Arc;

use futures::channel::mpsc;
use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::ResourceExt;
use kube::api::ApiResource;
use kube::runtime::Controller;
use kube::runtime::controller::Config;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::apply::EventSink;
use crate::cache::{
    CacheLease, CacheView, CachedObject, NamespaceGate, SharedCache, api_resource, namespace_kind,
};
use crate::contract::{Grant, HostObjects, ResourceKind};
use crate::lease::ShardGates;
use crate::registry::{ActiveVersion, RolloutCandidate, ServingVersions, VersionSet};
use crate::telemetry::Metrics;

/// How often a starting controller looks whether its caches have synced.
const SYNC_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// `lease`'s events, starting once every cache of `all` has synced (with
/// what the cache holds then, see [`CacheLease::subscribe`]). A cache that
/// never syncs holds this plugin's reconciles, and only this plugin's; the
/// readiness checks name it.
fn after_sync(
    all: &Arc<Vec<CacheLease>>,
    lease: &CacheLease,
) -> impl futures::Stream<Item = crate::cache::CacheEvent> + Send + 'static {
    let all = all.clone();
    let lease = lease.clone();
    futures::stream::once(async move {
        while !all.iter().all(CacheLease::synced) {
            tokio::time::sleep(SYNC_POLL).await;
        }
    })
    .flat_map(move |()| lease.subscribe())
}

/// A running controller. Dropping it without [`ControllerHandle::stop`]
/// cancels it abruptly; `stop` lets calls in flight finish.
pub struct ControllerHandle {
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
    /// The pacer, the access publisher and the sweeps: each holds cache
    /// leases, so [`ControllerHandle::stop`] waits for them too.
    helpers: TaskTracker,
    leases: Arc<Vec<CacheLease>>,
    reconcile_all: mpsc::UnboundedSender<()>,
    /// Batches of objects to reconcile again, paced by [`pace`].
    paced: tokio::sync::mpsc::UnboundedSender<Paced>,
    ctx: Arc<context::Context>,
    primary: Store<CachedObject>,
    primary_ar: ApiResource,
}

impl std::fmt::Debug for ControllerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerHandle")
            .field("plugin", &self.ctx.plugin)
            .field("synced", &self.synced())
            .finish_non_exhaustive()
    }
}

/// Objects to reconcile again at `rate` per second.
struct Paced {
    objects: Vec<ObjectRef<CachedObject>>,
    rate: f64,
}

/// The kinds a controller of `set` must watch: the owned and watched kinds
/// of the stable version and of the candidate (a candidate's children are
/// observed like the stable version's), in manifest order, deduplicated.
pub fn kinds_of(set: &VersionSet) -> (Vec<ResourceKind>, Vec<ResourceKind>) {
    let mut owns = Vec::new();
    let mut watches = Vec::new();
    let manifests = std::iter::once(set.stable.plugin.manifest())
        .chain(set.candidate.as_ref().map(|c| c.version.plugin.manifest()));
    for manifest in manifests {
        for kind in &manifest.owns {
            if !owns.contains(kind) {
                owns.push(kind.clone());
            }
        }
        for kind in &manifest.watches {
            if !watches.contains(kind) {
                watches.push(kind.clone());
            }
        }
    }
    (owns, watches)
}

/// What a controller is started with.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Reconciles of this plugin that may run at once (different objects).
    pub concurrency: usize,
    /// Consulted before every write (the gate of the object's shard); its
    /// token is recorded on primaries.
    pub writes: ShardGates,
    /// The host's namespaces and objects: outside the plugin's grant unless
    /// it names the namespace; no child may be named like them.
    pub host_objects: Arc<HostObjects>,
}

/// The gate of a plugin's `grant` (keeping it out of the host's namespaces),
/// and the Namespace cache it reads when the grant selects namespaces by
/// label.
fn namespace_gate(
    cache: &SharedCache,
    grant: Arc<Grant>,
    host_objects: &Arc<HostObjects>,
) -> (NamespaceGate, Option<CacheLease>) {
    let namespace_lease = grant
        .needs_namespace_labels()
        .then(|| cache.acquire(&namespace_kind(), None));
    let gate = NamespaceGate::new(grant, namespace_lease.as_ref().map(CacheLease::store))
        .reserving(host_objects.clone());
    (gate, namespace_lease)
}

/// `controller` also triggered by its owned kinds (mapped to their
/// controller owner), its watched kinds (mapped to the primaries of their
/// namespace) and, with a namespace selector, Namespace changes.
fn watch_related(
    mut controller: Controller<CachedObject>,
    all: &Arc<Vec<CacheLease>>,
    (owned, watched, namespace_lease): (&[CacheLease], &[CacheLease], Option<&CacheLease>),
    (primary_lease, primary_ar): (&CacheLease, &ApiResource),
) -> Controller<CachedObject> {
    let primary_store = primary_lease.store();
    for lease in owned {
        controller = controller.owns_stream_with(
            trigger::related(after_sync(all, lease)),
            lease.api_resource().clone(),
        );
    }
    for lease in watched {
        let store = primary_store.clone();
        let index = primary_lease.index();
        let ar = primary_ar.clone();
        // The contract has no mapping from a watched object to the
        // primaries that read it; the primaries of its namespace (all of
        // them for cluster-scoped objects) are the safe over-approximation.
        controller = controller.watches_stream_with(
            trigger::related(after_sync(all, lease)),
            move |other| trigger::primaries_near(&other, &index, &store, &ar),
            lease.api_resource().clone(),
        );
    }

    if let Some(lease) = namespace_lease {
        let index = primary_lease.index();
        let ar = primary_ar.clone();
        // A Namespace relabelled into (or out of) the grant: its
        // primaries are reconciled (or skipped) again.
        controller = controller.watches_stream_with(
            trigger::related(lease.subscribe()),
            move |ns| trigger::primaries_in(&ns.name_any(), &index, &ar),
            lease.api_resource().clone(),
        );
    }

    controller
}

/// The audit of the stored primaries against the stable version's
/// `validate` ([`crate::webhook::admission::audit`]), beside the reconciles
/// and stopped with them: it reads the primary store once every cache of
/// the controller has synced, and writes its events as the host.
fn audit_task(
    ctx: &context::Context,
    cache: &SharedCache,
    primary: &Store<CachedObject>,
    all: &Arc<Vec<CacheLease>>,
    shutdown: &CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    use crate::webhook::admission::audit;
    let all = all.clone();
    let deps = audit::AuditDeps {
        plugin: ctx.plugin.clone(),
        versions: ctx.versions.clone(),
        cache: cache.clone(),
        primary: primary.clone(),
        primary_ar: ctx.primary.clone(),
        gate: ctx.gate.clone(),
        events: EventSink::new(ctx.host_client.clone(), &ctx.plugin),
        writes: ctx.writes.clone(),
        metrics: ctx.metrics.clone(),
    };
    audit::run(
        deps,
        move || all.iter().all(CacheLease::synced),
        shutdown.clone(),
    )
}

impl ControllerHandle {
    /// Starts the controller of the plugin whose serving state is `versions`
    /// (its primary, owned and watched kinds are read from the stable
    /// version's manifest).
    pub fn start(
        client: Client,
        cache: &SharedCache,
        versions: Arc<ServingVersions>,
        metrics: Metrics,
        options: &ControllerOptions,
    ) -> ControllerHandle {
        let manifest = versions.current().stable.plugin.manifest().clone();
        let grant = versions.current().stable.grant.clone();
        let (owns, watches) = kinds_of(&versions.current());
        // Writes as the plugin's own identity when the grant names one, so
        // the API server's RBAC enforces the grant too.
        let host_client = client.clone();
        let client = match &grant.service_account {
            Some(account) => crate::apply::impersonating(client, account),
            None => client,
        };
        let (gate, namespace_lease) = namespace_gate(cache, grant, &options.host_objects);
        let primary_lease = cache.acquire(&manifest.primary, None);
        let owned: Vec<CacheLease> = owns.iter().map(|k| cache.acquire(k, None)).collect();
        let watched: Vec<CacheLease> = watches
            .iter()
            .filter(|k| **k != manifest.primary && !owns.contains(k))
            .map(|k| cache.acquire(k, None))
            .collect();
        let primary_ar = api_resource(&manifest.primary);
        let primary_store = primary_lease.store();
        // Every cache this controller reads; reconciles wait until all have
        // synced (like controller-runtime's WaitForCacheSync), so a plugin
        // is never called with a half-loaded view of its children.
        let all: Arc<Vec<CacheLease>> = Arc::new(
            std::iter::once(primary_lease.clone())
                .chain(owned.iter().cloned())
                .chain(watched.iter().cloned())
                .collect(),
        );
        let shutdown = CancellationToken::new();
        let (reconcile_all, reconcile_all_rx) = mpsc::unbounded();
        let (paced, paced_rx) = tokio::sync::mpsc::unbounded_channel();
        let (reconcile_one, reconcile_one_rx) = mpsc::unbounded();
        let helpers = TaskTracker::new();
        helpers.spawn(pace(paced_rx, reconcile_one, shutdown.clone()));
        let concurrency = u16::try_from(options.concurrency.max(1)).unwrap_or(u16::MAX);
        let controller = Controller::for_stream_with(
            trigger::primaries(after_sync(&all, &primary_lease), gate.clone()),
            primary_store.clone(),
            primary_ar.clone(),
        )
        .with_config(Config::default().concurrency(concurrency))
        .reconcile_all_on(reconcile_all_rx)
        .reconcile_on(reconcile_one_rx)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
        let controller = watch_related(
            controller,
            &all,
            (&owned, &watched, namespace_lease.as_ref()),
            (&primary_lease, &primary_ar),
        );

        // Refused lists/watches and the primaries outside the grant, for
        // the WasmPlugin status and `/readyz`.
        let probed = all.iter().chain(namespace_lease.iter()).cloned().collect();
        helpers.spawn(access::publish(
            probed,
            (primary_store.clone(), gate.clone()),
            versions.clone(),
            shutdown.clone(),
        ));
        metrics.controller_started(&manifest.name);
        metrics.plugin_version_loaded(&manifest.name, &manifest.version);
        let cache_reader: Arc<dyn crate::engine::CacheReader> = Arc::new(
            CacheView::new(cache.clone(), manifest.readable().cloned()).confined_to(gate.clone()),
        );
        if manifest.implements.backup {
            // Backups and restores of this plugin's primaries, beside its
            // reconciles (and stopped with them).
            let deps = crate::backup::RunnerDeps {
                plugin: manifest.name.clone(),
                versions: versions.clone(),
                host_client: host_client.clone(),
                plugin_client: client.clone(),
                cache_reader: cache_reader.clone(),
                primary: primary_ar.clone(),
                gate: gate.clone(),
                writes: options.writes.clone(),
                events: EventSink::new(client.clone(), &manifest.name),
                metrics: metrics.clone(),
            };
            helpers.spawn(crate::backup::runner::run(
                deps,
                cache.clone(),
                manifest.primary.clone(),
                shutdown.clone(),
            ));
        }
        let ctx = Arc::new(context::Context {
            client: client.clone(),
            host_client,
            plugin: manifest.name.clone(),
            versions,
            primary: primary_ar.clone(),
            owned: owned.clone(),
            cache: cache_reader,
            gate,
            events: EventSink::new(client, &manifest.name),
            metrics,
            writes: options.writes.clone(),
            failures: Default::default(),
            rates: Default::default(),
            creations: Default::default(),
            applied: Default::default(),
            primary_writes: Default::default(),
        });
        helpers.spawn(audit_task(&ctx, cache, &primary_store, &all, &shutdown));
        let handle_ctx = ctx.clone();
        let name = manifest.name.clone();
        let task = tokio::spawn(
            controller
                .run(reconcile::reconcile, reconcile::error_policy, ctx)
                .for_each(move |result| {
                    if let Err(error) = result {
                        // Reconcile failures are reported on the objects; what
                        // arrives here is queue noise (e.g. an object deleted
                        // before its turn came).
                        tracing::debug!(plugin = %name, %error, "controller event");
                    }
                    futures::future::ready(())
                })
                .map(|_| ()),
        );
        let mut leases = vec![primary_lease];
        leases.extend(owned);
        leases.extend(watched);
        leases.extend(namespace_lease);
        ControllerHandle {
            shutdown,
            task: Some(task),
            helpers,
            leases: Arc::new(leases),
            reconcile_all,
            paced,
            ctx: handle_ctx,
            primary: primary_store,
            primary_ar,
        }
    }

    /// Queues every primary whose serving version differs between
    /// `previous` and `next` (a candidate set, stepped, dropped or
    /// promoted), at most `rate` per second, so it is reconciled by its new
    /// version without a herd. Returns how many were queued.
    pub fn reconcile_moved(&self, previous: &VersionSet, next: &VersionSet, rate: f64) -> usize {
        self.reconcile_paced(|o| previous.moves(next, o), rate)
    }

    /// Queues every primary `pick` selects, at most `rate` per second (see
    /// [`ControllerHandle::reconcile_moved`]). Returns how many were queued.
    pub fn reconcile_paced(&self, pick: impl Fn(&CachedObject) -> bool, rate: f64) -> usize {
        let mut objects: Vec<Arc<CachedObject>> = self
            .primary
            .state()
            .into_iter()
            .filter(|o| pick(o))
            .collect();
        // Deterministic order: namespace, then name.
        objects.sort_by_key(|o| (o.namespace(), o.name_any()));
        let objects: Vec<ObjectRef<CachedObject>> = objects
            .iter()
            .map(|o| ObjectRef::from_obj_with(o.as_ref(), self.primary_ar.clone()))
            .collect();
        let count = objects.len();
        if count > 0 {
            // Fails only when the controller already stopped.
            let _ = self.paced.send(Paced { objects, rate });
        }
        count
    }

    /// Starts the pre-flight dry run of `candidate` over every primary (once
    /// the caches have synced), recording into its observations; it stops
    /// with this controller or when the candidate leaves the version set.
    pub fn start_dry_run(&self, candidate: RolloutCandidate) {
        self.start_sweep(candidate, shadow::Sweep::DryRun);
    }

    /// Compares a new shadow `candidate` with the `stable` version on every
    /// primary once (both compute, neither writes; at the candidate's
    /// shadow concurrency), so every object has a comparison without
    /// waiting for a change or the resync. Later comparisons come from the
    /// stable version's reconciles.
    pub fn start_shadow_sweep(&self, candidate: RolloutCandidate, stable: Arc<ActiveVersion>) {
        self.start_sweep(candidate, shadow::Sweep::Compare(stable));
    }

    fn start_sweep(&self, candidate: RolloutCandidate, sweep: shadow::Sweep) {
        let leases = self.leases.clone();
        self.helpers.spawn(shadow::sweep(
            self.ctx.clone(),
            candidate,
            sweep,
            self.primary.clone(),
            move || leases.iter().all(CacheLease::synced),
            self.shutdown.clone(),
        ));
    }

    /// True once every cache this controller reads has synced.
    pub fn synced(&self) -> bool {
        self.leases.iter().all(CacheLease::synced)
    }

    /// The caches of this controller that have not synced yet, as
    /// `apiVersion Kind (plural)`.
    pub fn unsynced(&self) -> Vec<String> {
        self.leases
            .iter()
            .filter(|lease| !lease.synced())
            .map(|lease| {
                let ar = lease.api_resource();
                format!("{} {} ({})", ar.api_version, ar.kind, ar.plural)
            })
            .collect()
    }

    /// The caches of this controller whose list or watch the API server
    /// forbids (403), each with the API server's message (verb, resource,
    /// identity).
    pub fn forbidden(&self) -> Vec<String> {
        access::forbidden_reads(&self.leases)
            .into_values()
            .collect()
    }

    /// Queues every primary for a reconcile (after a version swap).
    pub fn reconcile_all(&self) {
        // Fails only when the controller already stopped.
        let _ = self.reconcile_all.unbounded_send(());
    }

    /// Stops taking new work, waits for reconciles in flight, then releases
    /// the caches.
    ///
    /// # Guarantees
    /// When this returns, no task of this controller runs and none holds a
    /// cache lease: a reflector only this controller used is gone.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
            && error.is_panic()
        {
            tracing::error!(%error, "controller task panicked");
        }
        // Each helper returns once `shutdown` is cancelled.
        self.helpers.close();
        self.helpers.wait().await;
    }
}

/// Feeds `out` the objects of every batch, `rate` per second (the latest
/// batch's rate), each object once while queued; the first at once.
async fn pace(
    mut batches: tokio::sync::mpsc::UnboundedReceiver<Paced>,
    out: mpsc::UnboundedSender<ObjectRef<CachedObject>>,
    shutdown: CancellationToken,
) {
    use std::collections::{HashSet, VecDeque};
    let mut queue: VecDeque<ObjectRef<CachedObject>> = VecDeque::new();
    let mut queued: HashSet<ObjectRef<CachedObject>> = HashSet::new();
    let mut rate = crate::registry::DEFAULT_ROLLOUT_RATE;
    let ticker = |rate: f64| {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs_f64(1.0 / rate));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick
    };
    let mut tick = ticker(rate);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            batch = batches.recv() => {
                let Some(batch) = batch else { return };
                if batch.rate.is_finite() && batch.rate > 0.0 && batch.rate != rate {
                    rate = batch.rate;
                    tick = ticker(rate);
                }
                for object in batch.objects {
                    if queued.insert(object.clone()) {
                        queue.push_back(object);
                    }
                }
            }
            _ = tick.tick(), if !queue.is_empty() => {
                if let Some(object) = queue.pop_front() {
                    queued.remove(&object);
                    if out.unbounded_send(object).is_err() {
                        return;
                    }
                }
            }
        }
    }
}

impl Drop for ControllerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> ObjectRef<CachedObject> {
        let ar = ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "WebApp".into(),
            plural: "webapps".into(),
        };
        ObjectRef::new_with(name, ar).within("default")
    }

    #[tokio::test]
    async fn the_pacer_queues_each_object_once_in_order() {
        let (batches, rx) = tokio::sync::mpsc::unbounded_channel();
        let (out, mut received) = mpsc::unbounded();
        let shutdown = CancellationToken::new();
        let pacer = tokio::spawn(pace(rx, out, shutdown.clone()));
        let refs = |names: &[&str]| names.iter().map(|n| object(n)).collect();
        batches
            .send(Paced {
                objects: refs(&["a", "b", "c"]),
                rate: 1000.0,
            })
            .unwrap();
        // "b" and "c" are still queued: only "d" is added.
        batches
            .send(Paced {
                objects: refs(&["b", "c", "d"]),
                rate: 1000.0,
            })
            .unwrap();
        let mut names = Vec::new();
        while names.len() < 4 {
            let next = received.next().await.expect("the pacer runs");
            names.push(next.name);
        }
        assert_eq!(names, ["a", "b", "c", "d"]);
        shutdown.cancel();
        pacer.await.unwrap();
    }
}
