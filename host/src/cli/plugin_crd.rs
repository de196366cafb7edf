//! `wasm-operator plugin crd`: the CustomResourceDefinition a plugin
//! carries (derived by the SDK from the author's spec and status types),
//! ready for `kubectl apply -f -`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::CliError;
use super::inspect::{InspectError, read_component_at};

/// Arguments of `wasm-operator plugin crd`.
#[derive(Debug, Args)]
pub struct PluginCrdArgs {
    /// The plugin component: a .wasm file, a .wasm.gz, or
    /// oci://REGISTRY/REPOSITORY:TAG (or @sha256:HEX), read as by `plugin inspect`.
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = CrdFormat::Yaml)]
    pub output: CrdFormat,
}

/// How `plugin crd` prints the CRD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CrdFormat {
    /// YAML, as `kubectl apply -f` takes it.
    Yaml,
    /// JSON.
    Json,
}

/// Why `plugin crd` printed nothing.
#[derive(Debug, thiserror::Error)]
pub enum PluginCrdError {
    /// The component could not be read or loaded (see `plugin inspect`).
    #[error(transparent)]
    Load(#[from] InspectError),
    /// The plugin carries no CRD.
    #[error(
        "plugin {name} {version} ({path}) carries no CRD: it was built without the SDK's `schema` export or its Reconciler has no `crd()`; derive one with `Crd::of::<Spec, Status>(&Self::manifest())` (docs/writing-plugins.md, \"Start a plugin\") and rebuild"
    )]
    None {
        /// The plugin's name.
        name: String,
        /// The plugin's version.
        version: String,
        /// The component file or reference.
        path: String,
    },
}

/// Runs `wasm-operator plugin crd`.
pub async fn plugin_crd(args: PluginCrdArgs) -> Result<(), CliError> {
    let rendered = render(&args).await.map_err(CliError::PluginCrd)?;
    println!("{}", rendered.trim_end());
    Ok(())
}

/// The text `plugin crd` prints for `args`.
pub async fn render(args: &PluginCrdArgs) -> Result<String, PluginCrdError> {
    let component = read_component_at(&args.file).await?;
    let path = component.path.clone();
    let render_error = |format: &'static str, message: String| InspectError::Render {
        path: path.clone(),
        format,
        message,
    };
    let bytes = component.bytes;
    let inspection = tokio::task::spawn_blocking(move || crate::engine::inspect::inspect(&bytes))
        .await
        .map_err(|e| render_error("yaml", format!("the inspection task failed: {e}")))?
        .map_err(|source| InspectError::Inspect {
            path: path.clone(),
            source,
        })?;
    let Some(crd) = inspection.crd else {
        return Err(PluginCrdError::None {
            name: inspection.manifest.name,
            version: inspection.manifest.version,
            path: path.display().to_string(),
        });
    };
    let text = match args.output {
        CrdFormat::Yaml => {
            serde_yaml::to_string(&crd).map_err(|e| render_error("yaml", e.to_string()))
        }
        CrdFormat::Json => {
            serde_json::to_string_pretty(&crd).map_err(|e| render_error("json", e.to_string()))
        }
    }?;
    Ok(text)
}
