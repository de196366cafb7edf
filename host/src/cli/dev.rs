//! `wasm-operator dev`: argument parsing and terminal output around
//! [`crate::dev::DevSession`].

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;

use super::CliError;
use crate::dev::author::AuthorCrate;
use crate::dev::{DevOptions, DevSession, LoadOutcome};

/// Arguments of `wasm-operator dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Port of the embedded API server on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 6443)]
    pub port: u16,
    /// SQLite file keeping the cluster's objects across runs (default: in memory).
    #[arg(long, value_name = "FILE")]
    pub data: Option<PathBuf>,
    /// Where to write the kubeconfig of the cluster `dev` starts (default:
    /// a temporary file, removed when `dev` stops).
    #[arg(long, value_name = "PATH")]
    pub write_kubeconfig: Option<PathBuf>,
    /// The old name of --write-kubeconfig, kept for one release: kubectl's
    /// --kubeconfig reads a file, this one wrote it. Warns when used.
    #[arg(
        long = "kubeconfig",
        value_name = "PATH",
        hide = true,
        conflicts_with = "write_kubeconfig"
    )]
    pub deprecated_kubeconfig: Option<PathBuf>,
    /// Do not build the plugins; load the .wasm files already built.
    #[arg(long)]
    pub no_build: bool,
    /// Directory of plugin crates.
    #[arg(long, default_value = "plugins", value_name = "DIR")]
    pub plugins_dir: PathBuf,
    /// Directory of examples (`<name>/crd.yaml` and objects).
    #[arg(long, default_value = "examples", value_name = "DIR")]
    pub examples_dir: PathBuf,
    /// Directory of built plugins to load and watch (default: target/wasm32-wasip2/release).
    #[arg(long, env = "WASM_OPERATOR_WASM_DIR", value_name = "DIR")]
    pub wasm_dir: Option<PathBuf>,
    /// Do not apply the example objects (CRDs are still installed).
    #[arg(long)]
    pub no_examples: bool,
    /// Serve /metrics, /healthz and /readyz here.
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// How long a rebuilt .wasm must be quiet before it is reloaded, in milliseconds.
    #[arg(long, default_value_t = 500, value_name = "MS")]
    pub debounce_ms: u64,
    /// Run on a real control plane (kube-apiserver, etcd, kube-controller-manager
    /// from `scripts/build-realcluster.sh`) instead of the embedded devcluster.
    #[arg(long)]
    pub real: bool,
    /// Do not simulate workloads on the embedded devcluster (by default Pods,
    /// Deployments, StatefulSets, DaemonSets and Jobs become Ready/Complete
    /// on 3 fake nodes through kwok-compatible stages; no containers run).
    #[arg(long)]
    pub no_simulate_workloads: bool,
    /// A kwok Stage YAML file added to the simulation's stages (one named
    /// like a default replaces it); repeatable.
    #[arg(
        long = "stages",
        value_name = "FILE",
        conflicts_with = "no_simulate_workloads"
    )]
    pub stages: Vec<PathBuf>,
    /// The `realcluster` binary `--real` runs.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "target/realcluster/realcluster"
    )]
    pub realcluster: PathBuf,
    /// The CRD conversion webhook (always served; these flags move it).
    #[command(flatten)]
    pub webhook: Box<super::webhook::WebhookArgs>,
}

impl DevArgs {
    /// The warning the deprecated `--kubeconfig` spelling deserves, if it
    /// was used.
    pub fn deprecation(&self) -> Option<String> {
        let path = self.deprecated_kubeconfig.as_ref()?;
        Some(format!(
            "`dev --kubeconfig {0}` is deprecated and will be removed in the next release: it writes the file, while kubectl's --kubeconfig reads one; use `dev --write-kubeconfig {0}`",
            path.display()
        ))
    }

    /// The session options these arguments describe, relative to the current
    /// directory (the workspace root).
    ///
    /// Inside a plugin author's crate (a `cdylib` on `wasm-operator-sdk`),
    /// the session builds and serves that crate; `--plugins-dir` and
    /// `--examples-dir` do not apply there.
    pub fn options(&self) -> DevOptions {
        let author = AuthorCrate::detect(Path::new("."));
        let in_workspace = author.is_none();
        let mut options = match author {
            Some(author) => DevOptions::for_author_crate(author),
            None => DevOptions::for_workspace("."),
        };
        options.port = self.port;
        options.data = self.data.clone();
        options.kubeconfig = self
            .write_kubeconfig
            .clone()
            .or_else(|| self.deprecated_kubeconfig.clone());
        options.real = self.real.then(|| self.realcluster.clone());
        options.simulate_workloads = !self.no_simulate_workloads;
        options.stages = self.stages.clone();
        options.build = !self.no_build;
        if in_workspace {
            options.plugins_dir = self.plugins_dir.clone();
            options.examples_dir = self.examples_dir.clone();
        }
        if let Some(dir) = &self.wasm_dir {
            options.wasm_dir = dir.clone();
        }
        options.apply_examples = !self.no_examples;
        options.metrics_addr = self.metrics_addr;
        options.debounce = Duration::from_millis(self.debounce_ms);
        options.webhook = self
            .webhook
            .options(crate::dev::default_webhook().addr.into())
            .map(|mut webhook| {
                // A dev session keeps storage migrated by itself.
                webhook.migrate_storage = true;
                webhook
            });
        options
    }
}

/// Runs `wasm-operator dev` until SIGINT/SIGTERM.
pub async fn dev(args: DevArgs) -> Result<(), CliError> {
    if let Some(warning) = args.deprecation() {
        tracing::warn!("{warning}");
    }
    let shutdown = super::signals::shutdown_signal().map_err(CliError::Signals)?;
    tokio::pin!(shutdown);
    // Ctrl-C during a long build stops right away (the build is killed and
    // the cluster stopped when the start future is dropped).
    let session = tokio::select! {
        session = DevSession::start(args.options()) => session?,
        signal = &mut shutdown => {
            tracing::info!(signal, "stopped while starting");
            return Ok(());
        }
    };
    print_banner(&session);
    let signal = shutdown.await;
    tracing::info!(signal, "stopping: controllers first, then the devcluster");
    session.shutdown().await;
    Ok(())
}

fn print_banner(session: &DevSession) {
    let summary = session.summary();
    let mut out = std::io::stdout().lock();
    // Printing is best effort: a closed stdout must not stop the session.
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "wasm-operator dev is running against {}",
        session.url()
    );
    for event in &summary.plugins {
        let line = match &event.outcome {
            LoadOutcome::Loaded {
                name,
                version,
                digest,
            } => {
                format!("  plugin {name} {version} ({})", short_digest(digest))
            }
            LoadOutcome::Failed(message) => format!("  FAILED {message}"),
            LoadOutcome::Unchanged | LoadOutcome::Removed => continue,
        };
        let _ = writeln!(out, "{line}");
    }
    if let Some(addr) = summary.metrics_addr {
        let _ = writeln!(out, "  metrics:    http://{addr}/metrics");
    }
    let _ = writeln!(out, "  kubeconfig: {}", session.kubeconfig_path().display());
    let _ = writeln!(out);
    let _ = writeln!(out, "Try:");
    let _ = writeln!(out, "  {}", session.kubectl_hint());
    if let Some(author) = session.author() {
        let _ = writeln!(
            out,
            "  wasm-operator plugin test {} fixtures",
            author.wasm_file().display()
        );
    }
    let _ = writeln!(out);
    match session.author() {
        Some(author) => {
            let _ = writeln!(
                out,
                "Save a file under {} (or Cargo.toml) and {} is rebuilt and swapped in; a failed build keeps the last good version serving.",
                author.dir.join("src").display(),
                author.package
            );
        }
        None => {
            let _ = writeln!(
                out,
                "Rebuild a plugin (cargo build --release --target wasm32-wasip2 -p NAME) and it is reloaded from {}.",
                session.wasm_dir().display()
            );
        }
    }
    let _ = writeln!(out, "Press Ctrl-C to stop.");
    let _ = out.flush();
}

fn short_digest(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    hex.get(..12).unwrap_or(hex)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};

    fn dev_options(args: &[&str]) -> crate::dev::DevOptions {
        let cli = Cli::try_parse_from([&["wasm-operator", "dev"], args].concat()).unwrap();
        match cli.command {
            Command::Dev(dev) => dev.options(),
            other => panic!("not dev: {other:?}"),
        }
    }

    #[test]
    fn the_kubeconfig_to_write_is_write_kubeconfig_and_the_old_name_still_works() {
        let new = dev_options(&["--write-kubeconfig", "dev.kubeconfig"]);
        assert_eq!(
            new.kubeconfig,
            Some(std::path::PathBuf::from("dev.kubeconfig"))
        );
        let old = dev_options(&["--kubeconfig", "old.kubeconfig"]);
        assert_eq!(
            old.kubeconfig,
            Some(std::path::PathBuf::from("old.kubeconfig"))
        );
        let cli = Cli::try_parse_from(["wasm-operator", "dev", "--kubeconfig", "old.kubeconfig"])
            .unwrap();
        let Command::Dev(args) = cli.command else {
            panic!("not dev")
        };
        let warning = args.deprecation().unwrap();
        assert!(
            warning.contains("deprecated") && warning.contains("--write-kubeconfig old.kubeconfig"),
            "{warning}"
        );
        assert!(
            Cli::try_parse_from([
                "wasm-operator",
                "dev",
                "--kubeconfig",
                "a",
                "--write-kubeconfig",
                "b"
            ])
            .is_err(),
            "both names at once are refused"
        );
        let help = {
            use clap::CommandFactory;
            let mut command = Cli::command();
            command
                .find_subcommand_mut("dev")
                .unwrap()
                .render_long_help()
                .to_string()
        };
        assert!(
            help.contains("--write-kubeconfig") && !help.contains("--kubeconfig "),
            "{help}"
        );
    }

    #[test]
    fn workloads_are_simulated_unless_turned_off_and_stage_files_repeat() {
        let default = dev_options(&[]);
        assert!(default.simulate_workloads);
        assert!(default.stages.is_empty());
        assert!(!dev_options(&["--no-simulate-workloads"]).simulate_workloads);
        let custom = dev_options(&["--stages", "a.yaml", "--stages", "b.yaml"]);
        assert_eq!(
            custom.stages,
            ["a.yaml", "b.yaml"].map(std::path::PathBuf::from)
        );
        assert!(
            Cli::try_parse_from([
                "wasm-operator",
                "dev",
                "--no-simulate-workloads",
                "--stages",
                "a.yaml"
            ])
            .is_err(),
            "stage files without the simulation are refused"
        );
    }
}
