//! Pointing a plugin's CRD at the webhook: `spec.conversion` set to
//! `Webhook` with the client config and `caBundle` of this host. The
//! decision (does the CRD need a change?) is a pure function; the write is
//! a merge patch of `spec.conversion` alone.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

/// Field manager of the host's CRD writes.
pub const FIELD_MANAGER: &str = "wasm-operator-webhook";

/// Path the webhook serves ConversionReviews on.
pub const PATH: &str = "/convert";

/// How the API server reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientConfig {
    /// A URL, e.g. `https://127.0.0.1:9443/convert` (dev and tests).
    Url(String),
    /// A Service in front of the host's replicas (deploy/).
    Service {
        /// The Service's namespace.
        namespace: String,
        /// The Service's name.
        name: String,
        /// The Service's port.
        port: u16,
    },
}

impl ClientConfig {
    /// The host names the serving certificate must cover for this config.
    pub fn hosts(&self) -> Vec<String> {
        match self {
            ClientConfig::Url(url) => url::host_of(url).into_iter().collect(),
            ClientConfig::Service {
                namespace, name, ..
            } => vec![
                format!("{name}.{namespace}.svc"),
                format!("{name}.{namespace}.svc.cluster.local"),
            ],
        }
    }

    fn to_json(&self, ca_bundle: &str) -> Value {
        match self {
            ClientConfig::Url(url) => json!({"url": url, "service": null, "caBundle": ca_bundle}),
            ClientConfig::Service {
                namespace,
                name,
                port,
            } => json!({
                "url": null,
                "service": {"namespace": namespace, "name": name, "port": port, "path": PATH},
                "caBundle": ca_bundle,
            }),
        }
    }
}

mod url {
    /// The host of `https://host:port/path` (brackets of IPv6 removed).
    pub fn host_of(url: &str) -> Option<String> {
        let rest = url.split_once("://").map_or(url, |(_, r)| r);
        let authority = rest.split('/').next().unwrap_or_default();
        let host = if let Some(v6) = authority.strip_prefix('[') {
            v6.split(']').next().unwrap_or_default()
        } else {
            authority.rsplit_once(':').map_or(authority, |(h, _)| h)
        };
        (!host.is_empty()).then(|| host.to_string())
    }
}

/// The `spec.conversion` this host wants on a plugin's CRD.
pub fn desired_conversion(client_config: &ClientConfig, ca_bundle: &str) -> Value {
    json!({
        "strategy": "Webhook",
        "webhook": {
            "conversionReviewVersions": ["v1"],
            "clientConfig": client_config.to_json(ca_bundle),
        },
    })
}

/// True when `current` (a CRD's `spec.conversion`, absent or not) does not
/// already say what `desired` says. `null` fields of `desired` mean
/// "absent".
pub fn needs_update(current: Option<&Value>, desired: &Value) -> bool {
    !covers(current.unwrap_or(&Value::Null), desired)
}

fn covers(current: &Value, desired: &Value) -> bool {
    match desired {
        Value::Null => current.is_null(),
        Value::Object(fields) => fields
            .iter()
            .all(|(k, v)| covers(current.get(k).unwrap_or(&Value::Null), v)),
        other => current == other,
    }
}

/// Sets `spec.conversion` of CRD `crd_name` to `desired` unless it already
/// says that. Returns whether it wrote; `Ok(false)` also when the CRD does
/// not exist (nothing to convert).
///
/// # Errors
///
/// The API server's answer to the read or the patch.
pub async fn ensure(
    client: &kube::Client,
    crd_name: &str,
    desired: &Value,
) -> Result<bool, kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd) = api.get_opt(crd_name).await? else {
        return Ok(false);
    };
    let current = serde_json::to_value(&crd.spec.conversion).unwrap_or(Value::Null);
    if !needs_update(Some(&current), desired) {
        return Ok(false);
    }
    let patch = json!({"spec": {"conversion": desired}});
    api.patch(
        crd_name,
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..Default::default()
        },
        &Patch::Merge(&patch),
    )
    .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crd_without_conversion_or_with_another_bundle_needs_an_update() {
        let url = ClientConfig::Url("https://127.0.0.1:9443/convert".into());
        let desired = desired_conversion(&url, "QUJD");
        assert!(needs_update(None, &desired));
        assert!(needs_update(Some(&json!({"strategy": "None"})), &desired));
        let mut current = desired.clone();
        current["webhook"]["clientConfig"]["caBundle"] = json!("T1RIRVI=");
        assert!(needs_update(Some(&current), &desired));
    }

    #[test]
    fn a_crd_already_pointing_here_needs_nothing() {
        let url = ClientConfig::Url("https://127.0.0.1:9443/convert".into());
        let desired = desired_conversion(&url, "QUJD");
        // The API server drops null fields: absent matches null.
        let current = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
            "clientConfig": {"url": "https://127.0.0.1:9443/convert", "caBundle": "QUJD"}}});
        assert!(!needs_update(Some(&current), &desired));
        let service = ClientConfig::Service {
            namespace: "ops".into(),
            name: "wo".into(),
            port: 443,
        };
        assert!(needs_update(
            Some(&current),
            &desired_conversion(&service, "QUJD")
        ));
    }

    #[test]
    fn certificate_hosts_follow_the_client_config() {
        assert_eq!(
            ClientConfig::Url("https://10.0.0.5:9443/convert".into()).hosts(),
            ["10.0.0.5"]
        );
        assert_eq!(
            ClientConfig::Url("https://[::1]:9443/convert".into()).hosts(),
            ["::1"]
        );
        assert_eq!(
            ClientConfig::Url("https://hook.example:1/c".into()).hosts(),
            ["hook.example"]
        );
        let service = ClientConfig::Service {
            namespace: "ops".into(),
            name: "wo".into(),
            port: 443,
        };
        assert_eq!(service.hosts(), ["wo.ops.svc", "wo.ops.svc.cluster.local"]);
    }
}
