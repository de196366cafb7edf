//! Finding the signatures a registry holds for a manifest digest: bundle
//! referrers (the referrers API, or the referrers tag schema when the
//! registry has no such API) and the tag-based `sha256-HEX.sig` manifest.
//! Every read is bounded; nothing is verified here.

use std::collections::BTreeMap;
use std::time::Duration;

use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor,
};
use oci_client::secrets::RegistryAuth;
use oci_client::{Reference, RegistryOperation};
use serde::Deserialize;

use super::found::FoundSignature;
use super::payload;
use super::{
    BUNDLE_MEDIA_TYPE, BUNDLE_MEDIA_TYPE_PREFIX, MAX_SIGNATURE_BLOB_BYTES, MAX_SIGNATURES,
    SIMPLE_SIGNING_MEDIA_TYPE,
};
use crate::oci::client::{check_digest, client_for, is_loopback, map_error, parse_reference};
use crate::oci::fetch::Repository;
use crate::oci::pull::sha256;
use crate::oci::{DockerConfig, Excess, MAX_MANIFEST_BYTES, OciError};

/// What a registry holds for a digest.
#[derive(Debug, Clone, Default)]
pub struct Discovered {
    /// The signatures found (at most [`MAX_SIGNATURES`](super::MAX_SIGNATURES)).
    pub signatures: Vec<FoundSignature>,
    /// Things found but unusable (an unparsable bundle, a blob whose
    /// digest does not match, signatures past the limit), for messages.
    pub notes: Vec<String>,
}

/// An index or manifest descriptor, with the OCI 1.1 fields oci-client's
/// types lack (`artifactType`).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    #[serde(default)]
    media_type: String,
    digest: String,
    size: i64,
    #[serde(default)]
    artifact_type: Option<String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    subject: Option<Descriptor>,
}

/// The OCI empty descriptor's media type (the config of artifacts).
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

fn is_bundle_type(media_type: &str) -> bool {
    media_type == BUNDLE_MEDIA_TYPE || media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX)
}

/// Finds the signatures of manifest `digest` in `reference`'s repository:
/// (a) bundles listed by `GET /v2/REPO/referrers/DIGEST`, or, when the
/// registry answers 404 there, by the referrers tag schema
/// (`REPO:sha256-HEX`); (b) the layers of `REPO:sha256-HEX.sig`.
///
/// # Guarantees
/// Indexes and manifests are read under
/// [`MAX_MANIFEST_BYTES`](crate::oci::MAX_MANIFEST_BYTES), blobs under
/// [`MAX_SIGNATURE_BLOB_BYTES`](super::MAX_SIGNATURE_BLOB_BYTES) and checked
/// against their descriptor's digest; at most
/// [`MAX_SIGNATURES`](super::MAX_SIGNATURES) signatures are returned.
/// Nothing is verified: that is [`evaluate`](super::evaluate)'s work.
///
/// # Errors
/// [`OciError::InvalidReference`] / [`OciError::InvalidDigest`] for a bad
/// reference or digest; [`OciError::Unreachable`],
/// [`OciError::Unauthorized`] or [`OciError::Registry`] when the registry
/// cannot be read. A missing signature is not an error (empty result).
pub async fn discover(
    reference: &str,
    digest: &str,
    pull_secret: Option<&DockerConfig>,
) -> Result<Discovered, OciError> {
    let parsed = parse_reference(reference)?;
    check_digest(reference, digest)?;
    let auth = match pull_secret {
        Some(config) => config.auth_for(parsed.resolve_registry())?,
        None => RegistryAuth::Anonymous,
    };
    let client = client_for(parsed.resolve_registry(), false);
    let repository = Repository::open(&client, &parsed, &auth).await?;
    let mut found = Discovered::default();
    let hex = digest.trim_start_matches("sha256:");

    let index = match referrers(&client, &parsed, &auth, digest).await? {
        Some(index) => Some(index),
        None => tag_schema_index(&repository, hex).await?,
    };
    for descriptor in index.map(|i| i.manifests).unwrap_or_default() {
        // Some registries report the config's media type as the artifact
        // type (go-containerregistry's), or none: those are opened too and
        // judged by their layers. Declared other types (SBOMs,
        // attestations) are skipped unread.
        let artifact = descriptor.artifact_type.as_deref().unwrap_or_default();
        if is_bundle_type(artifact) || artifact.is_empty() || artifact == EMPTY_MEDIA_TYPE {
            bundle_referrer(&repository, reference, digest, &descriptor, &mut found).await?;
        }
    }
    tag_signatures(&repository, hex, &mut found).await?;
    Ok(found)
}

/// The referrers API's index, or `None` when the registry has no
/// referrers API (404, or 400/405 from registries that reject the path).
async fn referrers(
    client: &oci_client::Client,
    reference: &Reference,
    auth: &RegistryAuth,
    digest: &str,
) -> Result<Option<Index>, OciError> {
    let token = client
        .auth(reference, auth, RegistryOperation::Pull)
        .await
        .map_err(|e| map_error(reference, e))?;
    let registry = reference.resolve_registry();
    let scheme = if is_loopback(registry) {
        "http"
    } else {
        "https"
    };
    let url = format!(
        "{scheme}://{registry}/v2/{}/referrers/{digest}",
        reference.repository()
    );
    let http = oci_http::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| {
            map_error(
                reference,
                oci_client::errors::OciDistributionError::RequestError(e),
            )
        })?;
    let mut request = http.get(&url).header("Accept", OCI_IMAGE_INDEX_MEDIA_TYPE);
    request = match (token, auth) {
        (Some(token), _) => request.bearer_auth(token),
        (None, RegistryAuth::Basic(user, password)) => request.basic_auth(user, Some(password)),
        (None, _) => request,
    };
    let request_error = |e| {
        map_error(
            reference,
            oci_client::errors::OciDistributionError::RequestError(e),
        )
    };
    let response = request.send().await.map_err(request_error)?;
    let status = response.status().as_u16();
    if matches!(status, 404 | 400 | 405) {
        return Ok(None);
    }
    let body = read_capped(response, MAX_MANIFEST_BYTES)
        .await
        .map_err(request_error)?
        .map_err(|sent| OciError::ManifestTooLarge {
            reference: reference.whole(),
            limit: MAX_MANIFEST_BYTES,
            sent,
        })?;
    if !(200..300).contains(&status) {
        let message = format!(
            "HTTP {status} from {url}: {}",
            String::from_utf8_lossy(&body[..body.len().min(2048)]).trim()
        );
        return Err(match status {
            401 | 403 => OciError::Unauthorized {
                reference: reference.whole(),
                registry: registry.to_string(),
                message,
            },
            _ => OciError::Registry {
                reference: reference.whole(),
                message,
            },
        });
    }
    serde_json::from_slice(&body)
        .map(Some)
        .map_err(|e| OciError::Registry {
            reference: reference.whole(),
            message: format!("the referrers index from {url} does not parse: {e}"),
        })
}

/// Reads at most `cap` bytes: `Ok(Err(excess))` past it.
async fn read_capped(
    mut response: oci_http::Response,
    cap: u64,
) -> Result<Result<Vec<u8>, Excess>, oci_http::Error> {
    if let Some(announced) = response.content_length()
        && announced > cap
    {
        return Ok(Err(Excess::Announced(announced)));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() as u64 + chunk.len() as u64 > cap {
            return Ok(Err(Excess::MoreThan(cap)));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Ok(body))
}

/// The referrers tag schema's index (`REPO:sha256-HEX`), if any.
async fn tag_schema_index(repository: &Repository, hex: &str) -> Result<Option<Index>, OciError> {
    let raw = match repository
        .manifest(&format!("sha256-{hex}"), &[OCI_IMAGE_INDEX_MEDIA_TYPE])
        .await
    {
        Ok(raw) => raw,
        Err(OciError::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    // A tag of that name that is not an index (e.g. an unrelated image)
    // lists no referrers.
    Ok(serde_json::from_slice::<Index>(&raw).ok())
}

/// The manifest `digest` names, checked to hash to it.
async fn manifest_by_digest(
    repository: &Repository,
    digest: &str,
) -> Result<Result<Manifest, String>, OciError> {
    let raw = match repository
        .manifest(digest, &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE])
        .await
    {
        Ok(raw) => raw,
        Err(OciError::NotFound { message, .. }) => return Ok(Err(format!("not found: {message}"))),
        Err(e) => return Err(e),
    };
    if sha256(&raw) != digest {
        return Ok(Err(format!(
            "the registry served a manifest hashing to {}",
            sha256(&raw)
        )));
    }
    Ok(serde_json::from_slice(&raw).map_err(|e| format!("the manifest does not parse: {e}")))
}

/// A blob under [`MAX_SIGNATURE_BLOB_BYTES`], checked against its
/// descriptor.
async fn small_blob(
    repository: &Repository,
    descriptor: &Descriptor,
) -> Result<Result<Vec<u8>, String>, OciError> {
    if descriptor.size < 0 || descriptor.size as u64 > MAX_SIGNATURE_BLOB_BYTES {
        return Ok(Err(format!(
            "blob {} is {} bytes; signature blobs are limited to {MAX_SIGNATURE_BLOB_BYTES}",
            descriptor.digest, descriptor.size
        )));
    }
    let oci = OciDescriptor {
        media_type: descriptor.media_type.clone(),
        digest: descriptor.digest.clone(),
        size: descriptor.size,
        ..Default::default()
    };
    let (bytes, got) = match repository.blob(&oci).await {
        Ok(read) => read,
        Err(OciError::BlobTooLarge { sent, .. }) => {
            return Ok(Err(format!(
                "blob {} is larger than announced ({sent})",
                descriptor.digest
            )));
        }
        Err(OciError::NotFound { message, .. }) => {
            return Ok(Err(format!(
                "blob {} not found: {message}",
                descriptor.digest
            )));
        }
        Err(e) => return Err(e),
    };
    if got != descriptor.digest || bytes.len() as i64 != descriptor.size {
        return Ok(Err(format!(
            "blob {} hashes to {got} ({} bytes)",
            descriptor.digest,
            bytes.len()
        )));
    }
    Ok(Ok(bytes))
}

/// Reads one bundle referrer into `found`.
async fn bundle_referrer(
    repository: &Repository,
    reference: &str,
    digest: &str,
    descriptor: &Descriptor,
    found: &mut Discovered,
) -> Result<(), OciError> {
    let origin = format!("referrer {}", descriptor.digest);
    if found.signatures.len() >= MAX_SIGNATURES {
        found.notes.push(format!(
            "{origin}: ignored, more than {MAX_SIGNATURES} signatures"
        ));
        return Ok(());
    }
    if check_digest(reference, &descriptor.digest).is_err() {
        found.notes.push(format!("{origin}: not a sha256 digest"));
        return Ok(());
    }
    let manifest = match manifest_by_digest(repository, &descriptor.digest).await? {
        Ok(m) => m,
        Err(reason) => {
            found.notes.push(format!("{origin}: {reason}"));
            return Ok(());
        }
    };
    if manifest.subject.as_ref().map(|s| s.digest.as_str()) != Some(digest) {
        found
            .notes
            .push(format!("{origin}: its subject is not {digest}"));
        return Ok(());
    }
    for layer in manifest
        .layers
        .iter()
        .filter(|l| is_bundle_type(&l.media_type))
    {
        let bytes = match small_blob(repository, layer).await? {
            Ok(b) => b,
            Err(reason) => {
                found.notes.push(format!("{origin}: {reason}"));
                continue;
            }
        };
        match payload::parse_bundle(&bytes, &origin) {
            Ok(signatures) => {
                let room = MAX_SIGNATURES.saturating_sub(found.signatures.len());
                found.signatures.extend(signatures.into_iter().take(room));
            }
            Err(reason) => found.notes.push(format!("{origin}: {reason}")),
        }
    }
    Ok(())
}

/// Reads the layers of `REPO:sha256-HEX.sig` into `found`.
async fn tag_signatures(
    repository: &Repository,
    hex: &str,
    found: &mut Discovered,
) -> Result<(), OciError> {
    let tag = format!("sha256-{hex}.sig");
    let raw = match repository
        .manifest(&tag, &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE])
        .await
    {
        Ok(raw) => raw,
        Err(OciError::NotFound { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    let manifest: Manifest = match serde_json::from_slice(&raw) {
        Ok(m) => m,
        Err(e) => {
            found
                .notes
                .push(format!("tag {tag}: the manifest does not parse: {e}"));
            return Ok(());
        }
    };
    for (i, layer) in manifest.layers.iter().enumerate() {
        let origin = format!("tag {tag} layer {i}");
        if layer.media_type != SIMPLE_SIGNING_MEDIA_TYPE {
            continue;
        }
        if found.signatures.len() >= MAX_SIGNATURES {
            found.notes.push(format!(
                "{origin}: ignored, more than {MAX_SIGNATURES} signatures"
            ));
            continue;
        }
        let payload = match small_blob(repository, layer).await? {
            Ok(b) => b,
            Err(reason) => {
                found.notes.push(format!("{origin}: {reason}"));
                continue;
            }
        };
        let annotations = layer.annotations.clone().unwrap_or_default();
        match payload::from_tag_layer(payload, &annotations, &origin) {
            Ok(signature) => found.signatures.push(signature),
            Err(reason) => found.notes.push(format!("{origin}: {reason}")),
        }
    }
    Ok(())
}
