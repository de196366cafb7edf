//! The oci-client plumbing shared by pull and push: reference parsing, the
//! client configuration (plain HTTP for loopback registries) and mapping
//! oci-client errors onto [`OciError`].

use std::time::Duration;

use oci_client::Reference;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};

use super::OciError;

/// Parses `reference`; a reference with neither tag nor digest means `:latest`.
pub(crate) fn parse_reference(reference: &str) -> Result<Reference, OciError> {
    let parsed: Reference =
        reference
            .parse()
            .map_err(|e: oci_client::ParseError| OciError::InvalidReference {
                reference: reference.to_string(),
                reason: e.to_string(),
            })?;
    // Without a registry host in the text, oci-client silently means Docker
    // Hub; a plugin reference must say where it comes from.
    let first = reference.split('/').next().unwrap_or_default();
    if !reference.contains('/')
        || !(first.contains('.') || first.contains(':') || first == "localhost")
    {
        return Err(OciError::InvalidReference {
            reference: reference.to_string(),
            reason: "it does not start with a registry host (e.g. registry.example.com/ or 127.0.0.1:5000/)".into(),
        });
    }
    Ok(parsed)
}

/// Checks that `digest` is `sha256:<64 lowercase hex>`.
pub(crate) fn check_digest(reference: &str, digest: &str) -> Result<(), OciError> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(OciError::InvalidDigest {
            reference: reference.to_string(),
            digest: digest.to_string(),
        })
    }
}

/// True for registries on this machine (`localhost`, `127.x.x.x`, `[::1]`).
pub(crate) fn is_loopback(registry: &str) -> bool {
    let host = match registry.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(rest),
        None => registry.split(':').next().unwrap_or(registry),
    };
    host == "localhost"
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// A client for `registry`. Registries are spoken to over HTTPS, except
/// loopback ones (a registry on the node or a test registry has no
/// certificate) and, when `insecure`, the given registry: those use plain
/// HTTP. Credentials never cross a non-loopback plain-HTTP link unless the
/// user asked for `insecure`.
pub(crate) fn client_for(registry: &str, insecure: bool) -> oci_client::Client {
    // oci-client's reqwest is built without a TLS provider of its own and
    // uses the process default, panicking when there is none: install ring,
    // the provider kube uses. An Err only means one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = if insecure || is_loopback(registry) {
        ClientProtocol::HttpsExcept(vec![registry.to_string()])
    } else {
        ClientProtocol::Https
    };
    oci_client::Client::new(ClientConfig {
        protocol,
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        ..Default::default()
    })
}

/// Maps an oci-client error for `reference` onto [`OciError`].
pub(crate) fn map_error(reference: &Reference, error: OciDistributionError) -> OciError {
    let name = reference.whole();
    let registry = reference.resolve_registry().to_string();
    match &error {
        OciDistributionError::RequestError(e) if is_connection_error(e) => OciError::Unreachable {
            reference: name,
            address: registry,
            message: chain(e),
        },
        OciDistributionError::ImageManifestNotFoundError(m) => OciError::NotFound {
            reference: name,
            message: m.clone(),
        },
        OciDistributionError::UnauthorizedError { url } => OciError::Unauthorized {
            reference: name,
            registry,
            message: format!("401 from {url}"),
        },
        OciDistributionError::AuthenticationFailure(m) => OciError::Unauthorized {
            reference: name,
            registry,
            message: m.clone(),
        },
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            let message = envelope
                .errors
                .iter()
                .map(|e| format!("{:?}: {}", e.code, e.message))
                .collect::<Vec<_>>()
                .join("; ");
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::ManifestUnknown
                        | OciErrorCode::NameUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                OciError::NotFound {
                    reference: name,
                    message,
                }
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                OciError::Unauthorized {
                    reference: name,
                    registry,
                    message,
                }
            } else {
                OciError::Registry {
                    reference: name,
                    message,
                }
            }
        }
        OciDistributionError::ServerError {
            code: 404, message, ..
        } => OciError::NotFound {
            reference: name,
            message: message.clone(),
        },
        OciDistributionError::ServerError {
            code: 401 | 403,
            message,
            ..
        } => OciError::Unauthorized {
            reference: name,
            registry,
            message: message.clone(),
        },
        _ => OciError::Registry {
            reference: name,
            message: chain(&error),
        },
    }
}

/// A connect-level failure (refused, timed out, no route, DNS) rather than
/// an HTTP answer: reqwest marks those `is_connect`/`is_timeout` without a
/// status.
fn is_connection_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(err) = current {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionRefused
                    | ConnectionReset
                    | ConnectionAborted
                    | TimedOut
                    | HostUnreachable
                    | NetworkUnreachable
                    | AddrNotAvailable
                    | NotConnected
            ) {
                return true;
            }
        }
        current = err.source();
    }
    // reqwest's own classification, through its Display ("error sending
    // request" + a connect source) when no io::Error is exposed.
    let text = chain(e);
    text.contains("tcp connect error")
        || text.contains("dns error")
        || text.contains("Connection refused")
}

/// `error: source: source…` in one line.
pub(crate) fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut current = e.source();
    while let Some(err) = current {
        let text = err.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        current = err.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_registries_are_recognised() {
        assert!(is_loopback("127.0.0.1:5000"));
        assert!(is_loopback("localhost:5000"));
        assert!(is_loopback("[::1]:5000"));
        assert!(!is_loopback("registry.example.com"));
        assert!(!is_loopback("10.0.0.1:5000"));
    }

    #[test]
    fn references_need_a_registry_host() {
        assert!(parse_reference("127.0.0.1:5000/webapp:1.0").is_ok());
        assert!(parse_reference("ghcr.io/acme/webapp@sha256:0000000000000000000000000000000000000000000000000000000000000000").is_ok());
        let err = parse_reference("webapp:1.0").unwrap_err();
        assert!(err.to_string().contains("registry host"), "{err}");
        assert!(parse_reference("127.0.0.1:5000/Bad Name").is_err());
    }

    #[test]
    fn digests_are_checked() {
        assert!(check_digest("r", &format!("sha256:{}", "a".repeat(64))).is_ok());
        assert!(check_digest("r", "sha256:abc").is_err());
        assert!(check_digest("r", &format!("md5:{}", "a".repeat(64))).is_err());
    }
}
