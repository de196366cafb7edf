//! The `WasmPlugin` resource (wasm-operator.dev/v1alpha1, cluster-scoped) and
//! its controller: how a cluster operator deploys a plugin.
//!
//! Creating a WasmPlugin loads its plugin into the [`Registry`], editing it
//! reloads it (new source, config, limits), deleting it unloads the plugin
//! (behind the [`FINALIZER`]). The registry's listener (the manager) starts
//! and stops the plugins' controllers; this controller only decides which
//! version serves. Sources are watched: a changed file,
//! ConfigMap or OCI tag is fetched, compiled off the reconcile path and
//! swapped in. A bad new version never replaces a good one; it shows as a
//! `Degraded` condition and a Warning event. See docs/deploying-plugins.md.

mod audit;
pub mod canary;
mod cluster;
mod crds;
mod oci_source;
mod refusal;
mod release;
pub mod source;
pub mod spec;
mod status;
mod watch;
mod worker;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch as channel;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::lease::WriteGate;
use crate::registry::Registry;
use crate::webhook::WebhookBoard;

pub use audit::{AuditRecord, REPORTER, Transition};
pub use canary::{ACTION_ANNOTATION, DIFFS_KEY, diffs_config_map_name, diffs_namespace};
pub use spec::{
    OciSpec, OutsideGrantStatus, Source, StorageMigrationStatus, WasmPlugin, WasmPluginSpec,
    WasmPluginStatus, crd_yaml,
};

/// API group of WasmPlugin.
pub const GROUP: &str = "wasm-operator.dev";
/// API version of WasmPlugin.
pub const VERSION: &str = "v1alpha1";
/// Kind.
pub const KIND: &str = "WasmPlugin";
/// Plural resource name.
pub const PLURAL: &str = "wasmplugins";
/// The CRD's name.
pub const CRD_NAME: &str = "wasmplugins.wasm-operator.dev";
/// Finalizer that unloads the plugin before its WasmPlugin disappears.
pub const FINALIZER: &str = "wasm-operator.dev/unload-plugin";

/// The WasmPlugin API resource.
pub fn api_resource() -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: KIND.to_string(),
        plural: PLURAL.to_string(),
    }
}

/// Why the WasmPlugin controller cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WasmPluginError {
    /// The API server does not serve WasmPlugin.
    #[error(
        "the cluster does not serve {CRD_NAME}; install the CRD with `kubectl apply -f deploy/crds/wasmplugin.yaml`, or pass --plugin FILE.wasm"
    )]
    CrdNotInstalled,
    /// Listing WasmPlugins failed.
    #[error("cannot list WasmPlugins: {0}; check the host's RBAC allows list/watch of {CRD_NAME}")]
    Api(#[source] kube::Error),
}

/// How the WasmPlugin controller runs.
#[derive(Debug, Clone)]
pub struct WasmPluginOptions {
    /// Whether finalizers, status and events are written, consulted before
    /// every write. A replica that may not write (a standby) still loads
    /// every WasmPlugin's plugin (so it can take over warm) but leaves the
    /// objects alone.
    pub writes: WriteGate,
    /// How long a source must be quiet after a change notification before
    /// it is fetched: one file write or ConfigMap update arrives as several
    /// notifications.
    pub source_settle: std::time::Duration,
    /// Where this host's conversion webhook posts its `spec.conversion`
    /// and storage-migration progress (the manager's
    /// [`crate::manager::Manager::webhook_board`]); the default is a board
    /// of its own that no webhook posts on.
    pub webhook: WebhookBoard,
    /// The verification policy of WasmPlugins with an OCI source and no
    /// `spec.verification` of their own (`wasm-operator run
    /// --verification-policy`); `None`: such sources load unverified.
    pub verification: Option<Arc<crate::oci::signature::VerificationPolicy>>,
}

impl Default for WasmPluginOptions {
    fn default() -> Self {
        WasmPluginOptions {
            writes: WriteGate::always_open(),
            source_settle: std::time::Duration::from_millis(300),
            webhook: WebhookBoard::new(),
            verification: None,
        }
    }
}

/// The running WasmPlugin controller. Stop it with [`WasmPluginController::stop`];
/// dropping it stops the supervisor but leaves loaded plugins in the registry.
#[derive(Debug)]
pub struct WasmPluginController {
    cancel: CancellationToken,
    task: JoinHandle<()>,
    audit: audit::AuditTrail,
}

impl WasmPluginController {
    /// [`WasmPluginController::start_with`] the default options (a writer).
    ///
    /// # Errors
    ///
    /// See [`WasmPluginController::start_with`].
    pub async fn start(
        client: kube::Client,
        registry: Registry,
    ) -> Result<WasmPluginController, WasmPluginError> {
        Self::start_with(client, registry, WasmPluginOptions::default()).await
    }

    /// Checks that the CRD is installed, then watches WasmPlugin objects and
    /// loads, reloads and unloads their plugins in `registry`.
    ///
    /// # Errors
    ///
    /// [`WasmPluginError::CrdNotInstalled`] without the CRD,
    /// [`WasmPluginError::Api`] when WasmPlugins cannot be listed.
    pub async fn start_with(
        client: kube::Client,
        registry: Registry,
        options: WasmPluginOptions,
    ) -> Result<WasmPluginController, WasmPluginError> {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(WasmPluginError::CrdNotInstalled);
            }
            Err(e) => return Err(WasmPluginError::Api(e)),
        }
        let cancel = CancellationToken::new();
        let audit = audit::AuditTrail::new(client.clone(), options.writes.clone());
        let task = tokio::spawn(supervise(
            client,
            registry,
            api,
            audit.clone(),
            options,
            cancel.clone(),
        ));
        Ok(WasmPluginController {
            cancel,
            task,
            audit,
        })
    }

    /// Every later transition of every WasmPlugin (the audit trail).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<AuditRecord> {
        self.audit.subscribe()
    }

    /// Stops watching. Loaded plugins stay loaded (stop them with
    /// [`Registry::shutdown`]); deleting WasmPlugins is not needed.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        let _ = (&mut self.task).await;
    }
}

impl Drop for WasmPluginController {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Which WasmPlugin serves which plugin name: one each.
type Claims = Arc<std::sync::Mutex<HashMap<String, String>>>;

struct WorkerHandle {
    updates: channel::Sender<Arc<DynamicObject>>,
    task: JoinHandle<()>,
}

/// Watches WasmPlugins and runs one worker per object.
async fn supervise(
    client: kube::Client,
    registry: Registry,
    api: Api<DynamicObject>,
    audit: audit::AuditTrail,
    options: WasmPluginOptions,
    cancel: CancellationToken,
) {
    let claims = Claims::default();
    let mut workers: HashMap<String, WorkerHandle> = HashMap::new();
    // Names seen during a (re)list: objects deleted while the watch was
    // down get no Delete event and are dropped at InitDone.
    let mut relisted: Option<Vec<String>> = None;
    let mut events = watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let event = tokio::select! {
            _ = cancel.cancelled() => break,
            event = events.next() => event,
        };
        let Some(event) = event else { break };
        // Workers that finished (finalized deletions) are forgotten.
        workers.retain(|_, w| !w.task.is_finished());
        match event {
            Ok(watcher::Event::Init) => relisted = Some(Vec::new()),
            Ok(watcher::Event::InitApply(object) | watcher::Event::Apply(object)) => {
                let Some(name) = object.metadata.name.clone() else {
                    continue;
                };
                if let Some(seen) = relisted.as_mut() {
                    seen.push(name.clone());
                }
                let object = Arc::new(object);
                match workers.get(&name) {
                    Some(worker) => {
                        let _ = worker.updates.send(object);
                    }
                    None => {
                        let (tx, rx) = channel::channel(object.clone());
                        let task = worker::Worker::spawn(
                            client.clone(),
                            registry.clone(),
                            audit.clone(),
                            options.clone(),
                            claims.clone(),
                            object,
                            rx,
                        );
                        workers.insert(name, WorkerHandle { updates: tx, task });
                    }
                }
            }
            Ok(watcher::Event::InitDone) => {
                if let Some(seen) = relisted.take() {
                    let gone: Vec<String> = workers
                        .keys()
                        .filter(|name| !seen.contains(name))
                        .cloned()
                        .collect();
                    for name in gone {
                        stop_worker(workers.remove(&name)).await;
                    }
                }
            }
            Ok(watcher::Event::Delete(object)) => {
                if let Some(name) = object.metadata.name {
                    stop_worker(workers.remove(&name)).await;
                }
            }
            Err(error) => {
                tracing::warn!(%error, "WasmPlugin watch failed; retrying with backoff");
            }
        }
    }
    // Stopping the host: workers end without unloading (the registry's
    // shutdown stops the controllers).
    for (_, worker) in workers {
        worker.task.abort();
    }
}

/// Closes a worker's updates, which makes it unload its plugin and end.
async fn stop_worker(worker: Option<WorkerHandle>) {
    if let Some(WorkerHandle { updates, task }) = worker {
        drop(updates);
        let _ = task.await;
    }
}
