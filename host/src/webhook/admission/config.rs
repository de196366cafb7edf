//! The Validating- and MutatingWebhookConfigurations that point the API
//! server at this host's `/validate` and `/mutate`: one of each per plugin
//! whose stable version implements `validate` or `defaults`, for the
//! plugin's primary kind only, named `wasm-operator-<plugin>` and labelled
//! as the host's. [`desired`] builds them (pure); [`sync`] writes them
//! with server-side apply and deletes the host's configurations of plugins
//! that no longer admit.
//!
//! Every configuration skips `kube-system` (a `namespaceSelector` on
//! `kubernetes.io/metadata.name`): a plugin never blocks the cluster's own
//! objects, whatever its failure policy.

use std::collections::BTreeSet;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::contract::{AdmissionFunctions, ResourceKind};
use crate::registry::{AdmissionSettings, FailurePolicy};

/// The path the API server posts validation reviews to.
pub const VALIDATE_PATH: &str = "/validate";
/// The path the API server posts mutation reviews to.
pub const MUTATE_PATH: &str = "/mutate";
/// The label on every configuration the host writes: the plugin's name.
pub const PLUGIN_LABEL: &str = "wasm-operator.dev/admission-plugin";
/// The field manager of the host's configuration writes.
const FIELD_MANAGER: &str = "wasm-operator";
/// Namespaces a plugin's admission never sees.
pub const EXEMPT_NAMESPACES: [&str; 1] = ["kube-system"];

/// The name of `plugin`'s configurations.
pub fn configuration_name(plugin: &str) -> String {
    format!("wasm-operator-{plugin}")
}

/// What one plugin's configurations are made of.
#[derive(Debug, Clone, Copy)]
pub struct AdmittingPlugin<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// Its primary kind (the only kind it admits).
    pub primary: &'a ResourceKind,
    /// What its stable version implements.
    pub functions: AdmissionFunctions,
    /// The deployment's admission settings.
    pub settings: &'a AdmissionSettings,
}

/// The `clientConfig` of a webhook at `path`, from the conversion
/// webhook's (`{url}` or `{service}` with `caBundle`).
pub fn client_config_at(conversion_client_config: &Value, path: &str) -> Value {
    let mut config = conversion_client_config.clone();
    if let Some(url) = config["url"].as_str() {
        let base = url
            .strip_suffix(super::super::crd::PATH)
            .unwrap_or(url)
            .trim_end_matches('/');
        config["url"] = json!(format!("{base}{path}"));
    }
    if config["service"].is_object() {
        config["service"]["path"] = json!(path);
    }
    if let Some(fields) = config.as_object_mut() {
        fields.retain(|_, value| !value.is_null());
    }
    config
}

/// `plugin`'s ValidatingWebhookConfiguration and MutatingWebhookConfiguration
/// (`None` for a function it does not implement).
pub fn desired(by: AdmittingPlugin<'_>, client_config: &Value) -> (Option<Value>, Option<Value>) {
    let webhook = |function: &str, path: &str| {
        let mut hook = json!({
            "name": format!("{}.{function}.wasm-operator.dev", by.plugin),
            "clientConfig": client_config_at(client_config, path),
            "rules": [{
                "apiGroups": [by.primary.group],
                "apiVersions": ["*"],
                "operations": by.settings.operations.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                "resources": [by.primary.plural],
                "scope": match by.primary.scope {
                    crate::contract::Scope::Namespaced => "Namespaced",
                    crate::contract::Scope::Cluster => "Cluster",
                },
            }],
            "failurePolicy": match by.settings.failure_policy {
                FailurePolicy::Fail => "Fail",
                FailurePolicy::Ignore => "Ignore",
            },
            "matchPolicy": "Equivalent",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": by.settings.timeout_seconds,
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": EXEMPT_NAMESPACES,
            }]},
        });
        if !by.settings.match_conditions.is_empty() {
            hook["matchConditions"] = json!(
                by.settings
                    .match_conditions
                    .iter()
                    .map(|c| json!({"name": c.name, "expression": c.expression}))
                    .collect::<Vec<_>>()
            );
        }
        if function == "mutate" {
            hook["reinvocationPolicy"] = json!("IfNeeded");
        }
        hook
    };
    let configuration = |kind: &str, function: &str, path: &str| {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": kind,
            "metadata": {
                "name": configuration_name(by.plugin),
                "labels": {
                    "app.kubernetes.io/managed-by": "wasm-operator",
                    PLUGIN_LABEL: by.plugin,
                },
            },
            "webhooks": [webhook(function, path)],
        })
    };
    (
        by.functions
            .validate
            .then(|| configuration("ValidatingWebhookConfiguration", "validate", VALIDATE_PATH)),
        by.functions
            .defaults
            .then(|| configuration("MutatingWebhookConfiguration", "mutate", MUTATE_PATH)),
    )
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
        plural,
    )
}

/// Which of the host's configurations [`sync`] deletes when no plugin
/// wants them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale<'a> {
    /// Only those of these plugins (unloaded by this host since it started):
    /// right after a start, the plugins have not loaded yet, and deleting
    /// every configuration would leave writes unchecked until they do.
    Of(&'a BTreeSet<String>),
    /// Every one (the host has run long enough for its plugins to load).
    All,
}

/// Writes `configurations` (from [`desired`]) and deletes the host's
/// `stale` ones of either kind (plugins unloaded, or no longer admitting).
/// Returns the names written and deleted. A configuration the API server
/// refuses does not stop the others.
///
/// # Errors
///
/// The API server's answer to the first write or delete it refused.
pub async fn sync(
    client: &kube::Client,
    configurations: &[Value],
    stale: Stale<'_>,
) -> Result<Vec<String>, kube::Error> {
    let mut changed = Vec::new();
    let mut first_error = None;
    for (kind, plural) in [
        (
            "ValidatingWebhookConfiguration",
            "validatingwebhookconfigurations",
        ),
        (
            "MutatingWebhookConfiguration",
            "mutatingwebhookconfigurations",
        ),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        let mut wanted = BTreeSet::new();
        for configuration in configurations.iter().filter(|c| c["kind"] == kind) {
            let name = configuration["metadata"]["name"]
                .as_str()
                .unwrap_or_default();
            wanted.insert(name.to_string());
            let current = match api.get_opt(name).await {
                Ok(current) => current,
                Err(error) => {
                    first_error.get_or_insert(error);
                    continue;
                }
            };
            let up_to_date = current.as_ref().is_some_and(|current| {
                let current = serde_json::to_value(current).unwrap_or_default();
                current["webhooks"] == configuration["webhooks"]
                    || webhooks_cover(&current["webhooks"], &configuration["webhooks"])
            });
            if up_to_date {
                continue;
            }
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch(name, &params, &Patch::Apply(configuration))
                .await?;
            changed.push(format!("{kind}/{name}"));
        }
        let ours = match api
            .list(&ListParams::default().labels("app.kubernetes.io/managed-by=wasm-operator"))
            .await
        {
            Ok(ours) => ours,
            Err(error) => {
                first_error.get_or_insert(error);
                continue;
            }
        };
        for leftover in ours.items.iter().filter(|c| {
            let plugin = c.metadata.labels.as_ref().and_then(|l| l.get(PLUGIN_LABEL));
            let deletable = match (stale, plugin) {
                (_, None) => false,
                (Stale::All, Some(_)) => true,
                (Stale::Of(unloaded), Some(plugin)) => unloaded.contains(plugin),
            };
            deletable && !wanted.contains(c.metadata.name.as_deref().unwrap_or_default())
        }) {
            let name = leftover.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => changed.push(format!("{kind}/{name} (deleted)")),
                Err(kube::Error::Api(response)) if response.code == 404 => {}
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(changed),
    }
}

/// True when every field of `desired` is in `current` with the same value
/// (the API server adds defaults such as `objectSelector`).
fn webhooks_cover(current: &Value, desired: &Value) -> bool {
    match (current, desired) {
        (Value::Object(current), Value::Object(desired)) => desired
            .iter()
            .all(|(key, value)| current.get(key).is_some_and(|c| webhooks_cover(c, value))),
        (Value::Array(current), Value::Array(desired)) => {
            current.len() == desired.len()
                && current
                    .iter()
                    .zip(desired)
                    .all(|(c, d)| webhooks_cover(c, d))
        }
        (current, desired) => current == desired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{AdmissionOperation, Scope};
    use crate::registry::AdmissionMode;

    fn primary() -> ResourceKind {
        ResourceKind {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "WebApp".into(),
            plural: "webapps".into(),
            scope: Scope::Namespaced,
        }
    }

    fn settings() -> AdmissionSettings {
        AdmissionSettings {
            mode: AdmissionMode::Enforce,
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: 5,
            operations: vec![AdmissionOperation::Create, AdmissionOperation::Update],
            match_conditions: vec![],
            audit_interval_seconds: 600,
        }
    }

    #[test]
    fn a_plugin_gets_one_configuration_per_function_for_its_primary_kind() {
        let settings = settings();
        let primary = primary();
        let (validating, mutating) = desired(
            AdmittingPlugin {
                plugin: "webapp",
                primary: &primary,
                functions: AdmissionFunctions {
                    validate: true,
                    defaults: false,
                },
                settings: &settings,
            },
            &json!({"url": "https://127.0.0.1:9443/convert", "caBundle": "Q0E="}),
        );
        assert!(mutating.is_none());
        let validating = validating.unwrap();
        assert_eq!(validating["metadata"]["name"], "wasm-operator-webapp");
        let hook = &validating["webhooks"][0];
        assert_eq!(
            hook["clientConfig"]["url"],
            "https://127.0.0.1:9443/validate"
        );
        assert_eq!(hook["rules"][0]["resources"], json!(["webapps"]));
        assert_eq!(hook["rules"][0]["apiGroups"], json!(["example.com"]));
        assert_eq!(hook["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(
            hook["namespaceSelector"]["matchExpressions"][0]["values"],
            json!(["kube-system"])
        );
    }

    #[test]
    fn a_service_client_config_gets_the_path() {
        let config = client_config_at(
            &json!({"url": null, "service": {"namespace": "ops", "name": "wo", "port": 443, "path": "/convert"}, "caBundle": "Q0E="}),
            MUTATE_PATH,
        );
        assert_eq!(config["service"]["path"], "/mutate");
        assert!(config.get("url").is_none());
    }

    #[test]
    fn defaults_the_api_server_adds_do_not_count_as_a_change() {
        let desired = json!([{"name": "a", "sideEffects": "None"}]);
        let current = json!([{"name": "a", "sideEffects": "None", "objectSelector": {}}]);
        assert!(webhooks_cover(&current, &desired));
        assert!(!webhooks_cover(&desired, &json!([{"name": "b"}])));
    }
}
