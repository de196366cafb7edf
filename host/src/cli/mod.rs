//! Command-line interface: argument parsing (clap) and the thin glue from
//! arguments to the library. Follows kubectl conventions: `--kubeconfig`,
//! `--context`, `-o yaml|json`.

pub mod backup;
pub mod canary;
pub mod connect;
pub(crate) mod crd;
#[cfg(feature = "devcluster")]
pub(crate) mod dev;
pub(crate) mod fixture;
pub(crate) mod inspect;
pub(crate) mod migrate;
pub(crate) mod plugin_crd;
pub(crate) mod plugin_new;
pub(crate) mod plugin_new_lang;
pub(crate) mod plugin_record;
pub(crate) mod plugin_test;
pub(crate) mod push;
pub mod rbac;
pub(crate) mod run;
pub(crate) mod shards;
pub(crate) mod signals;
pub(crate) mod unload;
pub(crate) mod verify;
pub(crate) mod webhook;

use clap::{Parser, Subcommand, ValueEnum};

/// Top-level arguments: what the `wasm-operator` binary parses and runs.
///
/// # Examples
///
/// ```no_run
/// use clap::Parser;
/// use wasm_operator::cli::Cli;
///
/// # async fn example() -> Result<(), wasm_operator::cli::CliError> {
/// let cli = Cli::parse_from(["wasm-operator", "crd", "print"]);
/// cli.execute().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Parser)]
#[command(
    name = "wasm-operator",
    version,
    about = "A Kubernetes operator host whose application logic runs in sandboxed WebAssembly components"
)]
pub struct Cli {
    /// Log line format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true)]
    pub log_format: LogFormat,
    /// Log verbosity, kubectl's levels: 0-2 info, 3-4 debug of the host,
    /// 5 trace of the host, 6-7 debug of everything (the Kubernetes client's
    /// requests too), 8 and up trace of everything. Overrides RUST_LOG;
    /// without it, RUST_LOG or info.
    #[arg(short = 'v', long = "v", value_name = "LEVEL", global = true)]
    pub verbosity: Option<u8>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Structured output format of commands that print objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A human-readable summary.
    Text,
    /// The full structure as YAML.
    Yaml,
    /// The full structure as JSON.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator against a cluster, serving the given plugins.
    Run(run::RunArgs),
    /// Start a local devcluster with the workspace's plugins and examples,
    /// reloading plugins when they are rebuilt.
    #[cfg(feature = "devcluster")]
    Dev(dev::DevArgs),
    /// Work with plugin files.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Print the CRDs this host serves (WasmPlugin; Backup and Restore),
    /// generated from its types.
    #[command(subcommand)]
    Crd(crd::CrdCommand),
    /// Take a backup of a primary now (`backup create KIND/NAME`).
    #[command(subcommand)]
    Backup(backup::BackupCommand),
    /// Migrate the objects of a CRD (storage version).
    #[command(subcommand)]
    Migrate(migrate::MigrateCommand),
    /// Follow, promote or abort a WasmPlugin's canary (spec.canary).
    #[command(subcommand)]
    Canary(canary::CanaryCommand),
    /// Show which replica holds which shard (with --shards N): reads the
    /// shard and membership Leases.
    Shards(shards::ShardsArgs),
}

impl Command {
    /// True for the commands that serve until stopped (`run`, `dev`); the
    /// others print their answer and exit.
    pub fn serves(&self) -> bool {
        match self {
            Command::Run(_) => true,
            #[cfg(feature = "devcluster")]
            Command::Dev(_) => true,
            _ => false,
        }
    }
}

/// `wasm-operator plugin ...`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Write a new plugin crate (typed spec and status, CRD, reconcile,
    /// unit test, golden fixture, sample) that builds as it is.
    New(plugin_new::PluginNewArgs),
    /// Print a plugin's manifest and WIT world.
    Inspect(inspect::InspectArgs),
    /// Print the CRD a plugin carries, derived from its spec and status
    /// types (for kubectl apply -f -).
    Crd(plugin_crd::PluginCrdArgs),
    /// Run a plugin's golden fixtures (FIXTURES_DIR/<case>/input.yaml →
    /// expected.yaml) in process, through the production engine and limits:
    /// exit 0 when every case matches, 1 on a mismatch (with a diff), 2 on
    /// unusable input.
    Test(plugin_test::PluginTestArgs),
    /// Record a golden fixture from a running cluster: an object, the
    /// children it controls and the cache reads the plugin makes, into
    /// DIR/<name>/input.yaml, then expected.yaml as `plugin test --update`.
    Record(plugin_record::PluginRecordArgs),
    /// Publish a plugin component to an OCI registry (CNCF Wasm layout)
    /// and print its digest.
    Push(push::PushArgs),
    /// Check a plugin's signatures in its registry against a verification
    /// policy (exit 1 when refused).
    Verify(verify::VerifyArgs),
    /// Print the RBAC (ServiceAccount, Roles, bindings) a grant needs when
    /// the plugin's writes impersonate its ServiceAccount; with --host, the
    /// rules the host's own ClusterRole needs to serve plugins (the chart's
    /// extraGrants value).
    Rbac(rbac::RbacArgs),
    /// Delete WasmPlugins and wait until a running host has unloaded them
    /// (the Helm chart's pre-delete hook).
    Unload(unload::UnloadArgs),
}

/// Why a command failed. Messages name the file or plugin and what to do.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `run` found no usable cluster credentials or could not build a client.
    #[error(transparent)]
    Connect(#[from] connect::ConnectError),
    /// `run` could not start.
    #[error(transparent)]
    Run(#[from] run::RunError),
    #[cfg(feature = "devcluster")]
    /// `dev` could not start the devcluster or its plugins.
    #[error(transparent)]
    // Boxed: a dev session's error is large, and every command returns this.
    Dev(Box<crate::dev::DevError>),
    /// `plugin inspect` failed.
    #[error(transparent)]
    Inspect(#[from] inspect::InspectError),
    /// `plugin crd` failed.
    #[error(transparent)]
    PluginCrd(plugin_crd::PluginCrdError),
    /// `plugin new` wrote nothing.
    #[error(transparent)]
    PluginNew(plugin_new::PluginNewError),
    /// `plugin test` found a mismatch or unusable fixtures.
    #[error(transparent)]
    PluginTest(plugin_test::PluginTestError),
    /// `plugin record` failed.
    #[error(transparent)]
    PluginRecord(plugin_record::PluginRecordError),
    /// `plugin push` failed.
    #[error(transparent)]
    Push(#[from] push::PushError),
    /// `plugin verify` refused or failed, or `plugin push --sign` could not sign.
    #[error(transparent)]
    Verify(Box<verify::VerifyError>),
    /// `plugin rbac` failed.
    #[error(transparent)]
    Rbac(#[from] rbac::RbacError),
    /// `plugin unload` failed.
    #[error(transparent)]
    Unload(#[from] unload::UnloadError),
    /// `crd` failed.
    #[error(transparent)]
    Crd(#[from] crd::CrdError),
    /// `migrate` failed.
    #[error(transparent)]
    Migrate(#[from] migrate::MigrateError),
    /// `canary` failed.
    #[error(transparent)]
    Canary(canary::CanaryCliError),
    /// `backup` failed.
    #[error(transparent)]
    Backup(backup::BackupCliError),
    /// `shards` failed.
    #[error(transparent)]
    Shards(#[from] shards::ShardsError),
    /// The Ctrl-C / SIGTERM handlers that stop a command cleanly could not
    /// be installed.
    #[error("cannot install signal handlers: {0}")]
    Signals(#[source] std::io::Error),
}

impl CliError {
    /// The process's exit code for this error: 1, or what the command
    /// documents (`plugin test`: 1 for a mismatch, 2 for unusable input).
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::PluginTest(error) => error.exit_code(),
            _ => 1,
        }
    }
}

#[cfg(feature = "devcluster")]
impl From<crate::dev::DevError> for CliError {
    fn from(error: crate::dev::DevError) -> Self {
        CliError::Dev(Box::new(error))
    }
}

impl Cli {
    /// Runs the parsed command to completion.
    pub async fn execute(self) -> Result<(), CliError> {
        let json = self.log_format == LogFormat::Json;
        let verbosity = self.verbosity;
        match self.command {
            Command::Run(args) => {
                crate::telemetry::init_logging(json, verbosity);
                run::run(args).await
            }
            #[cfg(feature = "devcluster")]
            Command::Dev(args) => {
                crate::telemetry::init_logging(json, verbosity);
                dev::dev(args).await
            }
            // No log subscriber: `-o json|yaml` output must stay parseable,
            // and failures are reported through the returned error.
            Command::Plugin(PluginCommand::Inspect(args)) => inspect::inspect(args).await,
            Command::Plugin(PluginCommand::New(args)) => plugin_new::plugin_new(args),
            Command::Plugin(PluginCommand::Crd(args)) => plugin_crd::plugin_crd(args).await,
            Command::Plugin(PluginCommand::Test(args)) => plugin_test::plugin_test(args).await,
            Command::Plugin(PluginCommand::Record(args)) => {
                plugin_record::plugin_record(args).await
            }
            Command::Plugin(PluginCommand::Push(args)) => push::push(args).await,
            Command::Plugin(PluginCommand::Verify(args)) => verify::verify(args).await,
            Command::Plugin(PluginCommand::Rbac(args)) => rbac::rbac(args).await,
            Command::Plugin(PluginCommand::Unload(args)) => unload::unload(args).await,
            Command::Crd(command) => crd::execute(command).map_err(CliError::Crd),
            Command::Migrate(command) => migrate::execute(command).await,
            Command::Canary(command) => canary::execute(command).await,
            Command::Backup(command) => backup::execute(command).await,
            Command::Shards(args) => shards::shards(args).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
