//! Reading what a registry sends, within a bound decided before the first
//! byte: a manifest never past [`MAX_MANIFEST_BYTES`], a blob never past its
//! descriptor's size (itself at most [`MAX_COMPONENT_BYTES`]) and hashed
//! while it arrives. The registry decides what it sends; the host decides
//! how much of it it holds — a registry that swaps a pinned blob for a
//! gigabyte of zeros costs the host one chunk past the descriptor's size,
//! not the gigabyte.
//!
//! oci-client still finds the credentials (its `/v2/` challenge and token
//! flow); the downloads are plain GETs made here, because oci-client reads
//! a manifest and every error body whole.

use std::time::Duration;

use oci_client::Reference;
use oci_client::RegistryOperation;
use oci_client::errors::OciDistributionError;
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use sha2::{Digest as _, Sha256};

use super::client::{is_loopback, map_error};
use super::{Excess, MAX_COMPONENT_BYTES, MAX_MANIFEST_BYTES, OciError};

/// How much of an error response's body is kept for the message.
const MAX_ERROR_BODY_BYTES: u64 = 16 << 10;

/// A connection to one repository of one registry, with the credentials
/// oci-client negotiated for pulling.
pub(crate) struct Repository {
    http: oci_http::Client,
    /// `SCHEME://REGISTRY/v2/REPOSITORY`.
    base: String,
    authorization: Authorization,
    /// The reference as given, for messages.
    reference: Reference,
}

enum Authorization {
    None,
    Bearer(String),
    Basic(String, String),
}

impl Repository {
    /// Negotiates pull credentials for `reference`'s repository with
    /// `client` (the registry's `/v2/` challenge, then its token endpoint).
    ///
    /// # Errors
    /// [`OciError::Unreachable`], [`OciError::Unauthorized`] or
    /// [`OciError::Registry`] when the registry cannot be reached or refuses
    /// the credentials.
    pub(crate) async fn open(
        client: &oci_client::Client,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<Repository, OciError> {
        let token = client
            .auth(reference, auth, RegistryOperation::Pull)
            .await
            .map_err(|e| map_error(reference, e))?;
        let authorization = match (token, auth) {
            (Some(token), _) => Authorization::Bearer(token),
            (None, RegistryAuth::Basic(user, password)) => {
                Authorization::Basic(user.clone(), password.clone())
            }
            (None, _) => Authorization::None,
        };
        let registry = reference.resolve_registry();
        // The same rule as `client_for` when pulling: plain HTTP only to a
        // registry on this machine.
        let scheme = if is_loopback(registry) {
            "http"
        } else {
            "https"
        };
        let http = oci_http::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(60))
            .build()
            .map_err(|e| map_error(reference, OciDistributionError::RequestError(e)))?;
        Ok(Repository {
            http,
            base: format!("{scheme}://{registry}/v2/{}", reference.repository()),
            authorization,
            reference: reference.clone(),
        })
    }

    /// The manifest `tag_or_digest` names, at most [`MAX_MANIFEST_BYTES`].
    ///
    /// # Errors
    /// [`OciError::ManifestTooLarge`] the moment the registry announces or
    /// sends more; the errors of a failed request otherwise.
    pub(crate) async fn manifest(
        &self,
        tag_or_digest: &str,
        accept: &[&str],
    ) -> Result<Vec<u8>, OciError> {
        let url = format!("{}/manifests/{tag_or_digest}", self.base);
        let response = self.get(&url, &accept.join(", ")).await?;
        let mut body = CappedBody::new(MAX_MANIFEST_BYTES);
        self.read(response, &mut body)
            .await?
            .map_err(|sent| OciError::ManifestTooLarge {
                reference: self.reference.whole(),
                limit: MAX_MANIFEST_BYTES,
                sent,
            })?;
        Ok(body.bytes)
    }

    /// The digest of the manifest `tag_or_digest` names: the registry's
    /// `Docker-Content-Digest` answer to a HEAD (no body), or, from a registry
    /// that sends none, the sha256 of the manifest fetched under
    /// [`Repository::manifest`]'s bound.
    ///
    /// # Errors
    /// As [`Repository::manifest`].
    pub(crate) async fn manifest_digest(
        &self,
        tag_or_digest: &str,
        accept: &[&str],
    ) -> Result<String, OciError> {
        let url = format!("{}/manifests/{tag_or_digest}", self.base);
        let request = self.authorize(self.http.head(&url).header("Accept", accept.join(", ")));
        let response = request.send().await.map_err(|e| self.request_error(e))?;
        let status = response.status();
        if !status.is_success() {
            // A HEAD answer has no body to explain itself: ask again with a
            // GET for the registry's message.
            self.manifest(tag_or_digest, accept).await?;
            return Err(OciError::Registry {
                reference: self.reference.whole(),
                message: format!("HTTP {status} from HEAD {url}"),
            });
        }
        let header = response
            .headers()
            .get("Docker-Content-Digest")
            .and_then(|v| v.to_str().ok())
            .filter(|d| d.starts_with("sha256:"))
            .map(str::to_string);
        match header {
            Some(digest) => Ok(digest),
            None => {
                let raw = self.manifest(tag_or_digest, accept).await?;
                Ok(format!("sha256:{}", hex::encode(Sha256::digest(&raw))))
            }
        }
    }

    /// The blob `layer` describes, at most `layer.size` bytes, with the
    /// `sha256:…` of what was received.
    ///
    /// # Errors
    /// [`OciError::BlobTooLarge`] the moment the registry announces or sends
    /// more than the descriptor's size; the errors of a failed request
    /// otherwise. A short or altered blob is returned as read: the caller
    /// compares the digest and the size.
    pub(crate) async fn blob(&self, layer: &OciDescriptor) -> Result<(Vec<u8>, String), OciError> {
        let size = u64::try_from(layer.size)
            .unwrap_or(0)
            .min(MAX_COMPONENT_BYTES);
        let url = format!("{}/blobs/{}", self.base, layer.digest);
        let response = self.get(&url, "*/*").await?;
        let mut body = CappedBody::new(size);
        self.read(response, &mut body)
            .await?
            .map_err(|sent| OciError::BlobTooLarge {
                reference: self.reference.whole(),
                digest: layer.digest.clone(),
                size,
                sent,
            })?;
        let digest = body.digest();
        Ok((body.bytes, digest))
    }

    /// Sends the GET; a non-success answer becomes an error with at most
    /// [`MAX_ERROR_BODY_BYTES`] of its body.
    async fn get(&self, url: &str, accept: &str) -> Result<oci_http::Response, OciError> {
        let request = self.authorize(self.http.get(url).header("Accept", accept));
        let response = request.send().await.map_err(|e| self.request_error(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let mut body = CappedBody::new(MAX_ERROR_BODY_BYTES);
        // An error body past the bound is cut, not an error of its own.
        let _ = self.read(response, &mut body).await?;
        let message = format!(
            "HTTP {status} from {url}: {}",
            String::from_utf8_lossy(&body.bytes).trim()
        );
        let name = self.reference.whole();
        Err(match status.as_u16() {
            404 => OciError::NotFound {
                reference: name,
                message,
            },
            401 | 403 => OciError::Unauthorized {
                reference: name,
                registry: self.reference.resolve_registry().to_string(),
                message,
            },
            _ => OciError::Registry {
                reference: name,
                message,
            },
        })
    }

    /// Reads `response` into `body`: `Ok(Err(excess))` when it announced or
    /// sent more than the bound (reading stops there).
    async fn read(
        &self,
        mut response: oci_http::Response,
        body: &mut CappedBody,
    ) -> Result<Result<(), Excess>, OciError> {
        if let Some(announced) = response.content_length()
            && announced > body.cap
        {
            return Ok(Err(Excess::Announced(announced)));
        }
        while let Some(chunk) = response.chunk().await.map_err(|e| self.request_error(e))? {
            if let Err(excess) = body.push(&chunk) {
                return Ok(Err(excess));
            }
        }
        Ok(Ok(()))
    }

    fn authorize(&self, request: oci_http::RequestBuilder) -> oci_http::RequestBuilder {
        match &self.authorization {
            Authorization::None => request,
            Authorization::Bearer(token) => request.bearer_auth(token),
            Authorization::Basic(user, password) => request.basic_auth(user, Some(password)),
        }
    }

    fn request_error(&self, error: oci_http::Error) -> OciError {
        map_error(&self.reference, OciDistributionError::RequestError(error))
    }
}

/// The bytes received so far, never more than `cap`, hashed as they come.
#[derive(Debug)]
struct CappedBody {
    cap: u64,
    bytes: Vec<u8>,
    hasher: Sha256,
}

impl CappedBody {
    fn new(cap: u64) -> CappedBody {
        // The capacity follows what arrives: a descriptor's size is the
        // registry's word too, so it is not reserved up front.
        CappedBody {
            cap,
            bytes: Vec::new(),
            hasher: Sha256::new(),
        }
    }

    /// Appends `chunk`, or refuses it whole when it would pass the cap.
    fn push(&mut self, chunk: &[u8]) -> Result<(), Excess> {
        let total = self.bytes.len() as u64 + chunk.len() as u64;
        if total > self.cap {
            return Err(Excess::MoreThan(self.cap));
        }
        self.hasher.update(chunk);
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// `sha256:<hex>` of everything pushed.
    fn digest(&self) -> String {
        format!("sha256:{}", hex::encode(self.hasher.clone().finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_held_up_to_its_cap_and_refused_past_it() {
        let mut body = CappedBody::new(10);
        assert!(body.push(b"01234").is_ok());
        assert!(body.push(b"56789").is_ok());
        assert_eq!(body.push(b"x"), Err(Excess::MoreThan(10)));
        assert_eq!(body.bytes, b"0123456789", "the refused chunk is not kept");
        let expected = format!("sha256:{}", hex::encode(Sha256::digest(b"0123456789")));
        assert_eq!(body.digest(), expected);
    }

    #[test]
    fn one_chunk_past_the_cap_is_refused_whole() {
        let mut body = CappedBody::new(4);
        assert_eq!(body.push(&[0; 1 << 16]), Err(Excess::MoreThan(4)));
        assert!(body.bytes.is_empty());
    }
}
