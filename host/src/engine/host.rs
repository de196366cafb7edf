//! Per-call store state: the WASI context (no files, env, args or sockets;
//! stdout/stderr captured in bounded memory pipes), the memory limiter, and the
//! `cache` and `log` imports.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::{cache, log, types};
use super::trap;
use super::{CacheReader, FixedClock};
use crate::contract;

/// The most of a call's stdout (and, separately, stderr) kept in memory;
/// the call's log limit keeps less when it is smaller. A plugin that writes
/// more is truncated (the rest is discarded and counted), never trapped,
/// and cannot exhaust host memory.
pub(crate) const STDIO_CAPACITY: usize = 1 << 20;

/// A stdout/stderr pipe keeping the first `capacity` bytes a call writes
/// and discarding (counting) the rest.
#[derive(Debug, Clone)]
pub(crate) struct CappedPipe {
    capacity: usize,
    state: Arc<Mutex<CappedState>>,
}

#[derive(Debug, Default)]
struct CappedState {
    kept: Vec<u8>,
    dropped: usize,
}

impl CappedPipe {
    pub fn new(capacity: usize) -> CappedPipe {
        CappedPipe {
            capacity,
            state: Arc::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, CappedState> {
        // Plain bytes: a poisoned lock still holds valid ones.
        crate::util::lock(&self.state)
    }

    fn push(&self, bytes: &[u8]) {
        let mut state = self.state();
        let room = self.capacity.saturating_sub(state.kept.len());
        let n = room.min(bytes.len());
        state.kept.extend_from_slice(&bytes[..n]);
        state.dropped = state.dropped.saturating_add(bytes.len() - n);
    }

    /// What was kept, and how many bytes were discarded.
    pub fn contents(&self) -> (Vec<u8>, usize) {
        let state = self.state();
        (state.kept.clone(), state.dropped)
    }
}

impl IsTerminal for CappedPipe {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CappedPipe {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedPipe {
    async fn ready(&mut self) {}
}

impl OutputStream for CappedPipe {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, StreamError> {
        // Always writable: what does not fit is discarded, not refused.
        Ok(64 << 10)
    }
}

impl tokio::io::AsyncWrite for CappedPipe {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl wasmtime_wasi::HostWallClock for FixedClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_secs(1)
    }
    fn now(&self) -> std::time::Duration {
        self.since_epoch
    }
}

impl wasmtime_wasi::HostMonotonicClock for FixedClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        // The same instant on every read: durations a plugin measures are 0.
        u64::try_from(self.since_epoch.as_nanos()).unwrap_or(u64::MAX)
    }
}

/// Refuses a linear memory's growth beyond the call's limit and records
/// that it did (which tells a `MemoryExceeded` from any other trap), and
/// counts the linear memory the call's instance holds.
pub(crate) struct Limiter {
    pub memory_limit: usize,
    pub exceeded: bool,
    /// Bytes of linear memory the instance holds, over all its memories:
    /// their initial sizes (wasmtime asks the limiter for those too) plus
    /// every growth granted.
    pub memory_bytes: usize,
}

/// Refusal raised by [`Limiter`]; traps the guest at the failing `memory.grow`.
#[derive(Debug, thiserror::Error)]
#[error("memory limit of {0} bytes exceeded")]
struct MemoryLimitExceeded(usize);

impl wasmtime::ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.exceeded = true;
            return Err(wasmtime::Error::new(MemoryLimitExceeded(self.memory_limit)));
        }
        self.memory_bytes = self
            .memory_bytes
            .saturating_add(desired.saturating_sub(current));
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
    pub stdout: CappedPipe,
    pub stderr: CappedPipe,
    /// What is left of the call's log budget, the bytes emitted and cut.
    pub log: LogBudget,
}

/// The log bytes one call may still emit (see `CallLimits::log_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LogBudget {
    /// The limit per call.
    pub limit: usize,
    /// Bytes emitted so far.
    pub emitted: usize,
    /// Bytes cut off.
    pub dropped: usize,
}

impl LogBudget {
    pub fn new(limit: usize) -> LogBudget {
        LogBudget {
            limit,
            emitted: 0,
            dropped: 0,
        }
    }

    /// The part of `message` that fits the budget, with a note on the first
    /// cut (later lines are dropped silently: the note said so once).
    /// `None` when nothing is left.
    pub fn admit<'m>(&mut self, message: &'m str) -> Option<std::borrow::Cow<'m, str>> {
        let left = self.limit.saturating_sub(self.emitted);
        if message.len() <= left {
            self.emitted += message.len();
            return Some(std::borrow::Cow::Borrowed(message));
        }
        let first_cut = self.dropped == 0;
        let mut end = left;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        self.emitted += end;
        self.dropped = self.dropped.saturating_add(message.len() - end);
        first_cut.then(|| {
            std::borrow::Cow::Owned(format!(
                "{}… [log truncated: the plugin exceeded its limit of {} log bytes per call (spec.limits.logSize); the rest of this call's log is dropped]",
                &message[..end],
                self.limit
            ))
        })
    }
}

impl HostState {
    pub fn new(
        plugin: Arc<str>,
        version: Arc<str>,
        manifest: Option<Arc<contract::Manifest>>,
        cache: Option<Arc<dyn CacheReader>>,
        memory_limit: usize,
        log_limit: usize,
        clock: Option<FixedClock>,
    ) -> HostState {
        let capacity = log_limit.min(STDIO_CAPACITY);
        let stdout = CappedPipe::new(capacity);
        let stderr = CappedPipe::new(capacity);
        // Deny-by-default: no preopens, env or args are added; sockets are
        // refused at every layer even though the interfaces are linked (the
        // Rust standard library imports them).
        let mut builder = WasiCtxBuilder::new();
        builder
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        if let Some(clock) = clock {
            // Both clocks stand still: a golden fixture's answer must not
            // depend on when or how fast it runs.
            builder.wall_clock(clock).monotonic_clock(clock);
        }
        let wasi = builder.build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            limiter: Limiter {
                memory_limit,
                exceeded: false,
                memory_bytes: 0,
            },
            plugin,
            version,
            manifest,
            cache,
            denied: Vec::new(),
            denied_namespaces: Vec::new(),
            stdout,
            stderr,
            log: LogBudget::new(log_limit),
        }
    }

    /// Emits what the plugin wrote to stdout/stderr as tracing records,
    /// within what is left of the call's log budget.
    pub fn flush_stdio(&mut self, function: &str) {
        for (stream, pipe) in [
            ("stdout", self.stdout.clone()),
            ("stderr", self.stderr.clone()),
        ] {
            let (bytes, discarded) = pipe.contents();
            for line in String::from_utf8_lossy(&bytes).lines() {
                let Some(line) = self.log.admit(line) else {
                    continue;
                };
                // The level follows the line (see `trap::line_level`).
                macro_rules! emit {
                    ($level:ident) => {
                        tracing::$level!(target: "plugin", plugin = %self.plugin, version = %self.version, function, stream, "{line}")
                    };
                }
                let level = trap::line_level(&line);
                if level == tracing::Level::ERROR {
                    emit!(error);
                } else if level == tracing::Level::WARN {
                    emit!(warn);
                } else if level == tracing::Level::INFO {
                    emit!(info);
                } else {
                    emit!(debug);
                }
            }
            if discarded > 0 {
                if self.log.dropped == 0 {
                    tracing::info!(
                        target: "plugin", plugin = %self.plugin, version = %self.version, function, stream,
                        "[log truncated: the plugin exceeded its limit of {} log bytes per call (spec.limits.logSize); {discarded} bytes of {stream} dropped]",
                        self.log.limit
                    );
                }
                self.log.dropped = self.log.dropped.saturating_add(discarded);
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
        let Some(message) = self.log.admit(&message) else {
            return;
        };
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

#[cfg(test)]
mod tests {
    use super::{CappedPipe, LogBudget};

    #[test]
    fn a_capped_pipe_keeps_the_start_and_counts_the_rest() {
        let pipe = CappedPipe::new(4);
        pipe.push(b"abc");
        pipe.push(b"defgh");
        assert_eq!(pipe.contents(), (b"abcd".to_vec(), 4));
    }

    #[test]
    fn the_log_budget_truncates_once_then_drops() {
        let mut budget = LogBudget::new(10);
        assert_eq!(budget.admit("12345").as_deref(), Some("12345"));
        let cut = budget.admit("abcdefghij").unwrap();
        assert!(cut.starts_with("abcde… [log truncated"), "{cut}");
        assert!(cut.contains("limit of 10 log bytes"), "{cut}");
        assert_eq!(budget.admit("more"), None);
        assert_eq!((budget.emitted, budget.dropped), (10, 9));
    }
}
