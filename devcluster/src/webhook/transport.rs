//! HTTP transport to webhooks: one reqwest client per distinct `caBundle`,
//! and the `clientConfig` checks kube-apiserver makes before calling.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

/// reqwest clients keyed by the `caBundle` they trust (empty key: no bundle).
#[derive(Debug, Clone, Default)]
pub struct Clients {
    by_bundle: Arc<Mutex<HashMap<String, reqwest::Client>>>,
}

/// Where and how to call a webhook, read from its `clientConfig`.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: reqwest::Url,
    pub ca_bundle: Option<String>,
}

impl Endpoint {
    /// Reads a `clientConfig`. Only `url` is supported: there are no Services
    /// to resolve in the devcluster.
    ///
    /// `https` is required as in kube-apiserver, except that plain `http` is
    /// accepted for loopback hosts (127.0.0.1, ::1, localhost) — a deliberate
    /// dev convenience so tests can run webhooks without certificates.
    pub fn from_client_config(client_config: Option<&Value>) -> Result<Self, String> {
        let Some(config) = client_config.filter(|c| c.is_object()) else {
            return Err("clientConfig is missing; set clientConfig.url".into());
        };
        let url = match (
            config.get("url").and_then(Value::as_str),
            config.get("service"),
        ) {
            (Some(url), _) => url,
            (None, Some(_)) => {
                return Err(
                    "clientConfig.service is not supported by devcluster; use clientConfig.url"
                        .into(),
                );
            }
            (None, None) => return Err("clientConfig.url is missing".into()),
        };
        let url = reqwest::Url::parse(url)
            .map_err(|e| format!("clientConfig.url {url:?} is not a valid URL: {e}"))?;
        match url.scheme() {
            "https" => {}
            "http" if is_loopback(&url) => {}
            other => {
                return Err(format!(
                    "clientConfig.url {url} uses scheme {other:?}; webhooks must use https (plain http is accepted only on loopback)"
                ));
            }
        }
        let ca_bundle = config
            .get("caBundle")
            .and_then(Value::as_str)
            .filter(|b| !b.is_empty())
            .map(str::to_owned);
        Ok(Self { url, ca_bundle })
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

impl Clients {
    /// POSTs `body` as JSON to `endpoint` and returns the decoded JSON answer.
    /// Errors are worded like kube-apiserver's (`Post "<url>": <cause>`).
    pub async fn post(
        &self,
        endpoint: &Endpoint,
        body: &Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let client = self.client_for(endpoint.ca_bundle.as_deref())?;
        let url = endpoint.url.as_str();
        let response = client
            .post(endpoint.url.clone())
            .timeout(timeout)
            .json(body)
            .send()
            .await
            .map_err(|e| describe(url, &e, timeout))?;
        let status = response.status();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| describe(url, &e, timeout))?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes);
            let snippet: String = text.chars().take(512).collect();
            return Err(format!(
                "Post {url:?}: the server responded with status {status}: {snippet}"
            ));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("Post {url:?}: the response is not valid JSON: {e}"))
    }

    /// The client trusting `ca_bundle` (base64 of PEM certificates), built once per bundle.
    fn client_for(&self, ca_bundle: Option<&str>) -> Result<reqwest::Client, String> {
        let key = ca_bundle.unwrap_or_default().to_string();
        // A poisoned lock only means another caller panicked mid-insert; the map is still usable.
        let mut clients = self.by_bundle.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(client) = clients.get(&key) {
            return Ok(client.clone());
        }
        let client = build_client(ca_bundle)?;
        clients.insert(key, client.clone());
        Ok(client)
    }
}

/// Without a bundle the client trusts reqwest's built-in (webpki) roots; with
/// one it trusts exactly the bundle's certificates, as kube-apiserver does.
fn build_client(ca_bundle: Option<&str>) -> Result<reqwest::Client, String> {
    let mut builder = reqwest::Client::builder().use_rustls_tls();
    if let Some(bundle) = ca_bundle {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(bundle.trim())
            .map_err(|e| format!("clientConfig.caBundle is not valid base64: {e}"))?;
        let ders: Vec<_> = rustls_pemfile::certs(&mut pem.as_slice())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("clientConfig.caBundle is not valid PEM: {e}"))?;
        if ders.is_empty() {
            return Err("clientConfig.caBundle contains no PEM certificate".into());
        }
        builder = builder.tls_built_in_root_certs(false);
        for der in ders {
            let cert = reqwest::Certificate::from_der(der.as_ref())
                .map_err(|e| format!("clientConfig.caBundle holds an unusable certificate: {e}"))?;
            builder = builder.add_root_certificate(cert);
        }
    }
    builder
        .build()
        .map_err(|e| format!("cannot build an HTTP client for the webhook: {}", chain(&e)))
}

fn describe(url: &str, error: &reqwest::Error, timeout: Duration) -> String {
    if error.is_timeout() {
        format!(
            "Post {url:?}: context deadline exceeded (timeout {}s)",
            timeout.as_secs()
        )
    } else {
        format!("Post {url:?}: {}", chain(error))
    }
}

/// An error and its sources on one line: reqwest's own Display hides the TLS or I/O cause.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = cause.source();
    }
    text
}
