//! Fetching a plugin component from a registry, and the cheap tag check
//! used for polling.

use oci_client::Reference;
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciImageManifest,
};
use oci_client::secrets::RegistryAuth;
use sha2::{Digest as _, Sha256};

use super::client::{check_digest, client_for, parse_reference};
use super::fetch::Repository;
use super::{
    CNCF_WASM_CONFIG_MEDIA_TYPE, DockerConfig, LEGACY_WASM_CONFIG_MEDIA_TYPE,
    LEGACY_WASM_LAYER_MEDIA_TYPE, MAX_COMPONENT_BYTES, OciError, OciSource, Pulled,
    WASM_LAYER_MEDIA_TYPE,
};

/// Pulls the component `source` names. See the [module docs](super) for the
/// accepted layouts and the pinning rules.
pub async fn pull(source: &OciSource) -> Result<Pulled, OciError> {
    let reference = parse_reference(&source.reference)?;
    let pin = pinned_digest(source, &reference)?;
    let auth = auth_for(source.pull_secret.as_ref(), &reference)?;
    let client = client_for(reference.resolve_registry(), false);
    // With a tag, fetch by tag and compare: a tag that moved away from the
    // pin is reported as a mismatch instead of silently serving the pin.
    let fetch = match (reference.tag(), &pin) {
        (Some(tag), _) => Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            tag.to_string(),
        ),
        (None, Some(digest)) => Reference::with_digest(
            reference.registry().to_string(),
            reference.repository().to_string(),
            digest.clone(),
        ),
        (None, None) => Reference::with_tag(
            reference.registry().to_string(),
            reference.repository().to_string(),
            "latest".to_string(),
        ),
    };
    let repository = Repository::open(&client, &reference, &auth).await?;
    let tag_or_digest = fetch
        .digest()
        .or(fetch.tag())
        .unwrap_or("latest")
        .to_string();
    let raw = repository
        .manifest(
            &tag_or_digest,
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await?;
    let digest = sha256(&raw);
    if let Some(expected) = pin
        && expected != digest
    {
        return Err(OciError::DigestMismatch {
            reference: source.reference.clone(),
            expected,
            actual: digest,
        });
    }
    let manifest = parse_manifest(&source.reference, &raw)?;
    let layer = &manifest.layers[0];
    let (bytes, layer_digest) = repository.blob(layer).await?;
    if layer_digest != layer.digest || bytes.len() as i64 != layer.size {
        return Err(OciError::LayerDigestMismatch {
            reference: source.reference.clone(),
            expected: format!("{} ({} bytes)", layer.digest, layer.size),
            actual: format!("{layer_digest} ({} bytes)", bytes.len()),
        });
    }
    Ok(Pulled {
        bytes,
        digest,
        layer_digest,
        reference: source.reference.clone(),
        version: manifest
            .annotations
            .as_ref()
            .and_then(|a| a.get(super::VERSION_ANNOTATION))
            .cloned(),
    })
}

/// The manifest digest `reference`'s tag currently points to, without
/// downloading the component (one HEAD request): compare it with
/// [`Pulled::digest`] to know whether a new version was pushed.
pub async fn resolve_digest(
    reference: &str,
    pull_secret: Option<&DockerConfig>,
) -> Result<String, OciError> {
    let parsed = parse_reference(reference)?;
    let auth = auth_for(pull_secret, &parsed)?;
    let client = client_for(parsed.resolve_registry(), false);
    // `repo:tag@sha256:…` asks where the tag points now, not about the pin.
    let target = match (parsed.tag(), parsed.digest()) {
        (Some(tag), Some(_)) => Reference::with_tag(
            parsed.registry().to_string(),
            parsed.repository().to_string(),
            tag.to_string(),
        ),
        _ => parsed.clone(),
    };
    let repository = Repository::open(&client, &parsed, &auth).await?;
    let tag_or_digest = target
        .digest()
        .or(target.tag())
        .unwrap_or("latest")
        .to_string();
    repository
        .manifest_digest(
            &tag_or_digest,
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        )
        .await
}

/// The digest the source is pinned to, if any.
fn pinned_digest(source: &OciSource, reference: &Reference) -> Result<Option<String>, OciError> {
    if let Some(d) = &source.digest {
        check_digest(&source.reference, d)?;
    }
    if let Some(d) = reference.digest() {
        check_digest(&source.reference, d)?;
    }
    match (source.digest.as_deref(), reference.digest()) {
        (Some(a), Some(b)) if a != b => Err(OciError::InvalidReference {
            reference: source.reference.clone(),
            reason: format!("it is pinned to {b} but the separate digest field says {a}"),
        }),
        (Some(a), _) => Ok(Some(a.to_string())),
        (None, b) => Ok(b.map(str::to_string)),
    }
}

fn auth_for(
    secret: Option<&DockerConfig>,
    reference: &Reference,
) -> Result<RegistryAuth, OciError> {
    match secret {
        Some(config) => config.auth_for(reference.resolve_registry()),
        None => Ok(RegistryAuth::Anonymous),
    }
}

/// Parses the manifest and checks it is one of the accepted Wasm layouts.
fn parse_manifest(reference: &str, raw: &[u8]) -> Result<OciImageManifest, OciError> {
    let not_wasm = |reason: String| OciError::NotWasm {
        reference: reference.to_string(),
        reason,
    };
    let value: serde_json::Value = serde_json::from_slice(raw)
        .map_err(|e| not_wasm(format!("the manifest is not JSON: {e}")))?;
    if value.get("mediaType").and_then(|m| m.as_str()) == Some(OCI_IMAGE_INDEX_MEDIA_TYPE)
        || value.get("manifests").is_some()
    {
        return Err(not_wasm(
            "it is an image index (multi-platform image), not a single Wasm artifact".into(),
        ));
    }
    let manifest: OciImageManifest = serde_json::from_value(value)
        .map_err(|e| not_wasm(format!("the manifest does not parse: {e}")))?;
    let config = manifest.config.media_type.as_str();
    if config != CNCF_WASM_CONFIG_MEDIA_TYPE && config != LEGACY_WASM_CONFIG_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "config media type is {config:?}; accepted: {CNCF_WASM_CONFIG_MEDIA_TYPE:?} (CNCF Wasm) or {LEGACY_WASM_CONFIG_MEDIA_TYPE:?} (wasm-to-oci)"
        )));
    }
    if manifest.layers.len() != 1 {
        return Err(not_wasm(format!(
            "it has {} layers; a Wasm artifact has exactly one",
            manifest.layers.len()
        )));
    }
    let layer = &manifest.layers[0];
    let media = layer.media_type.as_str();
    if media != WASM_LAYER_MEDIA_TYPE && media != LEGACY_WASM_LAYER_MEDIA_TYPE {
        return Err(not_wasm(format!(
            "layer media type is {media:?}; accepted: {WASM_LAYER_MEDIA_TYPE:?} or {LEGACY_WASM_LAYER_MEDIA_TYPE:?}"
        )));
    }
    if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES {
        return Err(not_wasm(format!(
            "the layer is {} bytes; plugins are limited to {MAX_COMPONENT_BYTES} bytes",
            layer.size
        )));
    }
    Ok(manifest)
}

/// `sha256:<hex>` of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(config: &str, layers: &[&str]) -> Vec<u8> {
        let layers: Vec<_> = layers
            .iter()
            .map(|m| serde_json::json!({"mediaType": m, "digest": format!("sha256:{}", "a".repeat(64)), "size": 10}))
            .collect();
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "config": {"mediaType": config, "digest": format!("sha256:{}", "b".repeat(64)), "size": 2},
            "layers": layers,
        }))
        .unwrap()
    }

    #[test]
    fn accepts_both_wasm_layouts() {
        assert!(
            parse_manifest(
                "r",
                &manifest(CNCF_WASM_CONFIG_MEDIA_TYPE, &[WASM_LAYER_MEDIA_TYPE])
            )
            .is_ok()
        );
        assert!(
            parse_manifest(
                "r",
                &manifest(
                    LEGACY_WASM_CONFIG_MEDIA_TYPE,
                    &[LEGACY_WASM_LAYER_MEDIA_TYPE]
                )
            )
            .is_ok()
        );
    }

    #[test]
    fn refuses_other_layouts() {
        let tar = "application/vnd.oci.image.layer.v1.tar";
        let err = parse_manifest("r", &manifest(CNCF_WASM_CONFIG_MEDIA_TYPE, &[tar])).unwrap_err();
        assert!(err.to_string().contains("layer media type"), "{err}");
        let err = parse_manifest(
            "r",
            &manifest(
                "application/vnd.oci.image.config.v1+json",
                &[WASM_LAYER_MEDIA_TYPE],
            ),
        )
        .unwrap_err();
        assert!(err.to_string().contains("config media type"), "{err}");
        let err = parse_manifest(
            "r",
            &manifest(
                CNCF_WASM_CONFIG_MEDIA_TYPE,
                &[WASM_LAYER_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE],
            ),
        )
        .unwrap_err();
        assert!(err.to_string().contains("2 layers"), "{err}");
    }
}
