//! Publishing a plugin component in the CNCF Wasm OCI artifact layout
//! (<https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/>).

use std::collections::BTreeMap;

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use serde::Serialize;

use super::client::{client_for, map_error, parse_reference};
use super::pull::sha256;
use super::{
    CNCF_WASM_CONFIG_MEDIA_TYPE, DockerConfig, OciError, TITLE_ANNOTATION, VERSION_ANNOTATION,
    WASM_LAYER_MEDIA_TYPE,
};
use crate::engine::inspect::{Inspection, inspect};

/// How to reach the registry when pushing.
#[derive(Debug, Clone, Default)]
pub struct PushOptions {
    /// Credentials; anonymous when `None` or when none match the registry.
    pub auth: Option<DockerConfig>,
    /// Speak plain HTTP to this registry even if it is not on loopback.
    pub insecure: bool,
}

/// A step of [`push`], reported to its progress callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushStep {
    /// Compiling the component to read its manifest and world.
    Inspecting,
    /// Uploading the component layer of `bytes` bytes.
    UploadingLayer {
        /// The component's size.
        bytes: u64,
    },
    /// The layer is in the registry (uploaded now or already there).
    LayerUploaded {
        /// The component's size.
        bytes: u64,
    },
    /// Uploading the config blob.
    UploadingConfig,
    /// Writing the manifest under the tag.
    WritingManifest,
}

/// What [`push`] published.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The reference pushed to, as given.
    pub reference: String,
    /// `sha256:…` of the manifest: pin it with `REFERENCE@DIGEST`.
    pub digest: String,
    /// `sha256:…` of the component bytes (the layer).
    pub layer_digest: String,
    /// The plugin's name, from its manifest.
    pub plugin: String,
    /// The plugin's version, from its manifest.
    pub version: String,
}

/// The CNCF Wasm artifact config (`application/vnd.wasm.config.v0+json`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig {
    created: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    author: Option<String>,
    architecture: &'static str,
    os: &'static str,
    layer_digests: Vec<String>,
    component: ComponentInfo,
}

#[derive(Debug, Serialize)]
struct ComponentInfo {
    exports: Vec<String>,
    imports: Vec<String>,
    target: String,
}

/// Publishes the component `bytes` at `reference` (`REGISTRY/REPO:TAG`):
/// inspects it (it must load as a plugin of our world), uploads one
/// `application/wasm` layer and a config describing its WIT world, then the
/// manifest annotated with the plugin's name and version. Returns the
/// manifest digest.
pub async fn push(
    bytes: &[u8],
    reference: &str,
    options: &PushOptions,
    progress: &mut (dyn FnMut(PushStep) + Send),
) -> Result<Pushed, OciError> {
    let parsed = parse_reference(reference)?;
    if parsed.digest().is_some() {
        return Err(OciError::InvalidReference {
            reference: reference.to_string(),
            reason: "a push goes to a tag, not to a digest".into(),
        });
    }
    progress(PushStep::Inspecting);
    let owned = bytes.to_vec();
    // Compiling takes seconds of CPU: keep it off the async workers.
    let inspection = tokio::task::spawn_blocking(move || inspect(&owned))
        .await
        .map_err(|e| OciError::InvalidComponent {
            reference: reference.to_string(),
            message: format!("inspection did not finish: {e}"),
        })?
        .map_err(|e| OciError::InvalidComponent {
            reference: reference.to_string(),
            message: e.to_string(),
        })?;
    let auth = match &options.auth {
        Some(config) => config.auth_for(parsed.resolve_registry())?,
        None => RegistryAuth::Anonymous,
    };
    let client = client_for(parsed.resolve_registry(), options.insecure);
    client
        .store_auth_if_needed(parsed.resolve_registry(), &auth)
        .await;

    let layer_digest = sha256(bytes);
    let config_json = config_for(&inspection, &layer_digest)?;
    let config = Config::new(config_json, CNCF_WASM_CONFIG_MEDIA_TYPE.to_string(), None);
    let layer = ImageLayer::new(bytes.to_vec(), WASM_LAYER_MEDIA_TYPE.to_string(), None);
    let mut annotations = BTreeMap::new();
    annotations.insert(
        VERSION_ANNOTATION.to_string(),
        inspection.manifest.version.clone(),
    );
    annotations.insert(
        TITLE_ANNOTATION.to_string(),
        inspection.manifest.name.clone(),
    );
    annotations.insert(
        "org.opencontainers.image.description".to_string(),
        inspection.manifest.description.clone(),
    );
    let mut manifest =
        OciImageManifest::build(std::slice::from_ref(&layer), &config, Some(annotations));
    manifest.media_type = Some(OCI_IMAGE_MEDIA_TYPE.to_string());
    // The distribution spec wants an artifactType-less image manifest here:
    // the config media type already says "Wasm", as the CNCF layout defines.

    let size = bytes.len() as u64;
    progress(PushStep::UploadingLayer { bytes: size });
    let exists = client
        .blob_exists(&parsed, &layer_digest)
        .await
        .map_err(|e| map_error(&parsed, e))?;
    if !exists {
        client
            .push_blob(&parsed, layer.data.clone(), &layer_digest)
            .await
            .map_err(|e| map_error(&parsed, e))?;
    }
    progress(PushStep::LayerUploaded { bytes: size });
    progress(PushStep::UploadingConfig);
    client
        .push_blob(&parsed, config.data.clone(), &manifest.config.digest)
        .await
        .map_err(|e| map_error(&parsed, e))?;
    progress(PushStep::WritingManifest);
    // Serialized here (not by oci-client) so the digest we report is the
    // digest of exactly the bytes the registry stores.
    let body = serde_json::to_vec(&manifest).map_err(|e| OciError::Registry {
        reference: reference.to_string(),
        message: format!("cannot serialize the manifest: {e}"),
    })?;
    let digest = sha256(&body);
    client
        .push_manifest_raw(
            &parsed,
            body,
            http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(|e| map_error(&parsed, e))?;
    Ok(Pushed {
        reference: reference.to_string(),
        digest,
        layer_digest,
        plugin: inspection.manifest.name.clone(),
        version: inspection.manifest.version.clone(),
    })
}

/// The config blob: the CNCF fields, with the component's world read from
/// the compiled component (not from the manifest, which could lie).
fn config_for(inspection: &Inspection, layer_digest: &str) -> Result<Vec<u8>, OciError> {
    let (imports, exports) = world_items(&inspection.world);
    let full = exports
        .iter()
        .any(|e| e.contains("/migration") || e.contains("/backup"));
    let target = if full {
        "wasm-operator:plugin/plugin@0.1.0"
    } else {
        "wasm-operator:plugin/reconciler-plugin@0.1.0"
    };
    let config = WasmConfig {
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        author: None,
        architecture: "wasm",
        os: "wasip2",
        layer_digests: vec![layer_digest.to_string()],
        component: ComponentInfo {
            exports,
            imports,
            target: target.to_string(),
        },
    };
    serde_json::to_vec(&config).map_err(|e| OciError::Registry {
        reference: inspection.manifest.name.clone(),
        message: format!("cannot serialize the config: {e}"),
    })
}

/// Import and export names from [`Inspection::world`]'s
/// `  import NAME …` / `  export NAME …` lines.
fn world_items(world: &str) -> (Vec<String>, Vec<String>) {
    let mut imports = Vec::new();
    let mut exports = Vec::new();
    for line in world.lines() {
        // Only the top-level items (two spaces), not functions inside them.
        let Some(item) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) else {
            continue;
        };
        let (list, rest) = if let Some(rest) = item.strip_prefix("import ") {
            (&mut imports, rest)
        } else if let Some(rest) = item.strip_prefix("export ") {
            (&mut exports, rest)
        } else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| !matches!(c, ' ' | ';' | '{'))
            .collect();
        let name = name.strip_suffix(':').unwrap_or(&name).to_string();
        if !name.is_empty() {
            list.push(name);
        }
    }
    (imports, exports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn world_items_reads_top_level_names() {
        let world = "world plugin {\n  import wasi:io/streams@0.2.0;\n  import wasm-operator:plugin/cache@0.1.0 {\n    get: func();\n  }\n  export wasm-operator:plugin/reconciler@0.1.0 {\n    manifest: func();\n  }\n  export run: func();\n}\n";
        let (imports, exports) = world_items(world);
        assert_eq!(
            imports,
            ["wasi:io/streams@0.2.0", "wasm-operator:plugin/cache@0.1.0"]
        );
        assert_eq!(exports, ["wasm-operator:plugin/reconciler@0.1.0", "run"]);
    }
}
