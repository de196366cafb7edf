//! `wasm-operator plugin inspect`: what a plugin component is, without a
//! cluster: its manifest and its WIT world.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{CliError, OutputFormat};
use crate::contract::{Manifest, ResourceKind};
use crate::engine::EngineError;
use crate::engine::inspect::Inspection;
use clap::Args;

/// Arguments of `wasm-operator plugin inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The plugin component: a .wasm file, a gzip-compressed .wasm.gz
    /// (decompressed up to 256 MiB), or oci://REGISTRY/REPOSITORY:TAG (or
    /// @sha256:HEX), pulled like --oci.
    #[arg(
        value_name = "FILE.wasm",
        required_unless_present = "oci",
        conflicts_with = "oci"
    )]
    pub file: Option<PathBuf>,
    /// Pull the component from a registry instead of reading a file:
    /// REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:HEX (anonymous;
    /// checked and bounded as the host's own pulls are).
    #[arg(long, value_name = "REFERENCE")]
    pub oci: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Why a plugin could not be inspected.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The component file cannot be read: missing, unreadable, not a
    /// regular file, or larger than a component can be.
    #[error("{source}; check the path")]
    Read {
        /// The component file.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: crate::wasmplugin::source::FileError,
    },
    /// The component could not be pulled from the registry.
    #[error("cannot inspect {reference}: {source}")]
    Pull {
        /// The `--oci` reference.
        reference: String,
        /// Why the pull failed.
        #[source]
        source: crate::oci::OciError,
    },
    /// The file starts like gzip but does not decompress, or decompresses
    /// beyond the size a component can have.
    #[error("{source}")]
    Decompress {
        /// The component file.
        path: PathBuf,
        /// What is wrong with the compressed data (boxed: the source
        /// error is large and this path is rare).
        #[source]
        source: Box<crate::wasmplugin::source::SourceError>,
    },
    /// The engine refused the component (not a component, wrong world,
    /// invalid manifest...).
    #[error("{} is not a wasm-operator plugin: {source}", path.display())]
    Inspect {
        /// The component file, or the `--oci` reference it was pulled from.
        path: PathBuf,
        /// Why the engine refused it.
        #[source]
        source: EngineError,
    },
    /// The inspection cannot be produced in the requested format (a host bug).
    #[error("cannot render the inspection of {} as {format}: {message}", path.display())]
    Render {
        /// The component file, or the `--oci` reference it was pulled from.
        path: PathBuf,
        /// The `--output` format.
        format: &'static str,
        /// What failed: the serializer, or the task that ran the inspection.
        message: String,
    },
}

/// Runs `wasm-operator plugin inspect`.
pub async fn inspect(args: InspectArgs) -> Result<(), CliError> {
    let rendered = render(&args).await?;
    println!("{}", rendered.trim_end());
    Ok(())
}

/// The text `inspect` prints for `args`.
pub async fn render(args: &InspectArgs) -> Result<String, InspectError> {
    let Component {
        path,
        bytes,
        oci_manifest_digest,
    } = read_component(args).await?;
    let inspection = inspect_bytes(&path, bytes).await?;
    let structured = |format: &'static str| {
        let mut value = serde_json::to_value(&inspection).map_err(|e| InspectError::Render {
            path: path.clone(),
            format,
            message: e.to_string(),
        })?;
        if let Some(digest) = &oci_manifest_digest {
            value["ociManifestDigest"] = serde_json::Value::String(digest.clone());
        }
        Ok::<_, InspectError>(value)
    };
    match args.output {
        OutputFormat::Json => {
            serde_json::to_string_pretty(&structured("json")?).map_err(|e| InspectError::Render {
                path: path.clone(),
                format: "json",
                message: e.to_string(),
            })
        }
        OutputFormat::Yaml => {
            serde_yaml::to_string(&structured("yaml")?).map_err(|e| InspectError::Render {
                path: path.clone(),
                format: "yaml",
                message: e.to_string(),
            })
        }
        OutputFormat::Text => Ok(render_text(&inspection, oci_manifest_digest.as_deref())),
    }
}

/// Inspects `bytes` (the component `path` names in messages) off the
/// runtime: inspecting compiles the component, which is CPU-bound.
async fn inspect_bytes(path: &Path, bytes: Vec<u8>) -> Result<Inspection, InspectError> {
    tokio::task::spawn_blocking(move || crate::engine::inspect::inspect(&bytes))
        .await
        .map_err(|e| InspectError::Render {
            path: path.to_path_buf(),
            format: "text",
            message: format!("the inspection task failed: {e}"),
        })?
        .map_err(|source| InspectError::Inspect {
            path: path.to_path_buf(),
            source,
        })
}

/// The manifest of `plugin`: a .wasm or .wasm.gz file, or
/// `oci://REGISTRY/REPOSITORY:TAG` (pulled anonymously), read and checked
/// as `plugin inspect` reads it (`plugin rbac --host` uses it).
pub(super) async fn manifest_of(plugin: &str) -> Result<Manifest, InspectError> {
    let component = read_component_at(Path::new(plugin)).await?;
    Ok(inspect_bytes(&component.path, component.bytes)
        .await?
        .manifest)
}

/// The manifest of component `bytes` (`what` names it in messages).
pub(super) async fn manifest_of_bytes(
    what: &str,
    bytes: Vec<u8>,
) -> Result<Manifest, InspectError> {
    Ok(inspect_bytes(Path::new(what), bytes).await?.manifest)
}

/// A component to inspect, what names it in messages, and for one pulled
/// from a registry, the manifest digest pulled.
pub(crate) struct Component {
    /// The file, or the OCI reference it was pulled from.
    pub path: PathBuf,
    /// The component's bytes (decompressed).
    pub bytes: Vec<u8>,
    /// The manifest digest, for a component pulled from a registry.
    pub oci_manifest_digest: Option<String>,
}

/// The prefix that makes the FILE argument an OCI reference (as Helm's).
const OCI_SCHEME: &str = "oci://";

/// The component `args` names and what names it in messages: the file, or
/// the `--oci` reference (pulled anonymously).
pub(crate) async fn read_component(args: &InspectArgs) -> Result<Component, InspectError> {
    match (args.oci.as_deref(), args.file.as_deref()) {
        (Some(reference), _) => pull_component(reference).await,
        // clap requires FILE.wasm without --oci.
        (None, file) => read_component_at(file.unwrap_or(Path::new(""))).await,
    }
}

/// The component `location` names: a .wasm or .wasm.gz file, or
/// `oci://REGISTRY/REPOSITORY:TAG` (pulled anonymously, as Helm names charts).
pub(crate) async fn read_component_at(location: &Path) -> Result<Component, InspectError> {
    if let Some(reference) = location.to_str().and_then(|l| l.strip_prefix(OCI_SCHEME)) {
        return pull_component(reference).await;
    }
    let path = location.to_path_buf();
    let bytes = crate::wasmplugin::source::read_plugin_file(&path)
        .await
        .map_err(|source| InspectError::Read {
            path: path.clone(),
            source,
        })?;
    // A .wasm.gz (or any file starting with gzip's magic number) is
    // decompressed, bounded like the host's own sources.
    let what = format!("plugin file {}", path.display());
    let bytes = crate::wasmplugin::source::maybe_gunzip(&bytes, &what).map_err(|source| {
        InspectError::Decompress {
            path: path.clone(),
            source: Box::new(source),
        }
    })?;
    Ok(Component {
        path,
        bytes,
        oci_manifest_digest: None,
    })
}

/// Pulls `reference` anonymously, checked and bounded as the host's pulls are.
async fn pull_component(reference: &str) -> Result<Component, InspectError> {
    let source = crate::oci::OciSource {
        reference: reference.to_string(),
        ..Default::default()
    };
    let pulled = crate::oci::pull(&source)
        .await
        .map_err(|source| InspectError::Pull {
            reference: reference.to_string(),
            source,
        })?;
    Ok(Component {
        path: PathBuf::from(reference),
        bytes: pulled.bytes,
        oci_manifest_digest: Some(pulled.digest),
    })
}

fn kind_line(kind: &ResourceKind) -> String {
    format!("{} ({}, {})", kind.kind, kind.api_version(), kind.plural)
}

fn kinds_line(kinds: &[ResourceKind]) -> String {
    if kinds.is_empty() {
        "-".to_string()
    } else {
        kinds.iter().map(kind_line).collect::<Vec<_>>().join(", ")
    }
}

/// The human-readable summary: manifest first, then the WIT world.
fn render_text(inspection: &Inspection, oci_manifest_digest: Option<&str>) -> String {
    let manifest = &inspection.manifest;
    let mut out = String::new();
    let _ = writeln!(out, "Name:           {}", manifest.name);
    let _ = writeln!(out, "Version:        {}", manifest.version);
    if !manifest.description.is_empty() {
        let _ = writeln!(out, "Description:    {}", manifest.description);
    }
    let _ = writeln!(out, "Primary kind:   {}", kind_line(&manifest.primary));
    let _ = writeln!(out, "Owns:           {}", kinds_line(&manifest.owns));
    let _ = writeln!(out, "Watches:        {}", kinds_line(&manifest.watches));
    let finalizer = if manifest.finalizer { "yes" } else { "no" };
    let _ = writeln!(out, "Finalizer:      {finalizer}");
    let mut implements = vec!["reconciler"];
    match (manifest.implements.convert, manifest.implements.upgrade) {
        (true, true) => implements.push("migration"),
        (true, false) => implements.push("migration (convert only)"),
        (false, true) => implements.push("migration (upgrade only)"),
        (false, false) => {}
    }
    if manifest.implements.backup {
        implements.push("backup");
    }
    let admission = match (inspection.admission.validate, inspection.admission.defaults) {
        (true, true) => "admission (validate, defaults)",
        (true, false) => "admission (validate)",
        (false, true) => "admission (defaults)",
        (false, false) => "",
    };
    if !admission.is_empty() {
        implements.push(admission);
    }
    let _ = writeln!(out, "Implements:     {}", implements.join(", "));
    if let Some(min) = &manifest.min_compatible_version {
        let _ = writeln!(out, "Min compatible: {min}");
    }
    let _ = writeln!(out, "Digest:         {}", inspection.digest);
    if let Some(digest) = oci_manifest_digest {
        let _ = writeln!(
            out,
            "OCI digest:     {digest} (the manifest; what @sha256: pins)"
        );
    }
    let size = inspection.size as u64;
    let _ = writeln!(out, "Size:           {} ({size} bytes)", human_size(size));
    let _ = writeln!(out, "\nWorld:");
    for line in inspection.world.lines() {
        let _ = writeln!(out, "  {line}");
    }
    out
}

fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Manifest, OptionalInterfaces, Scope};

    #[test]
    fn text_lists_manifest_then_world() {
        let kind = |group: &str, kind: &str, plural: &str| ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            scope: Scope::Namespaced,
        };
        let inspection = Inspection {
            digest: "sha256:ab".into(),
            size: 2048,
            manifest: Manifest {
                name: "webapp".into(),
                version: "1.0.0".into(),
                description: "d".into(),
                primary: kind("example.com", "WebApp", "webapps"),
                owns: vec![kind("apps", "Deployment", "deployments")],
                watches: vec![],
                finalizer: true,
                implements: OptionalInterfaces {
                    migration: false,
                    convert: false,
                    upgrade: false,
                    backup: true,
                },
                min_compatible_version: None,
            },
            admission: crate::contract::AdmissionFunctions {
                validate: true,
                defaults: false,
            },
            world: "world plugin {\n  export wasm-operator:plugin/reconciler@0.1.0;\n}".into(),
            crd: None,
        };
        let text = render_text(&inspection, None);
        assert!(!text.contains("OCI digest:"));
        let pulled = render_text(&inspection, Some("sha256:cd"));
        assert!(pulled.contains("OCI digest:     sha256:cd"), "{pulled}");
        assert!(text.contains("Primary kind:   WebApp (example.com/v1, webapps)"));
        assert!(text.contains("Owns:           Deployment (apps/v1, deployments)"));
        assert!(text.contains("Watches:        -"));
        assert!(text.contains("Implements:     reconciler, backup, admission (validate)"));
        assert!(text.contains("Size:           2.0 KiB (2048 bytes)"));
        assert!(text.find("Name:").unwrap() < text.find("World:").unwrap());
        assert!(text.contains("  export wasm-operator:plugin/reconciler@0.1.0;"));
    }
}
