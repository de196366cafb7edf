//! The registry of plugin versions: prepare a candidate (compile once, check
//! it), activate it (config, limits, concurrency), unload a plugin, and what
//! serves now.
//!
//! Per plugin the registry holds a [`VersionSet`] behind a shared
//! [`ServingVersions`] holder: the stable version and (later) at most one
//! rollout candidate. It starts nothing: every change of a version set is
//! announced ([`Registry::announcements`]) to whoever runs controllers (the
//! manager), and an activation or unload returns only once that listener has
//! applied it.
//!
//! # Guarantees
//!
//! - A version is compiled once per [`Registry::prepare`], off the async
//!   workers; activating it compiles nothing.
//! - Changes of one registry are serialised: two loads of one name cannot
//!   race, and every announcement is applied before the next change starts.
//! - A refused version never replaces the serving one, and never shows up
//!   in [`Registry::stats`].

pub mod assign;
mod candidate;
mod observations;
mod stats;
mod storage_progress;
mod versions;

use crate::util::lock;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::cache::{Discovery, DiscoveryError, KindProblem};
use crate::contract::{Excess, Grant, Reason, ReconcileLimits};
use crate::engine::{CallLimits, Engine, EngineConfig, EngineError, InstanceAllocation};
use crate::telemetry::Metrics;

pub use candidate::Candidate;
pub use observations::{
    CanaryObservations, DiffKind, DryRunFailure, DryRunReport, DryRunState, FieldDiff, MAX_DIFFS,
    MAX_DRY_RUN_FAILURES, MAX_KINDS, MAX_OBJECTS, ObjectDiff, ObjectName, ShadowCounts,
    ShadowOutcome,
};
pub use stats::{
    CounterSnapshot, LATENCY_BUCKETS, LatencyHistogram, VersionCounters, VersionRole, VersionStats,
};
pub use storage_progress::{StorageMigrationProgress, StorageMigrationState, StorageProgressBoard};
pub use versions::{
    ActiveVersion, DEFAULT_ROLLOUT_RATE, DEFAULT_SHADOW_CONCURRENCY, Rollout, RolloutCandidate,
    RolloutSettings, ServingVersions, VersionSet,
};

/// Per-deployment settings of one activation (e.g. from a `WasmPlugin`'s
/// spec); `None` fields use the registry's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActivationOptions {
    /// The `config` handed to every call (`null` means `{}`).
    pub config: Value,
    /// Call limits of this plugin's calls (default: the engine's).
    pub limits: Option<CallLimits>,
    /// Reconciles of this plugin that may run at once (default: the registry's).
    pub concurrency: Option<usize>,
    /// What the cluster operator grants the plugin (`Grant::default()` is
    /// the restricted default). Checked by [`Registry::activate`] under its
    /// lock, for every version, so a new version can never escalate; it
    /// travels with the serving version ([`ActiveVersion::grant`]) to the
    /// controller (namespaces) and the cache reads. A refused activation
    /// leaves the serving version with its own grant; a caller whose grant
    /// was narrowed (a WasmPlugin's `spec.permissions` edit) stops a serving
    /// version the new grant no longer covers first.
    pub grant: Grant,
    /// Limits per reconcile (default: [`ReconcileLimits::default`]).
    pub reconcile_limits: Option<ReconcileLimits>,
}

/// Instances the registry's engine pools by default: calls in flight across
/// all plugins (e.g. 64 plugins at the default concurrency of 4). A call
/// that finds the pool full fails with `InstancePoolFull` and is retried.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;

/// How a [`Registry`] runs its plugins.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Reconciles per plugin that may run at once (on different objects),
    /// unless an activation says otherwise.
    pub concurrency: usize,
    /// Engine settings, including the default call limits. The default
    /// uses the pooling allocator with [`DEFAULT_MAX_INSTANCES`] slots: in the
    /// `plugin_call` benchmark a pooled call takes about half the time of an
    /// on-demand one.
    pub engine: EngineConfig,
    /// Where plugin calls and versions are recorded.
    pub metrics: Metrics,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            concurrency: 4,
            engine: EngineConfig {
                allocation: InstanceAllocation::Pooling {
                    max_instances: DEFAULT_MAX_INSTANCES,
                },
                ..EngineConfig::default()
            },
            metrics: Metrics::new(),
        }
    }
}

/// One loaded plugin version, as reported to people and tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadedVersion {
    /// The manifest's name.
    pub name: String,
    /// The manifest's (semantic) version.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// Where it came from, e.g. `file:/path/webapp.wasm`.
    pub source: String,
}

/// Why the registry refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The wasm engine could not be created.
    #[error("cannot start the wasm engine: {0}")]
    Engine(#[source] EngineError),
    /// The component could not be loaded.
    #[error("cannot load plugin from {source_name}: {}", error.with_remedy())]
    Load {
        /// Where the component came from, e.g. `file:/path/webapp.wasm`.
        source_name: String,
        /// Why the engine refused it.
        #[source]
        error: EngineError,
    },
    /// A new version changes the primary kind of a running plugin.
    #[error(
        "plugin {} {} from {} reconciles {}, but the running version {} reconciles {}; the running version keeps serving. Deploy a kind change as a new plugin name",
        .0.name, .0.new_version, .0.source_name, .0.new_kind, .0.running_version, .0.running_kind
    )]
    PrimaryKindChanged(Box<PrimaryKindChange>),
    /// The new component is another plugin than the one it must replace.
    #[error(
        "the component from {source_name} is plugin {name} {version}, but it was deployed as a new version of plugin {expected}; deploy another plugin on its own"
    )]
    PluginNameChanged {
        /// Where the new component came from.
        source_name: String,
        /// The name of the plugin it was deployed to replace.
        expected: String,
        /// The new component's plugin name, from its manifest.
        name: String,
        /// The new component's version.
        version: String,
    },
    /// Swapping to an older version that the running version declared
    /// incompatible (its manifest's `min_compatible_version` is above it).
    #[error(
        "refusing to roll plugin {name} back from {running_version} to {new_version}: version {running_version} declares min_compatible_version {min_compatible}, so {new_version} could corrupt objects it managed; {running_version} keeps serving. Deploy {min_compatible} or newer"
    )]
    RollbackRefused {
        /// The plugin's name.
        name: String,
        /// The serving version, which keeps serving.
        running_version: String,
        /// The refused older version.
        new_version: String,
        /// The serving version's `min_compatible_version`: the oldest
        /// version that may replace it.
        min_compatible: String,
    },
    /// The manifest asks for more than the plugin's grant.
    #[error(
        "plugin {} {} from {} asks for more than its grant: {}. Nothing of it was loaded{}. If the cluster operator agrees, widen the grant (WasmPlugin spec.permissions, or `run --grant FILE`); otherwise remove these kinds from the plugin's manifest",
        .0.name, .0.version, .0.source_name,
        .0.excesses.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
        .0.serving.as_ref().map(|v| format!("; version {v} keeps serving")).unwrap_or_default()
    )]
    PermissionDenied(Box<PermissionDenial>),
    /// Another plugin already serves the candidate's primary kind.
    #[error(
        "plugin {name} {version} from {source_name} reconciles {kind}, which plugin {serving} already serves; one primary kind is served by one plugin. Unload {serving} first, or give {name} its own kind"
    )]
    PrimaryKindConflict {
        /// The refused plugin's name.
        name: String,
        /// The refused plugin's version.
        version: String,
        /// Where the refused component came from.
        source_name: String,
        /// `group/Kind` of the primary.
        kind: String,
        /// The plugin that serves that kind and keeps serving it.
        serving: String,
    },
    /// The cluster disagrees with the manifest's kinds: one it does not
    /// serve, or one it serves under another plural or scope.
    #[error("{0}")]
    Kinds(Box<KindRefusal>),
    /// API discovery could not be read to check the manifest's kinds.
    #[error(
        "cannot check the kinds of plugin {name} {version} from {source_name} against the cluster: {source}"
    )]
    Discovery {
        /// The manifest's plugin name.
        name: String,
        /// The manifest's version.
        version: String,
        /// Where the component came from.
        source_name: String,
        /// Why discovery failed.
        #[source]
        source: Box<DiscoveryError>,
    },
    /// No plugin of that name runs.
    #[error("no plugin named {0} is loaded; `wasm-operator plugin list` shows the loaded ones")]
    NotLoaded(String),
    /// A canary operation on a plugin without a rollout candidate.
    #[error(
        "plugin {0} has no canary candidate (none was set, or it was promoted or dropped already); `wasm-operator canary status {0}` shows its state"
    )]
    NoCandidate(String),
    /// A split or selector candidate would write objects the stable
    /// version may not serve again: rolling back would be impossible.
    #[error(
        "refusing to let plugin {name} {candidate_version} serve objects beside {stable_version}: {candidate_version} declares min_compatible_version {min_compatible}, so objects it writes could no longer be served by {stable_version} and a rollback would be impossible; {stable_version} keeps serving every object. Use Shadow mode, deploy a candidate whose min_compatible_version is at most {stable_version}, or accept this explicitly (spec.canary.acceptIrreversible)"
    )]
    CanaryIrreversible {
        /// The plugin's name.
        name: String,
        /// The stable version, which keeps serving.
        stable_version: String,
        /// The refused candidate.
        candidate_version: String,
        /// The candidate's `min_compatible_version`.
        min_compatible: String,
    },
    /// A blocking task of the registry failed (a host bug).
    #[error("internal error while loading plugin from {source_name}: {message}")]
    Internal {
        /// Where the component came from.
        source_name: String,
        /// What failed.
        message: String,
    },
}

impl RegistryError {
    /// True when the registry refused a new version (it is bad or unsafe)
    /// and the running version, if any, keeps serving; false for host
    /// problems, a busy engine and unknown names.
    pub fn is_rejection(&self) -> bool {
        match self {
            RegistryError::Load { error, .. } => !error.is_transient(),
            RegistryError::PrimaryKindChanged(_)
            | RegistryError::PluginNameChanged { .. }
            | RegistryError::RollbackRefused { .. }
            | RegistryError::PermissionDenied(_)
            | RegistryError::PrimaryKindConflict { .. }
            | RegistryError::CanaryIrreversible { .. }
            | RegistryError::Kinds(_) => true,
            _ => false,
        }
    }

    /// True when the same load may succeed later (the engine was busy).
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Load { error, .. } if error.is_transient())
    }

    /// True when loading the same component again later may succeed
    /// without anyone changing it: the engine was busy, discovery could not
    /// be read, or the only problem is a kind the cluster does not serve yet
    /// (its CRD may be installed after the plugin is deployed).
    pub fn may_pass(&self) -> bool {
        match self {
            RegistryError::Discovery { .. } => true,
            RegistryError::Kinds(refusal) => refusal.only_not_served(),
            other => other.is_transient(),
        }
    }

    /// A short CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            RegistryError::Engine(_) => Reason::EngineUnavailable.as_str(),
            RegistryError::Load { error, .. } if error.is_transient() => {
                Reason::InstancePoolFull.as_str()
            }
            RegistryError::Load { .. } => Reason::InvalidPlugin.as_str(),
            RegistryError::PrimaryKindChanged(_) => Reason::PrimaryKindChanged.as_str(),
            RegistryError::PluginNameChanged { .. } => Reason::PluginNameChanged.as_str(),
            RegistryError::RollbackRefused { .. } => Reason::RollbackRefused.as_str(),
            RegistryError::PermissionDenied(_) => Reason::PermissionDenied.as_str(),
            RegistryError::PrimaryKindConflict { .. } => Reason::PrimaryKindConflict.as_str(),
            RegistryError::Kinds(refusal) => refusal.reason().as_str(),
            RegistryError::Discovery { .. } => Reason::DiscoveryUnavailable.as_str(),
            RegistryError::NotLoaded(_) => Reason::NotLoaded.as_str(),
            RegistryError::NoCandidate(_) => Reason::NoCanary.as_str(),
            RegistryError::CanaryIrreversible { .. } => Reason::CanaryIrreversible.as_str(),
            RegistryError::Internal { .. } => Reason::InternalError.as_str(),
        }
    }
}

/// A refused change of primary kind: the new version and the serving one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryKindChange {
    /// The new component's plugin name.
    pub name: String,
    /// Where the new component came from.
    pub source_name: String,
    /// The new component's version.
    pub new_version: String,
    /// `apiVersion Kind` the new component reconciles.
    pub new_kind: String,
    /// The serving plugin's name (differs from `name` when the new
    /// component is another plugin altogether).
    pub running_name: String,
    /// The serving version.
    pub running_version: String,
    /// `apiVersion Kind` the serving version reconciles.
    pub running_kind: String,
}

/// A manifest refused by its grant: the plugin and every excess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDenial {
    /// The plugin's name.
    pub name: String,
    /// The refused version.
    pub version: String,
    /// Where the refused component came from.
    pub source_name: String,
    /// Everything the manifest asks for beyond the grant.
    pub excesses: Vec<Excess>,
    /// The version that serves under the plugin's name and keeps serving.
    pub serving: Option<String>,
}

/// A manifest refused because the cluster disagrees with its kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindRefusal {
    /// The manifest's plugin name.
    pub name: String,
    /// The manifest's version.
    pub version: String,
    /// Where the component came from.
    pub source_name: String,
    /// Every disagreement, in manifest order (primary, owns, watches).
    pub problems: Vec<KindProblem>,
}

impl KindRefusal {
    /// True when every problem is a kind not served (yet): the refusal
    /// passes once the cluster serves them.
    pub fn only_not_served(&self) -> bool {
        self.problems.iter().all(KindProblem::is_not_served)
    }

    /// `KindMismatch` when any kind disagrees (it never passes by itself),
    /// else `KindNotServed`.
    pub fn reason(&self) -> Reason {
        if self.only_not_served() {
            Reason::KindNotServed
        } else {
            Reason::KindMismatch
        }
    }
}

impl std::fmt::Display for KindRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let problems: Vec<String> = self.problems.iter().map(ToString::to_string).collect();
        write!(
            f,
            "plugin {} {} from {} names kinds the cluster does not serve as declared: {}. ",
            self.name,
            self.version,
            self.source_name,
            problems.join("; ")
        )?;
        if self.only_not_served() {
            f.write_str(
                "Install the CRDs that serve them (the host checks again until they are served), or fix the manifest",
            )
        } else {
            f.write_str(
                "Fix the manifest's plural and scope to what the cluster serves (`kubectl api-resources`); the host believes only API discovery",
            )
        }
    }
}

/// A change of one plugin's version set.
#[derive(Debug, Clone)]
pub enum VersionChange {
    /// A version set was created (first version) or replaced.
    Activated {
        /// The holder the plugin's controller reads; it already holds the
        /// new set.
        versions: Arc<ServingVersions>,
        /// The set that served before; `None` for the plugin's first version.
        previous: Option<Arc<VersionSet>>,
    },
    /// Nothing serves the plugin any more.
    Unloaded {
        /// The plugin's manifest name.
        plugin: String,
    },
}

/// One announced [`VersionChange`]. The registry's operation that made the
/// change returns once the announcement is acknowledged (or dropped).
#[derive(Debug)]
pub struct Announcement {
    /// What changed.
    pub change: VersionChange,
    applied: oneshot::Sender<()>,
}

impl Announcement {
    /// Tells the registry the change has been applied (e.g. controllers
    /// started, swapped or stopped).
    pub fn acknowledge(self) {
        // The registry stops waiting when it is dropped; nothing to report.
        let _ = self.applied.send(());
    }
}

/// `upgrade`, `rollback` or `reload` (same version, e.g. a rebuilt digest),
/// for the audit trail.
fn transition(from: &str, to: &str) -> &'static str {
    match (semver::Version::parse(from), semver::Version::parse(to)) {
        (Ok(a), Ok(b)) if b > a => "upgrade",
        (Ok(a), Ok(b)) if b < a => "rollback",
        _ => "reload",
    }
}

/// Refuses a split or selector candidate whose `min_compatible_version` is
/// above the stable version: objects it writes carry that mark, and the
/// stable version would refuse them after a rollback.
fn irreversible(
    stable: &LoadedVersion,
    candidate: &crate::contract::Manifest,
    settings: &RolloutSettings,
) -> Result<(), RegistryError> {
    if !settings.rollout.serves() || settings.accept_irreversible {
        return Ok(());
    }
    let Some(min) = candidate.min_compatible_version.as_deref() else {
        return Ok(());
    };
    // The same rule as the reconcile's version walk: a serving version older
    // than the object's min-compatible mark refuses it.
    let refused = match (
        semver::Version::parse(min),
        semver::Version::parse(&stable.version),
    ) {
        (Ok(min), Ok(stable)) => stable < min,
        _ => false,
    };
    if refused {
        return Err(RegistryError::CanaryIrreversible {
            name: candidate.name.clone(),
            stable_version: stable.version.clone(),
            candidate_version: candidate.version.clone(),
            min_compatible: min.to_string(),
        });
    }
    Ok(())
}

struct Inner {
    engine: Engine,
    metrics: Metrics,
    default_concurrency: usize,
    plugins: Mutex<HashMap<String, Arc<ServingVersions>>>,
    stats: Mutex<HashMap<String, stats::PluginStats>>,
    /// Serialises activations and unloads so two loads of one name cannot race.
    changes: tokio::sync::Mutex<()>,
    /// Where changes are announced (the manager); `None` until someone listens.
    listener: Mutex<Option<mpsc::UnboundedSender<Announcement>>>,
    /// API discovery, once a client is known ([`Registry::use_discovery`]).
    /// A registry without one (unit tests, `plugin inspect`) does not check
    /// kinds against a cluster: there is none.
    discovery: std::sync::OnceLock<Discovery>,
    /// Where this host's storage migrations stand, per plugin.
    storage_progress: StorageProgressBoard,
    /// The `spec.conversion` this host's conversion webhook wants in the
    /// CRDs of the plugins that implement `migration` (set by the webhook).
    conversion_target: Mutex<Option<Value>>,
}

/// The plugin versions of this host. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("loaded", &self.loaded())
            .finish()
    }
}

impl Registry {
    /// A registry with no plugins.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Engine`] when the wasm engine cannot be created
    /// (e.g. the instance pool cannot reserve its address space).
    pub fn new(mut options: RegistryOptions) -> Result<Registry, RegistryError> {
        // Every call the engine makes is timed into this registry's metrics.
        if options.engine.observer.is_none() {
            options.engine.observer = Some(Arc::new(options.metrics.clone()));
        }
        let engine = Engine::new(options.engine).map_err(RegistryError::Engine)?;
        Ok(Registry {
            inner: Arc::new(Inner {
                engine,
                metrics: options.metrics,
                default_concurrency: options.concurrency.max(1),
                plugins: Mutex::new(HashMap::new()),
                stats: Mutex::new(HashMap::new()),
                changes: tokio::sync::Mutex::new(()),
                listener: Mutex::new(None),
                discovery: std::sync::OnceLock::new(),
                storage_progress: StorageProgressBoard::default(),
                conversion_target: Mutex::new(None),
            }),
        })
    }

    fn plugins(&self) -> MutexGuard<'_, HashMap<String, Arc<ServingVersions>>> {
        lock(&self.inner.plugins)
    }

    fn stats_map(&self) -> MutexGuard<'_, HashMap<String, stats::PluginStats>> {
        lock(&self.inner.stats)
    }

    /// The engine the plugins run in.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Where plugin calls and versions are recorded.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Where the storage-version migrations of this host's plugins stand:
    /// the webhook publishes, the WasmPlugin status shows it.
    pub fn storage_progress(&self) -> &StorageProgressBoard {
        &self.inner.storage_progress
    }

    /// Records the `spec.conversion` (strategy, client config, caBundle)
    /// this host's conversion webhook serves, so that the WasmPlugin
    /// controller can point a plugin's CRD at it *before* the plugin's
    /// first version activates; `None` when no webhook serves.
    pub fn set_conversion_target(&self, conversion: Option<Value>) {
        *lock(&self.inner.conversion_target) = conversion;
    }

    /// See [`Registry::set_conversion_target`].
    pub fn conversion_target(&self) -> Option<Value> {
        lock(&self.inner.conversion_target).clone()
    }

    /// Checks every new version's kinds against `discovery` from now on
    /// (the manager sets its client's). Without it the registry trusts
    /// manifests' plurals and scopes: only for registries that serve no
    /// cluster. Set once; later calls are ignored.
    pub fn use_discovery(&self, discovery: Discovery) {
        let _ = self.inner.discovery.set(discovery);
    }

    /// Every later change of a version set. There is one listener, the
    /// composition root: a new call replaces (and closes) the previous
    /// receiver. Changes wait until the listener acknowledges each
    /// [`Announcement`]; a dropped receiver lets them proceed unannounced.
    pub fn announcements(&self) -> mpsc::UnboundedReceiver<Announcement> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.inner.listener) = Some(tx);
        rx
    }

    /// Announces `change` and waits until the listener applied it.
    async fn announce(&self, change: VersionChange) {
        let listener = lock(&self.inner.listener).clone();
        let Some(listener) = listener else {
            return;
        };
        let (applied, done) = oneshot::channel();
        if listener.send(Announcement { change, applied }).is_ok() {
            // An error means the listener dropped the announcement (it is
            // stopping): nothing left to wait for.
            let _ = done.await;
        }
    }

    /// Per-version figures of plugin `name`, in the order the versions
    /// were first activated (empty when never loaded).
    /// Each serving version carries its [`VersionRole`].
    pub fn stats(&self, name: &str) -> Vec<VersionStats> {
        let mut all = self
            .stats_map()
            .get(name)
            .map(stats::PluginStats::snapshot)
            .unwrap_or_default();
        if let Some(current) = self.versions(name).map(|v| v.current()) {
            let is = |s: &VersionStats, v: &ActiveVersion| {
                s.version == v.info.version && s.digest == v.info.digest
            };
            for s in &mut all {
                if is(s, &current.stable) {
                    s.role = Some(VersionRole::Stable);
                } else if current
                    .candidate
                    .as_ref()
                    .is_some_and(|c| is(s, &c.version))
                {
                    s.role = Some(VersionRole::Candidate);
                }
            }
        }
        all
    }

    /// Compiles `bytes` (once, off the async workers), reads the manifest and
    /// checks the version against what serves now: the same primary kind,
    /// the plugin `replaces` when given (a deployment of one plugin), and no
    /// rollback below the serving version's `min_compatible_version`.
    /// Nothing changes until [`Registry::activate`].
    ///
    /// # Errors
    ///
    /// [`RegistryError::Load`] (not a component of our world, an invalid
    /// manifest, or the engine's pool was busy: see
    /// [`RegistryError::is_transient`]), [`RegistryError::PrimaryKindChanged`],
    /// [`RegistryError::PluginNameChanged`], [`RegistryError::RollbackRefused`].
    pub async fn prepare(
        &self,
        source: &str,
        bytes: Vec<u8>,
        replaces: Option<&str>,
    ) -> Result<Candidate, RegistryError> {
        let engine = self.inner.engine.clone();
        // Compiling takes seconds of CPU: keep it off the async workers.
        let plugin = tokio::task::spawn_blocking(move || engine.load(&bytes))
            .await
            .map_err(|e| RegistryError::Internal {
                source_name: source.to_string(),
                message: e.to_string(),
            })?
            .map_err(|error| RegistryError::Load {
                source_name: source.to_string(),
                error,
            });
        let plugin = match plugin {
            Ok(plugin) => plugin,
            Err(error) => {
                tracing::warn!(target: "audit", source, "plugin version rejected: {error}");
                return Err(error);
            }
        };
        let candidate = Candidate {
            plugin,
            source: source.to_string(),
            replaces: replaces.map(str::to_string),
        };
        let running = self.current(candidate.target());
        self.admit(&candidate, running.as_deref(), None)?;
        // After the identity checks: a component that may not replace the
        // serving one is refused for that, whatever the cluster serves.
        self.check_kinds(&candidate).await?;
        Ok(candidate)
    }

    /// The plugin other than `candidate`'s target that serves its primary
    /// kind (same group and kind, any version), if any.
    fn primary_kind_conflict(&self, candidate: &Candidate) -> Option<RegistryError> {
        let target = candidate.target();
        let primary = &candidate.manifest().primary;
        let plugins = self.plugins();
        let mut serving: Vec<&String> = plugins
            .iter()
            .filter(|(name, versions)| {
                let current = versions.current();
                let theirs = &current.stable.plugin.manifest().primary;
                name.as_str() != target
                    && theirs.group == primary.group
                    && theirs.kind == primary.kind
            })
            .map(|(name, _)| name)
            .collect();
        serving.sort();
        let serving = serving.first()?;
        let new = candidate.manifest();
        Some(RegistryError::PrimaryKindConflict {
            name: new.name.clone(),
            version: new.version.clone(),
            source_name: candidate.source().to_string(),
            kind: format!(
                "{}/{}",
                if primary.group.is_empty() {
                    "core"
                } else {
                    primary.group.as_str()
                },
                primary.kind
            ),
            serving: (*serving).clone(),
        })
    }

    /// Resolves every kind of the candidate's manifest through API
    /// discovery (when the registry has it) and refuses a manifest whose
    /// plural or scope disagrees with the cluster, or that names a kind the
    /// cluster does not serve.
    async fn check_kinds(&self, candidate: &Candidate) -> Result<(), RegistryError> {
        let Some(discovery) = self.inner.discovery.get() else {
            return Ok(());
        };
        let manifest = candidate.manifest();
        let problems = discovery.check_manifest(manifest).await.map_err(|source| {
            RegistryError::Discovery {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                source_name: candidate.source().to_string(),
                source: Box::new(source),
            }
        })?;
        if problems.is_empty() {
            return Ok(());
        }
        let refusal = RegistryError::Kinds(Box::new(KindRefusal {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            source_name: candidate.source().to_string(),
            problems,
        }));
        self.inner
            .metrics
            .version_refused(&manifest.name, &manifest.version, refusal.reason());
        tracing::warn!(
            target: "audit", plugin = %manifest.name, version = %manifest.version,
            digest = %candidate.digest(), source = %candidate.source(),
            reason = %refusal.reason(), "plugin version rejected: {refusal}"
        );
        Err(refusal)
    }

    /// Runs the candidate's checks against `running` and the other plugins'
    /// primary kinds, and against `grant` when given, logging a refusal.
    fn admit(
        &self,
        candidate: &Candidate,
        running: Option<&ActiveVersion>,
        grant: Option<&Grant>,
    ) -> Result<(), RegistryError> {
        let verdict = match self.primary_kind_conflict(candidate) {
            Some(conflict) => Err(conflict),
            None => candidate.admit(running),
        }
        .and_then(|()| match grant {
            Some(grant) => candidate.check_grant(grant, running),
            None => Ok(()),
        });
        verdict.inspect_err(|refusal| {
            self.inner.metrics.version_refused(
                candidate.name(),
                &candidate.manifest().version,
                refusal.reason(),
            );
            tracing::warn!(
                target: "audit", plugin = %candidate.name(),
                from = %running.map(|r| r.info.version.as_str()).unwrap_or_default(),
                to = %candidate.manifest().version, digest = %candidate.digest(),
                source = %candidate.source(), "plugin version rejected: {refusal}"
            );
        })
    }

    /// Makes `candidate` the stable version of its plugin with `options`.
    /// The checks of [`Registry::prepare`] run again against what serves at
    /// this moment (another version may have been activated meanwhile). The
    /// swap is atomic: calls in flight finish on the old version, new calls
    /// use the new one. Returns once the change was announced and applied.
    ///
    /// # Errors
    ///
    /// The refusals of [`Registry::prepare`]; nothing changes then.
    pub async fn activate(
        &self,
        candidate: Candidate,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        self.activate_with(candidate, options, None).await
    }

    /// [`Registry::activate`] with a rollout candidate set in the same
    /// change (e.g. a host starting mid-canary): no object is ever served
    /// by the stable version alone in between, so a split's assignment
    /// holds from the first reconcile. `canary` is checked against the new
    /// stable version like [`Registry::activate_candidate`] checks it; it
    /// replaces a running candidate. With `canary` `None` this is
    /// [`Registry::activate`].
    ///
    /// # Errors
    ///
    /// Those of [`Registry::activate`] and [`Registry::activate_candidate`];
    /// nothing changes then.
    pub async fn activate_with(
        &self,
        candidate: Candidate,
        options: ActivationOptions,
        canary: Option<(Candidate, RolloutSettings, ActivationOptions)>,
    ) -> Result<LoadedVersion, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let target = candidate.target().to_string();
        let holder = self.plugins().get(&target).cloned();
        let previous = holder.as_ref().map(|h| h.current());
        self.admit(
            &candidate,
            previous.as_ref().map(|p| p.stable.as_ref()),
            Some(&options.grant),
        )?;

        let concurrency = options
            .concurrency
            .unwrap_or(self.inner.default_concurrency)
            .max(1);
        let active = self.active_version(candidate, options);
        let info = active.info.clone();
        let rollout = match canary {
            None => None,
            Some((next, settings, next_options)) => {
                if next.target() != info.name {
                    return Err(RegistryError::PluginNameChanged {
                        source_name: next.source().to_string(),
                        expected: info.name.clone(),
                        name: next.name().to_string(),
                        version: next.manifest().version.clone(),
                    });
                }
                self.admit(&next, Some(&active), Some(&next_options.grant))?;
                irreversible(&info, next.manifest(), &settings)?;
                let version = Arc::new(self.active_version(next, next_options));
                self.inner
                    .metrics
                    .plugin_version_loaded(&version.info.name, &version.info.version);
                let observations = Arc::new(CanaryObservations::new(
                    info.clone(),
                    version.info.clone(),
                    settings.shadow_concurrency,
                ));
                tracing::info!(
                    target: "audit", plugin = %info.name, stable = %info.version,
                    candidate = %version.info.version, digest = %version.info.digest,
                    source = %version.info.source, mode = settings.rollout.mode(),
                    rollout = ?settings.rollout, "canary candidate set"
                );
                Some(RolloutCandidate {
                    version,
                    settings,
                    observations,
                })
            }
        };
        let mut set = VersionSet::stable(active, concurrency);
        let running = previous.as_ref().and_then(|p| p.candidate.clone());
        if rollout.is_some() {
            if let Some(running) = &running {
                running.observations.stop();
            }
            set.candidate = rollout;
        } else if let Some(running) = running {
            // A rollout candidate survives a new stable version (e.g. a
            // config change), unless the new stable version is the
            // candidate itself.
            if running.version.info.digest == info.digest {
                running.observations.stop();
            } else {
                set.candidate = Some(running);
            }
        }
        self.inner
            .metrics
            .plugin_version_loaded(&info.name, &info.version);
        let (versions, previous) = match holder {
            Some(holder) => {
                let previous = holder.replace(set);
                (holder, Some(previous))
            }
            None => {
                let holder = Arc::new(ServingVersions::new(set));
                self.plugins().insert(info.name.clone(), holder.clone());
                (holder, None)
            }
        };
        match &previous {
            None => tracing::info!(
                target: "audit", plugin = %info.name, version = %info.version,
                digest = %info.digest, source = %info.source, "plugin loaded"
            ),
            Some(old) => tracing::info!(
                target: "audit", plugin = %info.name, from = %old.stable.info.version,
                to = %info.version, digest = %info.digest, source = %info.source,
                transition = transition(&old.stable.info.version, &info.version),
                "plugin version swapped"
            ),
        }
        self.announce(VersionChange::Activated { versions, previous })
            .await;
        Ok(info)
    }

    /// Checks `candidate` (prepared with [`Registry::prepare`], `replaces`
    /// naming the plugin) exactly like a new version against the stable
    /// one (name, primary kind, grant, rollback rule, kinds) and sets it
    /// beside the stable version with `settings`, replacing an earlier
    /// candidate (whose observations stop). Returns once the change was
    /// announced and applied (the manager re-reconciles the objects whose
    /// serving version changed, at `settings.rollout_rate`).
    ///
    /// `options` are the candidate's own config, call limits, grant and
    /// reconcile limits; its `concurrency` is not used (a candidate's
    /// objects are reconciled by the plugin's controller at the stable
    /// version's concurrency, shadow work at `settings.shadow_concurrency`).
    /// The controller watches the kinds of both versions.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when no stable version serves `name`;
    /// the refusals of [`Registry::activate`]; and
    /// [`RegistryError::CanaryIrreversible`] for a Split or Selector
    /// candidate whose `min_compatible_version` is above the stable version,
    /// unless `settings.accept_irreversible`. Nothing changes then.
    pub async fn activate_candidate(
        &self,
        candidate: Candidate,
        settings: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let target = candidate.target().to_string();
        let holder = self
            .versions(&target)
            .ok_or_else(|| RegistryError::NotLoaded(target.clone()))?;
        let previous = holder.current();
        self.admit(&candidate, Some(&previous.stable), Some(&options.grant))?;
        irreversible(&previous.stable.info, candidate.manifest(), &settings)?;
        let active = Arc::new(self.active_version(candidate, options));
        let info = active.info.clone();
        let observations = Arc::new(CanaryObservations::new(
            previous.stable.info.clone(),
            info.clone(),
            settings.shadow_concurrency,
        ));
        if let Some(old) = &previous.candidate {
            old.observations.stop();
        }
        let mut set = (*previous).clone();
        set.candidate = Some(RolloutCandidate {
            version: active,
            settings: settings.clone(),
            observations,
        });
        self.inner
            .metrics
            .plugin_version_loaded(&info.name, &info.version);
        tracing::info!(
            target: "audit", plugin = %info.name, stable = %previous.stable.info.version,
            candidate = %info.version, digest = %info.digest, source = %info.source,
            mode = settings.rollout.mode(), rollout = ?settings.rollout,
            "canary candidate set"
        );
        let previous = holder.replace(set);
        self.announce(VersionChange::Activated {
            versions: holder,
            previous: Some(previous),
        })
        .await;
        Ok(info)
    }

    /// Changes how plugin `name`'s candidate takes part (a weight step,
    /// DryRun → Shadow or Split, a new selector, rate or shadow
    /// concurrency). Observations are kept. Returns once the change was
    /// applied (objects that change version are re-reconciled at the new
    /// `rollout_rate`).
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`], [`RegistryError::NoCandidate`], and
    /// [`RegistryError::CanaryIrreversible`] as in
    /// [`Registry::activate_candidate`]; nothing changes then.
    pub async fn set_rollout(
        &self,
        name: &str,
        settings: RolloutSettings,
    ) -> Result<(), RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let holder = self
            .versions(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        let previous = holder.current();
        let Some(candidate) = &previous.candidate else {
            return Err(RegistryError::NoCandidate(name.to_string()));
        };
        irreversible(
            &previous.stable.info,
            candidate.version.plugin.manifest(),
            &settings,
        )?;
        if candidate.settings == settings {
            return Ok(());
        }
        candidate
            .observations
            .set_concurrency(settings.shadow_concurrency);
        tracing::info!(
            target: "audit", plugin = %name, stable = %previous.stable.info.version,
            candidate = %candidate.version.info.version, from = ?candidate.settings.rollout,
            to = ?settings.rollout, rollout_rate = settings.effective_rate(),
            "canary rollout changed"
        );
        let mut set = (*previous).clone();
        if let Some(c) = set.candidate.as_mut() {
            c.settings = settings;
        }
        let previous = holder.replace(set);
        self.announce(VersionChange::Activated {
            versions: holder,
            previous: Some(previous),
        })
        .await;
        Ok(())
    }

    /// Rolls plugin `name`'s candidate back (analysis failed, abort, or it
    /// became unloadable): it stops serving and computing at once, and
    /// every object it served is re-reconciled by the stable version at
    /// the candidate's `rollout_rate`. Returns the dropped candidate
    /// (`None` when there was none) once the change was applied.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when the plugin does not serve.
    pub async fn drop_candidate(&self, name: &str) -> Result<Option<LoadedVersion>, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let holder = self
            .versions(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        let previous = holder.current();
        let Some(candidate) = previous.candidate.clone() else {
            return Ok(None);
        };
        candidate.observations.stop();
        tracing::info!(
            target: "audit", plugin = %name, stable = %previous.stable.info.version,
            candidate = %candidate.version.info.version, digest = %candidate.version.info.digest,
            "canary candidate dropped; the stable version serves every object"
        );
        let mut set = (*previous).clone();
        set.candidate = None;
        let previous = holder.replace(set);
        self.announce(VersionChange::Activated {
            versions: holder,
            previous: Some(previous),
        })
        .await;
        Ok(Some(candidate.version.info.clone()))
    }

    /// Makes plugin `name`'s candidate its stable version: every object it
    /// did not serve yet moves to it (re-reconciled at its `rollout_rate`),
    /// and the old stable version is unloaded once its calls in flight
    /// finish. Returns the new stable version once the change was applied.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`], [`RegistryError::NoCandidate`].
    pub async fn promote_candidate(&self, name: &str) -> Result<LoadedVersion, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let holder = self
            .versions(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        let previous = holder.current();
        let Some(candidate) = previous.candidate.clone() else {
            return Err(RegistryError::NoCandidate(name.to_string()));
        };
        candidate.observations.stop();
        let info = candidate.version.info.clone();
        tracing::info!(
            target: "audit", plugin = %name, from = %previous.stable.info.version,
            to = %info.version, digest = %info.digest, source = %info.source,
            transition = transition(&previous.stable.info.version, &info.version),
            "canary candidate promoted"
        );
        let set = VersionSet {
            stable: candidate.version,
            candidate: None,
            concurrency: previous.concurrency,
        };
        let previous = holder.replace(set);
        self.announce(VersionChange::Activated {
            versions: holder,
            previous: Some(previous),
        })
        .await;
        Ok(info)
    }

    /// The observations of plugin `name`'s rollout candidate; `None`
    /// without a candidate.
    pub fn canary(&self, name: &str) -> Option<Arc<CanaryObservations>> {
        let versions = self.versions(name)?.current();
        versions.candidate.as_ref().map(|c| c.observations.clone())
    }

    /// The live figures of plugin `name`'s stable version and candidate,
    /// for windowed analysis ([`CounterSnapshot::since`]).
    pub fn counters(&self, name: &str) -> Option<(CounterSnapshot, Option<CounterSnapshot>)> {
        let versions = self.versions(name)?.current();
        Some((
            versions.stable.counters.snapshot(),
            versions
                .candidate
                .as_ref()
                .map(|c| c.version.counters.snapshot()),
        ))
    }

    /// The serving form of an accepted `candidate`: its limits, config,
    /// grant and (shared per version and digest) counters.
    fn active_version(&self, candidate: Candidate, options: ActivationOptions) -> ActiveVersion {
        let plugin = match options.limits {
            Some(limits) => candidate.plugin.with_limits(limits),
            None => candidate.plugin,
        };
        let info = LoadedVersion {
            name: plugin.manifest().name.clone(),
            version: plugin.manifest().version.clone(),
            digest: plugin.digest().to_string(),
            source: candidate.source,
        };
        let config = if options.config.is_null() {
            Value::Object(Default::default())
        } else {
            options.config
        };
        // Created only now that the version is accepted, so a refused one
        // never shows up in the stats.
        let counters = self
            .stats_map()
            .entry(info.name.clone())
            .or_default()
            .counters(&info.version, &info.digest);
        ActiveVersion {
            plugin,
            config,
            limits: options.reconcile_limits.unwrap_or_default(),
            info,
            counters,
            grant: Arc::new(options.grant),
        }
    }

    /// [`Registry::prepare`] then [`Registry::activate`] with `config` and
    /// the registry's default limits and concurrency: a load of a component
    /// that may be any plugin.
    ///
    /// # Errors
    ///
    /// Those of [`Registry::prepare`] and [`Registry::activate`].
    pub async fn load(
        &self,
        source: &str,
        bytes: &[u8],
        config: Value,
    ) -> Result<LoadedVersion, RegistryError> {
        let candidate = self.prepare(source, bytes.to_vec(), None).await?;
        self.activate(
            candidate,
            ActivationOptions {
                config,
                ..ActivationOptions::default()
            },
        )
        .await
    }

    /// Forgets plugin `name`; returns once the change was announced and
    /// applied (its controller stopped after its calls in flight).
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when no plugin of that name serves.
    pub async fn unload(&self, name: &str) -> Result<(), RegistryError> {
        let _changes = self.inner.changes.lock().await;
        self.plugins()
            .remove(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        self.stats_map().remove(name);
        self.announce(VersionChange::Unloaded {
            plugin: name.to_string(),
        })
        .await;
        tracing::info!(target: "audit", plugin = %name, "plugin unloaded");
        Ok(())
    }

    /// Forgets every plugin, announcing each unload.
    pub async fn unload_all(&self) {
        let names: Vec<String> = self.plugins().keys().cloned().collect();
        for name in names {
            // A plugin another task unloaded meanwhile is gone either way.
            let _ = self.unload(&name).await;
        }
    }

    /// Every loaded plugin's stable version, sorted by name.
    pub fn loaded(&self) -> Vec<LoadedVersion> {
        let mut out: Vec<LoadedVersion> = self
            .plugins()
            .values()
            .map(|v| v.current().stable.info.clone())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The stable version of plugin `name`, with its handle (for tools that
    /// call the plugin directly, e.g. conversion webhooks).
    pub fn current(&self, name: &str) -> Option<Arc<ActiveVersion>> {
        self.plugins().get(name).map(|v| v.current().stable.clone())
    }

    /// The serving-state holder of plugin `name`.
    pub fn versions(&self, name: &str) -> Option<Arc<ServingVersions>> {
        self.plugins().get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_error(error: EngineError) -> RegistryError {
        RegistryError::Load {
            source_name: "file:/plugins/webapp.wasm".into(),
            error,
        }
    }

    fn kind_refusal(problems: Vec<KindProblem>) -> RegistryError {
        RegistryError::Kinds(Box::new(KindRefusal {
            name: "liar".into(),
            version: "1.0.0".into(),
            source_name: "file:/plugins/liar.wasm".into(),
            problems,
        }))
    }

    #[test]
    fn a_kind_not_served_yet_passes_a_lie_does_not() {
        use crate::cache::KindRole;
        let not_served = KindProblem::NotServed {
            role: KindRole::Primary,
            kind: "example.com/v1 Widget".into(),
            detail: "the cluster serves no group/version example.com/v1".into(),
        };
        let lie = KindProblem::Mismatch {
            role: KindRole::Watches,
            kind: "v1 ConfigMap".into(),
            declared: "plural \"secrets\", namespaced".into(),
            served: "plural \"configmaps\", namespaced".into(),
        };
        let waiting = kind_refusal(vec![not_served.clone()]);
        assert_eq!(waiting.reason(), "KindNotServed");
        assert!(waiting.is_rejection() && waiting.may_pass());
        let text = waiting.to_string();
        assert!(
            text.contains("plugin liar 1.0.0 from file:/plugins/liar.wasm"),
            "{text}"
        );
        assert!(text.contains("Install the CRDs"), "{text}");

        let lying = kind_refusal(vec![not_served, lie]);
        assert_eq!(lying.reason(), "KindMismatch");
        assert!(lying.is_rejection() && !lying.may_pass());
        let text = lying.to_string();
        assert!(
            text.contains("example.com/v1 Widget is not served"),
            "{text}"
        );
        assert!(
            text.contains("serves it as plural \"configmaps\""),
            "{text}"
        );
        assert!(text.contains("kubectl api-resources"), "{text}");
    }

    #[test]
    fn a_busy_engine_is_not_a_verdict_on_the_plugin() {
        let busy = load_error(EngineError::InstancePoolFull {
            digest: "sha256:00".into(),
            max_instances: 4,
        });
        assert!(busy.is_transient());
        assert!(!busy.is_rejection());
        assert_eq!(busy.reason(), "InstancePoolFull");

        let invalid = load_error(EngineError::InvalidManifest {
            digest: "sha256:00".into(),
            problem: "no version".into(),
        });
        assert!(!invalid.is_transient());
        assert!(invalid.is_rejection());
        assert_eq!(invalid.reason(), "InvalidPlugin");
    }

    #[test]
    fn grant_and_kind_refusals_are_verdicts_that_name_everything() {
        use crate::contract::{Access, ExcessKind, ResourceKind, Scope};
        let denied = RegistryError::PermissionDenied(Box::new(PermissionDenial {
            name: "hostile".into(),
            version: "1.0.0".into(),
            source_name: "file:/plugins/hostile.wasm".into(),
            excesses: vec![Excess {
                access: Access::Own,
                kind: ResourceKind {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "Secret".into(),
                    plural: "secrets".into(),
                    scope: Scope::Namespaced,
                },
                problem: ExcessKind::Sensitive("Secrets hold credentials"),
            }],
            serving: Some("0.9.0".into()),
        }));
        assert!(denied.is_rejection() && !denied.is_transient());
        assert_eq!(denied.reason(), "PermissionDenied");
        let text = denied.to_string();
        assert!(
            text.contains("plugin hostile 1.0.0")
                && text.contains("owns v1 Secret")
                && text.contains("version 0.9.0 keeps serving"),
            "{text}"
        );
        let conflict = RegistryError::PrimaryKindConflict {
            name: "b".into(),
            version: "1.0.0".into(),
            source_name: "file:/b.wasm".into(),
            kind: "example.com/WebApp".into(),
            serving: "a".into(),
        };
        assert!(conflict.is_rejection());
        assert_eq!(conflict.reason(), "PrimaryKindConflict");
        assert!(conflict.to_string().contains("plugin a already serves"));
    }
}
