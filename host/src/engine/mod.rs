//! The wasm engine: loads plugin components and runs their calls sandboxed.
//!
//! One [`Engine`] per process wraps one `wasmtime::Engine` (component model,
//! Cranelift at `speed`, epoch interruption driven by a 10 ms ticker thread),
//! the linker with the host's imports (`cache`, `log`, deny-by-default WASI
//! p2) and an optional disk cache of compiled components. [`Engine::load`]
//! turns component bytes into a [`LoadedPlugin`]; every call of a loaded
//! plugin gets a fresh store and instance, a deadline, a memory cap and an
//! output cap, so a faulty call fails alone and leaves nothing behind.

mod bindings;
mod compile;
mod convert;
mod error;
mod host;
pub mod inspect;
mod plugin;
mod trap;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{HasSelf, Linker};

pub use compile::LoadStats;
pub use error::{CallError, CallFailure, CallSite, EngineError, NamespaceDenial, WithRemedy};
pub use plugin::LoadedPlugin;

use crate::contract;
use host::HostState;

/// Bytes of each pooled linear memory kept mapped between calls (see
/// `wasmtime_config`).
const POOL_KEEP_RESIDENT: usize = 16 << 20;

/// How often the ticker thread advances the epoch; the granularity of timeouts.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Per-call resource limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Wall-clock deadline of one call (epoch interruption). Default 5 s.
    pub timeout: Duration,
    /// Largest linear memory a call may grow to. Default 256 MiB.
    pub memory_bytes: usize,
    /// Largest answer (sum of the returned strings). Default 16 MiB.
    pub output_bytes: usize,
    /// Log bytes one call may emit, through the `log` import and
    /// stdout/stderr together; the rest is truncated, with one note saying
    /// so. Default 64 KiB.
    pub log_bytes: usize,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            timeout: Duration::from_secs(5),
            memory_bytes: 256 << 20,
            output_bytes: 16 << 20,
            log_bytes: 64 << 10,
        }
    }
}

/// How instances get their memories and tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InstanceAllocation {
    /// mmap per instance (copy-on-write memory images). Nothing reserved up front.
    #[default]
    OnDemand,
    /// Wasmtime's pooling allocator: slots reserved up front and reused, with
    /// the pages a call dirtied kept resident (and reset) for the next one.
    /// Faster instantiation and no page faults; at most `max_instances`
    /// calls run at once (a call beyond that fails with
    /// [`CallFailure::InstancePoolFull`]). Each slot reserves 4 GiB + guard of
    /// address space, never of memory.
    Pooling {
        /// The pool's size: how many calls may run at once.
        max_instances: u32,
    },
}

impl InstanceAllocation {
    /// The pool's size; `None` for on-demand allocation (no bound).
    pub fn max_instances(self) -> Option<u32> {
        match self {
            InstanceAllocation::OnDemand => None,
            InstanceAllocation::Pooling { max_instances } => Some(max_instances),
        }
    }
}

/// A wall clock that stands still, for calls whose answer must be
/// reproducible (`wasm-operator plugin test`'s golden fixtures): the
/// plugin's `wasi:clocks` wall clock reads `since_epoch`, its monotonic
/// clock never advances. Production calls read the real clocks (no
/// [`FixedClock`] unless [`LoadedPlugin::with_clock`] sets one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedClock {
    /// The time the plugin reads, since the Unix epoch.
    pub since_epoch: Duration,
}

/// Outcome of one call, for metrics (`wasm_operator_plugin_call_duration_seconds`).
#[derive(Debug, Clone, Copy)]
pub struct CallReport<'a> {
    /// The plugin's name, from its manifest.
    pub plugin: &'a str,
    /// The plugin's version, from its manifest.
    pub version: &'a str,
    /// `manifest`, `reconcile`, `finalize`, `upgrade`, `convert`,
    /// `implemented`, `schema.crd`, `backup.plan`, `backup.restore`,
    /// `admission.validate` or `admission.defaults`.
    pub function: &'a str,
    /// Wall time of the call, instantiation included.
    pub duration: Duration,
    /// Of [`CallReport::duration`], the time spent setting up the call's
    /// fresh store and instantiating the component in it.
    pub instantiation: Duration,
    /// Linear memory the call's instance held when the call ended, over all
    /// its memories (initial sizes plus growth): a plugin's memory cost per
    /// call in flight.
    pub memory_bytes: usize,
    /// `"Ok"`, or the [`CallError::reason`] of the failure.
    pub outcome: &'static str,
    /// Log bytes the call emitted (after truncation).
    pub log_bytes: usize,
    /// Log bytes the call's log limit cut off.
    pub log_dropped: usize,
}

/// Receives a [`CallReport`] after every call. Must be cheap: it runs on the
/// call's thread.
pub trait CallObserver: Send + Sync {
    /// Records one finished call, successful or not.
    fn observe(&self, report: &CallReport<'_>);
}

/// Read access the host grants a call. The engine checks the manifest before a
/// read reaches it: implementations only see declared kinds. Objects are
/// answered as the compact JSON text the plugin receives (see
/// `cache::object_text`), so a read is serialized once, by the reader.
///
/// A read that cannot be answered (the cache has not synced, the kind is no
/// longer served, nothing caches the kind) is an `Err` with a message for
/// the plugin, never an empty answer: a plugin must be able to tell "there
/// is none" from "the host does not know".
pub trait CacheReader: Send + Sync {
    /// One object's JSON text, `Ok(None)` when it does not exist, `Err` when
    /// the host cannot tell.
    ///
    /// # Errors
    ///
    /// A message naming the kind and why it cannot be read now.
    fn get(&self, r: &contract::ObjectRef) -> Result<Option<String>, String>;
    /// The JSON text of the objects of a kind, optionally in one namespace
    /// and matching a label selector.
    ///
    /// # Errors
    ///
    /// A message naming the kind and why it cannot be read now, or the
    /// selector's syntax error.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String>;
    /// True when the plugin may read objects in `namespace` (its grant's
    /// namespaces); the engine refuses reads naming another one. Default:
    /// every namespace.
    fn may_read_namespace(&self, _namespace: &str) -> bool {
        true
    }
    /// The namespaces the plugin may read, for messages (`None`: all).
    fn granted_namespaces(&self) -> Option<String> {
        None
    }
}

/// A [`CacheReader`] that knows no objects (manifest-only tools, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct EmptyCache;

impl CacheReader for EmptyCache {
    fn get(&self, _r: &contract::ObjectRef) -> Result<Option<String>, String> {
        Ok(None)
    }
    fn list(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

/// Engine settings.
#[derive(Clone, Default)]
pub struct EngineConfig {
    /// Directory of compiled components; `None` = compile on every load.
    pub cache_dir: Option<PathBuf>,
    /// Default limits of every plugin's calls (see [`LoadedPlugin::with_limits`]).
    pub limits: CallLimits,
    /// Gets a report after every call.
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Instance allocation strategy.
    pub allocation: InstanceAllocation,
}

impl EngineConfig {
    /// The per-user compile cache, as the XDG base-directory convention
    /// names it: `$XDG_CACHE_HOME/wasm-operator`, else
    /// `$HOME/.cache/wasm-operator`; `None` when neither is set.
    pub fn user_cache_dir() -> Option<PathBuf> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| PathBuf::from(h).join(".cache"))
            })?;
        Some(base.join("wasm-operator"))
    }
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("cache_dir", &self.cache_dir)
            .field("limits", &self.limits)
            .field("observer", &self.observer.is_some())
            .field("allocation", &self.allocation)
            .finish()
    }
}

/// Hit/miss counts of the compiled-component disk cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Loads that found the compiled component on disk and skipped compiling.
    pub hits: u64,
    /// Loads that compiled the component (and stored it, when writable).
    pub misses: u64,
}

pub(crate) struct EngineInner {
    pub wasmtime: wasmtime::Engine,
    pub linker: Linker<HostState>,
    pub config: EngineConfig,
    compat_key: String,
    counters: compile::CacheCounters,
}

/// The process's wasm engine. Cheap to clone.
///
/// # Examples
///
/// Load a component and call its `reconcile` directly, as inspection tools
/// and benchmarks do (the host's controllers go through the
/// [`Registry`](crate::Registry) instead):
///
/// ```no_run
/// use std::sync::Arc;
/// use wasm_operator::contract::CallContext;
/// use wasm_operator::engine::{EmptyCache, Engine, EngineConfig};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::new(EngineConfig::default())?;
/// let plugin = engine.load(&std::fs::read("webapp.wasm")?)?;
/// println!("{} {}", plugin.manifest().name, plugin.manifest().version);
/// let ctx = CallContext {
///     plugin_version: plugin.manifest().version.clone(),
///     attempt: 1,
///     managed_by_version: None,
///     config: serde_json::json!({}),
/// };
/// let object = r#"{"apiVersion":"example.com/v1","kind":"WebApp","metadata":{"name":"a","namespace":"default"},"spec":{}}"#;
/// let desired = plugin
///     .reconcile(&ctx, object.to_string(), Vec::new(), Arc::new(EmptyCache))
///     .await?;
/// println!("{} children", desired.children.len());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<EngineInner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.inner.config)
            .finish()
    }
}

fn wasmtime_config(config: &EngineConfig) -> wasmtime::Config {
    let mut c = wasmtime::Config::new();
    c.wasm_component_model(true)
        .epoch_interruption(true)
        .cranelift_opt_level(wasmtime::OptLevel::Speed)
        .parallel_compilation(true)
        // Copy-on-write memory images: instantiation maps the data segments
        // instead of copying them.
        .memory_init_cow(true);
    if let InstanceAllocation::Pooling { max_instances } = config.allocation {
        let mut pool = wasmtime::PoolingAllocationConfig::default();
        // A Rust wasip2 component holds a handful of core instances (the
        // program, the WASI adapter, shims) with one memory each.
        pool.total_component_instances(max_instances)
            .total_core_instances(max_instances.saturating_mul(8))
            .total_memories(max_instances.saturating_mul(2))
            .total_tables(max_instances.saturating_mul(8))
            // Pages a call dirtied stay mapped when its slot is freed and are
            // reset (to zero or to the memory image) with memcpy instead of
            // madvise + a page fault per page in the next call. On Linux >= 6.7
            // (`pagemap_scan`, off by default in wasmtime) only the pages the
            // call actually dirtied are found with PAGEMAP_SCAN and reset, so
            // the budget only bounds what one call may leave resident; on
            // older kernels the first `min(budget, memory size)` bytes are
            // reset and the rest is decommitted. Isolation is unchanged: every
            // byte is reset before the slot is reused. PAGEMAP_SCAN measured
            // 126 -> 109 µs per webapp reconcile.
            // No `max_memory_size`: slots span the whole 4 GiB reservation
            // (address space only) and the per-call limiter enforces each
            // plugin's own memory limit, which may exceed the engine default.
            .linear_memory_keep_resident(POOL_KEEP_RESIDENT)
            .pagemap_scan(wasmtime::Enabled::Auto)
            .table_keep_resident(1 << 20);
        c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    c
}

impl Engine {
    /// Creates the engine and starts its epoch ticker thread (which ends when
    /// the last clone of the engine and of its plugins is dropped).
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        let wasmtime = wasmtime::Engine::new(&wasmtime_config(&config))
            .map_err(|e| EngineError::Config(format!("{e:#}")))?;
        let mut linker = Linker::<HostState>::new(&wasmtime);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)
            .map_err(|e| EngineError::Config(format!("WASI: {e:#}")))?;
        bindings::cache::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| EngineError::Config(format!("cache import: {e:#}")))?;
        bindings::log::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| EngineError::Config(format!("log import: {e:#}")))?;
        if let Some(dir) = &config.cache_dir {
            std::fs::create_dir_all(dir).map_err(|source| EngineError::Io {
                path: dir.display().to_string(),
                source,
            })?;
        }
        let weak = wasmtime.weak();
        std::thread::Builder::new()
            .name("wasm-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })
            .map_err(|e| {
                EngineError::Config(format!("cannot start the epoch ticker thread: {e}"))
            })?;
        let compat_key = compile::compatibility_key(&wasmtime);
        Ok(Engine {
            inner: Arc::new(EngineInner {
                wasmtime,
                linker,
                config,
                compat_key,
                counters: Default::default(),
            }),
        })
    }

    /// The engine's configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// Disk cache hits and misses since this engine was created.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.inner.counters.hits.load(Ordering::Relaxed),
            misses: self.inner.counters.misses.load(Ordering::Relaxed),
        }
    }

    /// Compiles (or loads from the disk cache), links, calls `manifest`,
    /// validates it and returns a plugin ready to call.
    pub fn load(&self, bytes: &[u8]) -> Result<LoadedPlugin, EngineError> {
        let digest_hex = hex::encode(Sha256::digest(bytes));
        let digest = format!("sha256:{digest_hex}");
        check_header(bytes, &digest)?;
        let (component, stats) = compile::load_component(
            &self.inner.wasmtime,
            &self.inner.compat_key,
            self.inner.config.cache_dir.as_deref(),
            &self.inner.counters,
            bytes,
            &digest_hex,
            &digest,
        )?;
        plugin::LoadedPlugin::link(self.clone(), component, digest, stats)
    }
}

/// Tells apart "not wasm", "a core module" and "a component" from the preamble.
fn check_header(bytes: &[u8], digest: &str) -> Result<(), EngineError> {
    let not = |what: &str| {
        Err(EngineError::NotAComponent {
            digest: digest.to_string(),
            what: what.to_string(),
        })
    };
    if bytes.len() < 8 || &bytes[0..4] != b"\0asm" {
        return not(
            "it is not WebAssembly at all: the file does not start with the `\\0asm` magic bytes",
        );
    }
    match bytes[4..8] {
        [1, 0, 0, 0] => not(
            "it is a core wasm module, not a component; build for wasm32-wasip2 or wrap it with `wasm-tools component new`",
        ),
        [_, _, 1, 0] => Ok(()),
        _ => not("unknown WebAssembly version/layer in the preamble"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_check_tells_core_modules_from_garbage() {
        let digest = "sha256:00";
        let garbage = check_header(b"hello world", digest)
            .unwrap_err()
            .to_string();
        assert!(garbage.contains("not WebAssembly at all"), "{garbage}");
        let core = check_header(b"\0asm\x01\0\0\0", digest)
            .unwrap_err()
            .to_string();
        assert!(core.contains("core wasm module"), "{core}");
        check_header(b"\0asm\x0d\0\x01\0", digest).unwrap();
    }

    /// The tuned pool keeps a call's dirty pages mapped for the next call in
    /// the same slot: the engine must still start, and a call in a reused
    /// slot must answer exactly like the first one (nothing left behind).
    #[test]
    fn pooled_slots_are_reused_and_reset_between_calls() {
        // Where scripts/build-plugins.sh wrote it: $CARGO_TARGET_DIR when set.
        let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
            || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
            std::path::PathBuf::from,
        );
        let path = target.join("wasm32-wasip2/release/webapp.wasm");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read {}: {e}; run scripts/build-plugins.sh first",
                path.display()
            )
        });
        let engine = Engine::new(EngineConfig {
            allocation: InstanceAllocation::Pooling { max_instances: 2 },
            ..Default::default()
        })
        .unwrap();
        let plugin = engine.load(&bytes).unwrap();
        let ctx = contract::CallContext {
            plugin_version: plugin.manifest().version.clone(),
            attempt: 1,
            managed_by_version: None,
            config: serde_json::json!({}),
        };
        let object = |name: &str, replicas: u32| {
            let k = &plugin.manifest().primary;
            serde_json::json!({
                "apiVersion": k.api_version(), "kind": k.kind,
                "metadata": {"name": name, "namespace": "default", "generation": 1},
                "spec": {"image": "nginx:1.27", "replicas": replicas, "port": 8080},
            })
        };
        let call = |o: &serde_json::Value| {
            plugin
                .reconcile_blocking(&ctx, o.to_string(), Vec::new(), Arc::new(EmptyCache))
                .unwrap()
        };
        let first = call(&object("a", 2));
        // A different, larger call dirties other pages of the slot in between.
        let other = call(&object(&"b".repeat(200), 7));
        assert_ne!(first, other);
        for _ in 0..3 {
            assert_eq!(call(&object("a", 2)), first);
        }
    }

    #[test]
    fn rejects_a_core_module_and_compiles_nothing() {
        let engine = Engine::new(EngineConfig::default()).unwrap();
        // The smallest valid core module: magic + version 1.
        let err = engine.load(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(matches!(err, EngineError::NotAComponent { .. }), "{err}");
        assert_eq!(engine.cache_stats(), CacheStats::default());
    }
}
