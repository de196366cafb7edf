//! Process-wide `tracing` subscriber set-up.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global `tracing` subscriber: JSON lines when `json` is true,
/// human-readable otherwise. The filter comes from `RUST_LOG` and defaults to
/// `info`. Calling it twice is harmless (the second call keeps the first
/// subscriber), so tests and the CLI can both call it. Text lines are
/// coloured only when stderr is a terminal and `NO_COLOR` is unset: a log
/// written to a file or a pipe carries no escape codes.
pub fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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

/// Whether log lines get ANSI colours: on a terminal only, unless the user
/// asked for none (<https://no-color.org>).
fn colour(terminal: bool, no_color: bool) -> bool {
    terminal && !no_color
}

#[cfg(test)]
mod tests {
    use super::colour;

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
