//! `wasm-operator dev`: a complete local loop in one process. Starts the
//! embedded devcluster, installs the WasmPlugin and example CRDs, builds the
//! workspace's plugins, deploys each as a file-source WasmPlugin object,
//! applies the example objects; the WasmPlugin controller reloads a plugin
//! whenever its `.wasm` changes on disk.
//!
//! The host is wired by the same [`Manager`] as `wasm-operator run` without
//! `--plugin`: dev adds the cluster, the builds and the objects around it.
//! This is library code so that tests drive exactly what the CLI runs; the
//! CLI only parses arguments into [`DevOptions`] and prints [`DevSession`]'s
//! summary.
//!
//! Run inside a plugin author's own crate instead ([`author::AuthorCrate`]),
//! dev builds and serves that one plugin, installs the CRD it carries,
//! applies its `samples/` and rebuilds it on save.

pub mod author;
pub(crate) mod build;
pub(crate) mod cluster;
pub mod manifests;
pub(crate) mod progress;
pub(crate) mod wasmplugins;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cluster::{Cluster, RealCluster, RealClusterError};
use devcluster::{DevCluster, DevClusterError, DevClusterOptions};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::contract::HostObjects;
use crate::manager::{Manager, ManagerError, ManagerOptions, Role};
use crate::registry::{Registry, RegistryOptions};
use crate::wasmplugin::{AuditRecord, WasmPlugin};
use crate::webhook::{
    CertSource, ConversionWebhook, DEFAULT_SECRET_NAME, WebhookError, WebhookOptions,
};
use build::{BuildError, PluginCrate};
use kube::CustomResourceExt;
use manifests::ManifestError;
use progress::Step;
pub use wasmplugins::{LoadEvent, LoadOutcome, PluginFilter};

/// How long dev waits for the first verdict on each plugin it deploys.
const FIRST_LOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// How to run a dev session.
#[derive(Debug, Clone)]
pub struct DevOptions {
    /// Port of the embedded API server on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// SQLite file keeping the cluster's state across runs; `None` keeps it in memory.
    pub data: Option<PathBuf>,
    /// Where to write the kubeconfig; `None` writes a temporary file.
    pub kubeconfig: Option<PathBuf>,
    /// The workspace root builds run in.
    pub workspace_dir: PathBuf,
    /// Directory of plugin crates (each with a Cargo.toml).
    pub plugins_dir: PathBuf,
    /// Directory of examples (`<name>/crd.yaml` and object files).
    pub examples_dir: PathBuf,
    /// Directory holding the built `.wasm` files, watched for changes.
    pub wasm_dir: PathBuf,
    /// Build the plugin crates before loading them.
    pub build: bool,
    /// Apply the example objects (not only the CRDs).
    pub apply_examples: bool,
    /// Example directories whose objects are not applied (test plugins).
    pub skip_examples: Vec<String>,
    /// How long a plugin file must be quiet before it is reloaded (the
    /// WasmPlugin controller's settle time for file changes).
    pub debounce: Duration,
    /// Serve /metrics, /healthz and /readyz here; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Options for the plugin registry (concurrency, cache directory, limits).
    pub registry: RegistryOptions,
    /// `config` passed to every plugin.
    pub plugin_config: Value,
    /// The plugin author's crate dev runs in (see [`DevOptions::for_author_crate`]);
    /// `None` for this repository's workspace.
    pub author: Option<author::AuthorCrate>,
    /// Run on a real control plane started from this `realcluster` binary
    /// (`dev --real`) instead of the embedded devcluster.
    pub real: Option<PathBuf>,
    /// Simulate workloads on the embedded devcluster (default on): fake
    /// nodes, Pods that become Ready, Deployments, StatefulSets, DaemonSets
    /// and Jobs whose status moves as the real controllers would move it
    /// (see `devcluster::stages`). The real control plane runs them for real.
    pub simulate_workloads: bool,
    /// kwok Stage files added to (or replacing by name) the simulation's defaults.
    pub stages: Vec<PathBuf>,
    /// The CRD conversion webhook for plugins that implement migration
    /// (default: 127.0.0.1, a free port, certificates in Secret
    /// `default/wasm-operator-webhook-cert`); `None` serves none.
    pub webhook: Option<WebhookOptions>,
}

/// The host's objects in a `dev` session: the webhook certificate Secret
/// and the canary diffs ConfigMaps are protected by name, but no namespace
/// is reserved (the throwaway devcluster keeps everything, the examples
/// included, in `default`).
fn dev_host_objects(webhook: Option<&WebhookOptions>) -> HostObjects {
    let host = HostObjects::default().with_canary_diffs(&crate::wasmplugin::diffs_namespace());
    match webhook.map(|w| &w.certs) {
        Some(CertSource::Secret { namespace, name }) => {
            host.with_webhook_secret(namespace, name, false)
        }
        _ => host,
    }
}

/// The webhook `dev` serves by default: loopback, a free port, the
/// certificate kept in the cluster (so a `--data` session keeps its CA).
pub fn default_webhook() -> WebhookOptions {
    WebhookOptions {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        client_config: None,
        certs: CertSource::Secret {
            namespace: "default".to_string(),
            name: DEFAULT_SECRET_NAME.to_string(),
        },
        migrate_storage: true,
        limits: Default::default(),
    }
}

impl DevOptions {
    /// Defaults for a workspace checked out at `workspace_dir`: `plugins/`,
    /// `examples/`, cargo's release dir for `wasm32-wasip2`, a free port.
    pub fn for_workspace(workspace_dir: impl Into<PathBuf>) -> DevOptions {
        let workspace_dir = workspace_dir.into();
        DevOptions {
            port: 0,
            data: None,
            kubeconfig: None,
            plugins_dir: workspace_dir.join("plugins"),
            examples_dir: workspace_dir.join("examples"),
            wasm_dir: build::default_wasm_dir(&workspace_dir),
            registry: dev_registry_options(&workspace_dir),
            workspace_dir,
            build: true,
            apply_examples: true,
            skip_examples: vec!["faulty".to_string()],
            debounce: Duration::from_millis(500),
            metrics_addr: None,
            plugin_config: Value::Object(Default::default()),
            real: None,
            simulate_workloads: true,
            stages: Vec::new(),
            webhook: Some(default_webhook()),
            author: None,
        }
    }

    /// Defaults for a plugin author's crate: build it in its directory, load
    /// its component from its own target directory, apply its `samples/`,
    /// no examples and no other plugin.
    pub fn for_author_crate(author: author::AuthorCrate) -> DevOptions {
        let mut options = DevOptions::for_workspace(&author.dir);
        options.wasm_dir = author.wasm_dir();
        options.examples_dir = author.samples_dir();
        options.skip_examples = Vec::new();
        options.author = Some(author);
        options
    }
}

/// Why a dev session could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    /// The embedded API server did not start.
    #[error("cannot start the embedded devcluster: {0}")]
    Cluster(#[from] DevClusterError),
    /// The real control plane (`dev --real`) did not start.
    #[error(transparent)]
    RealCluster(#[from] RealClusterError),
    /// The examples' CRDs could not be applied or did not become established.
    #[error("cannot install the example CRDs: {0}")]
    Crds(#[source] ManifestError),
    /// The `WasmPlugin` object for a built component could not be applied.
    #[error("cannot deploy plugin {} as WasmPlugin {name}: {source}", file.display())]
    Deploy {
        /// The `WasmPlugin` object's name.
        name: String,
        /// The component file it points at.
        file: PathBuf,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// The example objects could not be applied.
    #[error("cannot apply the example objects: {0}")]
    Examples(#[source] ManifestError),
    /// The author's plugin could not be read or its CRD installed.
    #[error(transparent)]
    Author(#[from] author::AuthorError),
    /// Building the workspace's plugins failed.
    #[error("cannot build the plugins: {0}")]
    Build(#[from] BuildError),
    /// The manager around the devcluster could not start.
    #[error(transparent)]
    Start(#[from] ManagerError),
    /// The conversion webhook could not start or configure a CRD.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// Not one component of the wasm directory loaded: a session without a
    /// plugin has nothing to show.
    #[error(
        "no plugin could be loaded from {}; build them (`cargo build --release --target wasm32-wasip2`) or point --wasm-dir at a directory of .wasm files",
        dir.display()
    )]
    NoPlugins {
        /// The directory of `.wasm` files (`--wasm-dir`).
        dir: PathBuf,
    },
}

/// What a session did while starting, for the CLI to print.
#[derive(Debug, Clone, Default)]
pub struct DevSummary {
    /// CRDs installed and established.
    pub crds: Vec<String>,
    /// Every plugin file found at start and what loading it did.
    pub plugins: Vec<LoadEvent>,
    /// `Kind/name` of every example object applied.
    pub applied: Vec<String>,
    /// Address the telemetry endpoint is bound to, if served.
    pub metrics_addr: Option<SocketAddr>,
    /// The resources (plurals) of the author's plugin, primary first, for
    /// the kubectl hint; empty in the workspace.
    pub resources: Vec<String>,
}

/// A running dev session. Call [`DevSession::shutdown`] to stop it cleanly;
/// dropping it stops the cluster too, without waiting for in-flight calls.
pub struct DevSession {
    cluster: Cluster,
    manager: Manager,
    webhook: Option<ConversionWebhook>,
    events: broadcast::Sender<LoadEvent>,
    /// Stops the event forwarder when the session is dropped without `shutdown`.
    cancel: DropGuard,
    forwarder: JoinHandle<()>,
    /// Rebuilds the author's crate on save (`dev` inside a plugin crate).
    rebuilder: Option<JoinHandle<()>>,
    author: Option<author::AuthorCrate>,
    wasm_dir: PathBuf,
    summary: DevSummary,
}

/// Starts the embedded devcluster, or the real control plane with `--real`.
async fn start_cluster(options: &DevOptions) -> Result<Cluster, DevError> {
    match &options.real {
        None => {
            let step = Step::start("Starting the embedded devcluster");
            let cluster = DevCluster::start(DevClusterOptions {
                port: options.port,
                data: options.data.clone(),
                kubeconfig: options.kubeconfig.clone(),
                simulate_workloads: options.simulate_workloads,
                stages: options.stages.clone(),
                ..DevClusterOptions::default()
            })
            .await;
            match cluster {
                Ok(cluster) => {
                    step.done(cluster.url());
                    Ok(Cluster::Embedded(cluster))
                }
                Err(error) => {
                    step.failed();
                    Err(error.into())
                }
            }
        }
        Some(binary) => {
            if options.data.is_some() {
                return Err(RealClusterError::DataWithReal.into());
            }
            let step = Step::start(
                "Starting the real control plane (kube-apiserver, etcd, kube-controller-manager)",
            );
            match RealCluster::start(binary, options.port, options.kubeconfig.as_deref()).await {
                Ok(cluster) => {
                    let cluster = Cluster::Real(cluster);
                    step.done(cluster.describe());
                    Ok(cluster)
                }
                Err(error) => {
                    step.failed();
                    Err(error.into())
                }
            }
        }
    }
}

/// Installs the WasmPlugin and example CRDs, then finds the plugin crates
/// under `options.plugins_dir` and (unless `--no-build`) builds them.
async fn install_and_build(
    client: &kube::Client,
    options: &DevOptions,
    summary: &mut DevSummary,
) -> Result<Vec<build::PluginCrate>, DevError> {
    if let Some(author) = &options.author {
        return install_and_build_author(client, options, author, summary).await;
    }
    let step = Step::start("Installing the WasmPlugin and example CRDs");
    match install_crds(client, &options.examples_dir).await {
        Ok(crds) => {
            step.done(if crds.is_empty() {
                "none found".to_string()
            } else {
                crds.join(", ")
            });
            summary.crds = crds;
        }
        Err(error) => {
            step.failed();
            return Err(DevError::Crds(error));
        }
    }

    let crates = if options.plugins_dir.is_dir() {
        build::find_plugin_crates(&options.plugins_dir)?
    } else {
        Vec::new()
    };
    if options.build && !crates.is_empty() {
        let names: Vec<&str> = crates.iter().map(|c| c.package.as_str()).collect();
        let step = Step::start(format!("Building plugins {}", names.join(", ")));
        match build::build_plugins(&options.workspace_dir, &crates).await {
            Ok(()) => step.done("done"),
            Err(error) => {
                step.failed();
                return Err(error.into());
            }
        }
    }
    Ok(crates)
}

impl DevSession {
    /// Starts the cluster, installs CRDs, builds and loads plugins, applies
    /// the examples and starts watching the plugin files.
    ///
    /// # Errors
    ///
    /// [`DevError`] naming the step that failed (the cluster, the CRDs, a
    /// plugin build, the manager or the webhook); whatever had started is
    /// stopped again.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use wasm_operator::dev::{DevOptions, DevSession};
    ///
    /// # async fn example() -> Result<(), wasm_operator::dev::DevError> {
    /// let session = DevSession::start(DevOptions::for_workspace(".")).await?;
    /// let client = session.client(); // talks to the embedded devcluster
    /// # drop(client);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn start(options: DevOptions) -> Result<DevSession, DevError> {
        let mut summary = DevSummary::default();

        let cluster = start_cluster(&options).await?;
        let client = cluster.client();
        let crates = install_and_build(&client, &options, &mut summary).await?;
        let filter = match &options.author {
            Some(author) => PluginFilter::Names([author.wasm_file_name()].into()),
            None => plugin_filter(&crates),
        };

        let manager = Manager::start(
            client,
            ManagerOptions {
                registry: options.registry.clone(),
                role: Role::Writer,
                // One process against its own cluster: no election.
                leader_election: None,
                shards: 1,
                metrics_addr: options.metrics_addr,
                source_settle: options.debounce,
                host_objects: dev_host_objects(options.webhook.as_ref()),
                // `dev` loads the plugins it builds: nothing to verify.
                verification: None,
            },
        )
        .await?;
        summary.metrics_addr = manager.telemetry_addr();
        // The webhook serves before plugins load: the round-trip gate does
        // not need it, but objects of a plugin's older API version do.
        let webhook = match &options.webhook {
            Some(webhook) => match manager.start_webhook(webhook.clone()).await {
                Ok(webhook) => Some(webhook),
                Err(error) => {
                    manager.shutdown().await;
                    return Err(error.into());
                }
            },
            None => None,
        };
        if let Err(error) = manager.serve_wasmplugins().await {
            if let Some(webhook) = &webhook {
                webhook.shutdown().await;
            }
            manager.shutdown().await;
            return Err(error.into());
        }
        match finish_start(
            &options,
            &cluster,
            &manager,
            webhook.as_ref(),
            filter,
            summary,
        )
        .await
        {
            Ok((summary, events, forwarder, cancel)) => {
                Ok(DevSession {
                    rebuilder: options.author.clone().filter(|_| options.build).map(
                        |plugin_crate| {
                            author::spawn_rebuilder(
                                plugin_crate,
                                options.debounce,
                                events.clone(),
                                cancel.clone(),
                            )
                        },
                    ),
                    author: options.author.clone(),
                    cluster,
                    manager,
                    webhook,
                    events,
                    cancel: cancel.drop_guard(),
                    forwarder,
                    wasm_dir: options.wasm_dir,
                    summary,
                })
            }
            Err(error) => {
                // Controllers stop before the cluster (dropped here) goes away.
                if let Some(webhook) = &webhook {
                    webhook.shutdown().await;
                }
                manager.shutdown().await;
                Err(error)
            }
        }
    }

    /// A client for the embedded cluster.
    pub fn client(&self) -> kube::Client {
        self.cluster.client()
    }

    /// The embedded cluster's URL.
    pub fn url(&self) -> &str {
        self.cluster.url()
    }

    /// The kubeconfig pointing at the embedded cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        self.cluster.kubeconfig_path()
    }

    /// The plugin registry serving the loaded plugins.
    pub fn registry(&self) -> &Registry {
        self.manager.registry()
    }

    /// The conversion webhook, when served.
    pub fn webhook(&self) -> Option<&ConversionWebhook> {
        self.webhook.as_ref()
    }

    /// The host wired for this session.
    pub fn manager(&self) -> &Manager {
        &self.manager
    }

    /// The author's crate this session builds and serves, if any.
    pub fn author(&self) -> Option<&author::AuthorCrate> {
        self.author.as_ref()
    }

    /// The directory watched for plugin changes.
    pub fn wasm_dir(&self) -> &Path {
        &self.wasm_dir
    }

    /// What happened while starting.
    pub fn summary(&self) -> &DevSummary {
        &self.summary
    }

    /// Every later (re)load of a plugin file, as it happens (the WasmPlugin
    /// controller's transitions of the session's plugins).
    pub fn subscribe(&self) -> broadcast::Receiver<LoadEvent> {
        self.events.subscribe()
    }

    /// A kubectl command that shows what the examples produced: the
    /// author's plugin's primary and owned resources, or the webapp example's.
    pub fn kubectl_hint(&self) -> String {
        let resources = if self.summary.resources.is_empty() {
            "webapps,deployments,services".to_string()
        } else {
            self.summary.resources.join(",")
        };
        format!(
            "kubectl --kubeconfig {} get {resources} -A",
            self.kubeconfig_path().display()
        )
    }

    /// Stops watching, lets the controllers finish their in-flight calls and
    /// stop, then stops the cluster.
    pub async fn shutdown(self) {
        if let Some(webhook) = &self.webhook {
            webhook.shutdown().await;
        }
        self.manager.shutdown().await;
        drop(self.cancel);
        let _ = self.forwarder.await;
        if let Some(rebuilder) = self.rebuilder {
            let _ = rebuilder.await;
        }
        let mut cluster = self.cluster;
        cluster.stop().await;
    }
}

/// The parts of a start that need the running manager: deploy the plugin
/// files as WasmPlugins and wait for each one's first verdict, apply the
/// examples, and forward later transitions as [`LoadEvent`]s.
async fn finish_start(
    options: &DevOptions,
    cluster: &Cluster,
    manager: &Manager,
    webhook: Option<&ConversionWebhook>,
    filter: PluginFilter,
    mut summary: DevSummary,
) -> Result<
    (
        DevSummary,
        broadcast::Sender<LoadEvent>,
        JoinHandle<()>,
        CancellationToken,
    ),
    DevError,
> {
    let client = cluster.client();
    let files = wasmplugins::plugin_files(&options.wasm_dir, &filter);
    let step = Step::start(format!(
        "Loading plugins from {}",
        options.wasm_dir.display()
    ));
    // Subscribed before any object exists, so no transition is missed. One
    // receiver for the start and the forwarder after it: a load reported at
    // start is not reported again to later subscribers.
    let Some(mut transitions) = manager.wasmplugin_transitions().await else {
        step.failed();
        return Err(DevError::NoPlugins {
            dir: options.wasm_dir.clone(),
        });
    };
    let mut by_name: BTreeMap<String, PathBuf> = BTreeMap::new();
    for file in &files {
        let name = wasmplugins::object_name(file);
        let path = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        let mut object = wasmplugins::wasmplugin_object(&name, &path, &options.plugin_config);
        if options.author.is_some() {
            wasmplugins::grant_crds(&mut object);
        }
        if let Err(source) = wasmplugins::apply_wasmplugin(&client, &name, &object).await {
            step.failed();
            return Err(DevError::Deploy {
                name,
                file: file.clone(),
                source,
            });
        }
        by_name.insert(name, file.clone());
    }
    let mut verdicts = first_outcomes(&mut transitions, &by_name).await;
    for file in &files {
        let outcome = verdicts
            .remove(file)
            .unwrap_or_else(|| {
                LoadOutcome::Failed(format!(
                    "plugin {} was not loaded within {FIRST_LOAD_TIMEOUT:?}; see `kubectl get wp {}` for why",
                    file.display(),
                    wasmplugins::object_name(file)
                ))
            });
        summary.plugins.push(LoadEvent {
            file: file.clone(),
            outcome,
        });
    }
    let loaded = summary
        .plugins
        .iter()
        .filter(|event| matches!(event.outcome, LoadOutcome::Loaded { .. }))
        .count();
    if loaded == 0 {
        step.failed();
        return Err(DevError::NoPlugins {
            dir: options.wasm_dir.clone(),
        });
    }
    step.done(format!("{loaded} of {} loaded", files.len()));

    // Objects of a plugin's other API versions are converted by its
    // webhook: point the CRDs at it before applying any.
    if let Some(webhook) = webhook {
        let step = Step::start("Pointing CRD conversion at the host's webhook");
        match webhook.sync_crds().await {
            Ok(_) => {
                let crds = webhook.migrating_crds();
                step.done(if crds.is_empty() {
                    format!("none needed ({})", webhook.addr())
                } else {
                    format!(
                        "{} ({})",
                        crds.into_iter().collect::<Vec<_>>().join(", "),
                        webhook.addr()
                    )
                });
            }
            Err(error) => {
                step.failed();
                return Err(error.into());
            }
        }
    }

    if options.apply_examples {
        let step = Step::start("Applying example objects");
        let mut skip = options.skip_examples.clone();
        let converted = webhook
            .map(ConversionWebhook::migrating_crds)
            .unwrap_or_default();
        let unconverted = match options.author {
            Some(_) => Vec::new(),
            None => unconverted_examples(&options.examples_dir, &converted),
        };
        for (example, crd) in unconverted {
            tracing::warn!(
                example = %example,
                crd = %crd,
                "not applying the objects of examples/{example}: CRD {crd} serves several versions and no loaded plugin converts them (build and load its plugin)"
            );
            skip.push(example);
        }
        let applied = match &options.author {
            Some(author) => apply_samples(&client, &author.samples_dir()).await,
            None => apply_examples(&client, &options.examples_dir, &skip).await,
        };
        match applied {
            Ok(applied) => {
                step.done(format!("{} objects", applied.len()));
                summary.applied = applied;
            }
            Err(error) => {
                step.failed();
                return Err(DevError::Examples(error));
            }
        }
    }
    let (events, _) = broadcast::channel(64);
    let cancel = CancellationToken::new();
    let forwarder = tokio::spawn(forward_transitions(
        transitions,
        by_name,
        events.clone(),
        cancel.clone(),
    ));
    Ok((summary, events, forwarder, cancel))
}

/// The first verdict on each WasmPlugin of `by_name` (a load, or a
/// rejection; a load retried because the engine was busy is no verdict),
/// by plugin file; files without one within [`FIRST_LOAD_TIMEOUT`] are
/// missing from the answer.
async fn first_outcomes(
    records: &mut broadcast::Receiver<AuditRecord>,
    by_name: &BTreeMap<String, PathBuf>,
) -> BTreeMap<PathBuf, LoadOutcome> {
    let mut outcomes = BTreeMap::new();
    let wait = async {
        while outcomes.len() < by_name.len() {
            let record = match records.recv().await {
                Ok(record) => record,
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return,
            };
            let Some(file) = by_name.get(&record.wasmplugin) else {
                continue;
            };
            if outcomes.contains_key(file) {
                continue;
            }
            if let Some(event) = wasmplugins::load_event(file, &record) {
                outcomes.insert(event.file, event.outcome);
            }
        }
    };
    // A timeout leaves the missing files out; the caller reports them.
    let _ = tokio::time::timeout(FIRST_LOAD_TIMEOUT, wait).await;
    outcomes
}

/// Turns the session's WasmPlugin transitions into [`LoadEvent`]s, logs
/// them and broadcasts them, until `cancel` fires or the controller stops.
async fn forward_transitions(
    mut records: broadcast::Receiver<AuditRecord>,
    by_name: BTreeMap<String, PathBuf>,
    events: broadcast::Sender<LoadEvent>,
    cancel: CancellationToken,
) {
    loop {
        let record = tokio::select! {
            _ = cancel.cancelled() => return,
            record = records.recv() => match record {
                Ok(record) => record,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "dev fell behind the WasmPlugin transitions");
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
        };
        let Some(file) = by_name.get(&record.wasmplugin) else {
            continue;
        };
        let Some(event) = wasmplugins::load_event(file, &record) else {
            continue;
        };
        match &event.outcome {
            LoadOutcome::Loaded {
                name,
                version,
                digest,
            } => {
                tracing::info!(file = %file.display(), plugin = %name, %version, %digest, "plugin loaded");
            }
            LoadOutcome::Unchanged => {}
            LoadOutcome::Removed => tracing::warn!(
                file = %file.display(),
                "plugin file removed; the loaded version keeps serving until the host stops"
            ),
            LoadOutcome::Failed(message) => tracing::error!(file = %file.display(), "{message}"),
        }
        // Nobody listening is fine: events are for tests and tooling.
        let _ = events.send(event);
    }
}

/// Registry defaults for dev mode: compiled components are cached under the
/// target directory, so restarting `dev` does not recompile unchanged plugins.
fn dev_registry_options(workspace_dir: &Path) -> RegistryOptions {
    let mut options = RegistryOptions::default();
    options.engine.cache_dir = build::default_wasm_dir(workspace_dir)
        .parent()
        .and_then(Path::parent)
        .map(|target| target.join("wasm-operator-cache"));
    options
}

/// Plugins built from the workspace's crates when there are any; every
/// `.wasm` of the directory otherwise (a directory of prebuilt plugins).
fn plugin_filter(crates: &[PluginCrate]) -> PluginFilter {
    if crates.is_empty() {
        PluginFilter::All
    } else {
        PluginFilter::Names(crates.iter().map(PluginCrate::wasm_file_name).collect())
    }
}

/// The example directories, or none (with a warning) when `examples_dir` does
/// not exist: dev mode is still useful without examples.
fn example_dirs(examples_dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    if !examples_dir.exists() {
        tracing::warn!(
            dir = %examples_dir.display(),
            "examples directory not found; no CRDs or example objects are installed (see --examples-dir)"
        );
        return Ok(Vec::new());
    }
    manifests::example_dirs(examples_dir)
}

/// Installs the WasmPlugin CRD (the one compiled into this binary), then
/// every example's `crd.yaml`. Returns the CRD names, each once.
async fn install_crds(
    client: &kube::Client,
    examples_dir: &Path,
) -> Result<Vec<String>, ManifestError> {
    let mut crds = install_wasmplugin_crd(client).await?;
    for dir in example_dirs(examples_dir)? {
        let crd = dir.join("crd.yaml");
        if crd.is_file() {
            for name in manifests::install_crds(client, &crd).await? {
                if !crds.contains(&name) {
                    crds.push(name);
                }
            }
        }
    }
    Ok(crds)
}

/// Installs the host's CRDs (WasmPlugin, Backup, Restore), generated from
/// the types this binary serves, so dev works from any directory
/// (deploy/crds/ holds the same CRDs, checked by a test).
async fn install_wasmplugin_crd(client: &kube::Client) -> Result<Vec<String>, ManifestError> {
    let origin = Path::new("deploy/crds/wasmplugin.yaml");
    let wasmplugin = manifests::ManifestObject {
        path: origin.to_path_buf(),
        object: serde_json::to_value(WasmPlugin::crd()).unwrap_or_default(),
    };
    let mut names = manifests::install_crd_objects(client, vec![wasmplugin], origin).await?;
    let origin = Path::new("deploy/crds/backup.yaml");
    let backups = [
        serde_json::to_value(crate::backup::Backup::crd()),
        serde_json::to_value(crate::backup::Restore::crd()),
    ]
    .into_iter()
    .map(|object| manifests::ManifestObject {
        path: origin.to_path_buf(),
        object: object.unwrap_or_default(),
    })
    .collect();
    names.extend(manifests::install_crd_objects(client, backups, origin).await?);
    Ok(names)
}

/// Example directories whose CRD serves several versions without saying
/// how to convert them, and no loaded plugin's webhook does (`converted`):
/// applying their objects would store them unconverted. `(example, CRD)`.
fn unconverted_examples(
    examples_dir: &Path,
    converted: &std::collections::BTreeSet<String>,
) -> Vec<(String, String)> {
    let Ok(dirs) = example_dirs(examples_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(objects) = manifests::read_manifest(&dir.join("crd.yaml")) else {
            continue;
        };
        let example = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        for crd in objects.iter().map(|o| &o.object) {
            let versions = crd
                .pointer("/spec/versions")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let name = crd
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if versions > 1
                && crd.pointer("/spec/conversion").is_none()
                && !converted.contains(name)
            {
                out.push((example.clone(), name.to_string()));
                break;
            }
        }
    }
    out
}

/// Installs the WasmPlugin CRD, then builds the author's crate and reads
/// the CRD it carries ([`author::prepare`]; the host installs it).
async fn install_and_build_author(
    client: &kube::Client,
    options: &DevOptions,
    author: &author::AuthorCrate,
    summary: &mut DevSummary,
) -> Result<Vec<build::PluginCrate>, DevError> {
    let step = Step::start("Installing the WasmPlugin CRD");
    summary.crds = match install_wasmplugin_crd(client).await {
        Ok(crds) => {
            step.done(crds.join(", "));
            crds
        }
        Err(error) => {
            step.failed();
            return Err(DevError::Crds(error));
        }
    };
    let prepared = author::prepare(author, options.build).await?;
    summary.crds.extend(prepared.crd);
    summary.resources = prepared.resources;
    Ok(Vec::new())
}

/// Applies every YAML file of the author's `samples/` (none without it).
async fn apply_samples(client: &kube::Client, dir: &Path) -> Result<Vec<String>, ManifestError> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut applied = Vec::new();
    for file in manifests::example_object_files(dir)? {
        applied.extend(manifests::apply_objects(client, &file).await?);
    }
    Ok(applied)
}

async fn apply_examples(
    client: &kube::Client,
    examples_dir: &Path,
    skip: &[String],
) -> Result<Vec<String>, ManifestError> {
    let mut applied = Vec::new();
    for dir in example_dirs(examples_dir)? {
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if skip.iter().any(|s| s == name) {
            continue;
        }
        for file in manifests::example_object_files(&dir)? {
            applied.extend(manifests::apply_objects(client, &file).await?);
        }
    }
    Ok(applied)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples_of_multi_version_crds_wait_for_a_converting_plugin() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let none = std::collections::BTreeSet::new();
        let skipped = unconverted_examples(&examples, &none);
        assert_eq!(
            skipped,
            [(
                "distributedkv".to_string(),
                "distributedkvs.kv.example.com".to_string()
            )]
        );
        let converted =
            std::collections::BTreeSet::from(["distributedkvs.kv.example.com".to_string()]);
        assert!(unconverted_examples(&examples, &converted).is_empty());
    }
}
