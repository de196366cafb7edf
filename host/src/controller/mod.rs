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

mod backoff;
mod reconcile;
mod trigger;

use std::sync::Arc;

use futures::channel::mpsc;
use futures::{FutureExt, StreamExt};
use kube::Client;
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::controller::Config;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::apply::EventSink;
use crate::cache::{
    CacheLease, CacheView, NamespaceGate, SharedCache, api_resource, namespace_kind,
};
use crate::registry::ServingVersions;
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
#[derive(Debug)]
pub struct ControllerHandle {
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
    leases: Arc<Vec<CacheLease>>,
    reconcile_all: mpsc::UnboundedSender<()>,
}

/// What a controller is started with.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Reconciles of this plugin that may run at once (different objects).
    pub concurrency: usize,
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
        // Writes as the plugin's own identity when the grant names one, so
        // the API server's RBAC enforces the grant too.
        let host_client = client.clone();
        let client = match &grant.service_account {
            Some(account) => crate::apply::impersonating(client, account),
            None => client,
        };
        // Namespace labels, only when the grant selects namespaces by them.
        let namespace_lease = grant
            .needs_namespace_labels()
            .then(|| cache.acquire(&namespace_kind(), None));
        let gate = NamespaceGate::new(grant, namespace_lease.as_ref().map(CacheLease::store));
        let primary_lease = cache.acquire(&manifest.primary, None);
        let owned: Vec<CacheLease> = manifest
            .owns
            .iter()
            .map(|k| cache.acquire(k, None))
            .collect();
        let watched: Vec<CacheLease> = manifest
            .watches
            .iter()
            .filter(|k| **k != manifest.primary && !manifest.owns.contains(k))
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
        let concurrency = u16::try_from(options.concurrency.max(1)).unwrap_or(u16::MAX);
        let mut controller = Controller::for_stream_with(
            trigger::primaries(after_sync(&all, &primary_lease), gate.clone()),
            primary_store.clone(),
            primary_ar.clone(),
        )
        .with_config(Config::default().concurrency(concurrency))
        .reconcile_all_on(reconcile_all_rx)
        .graceful_shutdown_on(shutdown.clone().cancelled_owned());
        for lease in &owned {
            controller = controller.owns_stream_with(
                trigger::related(after_sync(&all, lease)),
                lease.api_resource().clone(),
            );
        }
        for lease in &watched {
            let store = primary_store.clone();
            let index = primary_lease.index();
            let ar = primary_ar.clone();
            // The contract has no mapping from a watched object to the
            // primaries that read it; the primaries of its namespace (all of
            // them for cluster-scoped objects) are the safe over-approximation.
            controller = controller.watches_stream_with(
                trigger::related(after_sync(&all, lease)),
                move |other| trigger::primaries_near(&other, &index, &store, &ar),
                lease.api_resource().clone(),
            );
        }

        if let Some(lease) = &namespace_lease {
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

        metrics.controller_started(&manifest.name);
        metrics.plugin_version_loaded(&manifest.name, &manifest.version);
        let ctx = Arc::new(reconcile::Context {
            client: client.clone(),
            host_client,
            plugin: manifest.name.clone(),
            versions,
            primary: primary_ar,
            owned: owned.clone(),
            cache: Arc::new(
                CacheView::new(cache.clone(), manifest.readable().cloned())
                    .confined_to(gate.clone()),
            ),
            gate,
            events: EventSink::new(client, &manifest.name),
            metrics,
            failures: Default::default(),
            rates: Default::default(),
            applied: Default::default(),
        });
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
            leases: Arc::new(leases),
            reconcile_all,
        }
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

    /// Queues every primary for a reconcile (after a version swap).
    pub fn reconcile_all(&self) {
        // Fails only when the controller already stopped.
        let _ = self.reconcile_all.unbounded_send(());
    }

    /// Stops taking new work, waits for reconciles in flight, then releases
    /// the caches.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
            && error.is_panic()
        {
            tracing::error!(%error, "controller task panicked");
        }
    }
}

impl Drop for ControllerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
