//! Process-wide `tracing` subscriber set-up.

use tracing_subscriber::EnvFilter;

/// Installs the global `tracing` subscriber: JSON lines when `json` is true,
/// human-readable otherwise. The filter comes from `RUST_LOG` and defaults to
/// `info`. Calling it twice is harmless (the second call keeps the first
/// subscriber), so tests and the CLI can both call it.
pub fn init_logging(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Logs go to stderr, like kubectl's: stdout stays for command output
        // (`plugin inspect -o json`, the `dev` banner).
        .with_writer(std::io::stderr)
        .with_target(true);
    // `try_init` fails only when a global subscriber already exists; that is
    // the documented "call twice" case, not an error worth reporting.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
