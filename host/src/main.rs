//! The `wasm-operator` binary: parses arguments and runs the command. All
//! logic lives in the library (`wasm_operator::cli`, `wasm_operator::dev`).

use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use wasm_operator::cli::Cli;

fn main() -> ExitCode {
    // kube enables rustls's ring provider and oci-client its aws-lc-rs one;
    // with both, rustls cannot pick by itself and panics on the first TLS
    // setup. Ring it is (an Err only means a provider is already set).
    let _ = rustls::crypto::ring::default_provider().install_default();
    limit_malloc_arenas();
    let cli = Cli::parse();
    if !cli.command.serves() {
        exit_quietly_on_closed_pipe();
    }
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", describe(&error));
            let code = error
                .downcast_ref::<wasm_operator::cli::CliError>()
                .map_or(1, wasm_operator::cli::CliError::exit_code);
            ExitCode::from(code)
        }
    }
}

/// Caps glibc's malloc arenas at one per core, unless `MALLOC_ARENA_MAX`
/// says otherwise.
///
/// glibc gives threads that allocate concurrently arenas of their own, up to
/// eight per core, and an arena keeps what it once held. Plugin calls run
/// with `block_in_place`, which hands the calling worker's role to another
/// thread, so a busy host touches many threads and, on 2 cores, all 16
/// arenas. Each kept 1–4 MiB it no longer used: one arena per core measured
/// 65.8 -> 62.2 MiB peak RSS at 1,000 WebApps and 271 -> 260 MiB at 10,000
/// (`bench-scale`, devcluster). One per core still lets every core
/// allocate without waiting for another, which eight per core buys little
/// beyond for a process that runs one tokio worker per core.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn limit_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let arenas = libc::c_int::try_from(cores).unwrap_or(libc::c_int::MAX);
    // SAFETY: `mallopt` only sets a tunable of glibc's allocator; called
    // before the runtime starts any thread, it races with no allocation.
    // A refused value (it returns 0) leaves glibc's default in place.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
}

/// A command that prints and exits ends quietly when its output is piped
/// into a reader that stops early (`wasm-operator plugin inspect … | head`),
/// as kubectl and other Unix tools do, instead of panicking in `println!` on
/// EPIPE: SIGPIPE gets its default action back (Rust's runtime ignores it).
/// Not for `run` and `dev`: a server must outlive a peer that went away (its
/// sockets send with MSG_NOSIGNAL anyway, but a child's pipe would not).
#[cfg(unix)]
fn exit_quietly_on_closed_pipe() {
    // SAFETY: `signal` only restores the default disposition of SIGPIPE,
    // before the runtime starts any thread; no handler code is installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn exit_quietly_on_closed_pipe() {}

/// Other allocators have no arenas to cap.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn limit_malloc_arenas() {}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let result = runtime.block_on(cli.execute());
    // A blocking task still running (a compile, a plugin call) must not
    // keep a stopping process alive: it gets a moment, then the process
    // exits.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    result?;
    Ok(())
}

/// The error and its causes on one line. Our error messages usually embed
/// their cause already; a cause is only appended when it adds something.
fn describe(error: &anyhow::Error) -> String {
    let mut message = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !message.contains(&cause) {
            message.push_str(": ");
            message.push_str(&cause);
        }
    }
    message
}
