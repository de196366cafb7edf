//! `wasm-operator plugin unload`: delete WasmPlugins and wait until they are
//! gone, while a host still runs to take its `unload-plugin` finalizer off.
//! The Helm chart's pre-delete hook runs it so that an uninstall never leaves
//! a WasmPlugin waiting for a host that is already gone.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};

use super::CliError;
use crate::wasmplugin::{CRD_NAME, FINALIZER, api_resource};

/// `wasm-operator plugin unload`
#[derive(Debug, Args)]
pub struct UnloadArgs {
    /// Only the WasmPlugins with these labels (e.g.
    /// app.kubernetes.io/instance=wasm-operator); without it, every WasmPlugin.
    #[arg(short = 'l', long = "selector", value_name = "LABELS")]
    pub selector: Option<String>,
    /// How long to wait for the running host to unload them and take its
    /// finalizer off, in seconds (0: do not wait).
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub timeout: u64,
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

/// Why `plugin unload` failed.
#[derive(Debug, thiserror::Error)]
pub enum UnloadError {
    /// Listing or deleting the WasmPlugins failed.
    #[error(
        "cannot {doing}: {source}; check that {CRD_NAME} is installed and that you may list and delete WasmPlugins"
    )]
    Api {
        /// What was being done.
        doing: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// Some WasmPlugins were still there when the timeout ran out.
    #[error(
        "WasmPlugins {names} are still there after {seconds} s: is a wasm-operator host running to remove its {FINALIZER} finalizer? Without a host, remove it by hand: kubectl patch wasmplugin NAME --type=merge -p '{{\"metadata\":{{\"finalizers\":null}}}}'"
    )]
    Stuck {
        /// The names of the WasmPlugins left, comma-separated.
        names: String,
        /// The timeout.
        seconds: u64,
    },
}

/// Deletes the selected WasmPlugins and waits until they are gone.
///
/// # Errors
///
/// [`CliError`] when the cluster cannot be reached, the WasmPlugins cannot be
/// listed or deleted, or some are still there after `--timeout`.
pub async fn unload(args: UnloadArgs) -> Result<(), CliError> {
    let client =
        super::connect::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    // Untyped: a WasmPlugin whose spec this version cannot read is deleted too.
    let api: Api<DynamicObject> = Api::all_with(client, &api_resource());
    let params = match &args.selector {
        Some(selector) => ListParams::default().labels(selector),
        None => ListParams::default(),
    };
    let api_error = |doing: String| move |source| UnloadError::Api { doing, source };
    let names = list_names(&api, &params)
        .await
        .map_err(api_error("list WasmPlugins".to_string()))?;
    for name in &names {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => println!("wasmplugin {name} deleted"),
            // Deleted meanwhile: what we wanted.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(source) => Err(api_error(format!("delete WasmPlugin {name}"))(source))?,
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout);
    loop {
        let left = list_names(&api, &params)
            .await
            .map_err(api_error("list WasmPlugins".to_string()))?;
        if left.is_empty() {
            println!("{} WasmPlugin(s) unloaded", names.len());
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            Err(UnloadError::Stuck {
                names: left.join(", "),
                seconds: args.timeout,
            })?;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn list_names(
    api: &Api<DynamicObject>,
    params: &ListParams,
) -> Result<Vec<String>, kube::Error> {
    Ok(api
        .list(params)
        .await?
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect())
}
