//! `wasm-operator dev`: a complete local loop in one process. Starts the
//! embedded devcluster, installs the example CRDs, builds and loads the
//! workspace's plugins, applies the example objects and reloads a plugin
//! whenever its `.wasm` changes on disk.
//!
//! This is library code so that tests drive exactly what the CLI runs; the
//! CLI only parses arguments into [`DevOptions`] and prints [`DevSession`]'s
//! summary.

pub mod build;
pub mod manifests;
pub mod progress;
pub mod reload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use devcluster::{DevCluster, DevClusterError, DevClusterOptions};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::plugins::{Registry, RegistryError, RegistryOptions};
use crate::telemetry;
use build::{BuildError, PluginCrate};
use manifests::ManifestError;
use progress::Step;
pub use reload::{LoadEvent, LoadOutcome, PluginFilter};
use reload::{PluginLoader, WatchError};

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
    /// How long a plugin file must be quiet before it is reloaded.
    pub debounce: Duration,
    /// Serve /metrics, /healthz and /readyz here; `None` serves nothing.
    pub metrics_addr: Option<SocketAddr>,
    /// Options for the plugin registry (concurrency, cache directory, limits).
    pub registry: RegistryOptions,
    /// `config` passed to every plugin.
    pub plugin_config: Value,
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
        }
    }
}

/// Why a dev session could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("cannot start the embedded devcluster: {0}")]
    Cluster(#[from] DevClusterError),
    #[error("cannot install the example CRDs: {0}")]
    Crds(#[source] ManifestError),
    #[error("cannot apply the example objects: {0}")]
    Examples(#[source] ManifestError),
    #[error("cannot build the plugins: {0}")]
    Build(#[from] BuildError),
    #[error("cannot start the plugin registry: {0}")]
    Registry(#[from] RegistryError),
    #[error("cannot serve telemetry on {addr}: {source}; pick another --metrics-addr")]
    Telemetry {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Watch(#[from] WatchError),
    #[error(
        "no plugin could be loaded from {}; build them (`cargo build --release --target wasm32-wasip2`) or point --wasm-dir at a directory of .wasm files",
        dir.display()
    )]
    NoPlugins { dir: PathBuf },
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
}

/// A running dev session. Call [`DevSession::shutdown`] to stop it cleanly;
/// dropping it stops the cluster too, without waiting for in-flight calls.
pub struct DevSession {
    cluster: DevCluster,
    registry: Registry,
    events: broadcast::Sender<LoadEvent>,
    /// Stops the reloader when the session is dropped without `shutdown`.
    cancel: DropGuard,
    reloader: JoinHandle<()>,
    telemetry: Option<JoinHandle<()>>,
    wasm_dir: PathBuf,
    summary: DevSummary,
}

impl DevSession {
    /// Starts the cluster, installs CRDs, builds and loads plugins, applies
    /// the examples and starts watching the plugin files.
    pub async fn start(options: DevOptions) -> Result<DevSession, DevError> {
        let mut summary = DevSummary::default();

        let step = Step::start("Starting the embedded devcluster");
        let cluster = DevCluster::start(DevClusterOptions {
            port: options.port,
            data: options.data.clone(),
            kubeconfig: options.kubeconfig.clone(),
            ..DevClusterOptions::default()
        })
        .await;
        let cluster = match cluster {
            Ok(cluster) => cluster,
            Err(error) => {
                step.failed();
                return Err(error.into());
            }
        };
        step.done(cluster.url());
        let client = cluster.client();

        let step = Step::start("Installing example CRDs");
        match install_example_crds(&client, &options.examples_dir).await {
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
        let filter = plugin_filter(&crates);

        let metrics = options.registry.metrics.clone();
        let registry = Registry::new(cluster.client(), options.registry.clone()).await?;
        let telemetry = match options.metrics_addr {
            Some(addr) => {
                let ready_registry = registry.clone();
                let (bound, handle) =
                    telemetry::serve(addr, metrics.clone(), move || ready_registry.ready())
                        .await
                        .map_err(|source| DevError::Telemetry { addr, source })?;
                summary.metrics_addr = Some(bound);
                Some(handle)
            }
            None => None,
        };
        finish_start(options, cluster, registry, filter, summary, telemetry).await
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
        &self.registry
    }

    /// The directory watched for plugin changes.
    pub fn wasm_dir(&self) -> &Path {
        &self.wasm_dir
    }

    /// What happened while starting.
    pub fn summary(&self) -> &DevSummary {
        &self.summary
    }

    /// Every later (re)load of a plugin file, as it happens.
    pub fn subscribe(&self) -> broadcast::Receiver<LoadEvent> {
        self.events.subscribe()
    }

    /// A kubectl command that shows what the examples produced.
    pub fn kubectl_hint(&self) -> String {
        format!(
            "kubectl --kubeconfig {} get webapps,deployments,services -A",
            self.kubeconfig_path().display()
        )
    }

    /// Stops watching, lets the controllers finish their in-flight calls and
    /// stop, then stops the cluster.
    pub async fn shutdown(self) {
        drop(self.cancel);
        let _ = self.reloader.await;
        self.registry.shutdown().await;
        if let Some(telemetry) = self.telemetry {
            telemetry.abort();
        }
        let mut cluster = self.cluster;
        cluster.stop().await;
    }
}

async fn finish_start(
    options: DevOptions,
    cluster: DevCluster,
    registry: Registry,
    filter: PluginFilter,
    mut summary: DevSummary,
    telemetry: Option<JoinHandle<()>>,
) -> Result<DevSession, DevError> {
    let (events, _) = broadcast::channel(64);
    let mut loader = PluginLoader::new(
        registry.clone(),
        options.plugin_config.clone(),
        events.clone(),
    );

    let files = reload::plugin_files(&options.wasm_dir, &filter);
    let step = Step::start(format!(
        "Loading plugins from {}",
        options.wasm_dir.display()
    ));
    for file in &files {
        let outcome = loader.load_file(file).await;
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
        stop_partial(&registry, telemetry).await;
        return Err(DevError::NoPlugins {
            dir: options.wasm_dir.clone(),
        });
    }
    step.done(format!("{loaded} of {} loaded", files.len()));

    if options.apply_examples {
        let step = Step::start("Applying example objects");
        match apply_examples(
            &cluster.client(),
            &options.examples_dir,
            &options.skip_examples,
        )
        .await
        {
            Ok(applied) => {
                step.done(format!("{} objects", applied.len()));
                summary.applied = applied;
            }
            Err(error) => {
                step.failed();
                stop_partial(&registry, telemetry).await;
                return Err(DevError::Examples(error));
            }
        }
    }

    let cancel = CancellationToken::new();
    let reloader = match reload::spawn_reloader(
        &options.wasm_dir,
        filter,
        options.debounce,
        loader,
        cancel.clone(),
    ) {
        Ok(reloader) => reloader,
        Err(error) => {
            stop_partial(&registry, telemetry).await;
            return Err(error.into());
        }
    };
    Ok(DevSession {
        cluster,
        registry,
        events,
        cancel: cancel.drop_guard(),
        reloader,
        telemetry,
        wasm_dir: options.wasm_dir,
        summary,
    })
}

/// Undoes a start that failed half-way: controllers stop before the
/// cluster (dropped by the caller) goes away.
async fn stop_partial(registry: &Registry, telemetry: Option<JoinHandle<()>>) {
    registry.shutdown().await;
    if let Some(telemetry) = telemetry {
        telemetry.abort();
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

async fn install_example_crds(
    client: &kube::Client,
    examples_dir: &Path,
) -> Result<Vec<String>, ManifestError> {
    let mut crds = Vec::new();
    for dir in example_dirs(examples_dir)? {
        let crd = dir.join("crd.yaml");
        if crd.is_file() {
            crds.extend(manifests::install_crds(client, &crd).await?);
        }
    }
    Ok(crds)
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
