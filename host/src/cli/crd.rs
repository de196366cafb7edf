//! `wasm-operator crd print`: the CRDs this host serves, generated from its
//! types, so a cluster gets the schema of the binary it runs
//! (`wasm-operator crd print | kubectl apply -f -`).

use std::io::Write as _;

use clap::Subcommand;

/// `wasm-operator crd ...`
#[derive(Debug, Subcommand)]
pub enum CrdCommand {
    /// Print a CRD of the host as YAML: `wasmplugin` (the default; what
    /// deploy/crds/wasmplugin.yaml holds) or `backup` (Backup and Restore;
    /// deploy/crds/backup.yaml).
    Print {
        /// Which: `wasmplugin` or `backup`.
        #[arg(default_value = "wasmplugin", value_parser = ["wasmplugin", "backup"])]
        which: String,
    },
}

/// Why a CRD could not be printed.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The CRD could not be rendered as YAML.
    #[error("cannot render the CRD as YAML: {0}")]
    Render(#[source] serde_yaml::Error),
    /// Standard output could not be written (e.g. a closed pipe or a full disk).
    #[error("cannot write the CRD to standard output: {0}")]
    Write(#[source] std::io::Error),
}

/// Runs `wasm-operator crd <command>`.
pub fn execute(command: CrdCommand) -> Result<(), CrdError> {
    match command {
        CrdCommand::Print { which } => {
            let yaml = if which == "backup" {
                crate::backup::resources::crd_yaml()
            } else {
                crate::wasmplugin::crd_yaml()
            }
            .map_err(CrdError::Render)?;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(yaml.as_bytes())
                .and_then(|()| stdout.flush())
                .map_err(CrdError::Write)?;
        }
    }
    Ok(())
}
