//! The cryptography of verification: public keys (SubjectPublicKeyInfo),
//! signatures (ring), certificate chains (rustls-webpki) and the identity
//! a Fulcio-style certificate carries (x509-parser).

use std::time::SystemTime;

use sha2::{Digest as _, Sha256};
use x509_parser::prelude::FromDer as _;

use super::pem;

const OID_EC_PUBLIC_KEY: &str = "1.2.840.10045.2.1";
const OID_P256: &str = "1.2.840.10045.3.1.7";
const OID_P384: &str = "1.3.132.0.34";
const OID_ED25519: &str = "1.3.101.112";
const OID_RSA: &str = "1.2.840.113549.1.1.1";
/// Fulcio's OIDC issuer extension (v2: a DER UTF8String).
const OID_FULCIO_ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
/// Fulcio's first OIDC issuer extension (the raw string).
const OID_FULCIO_ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";
/// id-kp-codeSigning (1.3.6.1.5.5.7.3.3), the DER content octets.
const EKU_CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// The algorithm family of a public key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
    Rsa,
}

/// A public key: its SubjectPublicKeyInfo DER and what ring needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PublicKey {
    spki: Vec<u8>,
    kind: KeyKind,
    /// The subjectPublicKey bits (EC point, Ed25519 key, RSAPublicKey DER).
    raw: Vec<u8>,
}

impl PublicKey {
    /// Parses SubjectPublicKeyInfo DER.
    pub(crate) fn from_spki(der: &[u8]) -> Result<PublicKey, String> {
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(der)
            .map_err(|e| format!("the public key does not parse: {e}"))?;
        let algorithm = spki.algorithm.algorithm.to_id_string();
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok())
            .map(|o| o.to_id_string());
        let kind = match (algorithm.as_str(), curve.as_deref()) {
            (OID_EC_PUBLIC_KEY, Some(OID_P256)) => KeyKind::EcdsaP256,
            (OID_EC_PUBLIC_KEY, Some(OID_P384)) => KeyKind::EcdsaP384,
            (OID_ED25519, _) => KeyKind::Ed25519,
            (OID_RSA, _) => KeyKind::Rsa,
            (other, curve) => {
                return Err(format!(
                    "unsupported key algorithm {other} (curve {curve:?}); supported: ECDSA P-256/P-384, Ed25519, RSA"
                ));
            }
        };
        Ok(PublicKey {
            spki: spki.raw.to_vec(),
            kind,
            raw: spki.subject_public_key.data.to_vec(),
        })
    }

    /// The SubjectPublicKeyInfo DER.
    pub(crate) fn spki(&self) -> &[u8] {
        &self.spki
    }

    /// `sha256:<hex>` of the SubjectPublicKeyInfo DER.
    pub(crate) fn fingerprint(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(&self.spki)))
    }

    /// Checks `signature` over `message` (hashed by the algorithm: SHA-256
    /// for P-256 and RSA, SHA-384 for P-384, as cosign signs).
    pub(crate) fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), String> {
        use ring::signature as sig;
        let algorithms: &[&dyn sig::VerificationAlgorithm] = match self.kind {
            KeyKind::EcdsaP256 => &[&sig::ECDSA_P256_SHA256_ASN1],
            KeyKind::EcdsaP384 => &[&sig::ECDSA_P384_SHA384_ASN1],
            KeyKind::Ed25519 => &[&sig::ED25519],
            KeyKind::Rsa => &[
                &sig::RSA_PKCS1_2048_8192_SHA256,
                &sig::RSA_PSS_2048_8192_SHA256,
            ],
        };
        let ok = algorithms.iter().any(|alg| {
            sig::UnparsedPublicKey::new(*alg, &self.raw)
                .verify(message, signature)
                .is_ok()
        });
        if ok {
            Ok(())
        } else {
            Err(format!(
                "the signature does not verify with key {}",
                self.fingerprint()
            ))
        }
    }
}

/// Parses the first `PUBLIC KEY` block of PEM text.
pub(crate) fn parse_public_key(text: &[u8]) -> Result<PublicKey, String> {
    let blocks = pem::blocks(text)?;
    let block = blocks
        .iter()
        .find(|b| b.label == "PUBLIC KEY")
        .ok_or_else(|| "no -----BEGIN PUBLIC KEY----- block".to_string())?;
    PublicKey::from_spki(&block.der)
}

/// What a signing certificate says about its holder.
#[derive(Debug, Clone)]
pub(crate) struct CertIdentity {
    pub(crate) key: PublicKey,
    /// The OIDC issuer (Fulcio extension), if any.
    pub(crate) issuer: Option<String>,
    /// Email and URI subject alternative names.
    pub(crate) subjects: Vec<String>,
    /// Whether its extended key usage allows code signing.
    pub(crate) code_signing: bool,
}

/// Reads the key and identity of certificate `der`.
pub(crate) fn cert_identity(der: &[u8]) -> Result<CertIdentity, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the signing certificate does not parse: {e}"))?;
    let key = PublicKey::from_spki(cert.public_key().raw)?;
    let mut issuer_v1 = None;
    let mut issuer_v2 = None;
    for ext in cert.extensions() {
        match ext.oid.to_id_string().as_str() {
            OID_FULCIO_ISSUER_V2 => issuer_v2 = der_utf8_string(ext.value),
            OID_FULCIO_ISSUER_V1 => issuer_v1 = String::from_utf8(ext.value.to_vec()).ok(),
            _ => {}
        }
    }
    let mut subjects = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                x509_parser::extensions::GeneralName::RFC822Name(s)
                | x509_parser::extensions::GeneralName::URI(s) => subjects.push(s.to_string()),
                _ => {}
            }
        }
    }
    let code_signing = matches!(cert.extended_key_usage(), Ok(Some(eku)) if eku.value.code_signing);
    Ok(CertIdentity {
        key,
        issuer: issuer_v2.or(issuer_v1),
        subjects,
        code_signing,
    })
}

/// The text of a DER UTF8String (tag 12), short or long length form.
fn der_utf8_string(value: &[u8]) -> Option<String> {
    let (&tag, rest) = value.split_first()?;
    if tag != 0x0c {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        (len, &rest[n..])
    };
    String::from_utf8(rest.get(..len)?.to_vec()).ok()
}

/// Checks that `leaf` chains to one of `roots` through `intermediates` and
/// is valid at `now`; no certificate of the path may exclude code signing
/// (the leaf's own code-signing usage is checked by the caller: webpki
/// would also demand it of intermediates without any usage).
pub(crate) fn verify_chain(
    leaf: &[u8],
    intermediates: &[Vec<u8>],
    roots: &[Vec<u8>],
    now: SystemTime,
) -> Result<(), String> {
    use rustls_pki_types::{CertificateDer, UnixTime};
    let root_ders: Vec<CertificateDer<'_>> = roots
        .iter()
        .map(|r| CertificateDer::from(r.as_slice()))
        .collect();
    let anchors: Vec<_> = root_ders
        .iter()
        .filter_map(|r| webpki::anchor_from_trusted_cert(r).ok())
        .collect();
    if anchors.is_empty() {
        return Err("no certificate of the trust root is usable as a trust anchor".into());
    }
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(c.as_slice()))
        .collect();
    let leaf = CertificateDer::from(leaf);
    let end_entity = webpki::EndEntityCert::try_from(&leaf)
        .map_err(|e| format!("the signing certificate does not parse: {e}"))?;
    let since_epoch = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            UnixTime::since_unix_epoch(since_epoch),
            webpki::KeyUsage::required_if_present(EKU_CODE_SIGNING),
            None,
            None,
        )
        .map(|_| ())
        .map_err(|e| {
            format!(
                "the signing certificate does not chain to the trust root for code signing now: {e}"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_strings_in_both_length_forms() {
        assert_eq!(
            der_utf8_string(&[0x0c, 2, b'h', b'i']).as_deref(),
            Some("hi")
        );
        let long: Vec<u8> = [0x0c, 0x81, 200].into_iter().chain([b'a'; 200]).collect();
        assert_eq!(der_utf8_string(&long).map(|s| s.len()), Some(200));
        assert_eq!(der_utf8_string(&[0x13, 1, b'x']), None);
        assert_eq!(der_utf8_string(&[0x0c, 5, b'x']), None);
    }

    #[test]
    fn ecdsa_p256_signatures_verify_and_fingerprints_hash_the_spki() {
        let rng = ring::rand::SystemRandom::new();
        let alg = &ring::signature::ECDSA_P256_SHA256_ASN1_SIGNING;
        let pkcs8 = ring::signature::EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = ring::signature::EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).unwrap();
        let key_pair = rcgen::KeyPair::try_from(pkcs8.as_ref()).unwrap();
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key_pair);
        let key = PublicKey::from_spki(&spki).unwrap();
        assert_eq!(key.kind, KeyKind::EcdsaP256);
        use ring::signature::KeyPair as _;
        assert_eq!(key.raw, pair.public_key().as_ref());
        let sig = pair.sign(&rng, b"payload").unwrap();
        assert!(key.verify(b"payload", sig.as_ref()).is_ok());
        assert!(key.verify(b"other", sig.as_ref()).is_err());
        assert_eq!(
            key.fingerprint(),
            format!("sha256:{}", hex::encode(Sha256::digest(&spki)))
        );
        let pem = pem::encode("PUBLIC KEY", &spki);
        assert_eq!(parse_public_key(pem.as_bytes()).unwrap(), key);
    }
}
