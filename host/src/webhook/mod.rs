//! The CRD conversion webhook: ConversionReview v1 over HTTPS, answered by
//! the plugins' own `migration.convert`, and the round-trip gate a version's
//! `convert` must pass before it serves.
//!
//! One [`ConversionWebhook`] per host serves every loaded plugin whose
//! manifest implements `migration`: a review is routed by the objects'
//! group and kind to that plugin's *stable* version, read from the registry
//! per review, so a swap switches conversions atomically with reconciles.
//! Each converted object is checked ([`review::check_converted`]) before
//! it is returned. The webhook also keeps each such plugin's CRD pointing
//! at itself (`spec.conversion: Webhook` with its client config and
//! `caBundle`, [`crd`]), re-checked whenever the set of plugins changes and
//! periodically, so a restart, a second replica or an edit of the CRD
//! converges to the same configuration.
//!
//! Certificates come from a Secret (generated on first start, shared by
//! restarts and replicas) or from files ([`certs`]).
//!
//! # Guarantees
//!
//! - A review is answered by one plugin version, with that deployment's
//!   call limits; any failure fails the whole review with a message naming
//!   the object, the plugin and its version.
//! - Answers never break the API server's rules: apiVersion as requested,
//!   kind, name, namespace, uid and all metadata but labels and annotations
//!   unchanged.
//! - The host's marks (`wasm-operator.dev/*` annotations and labels,
//!   `app.kubernetes.io/managed-by`) in an answer are the ones the object
//!   came in with, whatever the plugin's `convert` returned
//!   ([`review::keep_host_marks`]); a changed mark is put back, logged and
//!   counted (`wasm_operator_host_marks_restored_total{via="convert"}`).
//! - A version that fails the gate ([`gate::check`]) is never activated by
//!   the WasmPlugin controller: the previous version keeps converting.
//!
//! # Errors
//!
//! [`WebhookError`]: the address cannot be bound, the certificates cannot
//! be made or read.

pub mod admission;
mod board;
pub mod certs;
pub mod crd;
pub mod gate;
pub mod review;
pub mod server;
pub mod storage;
mod storage_progress;

use crate::util::lock;
use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use board::WebhookBoard;
pub use certs::{CertError, Certificates};
pub use crd::ClientConfig;
pub use server::{MAX_REVIEW_BYTES, ServeLimits};
pub use storage_progress::{StorageMigrationProgress, StorageMigrationState, StorageProgressBoard};

use crate::lease::WriteGate;
use crate::registry::Registry;

/// Default name of the Secret holding the generated certificates.
pub const DEFAULT_SECRET_NAME: &str = "wasm-operator-webhook-cert";

/// How often the set of plugins is compared with the CRDs last configured.
const POLL: Duration = Duration::from_millis(500);
/// Every CRD is checked again at least this often (repairs an edited CRD).
const RESYNC: Duration = Duration::from_secs(60);
/// How often CRDs are checked for objects in old storage versions (with
/// [`WebhookOptions::migrate_storage`]).
pub const STORAGE_CHECK: Duration = Duration::from_secs(10);
/// How often a running storage migration publishes its progress at most.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);
/// The pause after a sync the API server refused, before the next try.
const FAILED_SYNC_PAUSE: Duration = Duration::from_secs(5);

/// Where the serving certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertSource {
    /// `tls.crt`, `tls.key` and (optionally) `ca.crt` in a directory
    /// (`--webhook-cert-dir`), e.g. mounted from cert-manager.
    Dir(PathBuf),
    /// A `kubernetes.io/tls` Secret with `ca.crt`; generated on first start.
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
    },
}

/// How a [`ConversionWebhook`] is set up.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// Where to listen (port 0 picks a free port).
    pub addr: SocketAddr,
    /// How the API server reaches the webhook; `None`: the URL
    /// `https://<bound address>/convert` (loopback when bound to all
    /// addresses), which suits `dev` and tests.
    pub client_config: Option<ClientConfig>,
    /// Where the certificate comes from.
    pub certs: CertSource,
    /// Migrate the objects of a migrating plugin's CRD to its storage
    /// version by itself whenever `status.storedVersions` lists more than
    /// that version ([`storage::migrate`], default rate), checked every
    /// [`STORAGE_CHECK`].
    pub migrate_storage: bool,
    /// What the endpoint accepts from a caller (body size, reviews in
    /// flight, connections, handshake and header timeouts).
    pub limits: ServeLimits,
}

/// Why the webhook could not start, or keep its configuration.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The admission webhook configurations could not be written.
    #[error(
        "cannot keep the admission webhook configurations: {0}; the host needs get, list, create, patch and delete on validatingwebhookconfigurations and mutatingwebhookconfigurations"
    )]
    Admission(#[source] kube::Error),
    /// The address is taken or not permitted.
    #[error("cannot serve the conversion webhook on {addr}: {source}; pick another --webhook-addr")]
    Bind {
        /// The `--webhook-addr`.
        addr: SocketAddr,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The certificates could not be made, read or kept.
    #[error(transparent)]
    Certs(#[from] CertError),
    /// A plugin's CRD could not be pointed at the webhook.
    #[error(
        "cannot set spec.conversion of CRD {crd} to this host's webhook: {source}; the host needs patch on customresourcedefinitions"
    )]
    Crd {
        /// The CRD's name.
        crd: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
}

struct Inner {
    client: kube::Client,
    registry: Registry,
    /// Where the conversion target and storage progress are posted for the
    /// WasmPlugin controller.
    board: WebhookBoard,
    addr: SocketAddr,
    client_config: ClientConfig,
    certs: Certificates,
    cancel: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// The CRDs configured by the last complete sync.
    synced: tokio::sync::Mutex<(BTreeSet<String>, Option<Instant>)>,
    migrate_storage: bool,
    /// CRDs whose storage migration runs now.
    migrating: Mutex<BTreeSet<String>>,
    /// Storage migrations start only where this replica may write (the
    /// leader, under leader election).
    writes: Mutex<WriteGate>,
    /// The host's caches, read by admission calls ([`ConversionWebhook::use_caches`]).
    caches: server::SharedCaches,
    /// The admission configurations written by the last complete sync.
    admission_synced: tokio::sync::Mutex<(Vec<serde_json::Value>, Option<Instant>)>,
    /// Plugins this webhook wrote configurations for: when one stops
    /// admitting, its configuration is deleted at once; others only once
    /// the host has run [`RESYNC`] (see [`admission::config::Stale`]).
    admitted: Mutex<BTreeSet<String>>,
    started: Instant,
}

/// The running conversion webhook. Cheap to clone; clones share it.
#[derive(Clone)]
pub struct ConversionWebhook {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ConversionWebhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversionWebhook")
            .field("addr", &self.inner.addr)
            .field("client_config", &self.inner.client_config)
            .finish_non_exhaustive()
    }
}

impl ConversionWebhook {
    /// [`ConversionWebhook::start_with`] a board of its own: for a webhook
    /// no WasmPlugin controller reads from (a bare registry, a benchmark).
    /// A host's webhook posts on the manager's board
    /// ([`crate::manager::Manager::webhook_board`]) instead.
    ///
    /// # Errors
    ///
    /// See [`ConversionWebhook::start_with`].
    pub async fn start(
        client: kube::Client,
        registry: Registry,
        options: WebhookOptions,
    ) -> Result<ConversionWebhook, WebhookError> {
        Self::start_with(client, registry, WebhookBoard::new(), options).await
    }

    /// Gets the certificates, binds, serves, and starts keeping the CRDs of
    /// the migrating plugins of `registry` pointed at this webhook. Posts
    /// on `board` the `spec.conversion` it serves (until
    /// [`ConversionWebhook::shutdown`]) and where its storage migrations
    /// stand, for the WasmPlugin controller that reads the same board.
    ///
    /// # Errors
    ///
    /// [`WebhookError::Certs`] and [`WebhookError::Bind`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn example(client: kube::Client, manager: wasm_operator::manager::Manager)
    /// # -> Result<(), Box<dyn std::error::Error>> {
    /// use wasm_operator::webhook::{CertSource, ConversionWebhook, WebhookOptions};
    ///
    /// let webhook = ConversionWebhook::start_with(
    ///     client,
    ///     manager.registry().clone(),
    ///     manager.webhook_board().clone(),
    ///     WebhookOptions {
    ///         addr: ([0, 0, 0, 0], 9443).into(),
    ///         client_config: None,
    ///         certs: CertSource::Secret {
    ///             namespace: "default".into(),
    ///             name: "wasm-operator-webhook-cert".into(),
    ///         },
    ///         migrate_storage: true,
    ///         limits: Default::default(),
    ///     },
    /// )
    /// .await?;
    /// webhook.shutdown().await;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start_with(
        client: kube::Client,
        registry: Registry,
        board: WebhookBoard,
        options: WebhookOptions,
    ) -> Result<ConversionWebhook, WebhookError> {
        let listener = tokio::net::TcpListener::bind(options.addr)
            .await
            .map_err(|source| WebhookError::Bind {
                addr: options.addr,
                source,
            })?;
        let bound = listener.local_addr().map_err(|source| WebhookError::Bind {
            addr: options.addr,
            source,
        })?;
        let client_config = options.client_config.clone().unwrap_or_else(|| {
            let ip = match bound.ip() {
                ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                ip => ip,
            };
            ClientConfig::Url(format!(
                "https://{}{}",
                SocketAddr::new(ip, bound.port()),
                crd::PATH
            ))
        });
        let certs = match &options.certs {
            CertSource::Dir(dir) => Certificates::from_dir(dir)?,
            CertSource::Secret { namespace, name } => {
                Certificates::from_secret(&client, namespace, name, &client_config.hosts()).await?
            }
        };
        let origin = match &options.certs {
            CertSource::Dir(dir) => format!("directory {}", dir.display()),
            CertSource::Secret { namespace, name } => format!("Secret {namespace}/{name}"),
        };
        let tls = certs.server_config(&origin)?;
        let cancel = CancellationToken::new();
        let webhook = ConversionWebhook {
            inner: Arc::new(Inner {
                client,
                registry: registry.clone(),
                board: board.clone(),
                addr: bound,
                client_config,
                certs,
                cancel: cancel.clone(),
                tasks: Mutex::new(Vec::new()),
                synced: tokio::sync::Mutex::new((BTreeSet::new(), None)),
                migrate_storage: options.migrate_storage,
                migrating: Mutex::new(BTreeSet::new()),
                writes: Mutex::new(WriteGate::always_open()),
                caches: Arc::default(),
                admission_synced: tokio::sync::Mutex::default(),
                admitted: Mutex::default(),
                started: Instant::now(),
            }),
        };
        // The WasmPlugin controller points a plugin's CRD here before its
        // first version activates (see `WebhookBoard::set_conversion_target`).
        board.set_conversion_target(Some(webhook.desired_conversion()));
        let serving = tokio::spawn(server::serve(
            listener,
            tls,
            registry,
            webhook.inner.caches.clone(),
            options.limits,
            cancel.clone(),
        ));
        let keeper = tokio::spawn(keep_configurations(webhook.clone(), cancel));
        *webhook.tasks() = vec![serving, keeper];
        tracing::info!(addr = %bound, client_config = ?webhook.inner.client_config, certificates = %origin, "serving the CRD conversion webhook");
        Ok(webhook)
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, Vec<JoinHandle<()>>> {
        crate::util::lock(&self.inner.tasks)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// How the API server reaches it.
    pub fn client_config(&self) -> &ClientConfig {
        &self.inner.client_config
    }

    /// The `caBundle` written into the CRDs (base64 of the CA's PEM).
    pub fn ca_bundle(&self) -> String {
        self.inner.certs.ca_bundle()
    }

    /// The `spec.conversion` this webhook writes into the CRDs.
    pub fn desired_conversion(&self) -> serde_json::Value {
        crd::desired_conversion(&self.inner.client_config, &self.ca_bundle())
    }

    /// The CRDs of the loaded plugins that implement `migration`
    /// (`<plural>.<group>` of their primary kinds).
    pub fn migrating_crds(&self) -> BTreeSet<String> {
        self.migrating_plugins().into_keys().collect()
    }

    /// The CRDs of [`ConversionWebhook::migrating_crds`], each with the
    /// name of the plugin that converts for it.
    fn migrating_plugins(&self) -> std::collections::BTreeMap<String, String> {
        let registry = &self.inner.registry;
        registry
            .loaded()
            .into_iter()
            .filter_map(|info| registry.current(&info.name))
            .filter(|v| v.plugin.manifest().implements.convert)
            .map(|v| {
                let primary = &v.plugin.manifest().primary;
                (
                    format!("{}.{}", primary.plural, primary.group),
                    v.info.name.clone(),
                )
            })
            .collect()
    }

    /// Points the CRD of every migrating plugin at this webhook now (the
    /// background task does the same on every change of the plugins and
    /// every minute). Returns the CRDs it had to change.
    ///
    /// # Errors
    ///
    /// [`WebhookError::Crd`] for the first CRD that cannot be patched.
    pub async fn sync_crds(&self) -> Result<Vec<String>, WebhookError> {
        let mut synced = self.inner.synced.lock().await;
        let crds = self.migrating_crds();
        let desired = self.desired_conversion();
        let mut changed = Vec::new();
        for name in &crds {
            let wrote = crd::ensure(&self.inner.client, name, &desired)
                .await
                .map_err(|source| WebhookError::Crd {
                    crd: name.clone(),
                    source,
                })?;
            if wrote {
                tracing::info!(crd = %name, "pointed the CRD's conversion at this host's webhook");
                changed.push(name.clone());
            }
        }
        *synced = (crds, Some(Instant::now()));
        Ok(changed)
    }

    /// Lets admission calls read `cache` (the manager's shared caches), as
    /// reconciles do; until then a plugin's cache reads during admission
    /// fail, naming why.
    pub fn use_caches(&self, cache: crate::cache::SharedCache) {
        *lock(&self.inner.caches) = Some(cache);
    }

    /// The webhook configurations every admitting plugin needs now
    /// ([`admission::config::desired`]).
    pub fn desired_admission(&self) -> Vec<serde_json::Value> {
        let registry = &self.inner.registry;
        let client_config = self.desired_conversion()["webhook"]["clientConfig"].clone();
        let mut out = Vec::new();
        for info in registry.loaded() {
            let Some(versions) = registry.versions(&info.name) else {
                continue;
            };
            let stable = versions.current().stable.clone();
            let manifest = stable.plugin.manifest();
            let (validating, mutating) = admission::config::desired(
                admission::config::AdmittingPlugin {
                    plugin: &manifest.name,
                    primary: &manifest.primary,
                    functions: stable.plugin.admission_functions(),
                    settings: &stable.admission,
                },
                &client_config,
            );
            out.extend(validating);
            out.extend(mutating);
        }
        out
    }

    /// Writes the webhook configurations of every admitting plugin and
    /// deletes the host's others (the background task does the same on
    /// every change and every minute). Returns what it changed.
    ///
    /// # Errors
    ///
    /// [`WebhookError::Admission`] with the API server's answer.
    pub async fn sync_admission(&self) -> Result<Vec<String>, WebhookError> {
        let mut synced = self.inner.admission_synced.lock().await;
        let desired = self.desired_admission();
        let plugins: BTreeSet<String> = desired
            .iter()
            .filter_map(|c| c["metadata"]["labels"][admission::config::PLUGIN_LABEL].as_str())
            .map(str::to_string)
            .collect();
        let unloaded: BTreeSet<String> = lock(&self.inner.admitted)
            .difference(&plugins)
            .cloned()
            .collect();
        let stale = if self.inner.started.elapsed() >= RESYNC {
            admission::config::Stale::All
        } else {
            admission::config::Stale::Of(&unloaded)
        };
        let changed = admission::config::sync(&self.inner.client, &desired, stale)
            .await
            .map_err(WebhookError::Admission)?;
        lock(&self.inner.admitted).extend(plugins);
        for name in &changed {
            tracing::info!(configuration = %name, "admission webhook configuration synced");
        }
        *synced = (desired, Some(Instant::now()));
        Ok(changed)
    }

    /// Starts storage migrations only while `gate` lets this replica write
    /// (the webhook itself serves on every replica).
    pub fn gate_writes(&self, gate: WriteGate) {
        *lock(&self.inner.writes) = gate;
    }

    /// Stops serving and keeping CRDs.
    pub async fn shutdown(&self) {
        let board = &self.inner.board;
        if board.conversion_target() == Some(self.desired_conversion()) {
            board.set_conversion_target(None);
        }
        self.inner.cancel.cancel();
        let tasks = std::mem::take(&mut *self.tasks());
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// Points the CRD of `manifest`'s primary kind at the conversion webhook
/// that posts on `board` ([`WebhookBoard::conversion_target`]), when the
/// plugin implements `migration` and a webhook serves; returns whether it
/// wrote. Call it *before* the version activates: the plugin's watch opens
/// on activation, and kube-apiserver keeps serving a watch opened before a
/// CRD change with the CRD's old conversion (it tears that storage down a
/// second or more later), so a watch opened while the CRD still said
/// `strategy: None` would hand the plugin objects of another version with
/// only their apiVersion rewritten.
///
/// # Errors
///
/// [`WebhookError::Crd`] when the CRD cannot be read or patched.
pub async fn point_before_activation(
    client: &kube::Client,
    board: &WebhookBoard,
    manifest: &crate::contract::Manifest,
) -> Result<bool, WebhookError> {
    if !manifest.implements.convert {
        return Ok(false);
    }
    let Some(desired) = board.conversion_target() else {
        return Ok(false);
    };
    let name = format!("{}.{}", manifest.primary.plural, manifest.primary.group);
    crd::ensure(client, &name, &desired)
        .await
        .map_err(|source| WebhookError::Crd { crd: name, source })
}

/// Starts a storage migration of every migrating plugin's CRD whose
/// `storedVersions` lists more than its storage version, unless one runs.
/// Where each stands is published on the webhook's [`StorageProgressBoard`]
/// ([`WebhookBoard::storage_progress`]) under the plugin's name (the
/// WasmPlugin status shows it).
async fn start_storage_migrations(webhook: &ConversionWebhook, cancel: &CancellationToken) {
    if !lock(&webhook.inner.writes).may_write() {
        return;
    }
    let crds: kube::Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        kube::Api::all(webhook.inner.client.clone());
    let board = webhook.inner.board.storage_progress();
    for (name, plugin) in webhook.migrating_plugins() {
        if lock(&webhook.inner.migrating).contains(&name) {
            continue;
        }
        let Ok(Some(crd)) = crds.get_opt(&name).await else {
            continue;
        };
        let storage = crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone());
        let stored = crd
            .status
            .and_then(|s| s.stored_versions)
            .unwrap_or_default();
        let Some(storage) = storage else { continue };
        let known = board.get(&plugin).filter(|p| p.crd == name);
        let start = storage::RunProgress::starting(&name, &storage, &stored, known.as_ref());
        if storage::is_migrated(&stored, &storage) {
            // Nothing to do: say so once (a run another replica or an
            // earlier start finished leaves no stale "in progress").
            if known.is_none_or(|p| !p.state.is_settled()) {
                board.publish(&plugin, start.settled());
            }
            continue;
        }
        lock(&webhook.inner.migrating).insert(name.clone());
        tracing::info!(crd = %name, %plugin, stored = ?stored, %storage, "migrating objects to the storage version");
        board.publish(&plugin, start.started());
        let client = webhook.inner.client.clone();
        let this = webhook.clone();
        let cancel = cancel.clone();
        let task = tokio::spawn(async move {
            let options = storage::StorageOptions::default();
            let board = this.inner.board.storage_progress();
            let mut published = Instant::now();
            let run = storage::migrate(&client, &name, &options, |migrated, total| {
                // Once a second at most: each publication may become a
                // status write.
                if published.elapsed() >= PROGRESS_EVERY || total == Some(migrated) {
                    published = Instant::now();
                    board.publish(&plugin, start.advanced(migrated, total));
                }
            });
            let outcome = tokio::select! {
                () = cancel.cancelled() => None,
                outcome = run => Some(outcome),
            };
            match outcome {
                Some(Ok(report)) => {
                    if report.done {
                        tracing::info!(crd = %name, migrated = report.migrated, storage = %report.storage_version, "storage migration finished; storedVersions is the storage version alone");
                    } else {
                        tracing::warn!(crd = %name, refused = ?report.refused, "storage migration left objects in old versions; storedVersions kept, retrying later");
                    }
                    board.publish(&plugin, start.finished(&report));
                }
                Some(Err(error)) => {
                    tracing::warn!(crd = %name, %error, "storage migration stopped; it resumes later");
                    let at = board.get(&plugin).map_or(0, |p| p.migrated);
                    board.publish(&plugin, start.interrupted(at, &error));
                }
                // Stopped with the host: the progress annotation resumes it.
                None => {}
            }
            lock(&this.inner.migrating).remove(&name);
        });
        webhook.tasks().push(task);
    }
}

/// Re-syncs the CRDs and the admission webhook configurations whenever
/// the set of plugins they depend on changes, and every [`RESYNC`]; with
/// `migrate_storage`, starts storage migrations every [`STORAGE_CHECK`].
async fn keep_configurations(webhook: ConversionWebhook, cancel: CancellationToken) {
    let mut storage_checked: Option<Instant> = None;
    loop {
        if webhook.inner.migrate_storage
            && storage_checked.is_none_or(|at| at.elapsed() >= STORAGE_CHECK)
            && webhook.inner.synced.lock().await.1.is_some()
        {
            storage_checked = Some(Instant::now());
            start_storage_migrations(&webhook, &cancel).await;
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(POLL) => {}
        }
        let due = {
            let synced = webhook.inner.synced.lock().await;
            synced.1.is_none_or(|at| at.elapsed() >= RESYNC) || synced.0 != webhook.migrating_crds()
        };
        let admission_due = {
            let synced = webhook.inner.admission_synced.lock().await;
            synced.1.is_none_or(|at| at.elapsed() >= RESYNC)
                || synced.0 != webhook.desired_admission()
        };
        if admission_due && let Err(error) = webhook.sync_admission().await {
            tracing::warn!(%error, "retrying in {}s", FAILED_SYNC_PAUSE.as_secs());
        }
        if due && let Err(error) = webhook.sync_crds().await {
            tracing::warn!(%error, "retrying in {}s", FAILED_SYNC_PAUSE.as_secs());
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(FAILED_SYNC_PAUSE) => {}
            }
        }
    }
}
