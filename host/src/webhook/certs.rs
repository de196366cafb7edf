//! The webhook's serving certificate and the CA that signs it: generated on
//! first start and kept in a Secret (so restarts and replicas serve the same
//! bundle), or read from files (`--webhook-cert-dir`, laid out like
//! controller-runtime's: `tls.crt`, `tls.key`, and `ca.crt` when the CA is
//! not the certificate itself).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::contract::HostObject;
use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};

/// Keys of the Secret and of the certificate directory.
pub const CA_KEY: &str = "ca.crt";
/// The serving certificate (PEM).
pub const CERT_KEY: &str = "tls.crt";
/// The serving certificate's private key (PEM, PKCS#8).
pub const KEY_KEY: &str = "tls.key";

/// A serving certificate, its key, and the CA bundle clients trust.
#[derive(Clone, PartialEq, Eq)]
pub struct Certificates {
    /// PEM of the CA (what goes into a CRD's `caBundle`, base64-encoded).
    pub ca_pem: String,
    /// PEM of the serving certificate (chain).
    pub cert_pem: String,
    /// PEM of the serving certificate's private key.
    pub key_pem: String,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Certificates")
            .field("ca_pem", &self.ca_pem)
            .finish_non_exhaustive()
    }
}

/// Why the webhook's certificates could not be made, read or kept.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// Generating a key or certificate failed.
    #[error("cannot generate the webhook's certificate: {0}")]
    Generate(String),
    /// A file of `--webhook-cert-dir` cannot be read.
    #[error("cannot read {}: {source}; --webhook-cert-dir must hold tls.crt and tls.key (and ca.crt)", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The certificate or key is not usable PEM.
    #[error("the webhook certificate from {origin} is unusable: {problem}")]
    Invalid {
        /// Where it came from (a directory, or `Secret ns/name`).
        origin: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A Secret at the certificate's name that the host did not create
    /// (no host label): planted, never served nor written into CRDs.
    #[error("{message}; the conversion webhook does not start")]
    NotTheHosts {
        /// The squatter, what it means and what to do.
        message: String,
    },
    /// The Secret could not be read or created.
    #[error(
        "cannot keep the webhook certificate in Secret {namespace}/{name}: {source}; the host needs get and create on secrets there"
    )]
    Secret {
        /// The Secret's namespace.
        namespace: String,
        /// The Secret's name.
        name: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
}

impl Certificates {
    /// A fresh CA and a serving certificate it signs, valid for `hosts`
    /// (DNS names or IP addresses; loopback names are always added).
    ///
    /// # Errors
    ///
    /// [`CertError::Generate`] when a host is not a valid name or key
    /// generation fails.
    pub fn generate(hosts: &[String]) -> Result<Certificates, CertError> {
        let failed = |e: rcgen::Error| CertError::Generate(e.to_string());
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(failed)?;
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wasm-operator webhook CA");
        ca_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = rcgen::KeyPair::generate().map_err(failed)?;
        let ca_cert = ca_params.self_signed(&ca_key).map_err(failed)?;
        let issuer = rcgen::Issuer::new(ca_params, ca_key);

        let mut names: Vec<String> = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(ToString::to_string)
            .collect();
        for host in hosts {
            if !names.contains(host) {
                names.push(host.clone());
            }
        }
        let mut params = rcgen::CertificateParams::new(names).map_err(failed)?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wasm-operator webhook");
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let key = rcgen::KeyPair::generate().map_err(failed)?;
        let cert = params.signed_by(&key, &issuer).map_err(failed)?;
        Ok(Certificates {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// Reads `tls.crt`, `tls.key` and (when present) `ca.crt` from `dir`.
    /// Without `ca.crt` the certificate is its own CA (self-signed).
    ///
    /// # Errors
    ///
    /// [`CertError::Read`] when a file is missing, [`CertError::Invalid`]
    /// when it is not PEM.
    pub fn from_dir(dir: &Path) -> Result<Certificates, CertError> {
        let read = |file: &str| {
            let path = dir.join(file);
            std::fs::read_to_string(&path).map_err(|source| CertError::Read { path, source })
        };
        let cert_pem = read(CERT_KEY)?;
        let key_pem = read(KEY_KEY)?;
        let ca_pem = match read(CA_KEY) {
            Ok(ca) => ca,
            Err(CertError::Read { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                cert_pem.clone()
            }
            Err(other) => return Err(other),
        };
        let certificates = Certificates {
            ca_pem,
            cert_pem,
            key_pem,
        };
        certificates.server_config(&format!("directory {}", dir.display()))?;
        Ok(certificates)
    }

    /// The certificates kept in Secret `namespace/name`; when it does not
    /// exist, fresh ones (for `hosts`) written there first. When two hosts
    /// create it at once, the one that loses the race reads the winner's,
    /// so every replica serves the same bundle.
    ///
    /// # Errors
    ///
    /// [`CertError::Secret`] when the Secret cannot be read or created,
    /// [`CertError::Invalid`] when it holds unusable data.
    pub async fn from_secret(
        client: &kube::Client,
        namespace: &str,
        name: &str,
        hosts: &[String],
    ) -> Result<Certificates, CertError> {
        let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
        let secret_error = |source| CertError::Secret {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        };
        let origin = format!("Secret {namespace}/{name}");
        let hosts_own = |secret: &Secret| {
            if HostObject::WebhookSecret.created_by_host(secret.metadata.labels.as_ref()) {
                return Ok(());
            }
            let message = HostObject::WebhookSecret.squatter_message("Secret", namespace, name);
            tracing::error!(secret = %format!("{namespace}/{name}"), "{message}");
            Err(CertError::NotTheHosts { message })
        };
        if let Some(secret) = api.get_opt(name).await.map_err(secret_error)? {
            hosts_own(&secret)?;
            return Certificates::from_secret_data(&secret, &origin);
        }
        let fresh = Certificates::generate(hosts)?;
        let secret = fresh.to_secret(name);
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => Ok(fresh),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let secret = api.get(name).await.map_err(secret_error)?;
                hosts_own(&secret)?;
                Certificates::from_secret_data(&secret, &origin)
            }
            Err(other) => Err(secret_error(other)),
        }
    }

    /// The Secret (type `kubernetes.io/tls`) holding these certificates.
    pub fn to_secret(&self, name: &str) -> Secret {
        let data = BTreeMap::from([
            (
                CA_KEY.to_string(),
                ByteString(self.ca_pem.clone().into_bytes()),
            ),
            (
                CERT_KEY.to_string(),
                ByteString(self.cert_pem.clone().into_bytes()),
            ),
            (
                KEY_KEY.to_string(),
                ByteString(self.key_pem.clone().into_bytes()),
            ),
        ]);
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                labels: Some(
                    HostObject::WebhookSecret
                        .labels()
                        .into_iter()
                        .chain([(
                            "app.kubernetes.io/managed-by".to_string(),
                            "wasm-operator".to_string(),
                        )])
                        .collect(),
                ),
                ..Default::default()
            },
            type_: Some("kubernetes.io/tls".to_string()),
            data: Some(data),
            ..Default::default()
        }
    }

    fn from_secret_data(secret: &Secret, origin: &str) -> Result<Certificates, CertError> {
        let data = secret.data.clone().unwrap_or_default();
        let field = |key: &str| {
            data.get(key)
                .map(|b| String::from_utf8_lossy(&b.0).into_owned())
                .ok_or_else(|| CertError::Invalid {
                    origin: origin.to_string(),
                    problem: format!("it has no {key}; delete it to have a new one generated"),
                })
        };
        let certificates = Certificates {
            ca_pem: field(CA_KEY)?,
            cert_pem: field(CERT_KEY)?,
            key_pem: field(KEY_KEY)?,
        };
        certificates.server_config(origin)?;
        Ok(certificates)
    }

    /// The CA bundle as a CRD's `caBundle` wants it: base64 of the PEM.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.ca_pem.as_bytes())
    }

    /// A rustls server configuration serving this certificate.
    ///
    /// # Errors
    ///
    /// [`CertError::Invalid`] naming `origin` when the certificate or key
    /// does not parse or does not match.
    pub fn server_config(&self, origin: &str) -> Result<Arc<rustls::ServerConfig>, CertError> {
        let invalid = |problem: String| CertError::Invalid {
            origin: origin.to_string(),
            problem,
        };
        let chain: Vec<_> = rustls_pemfile::certs(&mut self.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| invalid(format!("{CERT_KEY} is not PEM: {e}")))?;
        if chain.is_empty() {
            return Err(invalid(format!("{CERT_KEY} holds no certificate")));
        }
        let key = rustls_pemfile::private_key(&mut self.key_pem.as_bytes())
            .map_err(|e| invalid(format!("{KEY_KEY} is not PEM: {e}")))?
            .ok_or_else(|| invalid(format!("{KEY_KEY} holds no private key")))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| invalid(format!("{CERT_KEY} and {KEY_KEY} do not fit together: {e}")))?;
        Ok(Arc::new(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_certificates_serve_and_round_trip_through_a_secret() {
        let certs = Certificates::generate(&["webhook.example.svc".to_string()]).unwrap();
        assert!(certs.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(certs.ca_pem, certs.cert_pem);
        certs.server_config("test").unwrap();
        let secret = certs.to_secret("s");
        assert!(
            HostObject::WebhookSecret.created_by_host(secret.metadata.labels.as_ref()),
            "the host's Secret carries its label: {:?}",
            secret.metadata.labels
        );
        let back = Certificates::from_secret_data(&secret, "Secret x/s").unwrap();
        assert_eq!(back, certs);
        assert!(!format!("{certs:?}").contains("PRIVATE"));
    }

    #[test]
    fn a_directory_without_ca_serves_its_certificate_as_the_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let certs = Certificates::generate(&[]).unwrap();
        std::fs::write(dir.path().join(CERT_KEY), &certs.cert_pem).unwrap();
        std::fs::write(dir.path().join(KEY_KEY), &certs.key_pem).unwrap();
        let read = Certificates::from_dir(dir.path()).unwrap();
        assert_eq!(read.ca_pem, certs.cert_pem);
        std::fs::write(dir.path().join(CA_KEY), &certs.ca_pem).unwrap();
        assert_eq!(Certificates::from_dir(dir.path()).unwrap(), certs);
    }

    #[test]
    fn a_missing_or_broken_directory_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let error = Certificates::from_dir(dir.path()).unwrap_err().to_string();
        assert!(error.contains("tls.crt"), "{error}");
        std::fs::write(dir.path().join(CERT_KEY), "junk").unwrap();
        std::fs::write(dir.path().join(KEY_KEY), "junk").unwrap();
        let error = Certificates::from_dir(dir.path()).unwrap_err().to_string();
        assert!(error.contains("holds no certificate"), "{error}");
    }
}
