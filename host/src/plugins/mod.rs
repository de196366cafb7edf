//! The registry of loaded plugins: load (compile, validate, start or swap),
//! unload, and what runs now.

mod slot;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;
use serde_json::Value;

use crate::cache::SharedCache;
use crate::controller::{ControllerHandle, ControllerOptions};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::telemetry::Metrics;

pub use slot::{ActiveVersion, PluginSlot};

/// How a [`Registry`] runs its plugins.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Reconciles per plugin that may run at once (on different objects).
    pub concurrency: usize,
    /// Engine settings, including the default call limits.
    pub engine: EngineConfig,
    /// Where the controllers record their metrics.
    pub metrics: Metrics,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            concurrency: 4,
            engine: EngineConfig::default(),
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
    #[error("cannot load plugin from {source_name}: {error}")]
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

struct Running {
    slot: Arc<PluginSlot>,
    controller: ControllerHandle,
}

struct Inner {
    client: kube::Client,
    engine: Engine,
    cache: SharedCache,
    metrics: Metrics,
    controller: ControllerOptions,
    plugins: Mutex<HashMap<String, Running>>,
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
        options: RegistryOptions,
    ) -> Result<Registry, RegistryError> {
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

    /// Compiles and validates a version. If no plugin with its manifest's name
    /// runs, starts its controller; if one runs, swaps atomically: calls in
    /// flight finish on the old version, new calls use the new one, and every
    /// primary is reconciled again. A version with a different primary kind
    /// is refused (the old one keeps serving); one with different owned or
    /// watched kinds restarts the controller (after calls in flight finish).
    pub async fn load(
        &self,
        source: &str,
        bytes: &[u8],
        config: Value,
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
            .map_err(|error| RegistryError::Load {
                source_name: source.to_string(),
                error,
            })?;
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
        let version = ActiveVersion {
            plugin,
            config,
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
                    Some(old)
                }
            }
        };
        let Some(old) = old else {
            self.start(version);
            tracing::info!(plugin = %info.name, version = %info.version, digest = %info.digest, source, "plugin loaded");
            return Ok(info);
        };
        let old_manifest = old.plugin.manifest();
        if old_manifest.owns == manifest.owns && old_manifest.watches == manifest.watches {
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
            self.start(version);
        }
        tracing::info!(
            plugin = %info.name, from = %old.info.version, to = %info.version, digest = %info.digest, source,
            "plugin version swapped"
        );
        Ok(info)
    }

    fn start(&self, version: ActiveVersion) {
        let name = version.info.name.clone();
        let slot = Arc::new(PluginSlot::new(version));
        let controller = ControllerHandle::start(
            self.inner.client.clone(),
            &self.inner.cache,
            slot.clone(),
            self.inner.metrics.clone(),
            &self.inner.controller,
        );
        self.plugins().insert(name, Running { slot, controller });
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
        tracing::info!(plugin = %name, "plugin unloaded");
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
