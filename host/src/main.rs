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
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {}", describe(&error));
            ExitCode::FAILURE
        }
    }
}

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
