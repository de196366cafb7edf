//! Per-call store state: the WASI context (no files, env, args or sockets;
//! stdout/stderr captured in bounded memory pipes), the memory limiter, and the
//! `cache` and `log` imports.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::CacheReader;
use super::bindings::{cache, log, types};
use crate::contract;

/// How much of a call's stdout (and, separately, stderr) is kept. A plugin
/// that writes more traps, which keeps a chatty plugin from exhausting host memory.
pub(crate) const STDIO_CAPACITY: usize = 1 << 20;

/// Records the largest memory a call asked for and refuses growth beyond the
/// call's limit. The record tells a `MemoryExceeded` from any other trap.
pub(crate) struct Limiter {
    pub memory_limit: usize,
    pub exceeded: bool,
}

/// Refusal raised by [`Limiter`]; traps the guest at the failing `memory.grow`.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {0} bytes exceeded")]
struct MemoryLimitExceeded(usize);

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.exceeded = true;
            return Err(wasmtime::Error::new(MemoryLimitExceeded(self.memory_limit)));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million entries is far beyond any
        // real plugin and keeps a hostile one from growing them without bound.
        Ok(desired <= 1_000_000)
    }
}

/// A read the plugin's grant refused: which kind, in which namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NamespaceDenial {
    /// `apiVersion/kind`.
    pub kind: String,
    /// The namespace outside the grant.
    pub namespace: String,
    /// The namespaces the grant allows, in words.
    pub granted: String,
}

/// Everything one call's store owns. Dropped with the store after the call:
/// nothing survives between calls.
pub(crate) struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: Limiter,
    pub plugin: Arc<str>,
    pub version: Arc<str>,
    pub manifest: Option<Arc<contract::Manifest>>,
    pub cache: Option<Arc<dyn CacheReader>>,
    /// Kinds the plugin tried to read without declaring them, as `v1/Secret`.
    pub denied: Vec<String>,
    /// Reads into namespaces outside the plugin's grant.
    pub denied_namespaces: Vec<NamespaceDenial>,
    pub stdout: MemoryOutputPipe,
    pub stderr: MemoryOutputPipe,
}

impl HostState {
    pub fn new(
        plugin: Arc<str>,
        version: Arc<str>,
        manifest: Option<Arc<contract::Manifest>>,
        cache: Option<Arc<dyn CacheReader>>,
        memory_limit: usize,
    ) -> HostState {
        let stdout = MemoryOutputPipe::new(STDIO_CAPACITY);
        let stderr = MemoryOutputPipe::new(STDIO_CAPACITY);
        // Deny-by-default: no preopens, env or args are added; sockets are
        // refused at every layer even though the interfaces are linked (the
        // Rust standard library imports them).
        let wasi = WasiCtxBuilder::new()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }))
            .build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_limit,
                exceeded: false,
            },
            plugin,
            version,
            manifest,
            cache,
            denied: Vec::new(),
            denied_namespaces: Vec::new(),
            stdout,
            stderr,
        }
    }

    /// Emits what the plugin wrote to stdout/stderr as tracing records.
    pub fn flush_stdio(&self, function: &str) {
        for (stream, pipe) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let bytes = pipe.contents();
            if bytes.is_empty() {
                continue;
            }
            for line in String::from_utf8_lossy(&bytes).lines() {
                tracing::info!(target: "plugin", plugin = %self.plugin, version = %self.version, function, stream, "{line}");
            }
        }
    }

    /// Checks a read against the manifest and the grant's namespaces;
    /// records and refuses undeclared kinds and namespaces outside the
    /// grant. (A list over all namespaces is filtered by the reader.)
    fn check_read(
        &mut self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<&Arc<dyn CacheReader>, String> {
        let allowed = match &self.manifest {
            Some(m) => m.may_read(api_version, kind),
            // `manifest` itself runs before the manifest is known: no reads.
            None => false,
        };
        if !allowed {
            let name = format!("{api_version}/{kind}");
            let message = format!(
                "capability denied: plugin {} may not read {name}; declare it in the manifest's `watches`",
                self.plugin
            );
            tracing::warn!(target: "plugin", plugin = %self.plugin, version = %self.version, kind = %name, "plugin read an undeclared kind");
            if !self.denied.contains(&name) {
                self.denied.push(name);
            }
            return Err(message);
        }
        let Some(cache) = self.cache.as_ref() else {
            return Err("no cache is available during this call".to_string());
        };
        if let Some(namespace) = namespace
            && !cache.may_read_namespace(namespace)
        {
            let denial = NamespaceDenial {
                kind: format!("{api_version}/{kind}"),
                namespace: namespace.to_string(),
                granted: cache
                    .granted_namespaces()
                    .unwrap_or_else(|| "other namespaces only".into()),
            };
            let message = format!(
                "capability denied: plugin {} may not read namespace {namespace}: its grant allows {}",
                self.plugin, denial.granted
            );
            tracing::warn!(target: "plugin", plugin = %self.plugin, version = %self.version, kind = %denial.kind, namespace, "plugin read a namespace outside its grant");
            if !self.denied_namespaces.contains(&denial) {
                self.denied_namespaces.push(denial);
            }
            return Err(message);
        }
        self.cache
            .as_ref()
            .ok_or_else(|| "no cache is available during this call".to_string())
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl cache::Host for HostState {
    fn get(&mut self, r: types::ObjectRef) -> Result<Option<String>, String> {
        let reader = self.check_read(&r.api_version, &r.kind, r.namespace.as_deref())?;
        let r = contract::ObjectRef {
            api_version: r.api_version,
            kind: r.kind,
            namespace: r.namespace,
            name: r.name,
        };
        reader.get(&r)
    }

    fn list(
        &mut self,
        api_version: String,
        kind: String,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, String> {
        let reader = self.check_read(&api_version, &kind, namespace.as_deref())?;
        reader.list(
            &api_version,
            &kind,
            namespace.as_deref(),
            label_selector.as_deref(),
        )
    }
}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let (plugin, version) = (&*self.plugin, &*self.version);
        match level {
            log::Level::Trace => {
                tracing::trace!(target: "plugin", plugin, version, level = "trace", "{message}");
            }
            log::Level::Debug => {
                tracing::debug!(target: "plugin", plugin, version, level = "debug", "{message}");
            }
            log::Level::Info => {
                tracing::info!(target: "plugin", plugin, version, level = "info", "{message}");
            }
            log::Level::Warn => {
                tracing::warn!(target: "plugin", plugin, version, level = "warn", "{message}");
            }
            log::Level::Error => {
                tracing::error!(target: "plugin", plugin, version, level = "error", "{message}");
            }
        }
    }
}
