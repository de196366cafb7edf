//! Signing a pushed manifest the way cosign does without a transparency
//! log (`cosign sign --key cosign.key --tlog-upload=false`): a
//! simple-signing payload naming the digest, signed with the key, stored
//! as a layer of `REPO:sha256-HEX.sig` with the signature in its
//! `dev.cosignproject.cosign/signature` annotation. `cosign verify --key`
//! (2 and 3, with `--insecure-ignore-tlog`) accepts it.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use oci_client::Reference;
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE};
use oci_client::secrets::RegistryAuth;
use ring::signature::{self as sig, EcdsaKeyPair, KeyPair as _};
use serde::Deserialize;
use serde_json::{Value, json};

use super::crypto::PublicKey;
use super::error::SignatureError;
use super::{SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, SIMPLE_SIGNING_TYPE, pem};
use crate::oci::client::{check_digest, client_for, map_error, parse_reference};
use crate::oci::fetch::Repository;
use crate::oci::pull::sha256;
use crate::oci::{OciError, PushOptions};

/// The environment variable holding the key's password, as for cosign.
pub const PASSWORD_ENV: &str = "COSIGN_PASSWORD";
/// Largest key file read (64 KiB; a cosign key is under 1 KiB).
const MAX_KEY_FILE_BYTES: u64 = 64 << 10;
/// Most memory scrypt may use for a key file (128·r·N bytes, 256 MiB) and
/// its highest parallelism: a hostile key file cannot make the host
/// allocate without bound. cosign writes N=2^15, r=8, p=1 (32 MiB).
const MAX_SCRYPT_MEMORY: u64 = 256 << 20;
const MAX_SCRYPT_P: u32 = 16;

/// A private key from `cosign generate-key-pair` (ECDSA P-256 or P-384).
pub struct SigningKey {
    pair: EcdsaKeyPair,
    public: PublicKey,
}

impl std::fmt::Debug for SigningKey {
    // Never print the private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

#[derive(Deserialize)]
struct Encrypted {
    kdf: Kdf,
    cipher: Cipher,
    ciphertext: String,
}

#[derive(Deserialize)]
struct Kdf {
    name: String,
    params: ScryptParams,
    salt: String,
}

#[derive(Deserialize)]
struct ScryptParams {
    #[serde(rename = "N")]
    n: u64,
    r: u32,
    p: u32,
}

#[derive(Deserialize)]
struct Cipher {
    name: String,
    nonce: String,
}

impl SigningKey {
    /// Decrypts a cosign private key (`ENCRYPTED SIGSTORE PRIVATE KEY`, or
    /// the older `ENCRYPTED COSIGN PRIVATE KEY`: scrypt + NaCl secretbox
    /// around PKCS#8) with `password`.
    ///
    /// # Errors
    /// [`SignatureError::SigningKey`] when the PEM is not such a key, the
    /// password is wrong, or the key is not ECDSA P-256/P-384.
    pub fn from_cosign_pem(pem_text: &[u8], password: &[u8]) -> Result<SigningKey, SignatureError> {
        Self::decrypt(pem_text, password).map_err(|reason| SignatureError::SigningKey {
            origin: "(given as PEM)".into(),
            reason,
        })
    }

    /// Reads the cosign private key at `path`, its password from
    /// `COSIGN_PASSWORD` (empty when unset, as cosign's `--key` with a
    /// password-less key).
    ///
    /// # Errors
    /// [`SignatureError::SigningKey`] naming the file: unreadable, not a
    /// cosign key, wrong password, unsupported algorithm.
    pub fn from_file(path: &Path) -> Result<SigningKey, SignatureError> {
        use std::io::Read as _;
        let error = |reason: String| SignatureError::SigningKey {
            origin: path.display().to_string(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| error(e.to_string()))?;
        let mut text = Vec::new();
        file.take(MAX_KEY_FILE_BYTES)
            .read_to_end(&mut text)
            .map_err(|e| error(e.to_string()))?;
        let password = std::env::var(PASSWORD_ENV).unwrap_or_default();
        Self::decrypt(&text, password.as_bytes()).map_err(error)
    }

    fn decrypt(pem_text: &[u8], password: &[u8]) -> Result<SigningKey, String> {
        let blocks = pem::blocks(pem_text)?;
        let block = blocks
            .iter()
            .find(|b| {
                b.label == "ENCRYPTED SIGSTORE PRIVATE KEY"
                    || b.label == "ENCRYPTED COSIGN PRIVATE KEY"
            })
            .ok_or("no -----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY----- block")?;
        let encrypted: Encrypted = serde_json::from_slice(&block.der)
            .map_err(|e| format!("the encrypted key does not parse: {e}"))?;
        if encrypted.kdf.name != "scrypt" || encrypted.cipher.name != "nacl/secretbox" {
            return Err(format!(
                "unsupported encryption {} + {} (expected scrypt + nacl/secretbox)",
                encrypted.kdf.name, encrypted.cipher.name
            ));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let decode = |what: &str, text: &str| {
            b64.decode(text)
                .map_err(|e| format!("the key's {what} is not base64: {e}"))
        };
        let salt = decode("salt", &encrypted.kdf.salt)?;
        let nonce = decode("nonce", &encrypted.cipher.nonce)?;
        let ciphertext = decode("ciphertext", &encrypted.ciphertext)?;
        let ScryptParams { n, r, p } = encrypted.kdf.params;
        if !n.is_power_of_two()
            || n < 2
            || 128u64.saturating_mul(u64::from(r)).saturating_mul(n) > MAX_SCRYPT_MEMORY
            || p > MAX_SCRYPT_P
        {
            return Err(format!(
                "scrypt N={n} r={r} p={p} is beyond what a cosign key uses (N a power of two, 128·r·N up to {MAX_SCRYPT_MEMORY} bytes, p up to {MAX_SCRYPT_P})"
            ));
        }
        let params = scrypt::Params::new(n.trailing_zeros() as u8, r, p, 32)
            .map_err(|e| format!("invalid scrypt parameters: {e}"))?;
        let mut secret = [0u8; 32];
        scrypt::scrypt(password, &salt, &params, &mut secret)
            .map_err(|e| format!("scrypt failed: {e}"))?;
        use crypto_secretbox::aead::{Aead as _, KeyInit as _};
        if nonce.len() != 24 {
            return Err(format!("the nonce is {} bytes, not 24", nonce.len()));
        }
        let cipher = crypto_secretbox::XSalsa20Poly1305::new(&secret.into());
        let pkcs8 = cipher
            .decrypt(
                crypto_secretbox::Nonce::from_slice(&nonce),
                ciphertext.as_slice(),
            )
            .map_err(|_| format!("wrong password (set {PASSWORD_ENV})"))?;
        Self::from_pkcs8(&pkcs8)
    }

    fn from_pkcs8(pkcs8: &[u8]) -> Result<SigningKey, String> {
        let rng = ring::rand::SystemRandom::new();
        let (pair, curve) = [
            (&sig::ECDSA_P256_SHA256_ASN1_SIGNING, "1.2.840.10045.3.1.7"),
            (&sig::ECDSA_P384_SHA384_ASN1_SIGNING, "1.3.132.0.34"),
        ]
        .into_iter()
        .find_map(|(alg, curve)| EcdsaKeyPair::from_pkcs8(alg, pkcs8, &rng).ok().map(|p| (p, curve)))
        .ok_or("the key is not an ECDSA P-256 or P-384 PKCS#8 key (the algorithms `cosign generate-key-pair` writes)")?;
        let spki = ec_spki(curve, pair.public_key().as_ref());
        let public = PublicKey::from_spki(&spki)?;
        Ok(SigningKey { pair, public })
    }

    /// `sha256:<hex>` of the public key's DER: what verification reports
    /// as the signer.
    pub fn fingerprint(&self) -> String {
        self.public.fingerprint()
    }

    /// The public key, PEM (the content of cosign.pub).
    pub fn public_key_pem(&self) -> String {
        pem::encode("PUBLIC KEY", self.public.spki())
    }

    /// Signs `message` (ASN.1 DER ECDSA signature).
    fn sign_bytes(&self, message: &[u8]) -> Result<Vec<u8>, String> {
        let rng = ring::rand::SystemRandom::new();
        self.pair
            .sign(&rng, message)
            .map(|s| s.as_ref().to_vec())
            .map_err(|_| "signing failed".to_string())
    }
}

/// SubjectPublicKeyInfo DER of an uncompressed EC point on `curve_oid`.
fn ec_spki(curve_oid: &str, point: &[u8]) -> Vec<u8> {
    // id-ecPublicKey, then the curve.
    let ec_public_key: &[u8] = &[0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    let curve: &[u8] = if curve_oid == "1.3.132.0.34" {
        &[0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22]
    } else {
        &[0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07]
    };
    let algorithm = der(0x30, &[ec_public_key, curve].concat());
    let bits = der(0x03, &[&[0u8][..], point].concat());
    der(0x30, &[algorithm, bits].concat())
}

/// One DER TLV (lengths up to 65535).
fn der(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else if len < 0x100 {
        out.extend([0x81, len as u8]);
    } else {
        out.extend([0x82, (len >> 8) as u8, len as u8]);
    }
    out.extend_from_slice(content);
    out
}

/// What [`sign`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    /// The signed manifest digest.
    pub digest: String,
    /// `REGISTRY/REPO:sha256-HEX.sig`, where the signature is.
    pub signature_reference: String,
    /// `sha256:…` of the signature manifest written.
    pub signature_manifest: String,
    /// The key's fingerprint (what verification reports as the signer).
    pub fingerprint: String,
}

/// The cosign simple-signing payload for `digest` of `repository`
/// (`REGISTRY/REPO`), with `annotations` as its signed `optional` part.
fn simple_signing_payload(
    repository: &str,
    digest: &str,
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<u8>, String> {
    let optional = if annotations.is_empty() {
        Value::Null
    } else {
        json!(annotations)
    };
    serde_json::to_vec(&json!({
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": SIMPLE_SIGNING_TYPE,
        },
        "optional": optional,
    }))
    .map_err(|e| format!("cannot serialize the payload: {e}"))
}

/// Signs manifest `digest` of `reference`'s repository with `key` and
/// adds the signature to `REPO:sha256-HEX.sig` (keeping the signatures
/// already there), with `annotations` signed in the payload.
///
/// # Guarantees
/// The payload names exactly `digest`; the signature layer is the format
/// `cosign verify --key` reads (cosign 2 and 3). Existing signature
/// layers are kept.
///
/// # Errors
/// [`SignatureError::Registry`] when the registry refuses a read or a
/// write, or `digest` is not `sha256:<64 hex>`.
pub async fn sign(
    reference: &str,
    digest: &str,
    key: &SigningKey,
    annotations: &BTreeMap<String, String>,
    options: &PushOptions,
) -> Result<Signed, SignatureError> {
    let parsed = parse_reference(reference)?;
    check_digest(reference, digest)?;
    let registry_error = |message: String| OciError::Registry {
        reference: reference.to_string(),
        message,
    };
    let repository_name = format!("{}/{}", parsed.registry(), parsed.repository());
    let payload =
        simple_signing_payload(&repository_name, digest, annotations).map_err(registry_error)?;
    let signature = key.sign_bytes(&payload).map_err(registry_error)?;
    let auth = match &options.auth {
        Some(config) => config.auth_for(parsed.resolve_registry())?,
        None => RegistryAuth::Anonymous,
    };
    let client = client_for(parsed.resolve_registry(), options.insecure);
    let tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let mut layers = existing_layers(&client, &parsed, &auth, &tag).await?;
    let payload_digest = sha256(&payload);
    layers.push(json!({
        "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
        "size": payload.len(),
        "digest": payload_digest,
        "annotations": {SIGNATURE_ANNOTATION: base64::engine::general_purpose::STANDARD.encode(&signature)},
    }));
    let diff_ids: Vec<Value> = layers.iter().map(|l| l["digest"].clone()).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {},
    }))
    .map_err(|e| registry_error(format!("cannot serialize the config: {e}")))?;
    let config_digest = sha256(&config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": OCI_IMAGE_MEDIA_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": config.len(), "digest": config_digest},
        "layers": layers,
    }))
    .map_err(|e| registry_error(format!("cannot serialize the manifest: {e}")))?;
    client
        .store_auth_if_needed(parsed.resolve_registry(), &auth)
        .await;
    for (blob, blob_digest) in [(payload, payload_digest), (config, config_digest)] {
        let exists = client
            .blob_exists(&parsed, &blob_digest)
            .await
            .map_err(|e| map_error(&parsed, e))?;
        if !exists {
            client
                .push_blob(&parsed, blob, &blob_digest)
                .await
                .map_err(|e| map_error(&parsed, e))?;
        }
    }
    let target = Reference::with_tag(
        parsed.registry().to_string(),
        parsed.repository().to_string(),
        tag.clone(),
    );
    let manifest_digest = sha256(&manifest);
    client
        .push_manifest_raw(
            &target,
            manifest,
            http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(|e| map_error(&parsed, e))?;
    Ok(Signed {
        digest: digest.to_string(),
        signature_reference: format!("{repository_name}:{tag}"),
        signature_manifest: manifest_digest,
        fingerprint: key.fingerprint(),
    })
}

/// The layers already under the `.sig` tag (none when there is no tag).
async fn existing_layers(
    client: &oci_client::Client,
    parsed: &Reference,
    auth: &RegistryAuth,
    tag: &str,
) -> Result<Vec<Value>, OciError> {
    let repository = Repository::open(client, parsed, auth).await?;
    let raw = match repository
        .manifest(tag, &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE])
        .await
    {
        Ok(raw) => raw,
        Err(OciError::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let manifest: Value = serde_json::from_slice(&raw).map_err(|e| OciError::Registry {
        reference: parsed.whole(),
        message: format!(
            "the existing signature manifest {tag} does not parse ({e}); delete the tag or fix it before signing"
        ),
    })?;
    Ok(manifest["layers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|l| l["mediaType"] == SIMPLE_SIGNING_MEDIA_TYPE)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData as _;

    #[test]
    fn generated_spki_matches_ring_and_verifies() {
        let rng = ring::rand::SystemRandom::new();
        let alg = &sig::ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let key = SigningKey::from_pkcs8(pkcs8.as_ref()).unwrap();
        let rcgen_spki = rcgen::KeyPair::try_from(pkcs8.as_ref())
            .unwrap()
            .subject_public_key_info();
        assert_eq!(key.public.spki(), rcgen_spki.as_slice());
        let signature = key.sign_bytes(b"payload").unwrap();
        assert!(key.public.verify(b"payload", &signature).is_ok());
        assert!(
            key.public_key_pem()
                .starts_with("-----BEGIN PUBLIC KEY-----\n")
        );
    }

    #[test]
    fn the_payload_is_cosigns_simple_signing_format() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let payload = simple_signing_payload("r:1/p", &digest, &BTreeMap::new()).unwrap();
        assert_eq!(
            String::from_utf8(payload).unwrap(),
            format!(
                r#"{{"critical":{{"identity":{{"docker-reference":"r:1/p"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
            )
        );
    }

    #[test]
    fn a_key_that_is_not_a_cosign_key_is_refused() {
        let err = SigningKey::from_cosign_pem(
            b"-----BEGIN PUBLIC KEY-----\nAQID\n-----END PUBLIC KEY-----\n",
            b"",
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("ENCRYPTED SIGSTORE PRIVATE KEY"),
            "{err}"
        );
    }
}
