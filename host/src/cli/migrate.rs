//! `wasm-operator migrate storage CRD`: one-shot storage-version migration
//! with a progress bar (docs/conversion.md).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::{CliError, connect};
use crate::webhook::storage::{self, StorageError, StorageOptions};

/// `wasm-operator migrate ...`
#[derive(Debug, Subcommand)]
pub enum MigrateCommand {
    /// Rewrite every object of a CRD into its storage version, then set
    /// status.storedVersions to the storage version alone (after which an
    /// old version may be removed from the CRD). Resumes where an earlier
    /// run stopped.
    Storage(StorageArgs),
}

/// Arguments of `migrate storage`.
#[derive(Debug, Args)]
pub struct StorageArgs {
    /// The CRD, e.g. distributedkvs.kv.example.com.
    pub crd: String,
    /// Object writes per second at most (0: unlimited), so reconciles keep
    /// their share of the API server.
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub rate: u32,
    /// Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Why `migrate` failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The migration could not run or finish.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Some objects could not be rewritten; storedVersions was kept.
    #[error(
        "{count} objects of CRD {crd} could not be rewritten, so status.storedVersions was left as it was: {list}; fix them (or what refuses them) and run the migration again"
    )]
    Refused {
        /// The CRD.
        crd: String,
        /// How many.
        count: usize,
        /// `namespace/name: why`, joined.
        list: String,
    },
}

/// Runs `wasm-operator migrate`.
pub async fn execute(command: MigrateCommand) -> Result<(), CliError> {
    let MigrateCommand::Storage(args) = command;
    let client = connect::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg} [{bar:30}] {pos}/{len} objects ({per_sec})",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.set_message(format!("migrating {}", args.crd));
    let options = StorageOptions {
        writes_per_second: args.rate,
        max_objects: None,
    };
    let report = storage::migrate(&client, &args.crd, &options, |done, total| {
        if let Some(total) = total {
            bar.set_length(total as u64);
        }
        bar.set_position(done as u64);
    })
    .await
    .map_err(MigrateError::Storage);
    bar.finish_and_clear();
    let report = report?;
    if !report.refused.is_empty() {
        return Err(MigrateError::Refused {
            crd: args.crd,
            count: report.refused.len(),
            list: report.refused.join("; "),
        }
        .into());
    }
    println!(
        "{}: {} objects stored as {}; storedVersions was [{}], now [{}]",
        args.crd,
        report.migrated,
        report.storage_version,
        report.stored_before.join(", "),
        report.storage_version
    );
    Ok(())
}
