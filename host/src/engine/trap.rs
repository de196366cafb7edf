//! Turns a plugin's trap into one short line a person can act on, and
//! gives each line a plugin wrote to stdout/stderr a log level.
//!
//! A Rust panic in a plugin is printed by the standard library's panic hook
//! to the (captured) stderr as `thread '<unnamed>' panicked at FILE:LINE:COL:`
//! followed by the message and a `RUST_BACKTRACE` hint, and then aborts, which
//! traps. That message and location are what the author needs: they become
//! the condition and event. Any other trap is named by its kind and the
//! plugin's own innermost function, demangled. The full wasm backtrace goes
//! to the host log only: it is long and full of the standard library's frames.

use wasmtime::WasmBacktrace;

/// Longest panic message (in characters) kept on a condition; the rest is
/// replaced by `…`. The whole stderr is in the host log.
const MESSAGE_CHARS: usize = 120;

/// The path segments of a source location that are kept: enough to find the
/// file (`src/lib.rs`, `serde_json-1.0.140/src/de.rs`), without the build
/// machine's directories.
const LOCATION_SEGMENTS: usize = 3;

/// Frames of the standard library's panic and abort machinery, skipped when
/// naming the function that trapped.
const MACHINERY: [&str; 7] = [
    "abort",
    "panic",
    "rust_begin_unwind",
    "std::",
    "core::",
    "alloc::",
    "__rust",
];

/// The last panic on `stderr` as `panicked at LOCATION: MESSAGE`, on one
/// line and capped, or `None` when the plugin did not panic.
pub(crate) fn panic_line(stderr: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.iter().rposition(|l| l.contains("panicked at "))?;
    let header = lines[start];
    let after = &header[header.find("panicked at ")? + "panicked at ".len()..];
    // Since Rust 1.73 the message follows on the next lines and the header
    // ends with `LOCATION:`; before, the header was `at 'MESSAGE', LOCATION`.
    let (location, inline) = match after.strip_suffix(':') {
        Some(location) => (location, None),
        None => match after.rsplit_once("', ") {
            Some((message, location)) => (location, Some(message.trim_start_matches('\''))),
            None => (after, None),
        },
    };
    let message = match inline {
        Some(message) => message.to_string(),
        None => lines[start + 1..]
            .iter()
            .map(|l| l.trim())
            .take_while(|l| !l.starts_with("note: run with `RUST_BACKTRACE"))
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" "),
    };
    let location = short_location(location);
    Some(if message.is_empty() {
        format!("panicked at {location}")
    } else {
        format!("panicked at {location}: {}", cap(&message, MESSAGE_CHARS))
    })
}

/// A trap that is not a panic in one line: what trapped (wasmtime's trap
/// description, e.g. ``wasm `unreachable` instruction executed``) and the
/// plugin's innermost own function, demangled without its hash.
pub(crate) fn trap_line(e: &wasmtime::Error) -> String {
    let what = e.root_cause().to_string();
    match e.downcast_ref::<WasmBacktrace>().and_then(top_frame) {
        Some(function) => format!("{what} in {function}"),
        None => what,
    }
}

/// The innermost frame of the plugin's own code, demangled.
fn top_frame(trace: &WasmBacktrace) -> Option<String> {
    trace
        .frames()
        .iter()
        .map(|f| match f.func_name() {
            Some(name) => format!("{:#}", rustc_demangle::demangle(name)),
            None => format!("wasm function {}", f.func_index()),
        })
        .find(|name| !MACHINERY.iter().any(|m| name.contains(m)))
        .map(|name| cap(&name, MESSAGE_CHARS))
}

/// The full wasm backtrace of a trap, demangled by wasmtime (its `demangle`
/// feature), for the host log.
pub(crate) fn backtrace(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<WasmBacktrace>() {
        Some(trace) => trace.to_string(),
        None => format!("{e:?}"),
    }
}

/// How loud a line a plugin wrote to stdout/stderr is, from how it starts.
/// Rule: a panic or a line starting with `error`/`fatal` is an error; `warn`
/// a warning; `debug`/`trace` and the standard library's `RUST_BACKTRACE`
/// hint (a sandboxed plugin cannot act on it) are debug; anything else on
/// stderr or stdout is info.
pub(crate) fn line_level(line: &str) -> tracing::Level {
    let start: String = line
        .trim_start()
        .chars()
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase();
    if line.contains("panicked at ") || start.starts_with("error") || start.starts_with("fatal") {
        tracing::Level::ERROR
    } else if start.starts_with("warn") {
        tracing::Level::WARN
    } else if start.starts_with("debug")
        || start.starts_with("trace")
        || line.starts_with("note: run with `RUST_BACKTRACE")
    {
        tracing::Level::DEBUG
    } else {
        tracing::Level::INFO
    }
}

/// The last [`LOCATION_SEGMENTS`] segments of a source path with its
/// `:LINE:COL`.
fn short_location(location: &str) -> String {
    let segments: Vec<&str> = location.split('/').collect();
    segments[segments.len().saturating_sub(LOCATION_SEGMENTS)..].join("/")
}

/// `text` cut to `chars` characters, marked with `…` when cut.
fn cap(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_one_line_with_its_location() {
        let stderr = b"starting\nthread '<unnamed>' panicked at plugins/fixtures/faulty/src/lib.rs:95:13:\nmode trap panics on purpose\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_line(stderr).unwrap(),
            "panicked at faulty/src/lib.rs:95:13: mode trap panics on purpose"
        );
        let multi = b"thread 'main' panicked at src/lib.rs:1:1:\nfirst\nsecond\n";
        assert_eq!(
            panic_line(multi).unwrap(),
            "panicked at src/lib.rs:1:1: first second"
        );
        let old = b"thread 'main' panicked at 'boom', src/lib.rs:9:5\n";
        assert_eq!(panic_line(old).unwrap(), "panicked at src/lib.rs:9:5: boom");
        assert_eq!(panic_line(b"just a log line\n"), None);
    }

    #[test]
    fn a_long_panic_is_capped() {
        let stderr = format!(
            "thread 'x' panicked at src/lib.rs:1:1:\n{}\n",
            "é".repeat(500)
        );
        let line = panic_line(stderr.as_bytes()).unwrap();
        assert!(line.chars().count() < 160 && line.ends_with('…'), "{line}");
    }

    #[test]
    fn levels_follow_the_line() {
        use tracing::Level;
        assert_eq!(
            line_level("thread 'a' panicked at src/lib.rs:1:1:"),
            Level::ERROR
        );
        assert_eq!(line_level("ERROR: db gone"), Level::ERROR);
        assert_eq!(line_level("warning: slow"), Level::WARN);
        assert_eq!(line_level("debug: x=1"), Level::DEBUG);
        assert_eq!(
            line_level("note: run with `RUST_BACKTRACE=1` environment variable"),
            Level::DEBUG
        );
        assert_eq!(line_level("reconciled web"), Level::INFO);
    }

    /// A core module whose function, named with Rust's legacy mangling,
    /// executes `unreachable`.
    fn unreachable_module(name: &str) -> Vec<u8> {
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        bytes.extend([1, 4, 1, 0x60, 0, 0]); // type: () -> ()
        bytes.extend([3, 2, 1, 0]); // one function of that type
        bytes.extend([7, 5, 1, 1, b'f', 0, 0]); // exported as `f`
        bytes.extend([10, 5, 1, 3, 0, 0x00, 0x0b]); // body: unreachable
        let mut names = vec![1, 0, name.len() as u8];
        names.extend(name.as_bytes());
        let mut sub = vec![1, names.len() as u8];
        sub.extend(names);
        let mut custom = vec![4];
        custom.extend(b"name");
        custom.extend(sub);
        bytes.push(0);
        bytes.push(custom.len() as u8);
        bytes.extend(custom);
        bytes
    }

    #[test]
    fn another_trap_names_its_kind_and_the_demangled_function() {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(
            &engine,
            unreachable_module("_ZN10staticsite13desired_state17h836f0a1b2c3d4e5fE"),
        )
        .unwrap();
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let f = instance.get_typed_func::<(), ()>(&mut store, "f").unwrap();
        let e = f.call(&mut store, ()).unwrap_err();
        let line = trap_line(&e);
        assert_eq!(
            line,
            "wasm trap: wasm `unreachable` instruction executed in staticsite::desired_state"
        );
        assert!(
            backtrace(&e).contains("staticsite::desired_state"),
            "{}",
            backtrace(&e)
        );
    }
}
