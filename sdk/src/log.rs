//! Structured logging into the host's `tracing` output. Records are tagged by
//! the host with the plugin name, version and the object in hand. Compiled
//! natively (tests, benchmarks) records go to stderr.

/// Severity of a log record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation.
    Info,
    /// Something odd that did not fail the call.
    Warn,
    /// Something failed.
    Error,
}

/// Logs `message` at `level`.
pub fn log(level: Level, message: impl AsRef<str>) {
    emit(level, message.as_ref());
}

/// Logs at trace level.
pub fn trace(message: impl AsRef<str>) {
    emit(Level::Trace, message.as_ref());
}

/// Logs at debug level.
pub fn debug(message: impl AsRef<str>) {
    emit(Level::Debug, message.as_ref());
}

/// Logs at info level.
pub fn info(message: impl AsRef<str>) {
    emit(Level::Info, message.as_ref());
}

/// Logs at warn level.
pub fn warn(message: impl AsRef<str>) {
    emit(Level::Warn, message.as_ref());
}

/// Logs at error level.
pub fn error(message: impl AsRef<str>) {
    emit(Level::Error, message.as_ref());
}

#[cfg(target_arch = "wasm32")]
fn emit(level: Level, message: &str) {
    use crate::bindings::wasm_operator::plugin::log as host;
    let level = match level {
        Level::Trace => host::Level::Trace,
        Level::Debug => host::Level::Debug,
        Level::Info => host::Level::Info,
        Level::Warn => host::Level::Warn,
        Level::Error => host::Level::Error,
    };
    host::log(level, message);
}

#[cfg(not(target_arch = "wasm32"))]
fn emit(level: Level, message: &str) {
    eprintln!("[{level:?}] {message}");
}
