//! The conversion webhook's flags, shared by `run` and `dev`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::webhook::{
    CertSource, ClientConfig, DEFAULT_SECRET_NAME, MAX_REVIEW_BYTES, ServeLimits, WebhookOptions,
};

/// Flags of the CRD conversion webhook (docs/conversion.md).
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Serve the CRD conversion webhook (HTTPS) on this address for every
    /// plugin whose manifest implements migration. `run` serves it only
    /// with this flag; `dev` always does (default 127.0.0.1, a free port).
    #[arg(long, value_name = "ADDR")]
    pub webhook_addr: Option<SocketAddr>,
    /// The URL the API server calls, written into the CRDs' clientConfig
    /// (default: https://<webhook-addr>/convert, loopback when bound to all
    /// addresses).
    #[arg(long, value_name = "URL", conflicts_with = "webhook_service")]
    pub webhook_url: Option<String>,
    /// A Service in front of the host's replicas, written into the CRDs'
    /// clientConfig instead of a URL: NAMESPACE/NAME, or NAMESPACE/NAME:PORT
    /// (default port 443). The certificate covers NAME.NAMESPACE.svc.
    #[arg(long, value_name = "NAMESPACE/NAME[:PORT]", value_parser = parse_service)]
    pub webhook_service: Option<ClientConfig>,
    /// Directory with tls.crt, tls.key and (optionally) ca.crt, as
    /// controller-runtime's --webhook-cert-dir (e.g. from cert-manager).
    /// Without it the certificate and its CA are generated on first start
    /// and kept in --webhook-secret.
    #[arg(long, value_name = "DIR")]
    pub webhook_cert_dir: Option<PathBuf>,
    /// The Secret keeping the generated certificate, shared by restarts
    /// and replicas: NAMESPACE/NAME (default
    /// $POD_NAMESPACE/wasm-operator-webhook-cert, namespace `default`
    /// without POD_NAMESPACE).
    #[arg(long, value_name = "NAMESPACE/NAME", value_parser = parse_secret)]
    pub webhook_secret: Option<(String, String)>,
    /// Rewrite the objects of a migrating plugin's CRD into its storage
    /// version by itself (50 writes/s, resumable), then narrow
    /// status.storedVersions, whenever it lists older versions; checked
    /// every 10 s. `dev` always does; `wasm-operator migrate storage CRD`
    /// does it once by hand.
    #[arg(long)]
    pub migrate_storage: bool,
    /// The largest ConversionReview the webhook reads, in bytes (default
    /// 32 MiB). The API server sends a whole list of a converted kind in one
    /// review (10,000 small objects are ~4 MiB); the host holds about three
    /// times this per review, at most two such reviews at once. Larger
    /// reviews are refused (413) before their body is read.
    #[arg(long, value_name = "BYTES", default_value_t = MAX_REVIEW_BYTES)]
    pub webhook_max_review_bytes: usize,
}

fn split_namespaced(value: &str, what: &str) -> Result<(String, String), String> {
    match value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(format!(
            "{value:?} is not NAMESPACE/NAME; write the {what} as e.g. wasm-operator-system/wasm-operator"
        )),
    }
}

fn parse_secret(value: &str) -> Result<(String, String), String> {
    split_namespaced(value, "Secret")
}

fn parse_service(value: &str) -> Result<ClientConfig, String> {
    let (namespace, rest) = split_namespaced(value, "Service")?;
    let (name, port) = match rest.split_once(':') {
        Some((name, port)) => {
            let port = port.parse::<u16>().map_err(|e| {
                format!("port {port:?} of --webhook-service is not a port number: {e}")
            })?;
            (name.to_string(), port)
        }
        None => (rest, 443),
    };
    Ok(ClientConfig::Service {
        namespace,
        name,
        port,
    })
}

impl WebhookArgs {
    /// The Secret keeping the generated certificate: `--webhook-secret`,
    /// else `$POD_NAMESPACE/wasm-operator-webhook-cert` (namespace
    /// `default` without POD_NAMESPACE).
    pub fn secret(&self) -> (String, String) {
        self.webhook_secret.clone().unwrap_or_else(|| {
            let namespace = std::env::var("POD_NAMESPACE")
                .ok()
                .filter(|ns| !ns.is_empty())
                .unwrap_or_else(|| "default".to_string());
            (namespace, DEFAULT_SECRET_NAME.to_string())
        })
    }

    /// The webhook these flags describe, listening on `--webhook-addr` or
    /// else `default_addr`; `None` when neither is set.
    pub fn options(&self, default_addr: Option<SocketAddr>) -> Option<WebhookOptions> {
        let addr = self.webhook_addr.or(default_addr)?;
        let client_config = self
            .webhook_service
            .clone()
            .or_else(|| self.webhook_url.clone().map(ClientConfig::Url));
        let certs = match &self.webhook_cert_dir {
            Some(dir) => CertSource::Dir(dir.clone()),
            None => {
                let (namespace, name) = self.secret();
                CertSource::Secret { namespace, name }
            }
        };
        Some(WebhookOptions {
            addr,
            client_config,
            certs,
            migrate_storage: self.migrate_storage,
            limits: ServeLimits {
                max_review_bytes: self.webhook_max_review_bytes,
                ..ServeLimits::default()
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_and_secrets_parse_with_their_defaults() {
        assert_eq!(
            parse_service("ops/wo").unwrap(),
            ClientConfig::Service {
                namespace: "ops".into(),
                name: "wo".into(),
                port: 443
            }
        );
        assert_eq!(
            parse_service("ops/wo:9443").unwrap(),
            ClientConfig::Service {
                namespace: "ops".into(),
                name: "wo".into(),
                port: 9443
            }
        );
        assert!(parse_service("wo").unwrap_err().contains("NAMESPACE/NAME"));
        assert!(parse_service("ops/wo:x").unwrap_err().contains("port"));
        assert_eq!(
            parse_secret("a/b").unwrap(),
            ("a".to_string(), "b".to_string())
        );
        assert!(parse_secret("a/b/c").is_err());
    }

    #[test]
    fn without_an_address_there_is_no_webhook() {
        let args = WebhookArgs {
            webhook_addr: None,
            webhook_url: Some("https://h:1/convert".into()),
            webhook_service: None,
            webhook_cert_dir: None,
            webhook_secret: Some(("ns".into(), "s".into())),
            migrate_storage: false,
            webhook_max_review_bytes: 1 << 20,
        };
        assert!(args.options(None).is_none());
        let options = args.options(Some("127.0.0.1:0".parse().unwrap())).unwrap();
        assert_eq!(
            options.client_config,
            Some(ClientConfig::Url("https://h:1/convert".into()))
        );
        assert_eq!(options.limits.max_review_bytes, 1 << 20);
        assert_eq!(
            options.certs,
            CertSource::Secret {
                namespace: "ns".into(),
                name: "s".into()
            }
        );
    }
}
