//! Process-wide `tracing` subscriber set-up.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global `tracing` subscriber: JSON lines when `json` is true,
/// human-readable otherwise. The filter is [`verbosity_filter`] of
/// `verbosity` (`-v`) when given, else `RUST_LOG`, else `info`. Calling it twice is harmless (the second call keeps the first
/// subscriber), so tests and the CLI can both call it. Text lines are
/// coloured only when stderr is a terminal and `NO_COLOR` is unset: a log
/// written to a file or a pipe carries no escape codes.
pub fn init_logging(json: bool, verbosity: Option<u8>) {
    let filter = match verbosity {
        Some(level) => EnvFilter::new(verbosity_filter(level)),
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Logs go to stderr, like kubectl's: stdout stays for command output
        // (`plugin inspect -o json`, the `dev` banner).
        .with_writer(std::io::stderr)
        .with_ansi(colour(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
        ))
        .with_target(true);
    // `try_init` fails only when a global subscriber already exists; that is
    // the documented "call twice" case, not an error worth reporting.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// The `tracing` filter of kubectl's verbosity `level` (`-v`): kubectl's
/// 0-2 are the steady-state messages (`info`); 3-4 add the host's changes
/// and decisions (`debug` of `wasm_operator`); 5 the host's finest detail
/// (`trace`); 6-7 debug of every crate, the Kubernetes client's requests
/// included (kubectl -v=6 shows requests); 8 and up trace of everything
/// (kubectl -v=8 shows request bodies).
pub fn verbosity_filter(level: u8) -> &'static str {
    match level {
        0..=2 => "info",
        3..=4 => "info,wasm_operator=debug",
        5 => "info,wasm_operator=trace",
        6..=7 => "debug",
        _ => "trace",
    }
}

/// Whether log lines get ANSI colours: on a terminal only, unless the user
/// asked for none (<https://no-color.org>).
fn colour(terminal: bool, no_color: bool) -> bool {
    terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::{colour, verbosity_filter};

    #[test]
    fn verbosity_levels_map_onto_filters_that_parse() {
        assert_eq!(verbosity_filter(0), "info");
        assert_eq!(verbosity_filter(2), "info");
        assert_eq!(verbosity_filter(4), "info,wasm_operator=debug");
        assert_eq!(verbosity_filter(6), "debug");
        assert_eq!(verbosity_filter(9), "trace");
        for level in 0..=u8::MAX {
            tracing_subscriber::EnvFilter::try_new(verbosity_filter(level)).unwrap();
        }
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, false));
        assert!(
            !colour(false, false),
            "a file or a pipe gets no escape codes"
        );
        assert!(!colour(true, true), "NO_COLOR wins over a terminal");
    }
}
