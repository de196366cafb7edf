//! `wasm-operator run`: serve plugins against a cluster until stopped.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::Value;

use super::webhook::WebhookArgs;
use super::{CliError, connect};
use crate::contract::{Grant, HostObjects, WatchScope};
use crate::engine::{EngineConfig, InstanceAllocation};
use crate::lease::{LeaderElectionConfig, LeaseError};
use crate::manager::{Manager, ManagerError, ManagerOptions, Role};
use crate::registry::{ActivationOptions, Registry, RegistryError, RegistryOptions};
use crate::wasmplugin::source::{FileError, read_plugin_file};
use crate::webhook::{ConversionWebhook, WebhookBoard, WebhookError, gate};

/// Arguments of `wasm-operator run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// A plugin component (.wasm) to serve; repeat for several plugins.
    /// Without it, the plugins are the cluster's WasmPlugin objects.
    #[arg(long = "plugin", value_name = "FILE.wasm")]
    pub plugins: Vec<PathBuf>,
    /// `config` for one plugin, as NAME=JSON (NAME is the plugin's manifest
    /// name or its file name without `.wasm`); repeatable.
    #[arg(long = "config-for", value_name = "NAME=JSON")]
    pub config_for: Vec<String>,
    /// What the cluster operator grants the --plugin files of this run: a
    /// YAML file with the same fields as a WasmPlugin's spec.permissions
    /// (own, read, namespaces, namespaceSelector, clusterScoped,
    /// serviceAccount). The one grant applies to every --plugin of the run;
    /// without it each gets the restricted default (non-sensitive namespaced
    /// kinds, every namespace but the system ones, no cluster-scoped kinds).
    /// Plugins that need different grants are deployed as WasmPlugin objects,
    /// which carry their own.
    #[arg(long, value_name = "FILE")]
    pub grant: Option<PathBuf>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    // Not `env = "KUBECONFIG"`: that variable may list several files, which
    // kube's own loader merges like kubectl does.
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Serve only this namespace; repeatable (or comma-separated). Each
    /// plugin's grant stays the ceiling and this narrows it: an object is
    /// reconciled, read or written only in a namespace both the grant and
    /// these flags allow. Cluster-scoped kinds are not bounded by it.
    /// Without -n (or with -A), the grants alone decide.
    #[arg(
        short = 'n',
        long = "namespace",
        value_name = "NAMESPACE",
        value_delimiter = ',',
        conflicts_with = "all_namespaces"
    )]
    pub namespaces: Vec<String>,
    /// Serve every namespace the grants allow (the default; says so
    /// explicitly, like kubectl's -A).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// A verification policy file (YAML or JSON, the fields of a
    /// WasmPlugin's `spec.verification`): every WasmPlugin with an OCI
    /// source and no `spec.verification` of its own loads only what it
    /// verifies. See docs/security.md.
    #[arg(long, value_name = "FILE")]
    pub verification_policy: Option<PathBuf>,
    /// Address of the /metrics, /healthz and /readyz endpoint (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub metrics_addr: SocketAddr,
    /// Reconciles running at once per plugin.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// Where compiled plugins are cached (by digest) so restarts skip
    /// compilation (default: `$XDG_CACHE_HOME/wasm-operator`, else
    /// `$HOME/.cache/wasm-operator`; no disk cache when neither is set).
    #[arg(long, env = "WASM_OPERATOR_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Plugin calls that may be in flight at once across all plugins: the
    /// size of the engine's pool of instance slots (each reserves address
    /// space, not memory). 0 allocates every instance on demand instead
    /// (slower calls, no upper bound).
    #[arg(long, value_name = "N", default_value_t = crate::registry::DEFAULT_MAX_INSTANCES)]
    pub max_instances: u32,
    /// Seconds a SIGTERM/SIGINT waits for reconciles in flight before the
    /// host exits anyway (a second signal exits at once). Keep it below the
    /// pod's terminationGracePeriodSeconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 20)]
    pub shutdown_grace: u64,
    /// The CRD conversion webhook (served with --webhook-addr).
    #[command(flatten)]
    pub webhook: Box<WebhookArgs>,
    /// Leader election among replicas (--leader-elect and its settings).
    #[command(flatten)]
    pub election: Box<LeaderElectionArgs>,
}

/// The leader-election flags of `wasm-operator run` (controller-runtime's
/// names, client-go's defaults).
#[derive(Debug, Args)]
pub struct LeaderElectionArgs {
    /// Run as one of several replicas: only the holder of a
    /// coordination.k8s.io Lease runs the plugin controllers and writes;
    /// the others stay warm (plugins compiled, caches synced) and take over
    /// when it stops renewing. Needs RBAC on leases (the Helm chart's Role, deploy/wasm-operator.yaml).
    #[arg(long)]
    pub leader_elect: bool,
    /// The Lease's namespace (default: $POD_NAMESPACE, the pod's
    /// namespace, else the kubeconfig context's).
    #[arg(long, value_name = "NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// The Lease's name; replicas with the same name elect one leader.
    #[arg(long, value_name = "NAME", default_value = crate::lease::DEFAULT_LEASE_NAME)]
    pub leader_election_id: String,
    /// How long a Lease its holder stopped renewing blocks the others.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = crate::lease::parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps writing without a successful renewal;
    /// below --lease-duration so it stops before another may take over.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::lease::parse_duration)]
    pub renew_deadline: Duration,
    /// The pause between tries to acquire or renew the Lease.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = crate::lease::parse_duration)]
    pub retry_period: Duration,
    /// Split the primaries into N shards (by a stable hash of their UID),
    /// each guarded by its own Lease (`<leader-election-id>-shard-<i>`),
    /// spread evenly over the replicas; 1: one leader reconciles
    /// everything. Needs --leader-elect when above 1.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub shards: u16,
    /// The host version recorded on the Lease and compared for the
    /// version-aware handoff (default: this binary's). For tests.
    #[arg(
        long,
        hide = true,
        env = "WASM_OPERATOR_HOST_VERSION",
        value_name = "SEMVER"
    )]
    pub host_version: Option<String>,
}

impl LeaderElectionArgs {
    /// The elector's settings, `None` without --leader-elect;
    /// `default_namespace` is the kubeconfig context's namespace.
    ///
    /// # Errors
    ///
    /// [`LeaseError`] when the durations are out of order or the host
    /// version is not a version.
    pub fn config(
        &self,
        default_namespace: &str,
    ) -> Result<Option<LeaderElectionConfig>, LeaseError> {
        if !self.leader_elect {
            if self.shards > 1 {
                return Err(LeaseError::ShardsWithoutElection(self.shards));
            }
            return Ok(None);
        }
        let namespace = self
            .leader_election_namespace
            .clone()
            .unwrap_or_else(|| crate::lease::default_namespace(default_namespace));
        let config = LeaderElectionConfig {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..LeaderElectionConfig::new(
                &namespace,
                &self.leader_election_id,
                crate::lease::holder_identity(),
                crate::lease::host_version(self.host_version.as_deref())?,
            )
        };
        config.validate()?;
        Ok(Some(config))
    }

    /// Checks the flags without a cluster (durations in order, a version
    /// that parses), so a typo fails before anything starts.
    ///
    /// # Errors
    ///
    /// As [`LeaderElectionArgs::config`].
    pub fn check(&self) -> Result<(), LeaseError> {
        self.config("default").map(drop)
    }
}

/// The first pause between tries to reach the API server.
const REACH_FIRST_DELAY: Duration = Duration::from_millis(500);
/// The longest pause between tries to reach the API server.
const REACH_MAX_DELAY: Duration = Duration::from_secs(30);

/// The pause after `delay` when the API server still cannot be reached:
/// doubled, at most [`REACH_MAX_DELAY`].
fn next_delay(delay: Duration) -> Duration {
    (delay * 2).min(REACH_MAX_DELAY)
}

/// Why `run` failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// `--config-for` was given without `--plugin`: `WasmPlugin` objects
    /// carry their own config.
    #[error(
        "--config-for only applies to --plugin files; without --plugin, set spec.config on the WasmPlugin object instead"
    )]
    ConfigWithoutPlugins,
    /// `--grant` was given without `--plugin`: `WasmPlugin` objects carry
    /// their own grant.
    #[error(
        "--grant only applies to --plugin files; without --plugin, set spec.permissions on each WasmPlugin object instead"
    )]
    GrantWithoutPlugins,
    /// The `--verification-policy` file cannot be used.
    #[error("--verification-policy: {0}")]
    VerificationPolicy(#[from] crate::oci::signature::PolicyError),
    /// The `--grant` file cannot be read.
    #[error("cannot read grant file {}: {source}; check the --grant path", path.display())]
    ReadGrant {
        /// The `--grant` path.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The `--grant` file is not a grant.
    #[error(
        "grant file {} is not a grant: {source}; write the fields of a WasmPlugin's spec.permissions, e.g. `own: [{{group: example.com, kind: WebApp}}]`",
        path.display()
    )]
    GrantSyntax {
        /// The `--grant` path.
        path: PathBuf,
        /// Where the YAML breaks or which field is unknown.
        #[source]
        source: serde_yaml::Error,
    },
    /// Two `--plugin` files are the same plugin (one manifest name): the
    /// second would silently replace the first.
    #[error(
        "--plugin {} and --plugin {} are both plugin {name}; a plugin is served once: drop one of them (to upgrade, replace the file)",
        first.display(), second.display()
    )]
    DuplicatePlugin {
        /// The manifest name both carry.
        name: String,
        /// The file loaded first.
        first: PathBuf,
        /// The file refused.
        second: PathBuf,
    },
    /// The registry, telemetry or WasmPlugin controller could not start.
    #[error(transparent)]
    Start(#[from] ManagerError),
    /// The conversion webhook could not start.
    #[error(transparent)]
    Webhook(#[from] WebhookError),
    /// The leader-election flags are inconsistent.
    #[error(transparent)]
    LeaderElection(#[from] LeaseError),
    /// A `--plugin` file's `convert` failed the round-trip gate.
    #[error("cannot load plugin {}: {source}", path.display())]
    ConversionGate {
        /// The `--plugin` path.
        path: PathBuf,
        /// What the gate found.
        #[source]
        source: Box<gate::GateError>,
    },
    /// A `--config-for` value has no `=`; holds the value.
    #[error(
        "--config-for {0:?} is not NAME=JSON; write e.g. --config-for 'webapp={{\"replicas\":2}}'"
    )]
    ConfigSyntax(String),
    /// The JSON of a `--config-for` value does not parse.
    #[error("--config-for {name}: the value is not valid JSON: {source}")]
    ConfigJson {
        /// The plugin name before the `=`.
        name: String,
        /// Where the JSON breaks.
        #[source]
        source: serde_json::Error,
    },
    /// A `--config-for` names no loaded plugin, likely a typo: refused
    /// rather than ignored.
    #[error(
        "--config-for {name}: no plugin of that name was loaded (loaded: {loaded}); use the manifest name or the file name without .wasm"
    )]
    ConfigUnused {
        /// The plugin name before the `=`.
        name: String,
        /// The manifest names of the plugins that were loaded, comma-separated.
        loaded: String,
    },
    /// A `--plugin` file cannot be read: missing, unreadable, not a
    /// regular file, or larger than a component can be.
    #[error("{source}; check the --plugin path")]
    ReadPlugin {
        /// The `--plugin` path.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: FileError,
    },
    /// A `--plugin` file was read but could not be prepared or activated.
    #[error("cannot load plugin {}: {source}{}", path.display(), load_hint(source, path))]
    LoadPlugin {
        /// The `--plugin` path.
        path: PathBuf,
        /// Why the registry refused it.
        #[source]
        source: Box<RegistryError>,
    },
}

/// The hint after a refused `--plugin`: only a component the engine could
/// not load may have been built wrong; a refused grant or identity check
/// carries its own remedy.
fn load_hint(error: &RegistryError, path: &std::path::Path) -> String {
    match error {
        RegistryError::Load { .. } => format!(
            "; check it was built for wasm32-wasip2 against this host's WIT contract (`wasm-operator plugin inspect {}`)",
            path.display()
        ),
        _ => String::new(),
    }
}

/// Parses the `--config-for` values into plugin name → config.
pub fn parse_configs(values: &[String]) -> Result<BTreeMap<String, Value>, RunError> {
    let mut configs = BTreeMap::new();
    for value in values {
        let Some((name, json)) = value.split_once('=') else {
            return Err(RunError::ConfigSyntax(value.clone()));
        };
        let name = name.trim();
        if name.is_empty() {
            return Err(RunError::ConfigSyntax(value.clone()));
        }
        let config = serde_json::from_str(json).map_err(|source| RunError::ConfigJson {
            name: name.to_string(),
            source,
        })?;
        configs.insert(name.to_string(), config);
    }
    Ok(configs)
}

/// Reads a `--grant` file.
///
/// # Errors
///
/// [`RunError::ReadGrant`], [`RunError::GrantSyntax`] (unknown fields are
/// errors: a typo must not fall back to another grant).
pub fn read_grant(path: &std::path::Path) -> Result<Grant, RunError> {
    let text = std::fs::read_to_string(path).map_err(|source| RunError::ReadGrant {
        path: path.to_path_buf(),
        source,
    })?;
    if text.trim().is_empty() {
        return Ok(Grant::default());
    }
    serde_yaml::from_str(&text).map_err(|source| RunError::GrantSyntax {
        path: path.to_path_buf(),
        source,
    })
}

/// Runs `wasm-operator run`.
pub async fn run(args: RunArgs) -> Result<(), CliError> {
    if args.plugins.is_empty() && !args.config_for.is_empty() {
        return Err(RunError::ConfigWithoutPlugins.into());
    }
    if args.plugins.is_empty() && args.grant.is_some() {
        return Err(RunError::GrantWithoutPlugins.into());
    }
    let grant = match &args.grant {
        Some(path) => read_grant(path)?,
        None => Grant::default(),
    };
    let configs = parse_configs(&args.config_for)?;
    args.election.check().map_err(RunError::LeaderElection)?;
    // Read every file before touching the cluster: a typo fails fast.
    let mut plugins = Vec::new();
    for path in &args.plugins {
        let bytes = read_plugin_file(path)
            .await
            .map_err(|source| RunError::ReadPlugin {
                path: path.clone(),
                source,
            })?;
        plugins.push((path.clone(), bytes));
    }
    let shutdown = super::signals::shutdown_signal().map_err(CliError::Signals)?;
    tokio::pin!(shutdown);
    // A signal while connecting, waiting for the API server or compiling
    // stops right away.
    let (manager, webhook) = tokio::select! {
        started = start(&args, plugins, configs, grant) => started?,
        signal = &mut shutdown => {
            tracing::info!(signal, "stopped before the plugins were loaded");
            return Ok(());
        }
    };
    let signal = shutdown.await;
    let grace = Duration::from_secs(args.shutdown_grace);
    tracing::info!(
        signal,
        grace_seconds = args.shutdown_grace,
        "shutting down: letting in-flight reconciles finish"
    );
    // Stopping must never depend on the cluster: whatever the API server
    // does, the host exits within the grace period, or at a second signal.
    let again = super::signals::shutdown_signal().map_err(CliError::Signals)?;
    let stop = async {
        if let Some(webhook) = &webhook {
            webhook.shutdown().await;
        }
        manager.shutdown().await;
    };
    tokio::select! {
        () = stop => tracing::info!("stopped"),
        () = tokio::time::sleep(grace) => tracing::warn!(
            grace_seconds = args.shutdown_grace,
            "reconciles in flight did not finish within the grace period; exiting anyway"
        ),
        signal = again => tracing::warn!(signal, "second signal: exiting without waiting"),
    }
    Ok(())
}

/// The host's own namespaces and objects, computed once: the pod's
/// namespace, the leader-election Lease's and the webhook certificate
/// Secret's when a flag names them (a fallback to the kubeconfig context's
/// or `default` outside a pod reserves nothing; the objects' names are
/// protected anyway), and where the canary diffs ConfigMaps go.
fn host_objects(args: &RunArgs, leader_election: Option<&LeaderElectionConfig>) -> HostObjects {
    let mut host = HostObjects::new(crate::lease::pod_namespace().as_deref())
        .with_canary_diffs(&crate::wasmplugin::diffs_namespace())
        .with_scope(WatchScope::from_flags(&args.namespaces));
    if let Some(config) = leader_election {
        let named = args.election.leader_election_namespace.is_some();
        host = host.with_leader_election(&config.namespace, &config.name, named);
    }
    let webhook = args.webhook.webhook_addr.is_some() && args.webhook.webhook_cert_dir.is_none();
    if webhook {
        let named = args.webhook.webhook_secret.is_some();
        let (namespace, name) = args.webhook.secret();
        host = host.with_webhook_secret(&namespace, &name, named);
    }
    host
}

/// Waits until the API server at `url` answers (any HTTP answer counts:
/// it is reachable), retrying with backoff and saying which server and why
/// at every try. Cancelled by dropping it (the caller selects on signals).
async fn wait_for_api_server(client: &kube::Client, url: &str) {
    let mut delay = REACH_FIRST_DELAY;
    let mut tries = 0u32;
    loop {
        match client.apiserver_version().await {
            Ok(_) | Err(kube::Error::Api(_)) => {
                if tries > 0 {
                    tracing::info!(server = %url, "reached the Kubernetes API server");
                }
                return;
            }
            Err(error) => {
                tries += 1;
                tracing::warn!(
                    server = %url,
                    tries,
                    retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    "cannot reach the Kubernetes API server at {url}: {error}; retrying with backoff (check the kubeconfig's server and the network; SIGTERM or Ctrl-C stops the host)"
                );
                tokio::time::sleep(delay).await;
                delay = next_delay(delay);
            }
        }
    }
}

/// Connects, serves telemetry and loads every plugin: the `--plugin` files,
/// or (without any) the cluster's WasmPlugin objects.
async fn start(
    args: &RunArgs,
    plugins: Vec<(PathBuf, Vec<u8>)>,
    configs: BTreeMap<String, Value>,
    grant: Grant,
) -> Result<(Manager, Option<ConversionWebhook>), CliError> {
    let (client, url) =
        connect::connect_with_url(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let leader_election = args
        .election
        .config(client.default_namespace())
        .map_err(RunError::LeaderElection)?;
    let host_objects = host_objects(args, leader_election.as_ref());
    let verification = match &args.verification_policy {
        Some(path) => Some(std::sync::Arc::new(
            crate::oci::signature::VerificationPolicy::from_file(path)
                .map_err(RunError::VerificationPolicy)?,
        )),
        None => None,
    };
    tracing::info!(
        namespaces = %host_objects.describe_namespaces(),
        "the host's own namespaces: outside every plugin's grant unless it names them"
    );
    tracing::info!(
        served = %host_objects.scope().describe(),
        "the namespaces this host serves (-n/-A), within each plugin's grant"
    );
    let manager = Manager::start(
        client.clone(),
        ManagerOptions {
            registry: registry_options(args),
            // With --leader-elect, a writer only while it holds the Lease.
            role: Role::Writer,
            leader_election,
            shards: usize::from(args.election.shards),
            metrics_addr: Some(args.metrics_addr),
            host_objects,
            verification,
            ..ManagerOptions::default()
        },
    )
    .await
    .map_err(RunError::Start)?;
    // Telemetry serves (/healthz answers) while the API server is waited for.
    wait_for_api_server(&client, &url).await;
    // The webhook serves before any plugin loads, so a CRD pointed at it by
    // an earlier run is answered as soon as its plugin is back.
    let webhook = match args.webhook.options(None) {
        Some(options) => match manager.start_webhook(options).await {
            Ok(webhook) => {
                webhook.gate_writes(manager.write_gate().clone());
                Some(webhook)
            }
            Err(error) => {
                manager.shutdown().await;
                return Err(RunError::Webhook(error).into());
            }
        },
        None => None,
    };
    let loaded = if plugins.is_empty() {
        manager.serve_wasmplugins().await.map_err(RunError::Start)
    } else {
        load_all(
            &client,
            manager.registry(),
            manager.webhook_board(),
            plugins,
            configs,
            &grant,
        )
        .await
    };
    let synced = match (&loaded, &webhook) {
        (Ok(()), Some(webhook)) => webhook
            .sync_crds()
            .await
            .map(drop)
            .map_err(RunError::Webhook),
        _ => Ok(()),
    };
    if let Err(error) = loaded.and(synced) {
        if let Some(webhook) = &webhook {
            webhook.shutdown().await;
        }
        manager.shutdown().await;
        return Err(error.into());
    }
    Ok((manager, webhook))
}

/// Loads every plugin with its config. A config is found by file name
/// (`webapp` for `webapp.wasm`) or, failing that, by manifest name; the
/// manifest is read from the prepared (compiled once) version before it is
/// activated, so no controller ever runs with the wrong config. Every
/// plugin gets `grant`; two files of one plugin name are an error.
async fn load_all(
    client: &kube::Client,
    registry: &Registry,
    webhook: &WebhookBoard,
    plugins: Vec<(PathBuf, Vec<u8>)>,
    mut configs: BTreeMap<String, Value>,
    grant: &Grant,
) -> Result<(), RunError> {
    let mut loaded_names = Vec::new();
    let mut files: HashMap<String, PathBuf> = HashMap::new();
    for (path, bytes) in plugins {
        let source = format!("file:{}", path.display());
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        let load_error = |source: RegistryError| RunError::LoadPlugin {
            path: path.clone(),
            source: Box::new(source),
        };
        // Discovery that cannot be read (the API server went away since it
        // answered) is retried with backoff; every other refusal is final.
        let mut delay = REACH_FIRST_DELAY;
        let candidate = loop {
            match registry.prepare(&source, bytes.clone(), None).await {
                Err(error @ RegistryError::Discovery { .. }) => {
                    tracing::warn!("{error}; retrying with backoff");
                    tokio::time::sleep(delay).await;
                    delay = next_delay(delay);
                }
                other => break other.map_err(load_error)?,
            }
        };
        if let Some(first) = files.get(candidate.name()) {
            return Err(RunError::DuplicatePlugin {
                name: candidate.name().to_string(),
                first: first.clone(),
                second: path.clone(),
            });
        }
        files.insert(candidate.name().to_string(), path.clone());
        // The conversion round-trip gate, as for a WasmPlugin (which may
        // allow lossy conversion; a --plugin file may not).
        gate::check(client, candidate.plugin(), false)
            .await
            .map_err(|source| RunError::ConversionGate {
                path: path.clone(),
                source: Box::new(source),
            })?;
        // Before the plugin's watch opens (see the function's docs).
        if let Err(error) =
            crate::webhook::point_before_activation(client, webhook, candidate.manifest()).await
        {
            tracing::warn!(%error, "the webhook points the CRD shortly after activation instead");
        }
        let config = configs
            .remove(&stem)
            .or_else(|| configs.remove(candidate.name()))
            .unwrap_or_else(|| Value::Object(Default::default()));
        let loaded = registry
            .activate(
                candidate,
                ActivationOptions {
                    config,
                    grant: grant.clone(),
                    ..ActivationOptions::default()
                },
            )
            .await
            .map_err(load_error)?;
        tracing::info!(
            plugin = %loaded.name,
            version = %loaded.version,
            digest = %loaded.digest,
            file = %path.display(),
            "plugin loaded"
        );
        loaded_names.push(loaded.name);
    }
    match configs.into_keys().next() {
        Some(name) => Err(RunError::ConfigUnused {
            name,
            loaded: loaded_names.join(", "),
        }),
        None => Ok(()),
    }
}

/// The registry options the flags describe; unset flags keep the registry's
/// defaults (which include a fresh metrics registry).
fn registry_options(args: &RunArgs) -> RegistryOptions {
    let mut options = RegistryOptions::default();
    if let Some(concurrency) = args.concurrency {
        options.concurrency = concurrency.max(1);
    }
    options.engine.cache_dir = args.cache_dir.clone().or_else(EngineConfig::user_cache_dir);
    options.engine.allocation = match args.max_instances {
        0 => InstanceAllocation::OnDemand,
        max_instances => InstanceAllocation::Pooling { max_instances },
    };
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reaching_the_api_server_backs_off_to_a_ceiling() {
        let mut delay = REACH_FIRST_DELAY;
        let mut delays = Vec::new();
        for _ in 0..10 {
            delays.push(delay);
            delay = next_delay(delay);
        }
        assert_eq!(delays[1], REACH_FIRST_DELAY * 2);
        assert!(delays.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(*delays.last().unwrap(), REACH_MAX_DELAY);
    }

    #[test]
    fn the_host_reserves_the_namespaces_its_flags_name_and_protects_its_names() {
        use clap::Parser;
        let parse = |extra: &[&str]| {
            let cli = super::super::Cli::try_parse_from(
                ["wasm-operator", "run", "--leader-elect"]
                    .iter()
                    .chain(extra)
                    .copied(),
            )
            .unwrap();
            let super::super::Command::Run(args) = cli.command else {
                panic!("{cli:?}")
            };
            let election = args.election.config("fallback").unwrap();
            host_objects(&args, election.as_ref())
        };
        let host = parse(&[
            "--leader-election-namespace",
            "ops",
            "--webhook-addr",
            "127.0.0.1:0",
            "--webhook-secret",
            "certs/cert",
        ]);
        assert!(host.is_host_namespace("ops") && host.is_host_namespace("certs"));
        let claimed = |host: &HostObjects, ns: &str| {
            host.claimed("coordination.k8s.io", "Lease", Some(ns), "wasm-operator")
        };
        assert!(claimed(&host, "ops").is_some());
        assert!(host.claimed("", "Secret", Some("certs"), "cert").is_some());
        // Fallbacks outside a pod reserve nothing; the names stay protected.
        if crate::lease::pod_namespace().is_none() {
            let host = parse(&[]);
            assert!(!host.is_host_namespace("fallback"));
            assert!(claimed(&host, "fallback").is_some());
        }
    }

    #[test]
    fn parses_config_for() {
        let configs =
            parse_configs(&["webapp={\"a\":1}".to_string(), "x = []".to_string()]).unwrap();
        assert_eq!(configs["webapp"], serde_json::json!({"a": 1}));
        assert_eq!(configs["x"], serde_json::json!([]));
        assert!(matches!(
            parse_configs(&["webapp".to_string()]),
            Err(RunError::ConfigSyntax(_))
        ));
        assert!(matches!(
            parse_configs(&["webapp={".to_string()]),
            Err(RunError::ConfigJson { .. })
        ));
    }

    #[test]
    fn reads_a_grant_file_and_refuses_typos() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grant.yaml");
        std::fs::write(&path, "own: [{kind: ConfigMap}]\nnamespaces: [team-a]\n").unwrap();
        let grant = read_grant(&path).unwrap();
        assert_eq!(grant.namespaces, Some(vec!["team-a".to_string()]));
        std::fs::write(&path, "owns: [{kind: ConfigMap}]\n").unwrap();
        let error = read_grant(&path).unwrap_err().to_string();
        assert!(
            error.contains("owns") && error.contains("grant.yaml"),
            "{error}"
        );
        std::fs::write(&path, "").unwrap();
        assert_eq!(read_grant(&path).unwrap(), Grant::default());
        let missing = read_grant(&dir.path().join("nope.yaml")).unwrap_err();
        assert!(matches!(missing, RunError::ReadGrant { .. }));
    }
}
