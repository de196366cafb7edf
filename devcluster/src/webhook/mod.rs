//! Calls to webhooks the way kube-apiserver makes them: admission
//! (AdmissionReview v1, mutating then validating) and CRD conversion
//! (ConversionReview v1).
//!
//! Differences from kube-apiserver, chosen for a local development server:
//! - only `clientConfig.url` is supported (there are no Services to resolve);
//! - plain `http://` URLs are accepted for loopback hosts, so tests need no certificates;
//! - `reinvocationPolicy` is ignored: each mutating webhook runs once, in order;
//! - validating webhooks run concurrently; the first refusal in configuration order is reported;
//! - `matchPolicy` is always `Exact` and `matchConditions` (CEL) are not evaluated.

mod admission;
mod conversion;
mod matching;
mod transport;

use std::time::Duration;

use serde_json::Value;

pub use admission::{GROUPS, USERNAME};
pub use matching::selector_matches;

/// Why a webhook call refused or failed the request.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A webhook answered `allowed: false`; `code` is its status code (403 by default).
    #[error("admission webhook {webhook:?} denied the request: {message}")]
    Denied {
        webhook: String,
        code: u16,
        message: String,
    },
    /// A webhook could not be called or answered garbage, and its failurePolicy is Fail.
    #[error("failed calling webhook {webhook:?}: {message}")]
    Failed { webhook: String, message: String },
}

/// The request being admitted (the `request` of an AdmissionReview, minus uid).
#[derive(Debug, Clone)]
pub struct AdmissionAttributes {
    pub group: String,
    pub version: String,
    pub kind: String,
    /// Plural resource name, e.g. `deployments`.
    pub resource: String,
    /// E.g. `status`; empty for the main resource.
    pub sub_resource: String,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: String,
    pub namespace: Option<String>,
    pub name: String,
    pub object: Option<Value>,
    pub old_object: Option<Value>,
    pub dry_run: bool,
    /// Labels of the object's namespace, for `namespaceSelector`.
    pub namespace_labels: std::collections::BTreeMap<String, String>,
}

/// Calls webhooks and keeps one HTTP client per CA bundle.
///
/// Cloning is cheap and clones share the clients.
#[derive(Debug, Clone, Default)]
pub struct WebhookClient {
    clients: transport::Clients,
}

/// `timeoutSeconds` when a webhook does not set it, and the largest allowed.
const DEFAULT_TIMEOUT_SECONDS: u64 = 10;
const MAX_TIMEOUT_SECONDS: u64 = 30;
/// kube-apiserver gives conversion webhooks 30 seconds.
const CONVERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether a webhook was configured as `failurePolicy: Ignore`.
fn ignores_failures(webhook: &Value) -> bool {
    webhook.get("failurePolicy").and_then(Value::as_str) == Some("Ignore")
}

fn name_of(webhook: &Value) -> String {
    webhook
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>")
        .to_string()
}

/// The webhooks of `configs` in the order kube calls them: configurations
/// sorted by name, webhooks in their listed order.
fn webhooks_of(configs: &[Value]) -> Vec<&Value> {
    let mut sorted: Vec<&Value> = configs.iter().collect();
    sorted.sort_by_key(|c| {
        c.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    });
    sorted
        .into_iter()
        .flat_map(|c| {
            c.get("webhooks")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
        })
        .collect()
}

impl WebhookClient {
    /// Runs every matching mutating webhook of `configs` (MutatingWebhookConfiguration
    /// objects) in order and returns the object with their JSON patches applied.
    pub async fn mutate(
        &self,
        configs: &[Value],
        attrs: &AdmissionAttributes,
    ) -> Result<Option<Value>, WebhookError> {
        let mut current = attrs.clone();
        for webhook in webhooks_of(configs) {
            let Some(patch) = self.admit_one(webhook, &current).await? else {
                continue;
            };
            let Some(object) = current.object.as_mut() else {
                continue;
            };
            let mut patched = object.clone();
            match json_patch::patch(&mut patched, &patch) {
                Ok(()) => *object = patched,
                Err(e) => {
                    let message = format!(
                        "the JSON patch it returned cannot be applied to {}: {e}",
                        describe(&current)
                    );
                    self.failure(webhook, message)?;
                }
            }
        }
        Ok(current.object)
    }

    /// Runs every matching validating webhook of `configs` (ValidatingWebhookConfiguration objects).
    ///
    /// As in kube-apiserver the webhooks are called concurrently; when several
    /// refuse, the first in configuration order is reported.
    pub async fn validate(
        &self,
        configs: &[Value],
        attrs: &AdmissionAttributes,
    ) -> Result<(), WebhookError> {
        // Validating webhooks cannot change the object; a returned patch is ignored.
        let calls = webhooks_of(configs)
            .into_iter()
            .map(|webhook| self.admit_one(webhook, attrs));
        futures::future::join_all(calls)
            .await
            .into_iter()
            .try_for_each(|result| result.map(drop))
    }

    /// Calls one admission webhook if it applies to `attrs`. Returns the
    /// patch it asked for, `None` when it did not apply, allowed without a
    /// patch, or failed under `failurePolicy: Ignore`.
    async fn admit_one(
        &self,
        webhook: &Value,
        attrs: &AdmissionAttributes,
    ) -> Result<Option<json_patch::Patch>, WebhookError> {
        let name = name_of(webhook);
        if !matching::rules_match(webhook, attrs) {
            return Ok(None);
        }
        let selected = matching::namespace_matches(webhook, attrs)
            .and_then(|ns| Ok(ns && matching::object_matches(webhook, attrs)?));
        match selected {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => {
                return self
                    .failure(webhook, format!("invalid selector: {e}"))
                    .map(|()| None);
            }
        }
        if attrs.dry_run {
            let side_effects = webhook
                .get("sideEffects")
                .and_then(Value::as_str)
                .unwrap_or("Unknown");
            if !matches!(side_effects, "None" | "NoneOnDryRun") {
                // As kube-apiserver: a dry run must not reach a webhook with side effects.
                return Err(WebhookError::Failed {
                    webhook: name,
                    message: format!(
                        "the webhook has sideEffects {side_effects:?} and cannot be called for a dry-run request; set sideEffects: None or NoneOnDryRun"
                    ),
                });
            }
        }
        let seconds = webhook
            .get("timeoutSeconds")
            .and_then(Value::as_u64)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .clamp(1, MAX_TIMEOUT_SECONDS);
        let uid = uuid::Uuid::new_v4().to_string();
        let review = admission::review(attrs, &uid);
        let answer = match transport::Endpoint::from_client_config(webhook.get("clientConfig")) {
            Ok(endpoint) => {
                self.clients
                    .post(&endpoint, &review, Duration::from_secs(seconds))
                    .await
            }
            Err(e) => Err(e),
        };
        let verdict = answer.and_then(|a| admission::verdict(&a, &uid));
        match verdict {
            Ok(admission::Verdict::Allowed { patch }) => Ok(patch),
            Ok(admission::Verdict::Denied { code, message }) => Err(WebhookError::Denied {
                webhook: name,
                code,
                message,
            }),
            Err(message) => self.failure(webhook, message).map(|()| None),
        }
    }

    /// Applies the webhook's failurePolicy to a failed call: `Ignore` logs and
    /// continues, `Fail` (the default) fails the request.
    fn failure(&self, webhook: &Value, message: String) -> Result<(), WebhookError> {
        let name = name_of(webhook);
        if ignores_failures(webhook) {
            tracing::warn!(webhook = %name, error = %message, "webhook failed; ignored by failurePolicy: Ignore");
            Ok(())
        } else {
            Err(WebhookError::Failed {
                webhook: name,
                message,
            })
        }
    }

    /// Converts `objects` to `desired_api_version` through the webhook named by a
    /// CRD's `spec.conversion.webhook` (ConversionReview v1). Fails when the
    /// webhook fails, reports failure, or answers the wrong count or order.
    ///
    /// Objects already at `desired_api_version` are not sent; the result keeps
    /// the input order. `Failed.webhook` is the webhook's URL.
    pub async fn convert(
        &self,
        conversion_webhook: &Value,
        objects: Vec<Value>,
        desired_api_version: &str,
    ) -> Result<Vec<Value>, WebhookError> {
        let needs: Vec<bool> = objects
            .iter()
            .map(|o| o.get("apiVersion").and_then(Value::as_str) != Some(desired_api_version))
            .collect();
        let to_convert: Vec<Value> = objects
            .iter()
            .zip(&needs)
            .filter(|(_, n)| **n)
            .map(|(o, _)| o.clone())
            .collect();
        if to_convert.is_empty() {
            return Ok(objects);
        }
        let subject = conversion::subject(&to_convert);
        let client_config = conversion_webhook.get("clientConfig");
        let webhook = client_config
            .and_then(|c| c.get("url"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("conversion webhook for {subject}"));
        let failed = |message: String| WebhookError::Failed {
            webhook: webhook.clone(),
            message,
        };
        if let Some(versions) = conversion_webhook
            .get("conversionReviewVersions")
            .and_then(Value::as_array)
            && !versions.iter().any(|v| v.as_str() == Some("v1"))
        {
            return Err(failed(format!(
                "conversion webhook for {subject} does not accept ConversionReview v1 (conversionReviewVersions: {}); add \"v1\"",
                Value::Array(versions.clone())
            )));
        }
        let endpoint = transport::Endpoint::from_client_config(client_config).map_err(&failed)?;
        let uid = uuid::Uuid::new_v4().to_string();
        let review = conversion::review(&uid, desired_api_version, &to_convert);
        let answer = self
            .clients
            .post(&endpoint, &review, CONVERSION_TIMEOUT)
            .await
            .map_err(&failed)?;
        let converted =
            conversion::converted(&answer, &uid, desired_api_version, &to_convert, &subject)
                .map_err(&failed)?;
        let mut converted = converted.into_iter();
        Ok(objects
            .into_iter()
            .zip(needs)
            .map(|(original, need)| {
                if need {
                    converted.next().unwrap_or(original)
                } else {
                    original
                }
            })
            .collect())
    }
}

/// `<resource> "<namespace>/<name>"`, to name the object in errors.
fn describe(attrs: &AdmissionAttributes) -> String {
    match &attrs.namespace {
        Some(ns) => format!("{} \"{ns}/{}\"", attrs.resource, attrs.name),
        None => format!("{} {:?}", attrs.resource, attrs.name),
    }
}

#[cfg(test)]
mod tests;
