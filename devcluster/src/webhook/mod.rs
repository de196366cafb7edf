//! Calls to webhooks the way kube-apiserver makes them: admission
//! (AdmissionReview v1, mutating then validating) and CRD conversion
//! (ConversionReview v1).
//!
//! BASELINE: being replaced by the full implementation (owner: schema helper).

use serde_json::Value;

/// Why a webhook call refused or failed the request.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// A webhook answered `allowed: false`; `code` is its status code (403 by default).
    #[error("admission webhook {webhook:?} denied the request: {message}")]
    Denied { webhook: String, code: u16, message: String },
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
#[derive(Debug, Clone, Default)]
pub struct WebhookClient {}

impl WebhookClient {
    /// Runs every matching mutating webhook of `configs` (MutatingWebhookConfiguration
    /// objects) in order and returns the object with their JSON patches applied.
    pub async fn mutate(&self, configs: &[Value], attrs: &AdmissionAttributes) -> Result<Option<Value>, WebhookError> {
        let _ = configs;
        Ok(attrs.object.clone())
    }

    /// Runs every matching validating webhook of `configs` (ValidatingWebhookConfiguration objects).
    pub async fn validate(&self, configs: &[Value], attrs: &AdmissionAttributes) -> Result<(), WebhookError> {
        let _ = (configs, attrs);
        Ok(())
    }

    /// Converts `objects` to `desired_api_version` through the webhook named by a
    /// CRD's `spec.conversion.webhook` (ConversionReview v1). Fails when the
    /// webhook fails, reports failure, or answers the wrong count or order.
    pub async fn convert(&self, conversion_webhook: &Value, objects: Vec<Value>, desired_api_version: &str) -> Result<Vec<Value>, WebhookError> {
        let _ = (conversion_webhook, desired_api_version);
        Ok(objects)
    }
}
