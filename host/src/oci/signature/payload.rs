//! What a signature signs: cosign's simple-signing payload (tag-based
//! format) and the DSSE envelope of a Sigstore bundle with its in-toto
//! statement; both must name the manifest digest being verified.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::Deserialize;

use super::found::{Envelope, Format, FoundSignature};
use super::{
    BUNDLE_MEDIA_TYPE, BUNDLE_MEDIA_TYPE_PREFIX, COSIGN_SIGN_PREDICATE_TYPE, SIMPLE_SIGNING_TYPE,
    pem,
};

/// The DSSE payload type of an in-toto statement.
pub(crate) const IN_TOTO_PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// What a signature covers once its payload was checked against the digest.
#[derive(Debug, Clone)]
pub(crate) struct Claims {
    /// The exact bytes the signature is over.
    pub(crate) signed: Vec<u8>,
    /// The signed annotations (simple signing's `optional`, the in-toto
    /// subject's `annotations`).
    pub(crate) annotations: BTreeMap<String, String>,
}

/// Checks that `envelope` is a signature of manifest `digest` and returns
/// the bytes to verify and the annotations it signs.
pub(crate) fn claims(envelope: &Envelope, digest: &str) -> Result<Claims, String> {
    match envelope {
        Envelope::SimpleSigning { payload } => simple_signing(payload, digest),
        Envelope::Dsse {
            payload_type,
            payload,
        } => dsse(payload_type, payload, digest),
    }
}

#[derive(Deserialize)]
struct SimpleSigning {
    critical: Critical,
    #[serde(default)]
    optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Deserialize)]
struct Critical {
    #[serde(rename = "type")]
    kind: String,
    image: Image,
}

#[derive(Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

fn simple_signing(payload: &[u8], digest: &str) -> Result<Claims, String> {
    let parsed: SimpleSigning = serde_json::from_slice(payload)
        .map_err(|e| format!("the simple-signing payload does not parse: {e}"))?;
    if parsed.critical.kind != SIMPLE_SIGNING_TYPE {
        return Err(format!(
            "the payload's critical.type is {:?}, not {SIMPLE_SIGNING_TYPE:?}",
            parsed.critical.kind
        ));
    }
    if parsed.critical.image.docker_manifest_digest != digest {
        return Err(format!(
            "it signs {}, not {digest}",
            parsed.critical.image.docker_manifest_digest
        ));
    }
    Ok(Claims {
        signed: payload.to_vec(),
        annotations: strings(parsed.optional.unwrap_or_default()),
    })
}

#[derive(Deserialize)]
struct Statement {
    #[serde(rename = "predicateType")]
    predicate_type: String,
    #[serde(default)]
    subject: Vec<Subject>,
}

#[derive(Deserialize)]
struct Subject {
    #[serde(default)]
    digest: BTreeMap<String, String>,
    #[serde(default)]
    annotations: Option<BTreeMap<String, serde_json::Value>>,
}

fn dsse(payload_type: &str, payload: &[u8], digest: &str) -> Result<Claims, String> {
    if payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(format!(
            "the DSSE payload type is {payload_type:?}, not {IN_TOTO_PAYLOAD_TYPE:?}"
        ));
    }
    let statement: Statement = serde_json::from_slice(payload)
        .map_err(|e| format!("the in-toto statement does not parse: {e}"))?;
    if statement.predicate_type != COSIGN_SIGN_PREDICATE_TYPE {
        return Err(format!(
            "it is an attestation of type {:?}, not a signature ({COSIGN_SIGN_PREDICATE_TYPE})",
            statement.predicate_type
        ));
    }
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    let subject = statement
        .subject
        .into_iter()
        .find(|s| s.digest.get("sha256").is_some_and(|d| d == hex))
        .ok_or_else(|| format!("no subject of its in-toto statement is {digest}"))?;
    Ok(Claims {
        signed: pae(payload_type, payload),
        annotations: strings(subject.annotations.unwrap_or_default()),
    })
}

/// DSSE's pre-authentication encoding, what a DSSE signature is over.
pub(crate) fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {} {} ",
        payload_type.len(),
        payload_type,
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

fn strings(map: BTreeMap<String, serde_json::Value>) -> BTreeMap<String, String> {
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .collect()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bundle {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    verification_material: Option<Material>,
    #[serde(default)]
    dsse_envelope: Option<Dsse>,
    #[serde(default)]
    message_signature: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Material {
    #[serde(default)]
    certificate: Option<RawBytes>,
    #[serde(default)]
    x509_certificate_chain: Option<Chain>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawBytes {
    raw_bytes: String,
}

#[derive(Deserialize)]
struct Chain {
    #[serde(default)]
    certificates: Vec<RawBytes>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Dsse {
    payload: String,
    payload_type: String,
    #[serde(default)]
    signatures: Vec<DsseSignature>,
}

#[derive(Deserialize)]
struct DsseSignature {
    sig: String,
}

/// The signatures of a Sigstore bundle (JSON): one per DSSE signature,
/// with the bundle's certificates (leaf first). Transparency-log entries
/// and timestamps are not read (offline verification).
pub(crate) fn parse_bundle(bytes: &[u8], origin: &str) -> Result<Vec<FoundSignature>, String> {
    let bundle: Bundle = serde_json::from_slice(bytes)
        .map_err(|e| format!("the Sigstore bundle does not parse: {e}"))?;
    if let Some(media_type) = &bundle.media_type
        && media_type != BUNDLE_MEDIA_TYPE
        && !media_type.starts_with(BUNDLE_MEDIA_TYPE_PREFIX)
    {
        return Err(format!("the bundle's mediaType is {media_type:?}"));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut certificates = Vec::new();
    if let Some(material) = &bundle.verification_material {
        let raw: Vec<&RawBytes> = match (&material.certificate, &material.x509_certificate_chain) {
            (Some(c), _) => vec![c],
            (None, Some(chain)) => chain.certificates.iter().collect(),
            (None, None) => Vec::new(),
        };
        for cert in raw {
            certificates.push(
                b64.decode(&cert.raw_bytes)
                    .map_err(|e| format!("a bundle certificate is not base64: {e}"))?,
            );
        }
    }
    let Some(dsse) = bundle.dsse_envelope else {
        return Err(if bundle.message_signature.is_some() {
            "the bundle holds a messageSignature; cosign signs images with a DSSE envelope, and a message signature of an image cannot be checked against its digest here".into()
        } else {
            "the bundle has neither dsseEnvelope nor messageSignature".into()
        });
    };
    let payload = b64
        .decode(&dsse.payload)
        .map_err(|e| format!("the DSSE payload is not base64: {e}"))?;
    if dsse.signatures.is_empty() {
        return Err("the DSSE envelope has no signature".into());
    }
    dsse.signatures
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let signature = b64
                .decode(&s.sig)
                .map_err(|e| format!("DSSE signature {i} is not base64: {e}"))?;
            Ok(FoundSignature {
                format: Format::Bundle,
                envelope: Envelope::Dsse {
                    payload_type: dsse.payload_type.clone(),
                    payload: payload.clone(),
                },
                signature,
                certificates: certificates.clone(),
                origin: if dsse.signatures.len() > 1 {
                    format!("{origin} signature {i}")
                } else {
                    origin.to_string()
                },
            })
        })
        .collect()
}

/// The signature of one layer of a tag-based `.sig` manifest, from its
/// payload blob and its descriptor's annotations.
pub(crate) fn from_tag_layer(
    payload: Vec<u8>,
    annotations: &BTreeMap<String, String>,
    origin: &str,
) -> Result<FoundSignature, String> {
    let signature = annotations
        .get(super::SIGNATURE_ANNOTATION)
        .ok_or_else(|| {
            format!(
                "the layer has no {} annotation",
                super::SIGNATURE_ANNOTATION
            )
        })?;
    let signature = base64::engine::general_purpose::STANDARD
        .decode(signature.trim())
        .map_err(|e| format!("the signature annotation is not base64: {e}"))?;
    let mut certificates = Vec::new();
    for key in [super::CERTIFICATE_ANNOTATION, super::CHAIN_ANNOTATION] {
        if let Some(text) = annotations.get(key) {
            certificates.extend(
                pem::certificates(text.as_bytes()).map_err(|e| format!("annotation {key}: {e}"))?,
            );
        }
    }
    Ok(FoundSignature {
        format: Format::Tag,
        envelope: Envelope::SimpleSigning { payload },
        signature,
        certificates,
        origin: origin.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(pae("t", b"ab"), b"DSSEv1 1 t 2 ab");
    }

    #[test]
    fn a_simple_signing_payload_must_name_the_digest() {
        let payload = format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"r/p"}},"image":{{"docker-manifest-digest":"{DIGEST}"}},"type":"cosign container image signature"}},"optional":{{"team":"a","n":1}}}}"#
        );
        let envelope = Envelope::SimpleSigning {
            payload: payload.clone().into_bytes(),
        };
        let claims = claims(&envelope, DIGEST).unwrap();
        assert_eq!(claims.signed, payload.as_bytes());
        assert_eq!(claims.annotations["team"], "a");
        assert_eq!(claims.annotations["n"], "1");
        let other = format!("sha256:{}", "b".repeat(64));
        let err = super::claims(&envelope, &other).unwrap_err();
        assert!(err.contains("not sha256:bbb"), "{err}");
    }

    #[test]
    fn a_dsse_statement_must_be_a_cosign_signature_of_the_digest() {
        let hex = DIGEST.strip_prefix("sha256:").unwrap();
        let statement = |predicate: &str, hex: &str| {
            Envelope::Dsse {
            payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
            payload: format!(
                r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"digest":{{"sha256":"{hex}"}},"annotations":{{"k":"v"}}}}],"predicateType":"{predicate}","predicate":{{}}}}"#
            )
            .into_bytes(),
        }
        };
        let ok = claims(&statement(COSIGN_SIGN_PREDICATE_TYPE, hex), DIGEST).unwrap();
        assert!(
            ok.signed
                .starts_with(b"DSSEv1 28 application/vnd.in-toto+json ")
        );
        assert_eq!(ok.annotations["k"], "v");
        let err = claims(&statement("https://slsa.dev/provenance/v1", hex), DIGEST).unwrap_err();
        assert!(err.contains("attestation"), "{err}");
        let err = claims(
            &statement(COSIGN_SIGN_PREDICATE_TYPE, &"c".repeat(64)),
            DIGEST,
        )
        .unwrap_err();
        assert!(err.contains("no subject"), "{err}");
    }
}
