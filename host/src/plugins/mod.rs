//! The registry of loaded plugins: load (compile, validate, start or swap),
//! unload, and what runs now.

mod slot;
mod stats;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;

use crate::cache::SharedCache;
use crate::controller::{ControllerHandle, ControllerOptions};
use crate::engine::{CallLimits, Engine, EngineConfig, EngineError, InstanceAllocation};
use crate::telemetry::Metrics;

pub use slot::{ActiveVersion, PluginSlot};
pub use stats::{VersionCounters, VersionStats};

/// Per-deployment settings of one load (e.g. from a `WasmPlugin`'s spec);
/// `None` fields use the registry's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Call limits of this plugin's calls (default: the engine's).
    pub limits: Option<CallLimits>,
    /// Reconciles of this plugin that may run at once (default: the registry's).
    pub concurrency: Option<usize>,
}

/// Instances the registry's engine pools by default: calls in flight across
/// all plugins (e.g. 64 plugins at the default concurrency of 4). A call
/// that finds the pool full fails with `InstancePoolFull` and is retried.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;

/// How a [`Registry`] runs its plugins.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Reconciles per plugin that may run at once (on different objects).
    pub concurrency: usize,
    /// Engine settings, including the default call limits. The default
    /// uses the pooling allocator with [`DEFAULT_MAX_INSTANCES`] slots: in the
    /// `plugin_call` benchmark a pooled call takes about half the time of an
    /// on-demand one.
    pub engine: EngineConfig,
    /// Where the controllers record their metrics.
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
        source_name: String,
        #[source]
        error: EngineError,
    },
    /// A new version changes the primary kind of a running plugin.
    #[error(
        "plugin {name} {new_version} from {source_name} reconciles {new_kind}, but the running version {running_version} reconciles {running_kind}; the running version keeps serving. Deploy a kind change as a new plugin name"
    )]
    PrimaryKindChanged {
        name: String,
        source_name: String,
        new_version: String,
        new_kind: String,
        running_version: String,
        running_kind: String,
    },
    /// Swapping to an older version that the running version declared
    /// incompatible (its manifest's `min_compatible_version` is above it).
    #[error(
        "refusing to roll plugin {name} back from {running_version} to {new_version}: version {running_version} declares min_compatible_version {min_compatible}, so {new_version} could corrupt objects it managed; {running_version} keeps serving. Deploy {min_compatible} or newer"
    )]
    RollbackRefused {
        name: String,
        running_version: String,
        new_version: String,
        min_compatible: String,
    },
    /// No plugin of that name runs.
    #[error("no plugin named {0} is loaded; `wasm-operator plugin list` shows the loaded ones")]
    NotLoaded(String),
    /// A blocking task of the registry failed (a host bug).
    #[error("internal error while loading plugin from {source_name}: {message}")]
    Internal {
        source_name: String,
        message: String,
    },
}

impl RegistryError {
    /// True when the registry refused a new version (it is bad or unsafe)
    /// and the running version, if any, keeps serving; false for host
    /// problems and unknown names.
    pub fn is_rejection(&self) -> bool {
        match self {
            RegistryError::Load { error, .. } => !error.is_transient(),
            RegistryError::PrimaryKindChanged { .. } | RegistryError::RollbackRefused { .. } => {
                true
            }
            _ => false,
        }
    }

    /// True when the same load may succeed later (the engine was busy).
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Load { error, .. } if error.is_transient())
    }

    /// A short CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            RegistryError::Engine(_) => "EngineUnavailable",
            RegistryError::Load { error, .. } if error.is_transient() => "InstancePoolFull",
            RegistryError::Load { .. } => "InvalidPlugin",
            RegistryError::PrimaryKindChanged { .. } => "PrimaryKindChanged",
            RegistryError::RollbackRefused { .. } => "RollbackRefused",
            RegistryError::NotLoaded(_) => "NotLoaded",
            RegistryError::Internal { .. } => "InternalError",
        }
    }
}

/// Why `running` may not be replaced by `new`: `new` is older than the
/// running manifest's `min_compatible_version`. Versions were checked to be
/// semver when loaded; an unparsable one (cannot happen) never refuses.
fn rollback_refusal(
    running: &crate::contract::Manifest,
    new: &crate::contract::Manifest,
) -> Option<RegistryError> {
    let min = running.min_compatible_version.as_deref()?;
    let min_v = semver::Version::parse(min).ok()?;
    let new_v = semver::Version::parse(&new.version).ok()?;
    let running_v = semver::Version::parse(&running.version).ok()?;
    (new_v < running_v && new_v < min_v).then(|| RegistryError::RollbackRefused {
        name: running.name.clone(),
        running_version: running.version.clone(),
        new_version: new.version.clone(),
        min_compatible: min.to_string(),
    })
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

struct Running {
    slot: Arc<PluginSlot>,
    controller: ControllerHandle,
    concurrency: usize,
}

struct Inner {
    client: kube::Client,
    engine: Engine,
    cache: SharedCache,
    metrics: Metrics,
    controller: ControllerOptions,
    plugins: Mutex<HashMap<String, Running>>,
    stats: Mutex<HashMap<String, stats::PluginStats>>,
    /// Serialises load/unload so two loads of one name cannot race.
    changes: tokio::sync::Mutex<()>,
}

/// The loaded plugins and their controllers. Cheap to clone; clones share
/// everything.
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
    /// A registry with no plugins, writing through `client`.
    pub async fn new(
        client: kube::Client,
        mut options: RegistryOptions,
    ) -> Result<Registry, RegistryError> {
        // Every call the engine makes is timed into this registry's metrics.
        if options.engine.observer.is_none() {
            options.engine.observer = Some(Arc::new(options.metrics.clone()));
        }
        let engine = Engine::new(options.engine).map_err(RegistryError::Engine)?;
        Ok(Registry {
            inner: Arc::new(Inner {
                cache: SharedCache::new(client.clone()),
                client,
                engine,
                metrics: options.metrics,
                controller: ControllerOptions {
                    concurrency: options.concurrency,
                },
                plugins: Mutex::new(HashMap::new()),
                stats: Mutex::new(HashMap::new()),
                changes: tokio::sync::Mutex::new(()),
            }),
        })
    }

    fn plugins(&self) -> MutexGuard<'_, HashMap<String, Running>> {
        // Entries are replaced whole; a poisoned map is still consistent.
        self.inner.plugins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shared caches (tests check that reflectors are shared).
    pub fn cache(&self) -> &SharedCache {
        &self.inner.cache
    }

    /// The engine the plugins run in.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    fn stats_map(&self) -> MutexGuard<'_, HashMap<String, stats::PluginStats>> {
        // Only counters are inserted; a poisoned map is still consistent.
        self.inner.stats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Per-version reconcile and failure counts of plugin `name`, in the
    /// order the versions were first loaded (empty when never loaded).
    pub fn stats(&self, name: &str) -> Vec<VersionStats> {
        self.stats_map()
            .get(name)
            .map(stats::PluginStats::snapshot)
            .unwrap_or_default()
    }

    /// [`Registry::load_with`] with the registry's default limits and
    /// concurrency.
    pub async fn load(
        &self,
        source: &str,
        bytes: &[u8],
        config: Value,
    ) -> Result<LoadedVersion, RegistryError> {
        self.load_with(source, bytes, config, LoadOptions::default())
            .await
    }

    /// Compiles and validates a version. If no plugin with its manifest's name
    /// runs, starts its controller; if one runs, swaps atomically: calls in
    /// flight finish on the old version, new calls use the new one, and every
    /// primary is reconciled again. A version with a different primary kind
    /// is refused (the old one keeps serving); one with different owned or
    /// watched kinds (or another concurrency) restarts the controller (after
    /// calls in flight finish). Rolling back below the running version's
    /// `min_compatible_version` is refused ([`RegistryError::RollbackRefused`]).
    pub async fn load_with(
        &self,
        source: &str,
        bytes: &[u8],
        config: Value,
        options: LoadOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let engine = self.inner.engine.clone();
        let owned = bytes.to_vec();
        // Compiling takes seconds of CPU: keep it off the async workers.
        let plugin = tokio::task::spawn_blocking(move || engine.load(&owned))
            .await
            .map_err(|e| RegistryError::Internal {
                source_name: source.to_string(),
                message: e.to_string(),
            })?
            .map_err(|error| {
                let error = RegistryError::Load {
                    source_name: source.to_string(),
                    error,
                };
                tracing::warn!(target: "audit", source, "plugin version rejected: {error}");
                error
            })?;
        let plugin = match options.limits {
            Some(limits) => plugin.with_limits(limits),
            None => plugin,
        };
        let concurrency = options
            .concurrency
            .unwrap_or(self.inner.controller.concurrency)
            .max(1);
        let manifest = plugin.manifest().clone();
        let info = LoadedVersion {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            digest: plugin.digest().to_string(),
            source: source.to_string(),
        };
        let config = if config.is_null() {
            Value::Object(Default::default())
        } else {
            config
        };
        // Created only once the version is accepted, so a refused one
        // never shows up in the stats.
        let make_version = |registry: &Registry| ActiveVersion {
            counters: registry
                .stats_map()
                .entry(info.name.clone())
                .or_default()
                .counters(&info.version, &info.digest),
            plugin: plugin.clone(),
            config: config.clone(),
            info: info.clone(),
        };

        // Decided and (for a swap) done under the map lock, so `loaded()` and
        // `ready()` never see the plugin missing while it is replaced.
        let old = {
            let plugins = self.plugins();
            match plugins.get(&manifest.name) {
                None => None,
                Some(running) => {
                    let old = running.slot.current();
                    let old_manifest = old.plugin.manifest();
                    if old_manifest.primary != manifest.primary {
                        tracing::warn!(
                            target: "audit", plugin = %manifest.name, from = %old_manifest.version,
                            to = %manifest.version, digest = %info.digest, source,
                            "plugin version rejected: it reconciles another primary kind"
                        );
                        return Err(RegistryError::PrimaryKindChanged {
                            name: manifest.name.clone(),
                            source_name: source.to_string(),
                            new_version: manifest.version.clone(),
                            new_kind: format!(
                                "{} {}",
                                manifest.primary.api_version(),
                                manifest.primary.kind
                            ),
                            running_version: old_manifest.version.clone(),
                            running_kind: format!(
                                "{} {}",
                                old_manifest.primary.api_version(),
                                old_manifest.primary.kind
                            ),
                        });
                    }
                    if let Some(refusal) = rollback_refusal(old_manifest, &manifest) {
                        tracing::warn!(
                            target: "audit", plugin = %manifest.name, from = %old_manifest.version,
                            to = %manifest.version, digest = %info.digest, source,
                            "plugin version rejected: {refusal}"
                        );
                        return Err(refusal);
                    }
                    Some((old, running.concurrency))
                }
            }
        };
        let Some((old, old_concurrency)) = old else {
            self.start(make_version(self), concurrency);
            tracing::info!(target: "audit", plugin = %info.name, version = %info.version, digest = %info.digest, source, "plugin loaded");
            return Ok(info);
        };
        let old_manifest = old.plugin.manifest();
        if old_manifest.owns == manifest.owns
            && old_manifest.watches == manifest.watches
            && old_concurrency == concurrency
        {
            let version = make_version(self);
            let plugins = self.plugins();
            if let Some(running) = plugins.get(&manifest.name) {
                self.inner
                    .metrics
                    .plugin_version_loaded(&info.name, &info.version);
                running.slot.swap(version);
                running.controller.reconcile_all();
            }
        } else {
            // Other kinds to watch: a new controller, after the old one's
            // calls in flight finish (never two controllers on one object).
            let running = self.plugins().remove(&manifest.name);
            if let Some(running) = running {
                running.controller.stop().await;
            }
            self.start(make_version(self), concurrency);
        }
        let transition = transition(&old.info.version, &info.version);
        tracing::info!(
            target: "audit",
            plugin = %info.name, from = %old.info.version, to = %info.version, digest = %info.digest, source,
            transition, "plugin version swapped"
        );
        Ok(info)
    }

    fn start(&self, version: ActiveVersion, concurrency: usize) {
        let name = version.info.name.clone();
        let slot = Arc::new(PluginSlot::new(version));
        let controller = ControllerHandle::start(
            self.inner.client.clone(),
            &self.inner.cache,
            slot.clone(),
            self.inner.metrics.clone(),
            &ControllerOptions { concurrency },
        );
        self.plugins().insert(
            name,
            Running {
                slot,
                controller,
                concurrency,
            },
        );
    }

    /// Stops a plugin's controller cleanly (calls in flight finish) and
    /// forgets the plugin.
    pub async fn unload(&self, name: &str) -> Result<(), RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let running = self
            .plugins()
            .remove(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        running.controller.stop().await;
        self.stats_map().remove(name);
        tracing::info!(target: "audit", plugin = %name, "plugin unloaded");
        Ok(())
    }

    /// Every loaded plugin's current version, sorted by name.
    pub fn loaded(&self) -> Vec<LoadedVersion> {
        let mut out: Vec<LoadedVersion> = self
            .plugins()
            .values()
            .map(|r| r.slot.current().info.clone())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The current version of plugin `name`, with its handle (for tools that
    /// call the plugin directly, e.g. conversion webhooks).
    pub fn current(&self, name: &str) -> Option<Arc<ActiveVersion>> {
        self.plugins().get(name).map(|r| r.slot.current())
    }

    /// True when every controller's caches have synced (vacuously true
    /// without plugins).
    pub fn ready(&self) -> bool {
        self.plugins().values().all(|r| r.controller.synced())
    }

    /// Stops every controller and waits for calls in flight.
    pub async fn shutdown(&self) {
        let _changes = self.inner.changes.lock().await;
        let running: Vec<Running> = self.plugins().drain().map(|(_, r)| r).collect();
        futures::future::join_all(running.into_iter().map(|r| r.controller.stop())).await;
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
}
