//! A signature as found in a registry, before any check: the leaf type
//! discovery produces and evaluation consumes.

use serde::Serialize;

/// Where a signature was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Format {
    /// A Sigstore bundle in a referrer artifact (cosign 3).
    Bundle,
    /// A layer of the `sha256-HEX.sig` tag (cosign 2).
    Tag,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::Bundle => "bundle",
            Format::Tag => "tag",
        })
    }
}

/// What was signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope {
    /// A simple-signing payload; the signature is over these bytes.
    SimpleSigning {
        /// The payload blob as stored.
        payload: Vec<u8>,
    },
    /// A DSSE envelope; the signature is over its pre-authentication
    /// encoding.
    Dsse {
        /// `application/vnd.in-toto+json`.
        payload_type: String,
        /// The statement, decoded from base64.
        payload: Vec<u8>,
    },
}

/// One signature the registry holds for a digest, not yet checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundSignature {
    /// Bundle or tag-based.
    pub format: Format,
    /// What it signs.
    pub envelope: Envelope,
    /// The raw signature (ASN.1 DER for ECDSA).
    pub signature: Vec<u8>,
    /// Certificates it carries, DER, the signing certificate first, then
    /// its chain; empty for key signatures.
    pub certificates: Vec<Vec<u8>>,
    /// Where it was found, for messages (`referrer sha256:…`,
    /// `tag sha256-….sig layer 0`).
    pub origin: String,
}
