//! AdmissionReview v1: the request kube-apiserver sends and the checks it
//! makes on the answer.

use base64::Engine as _;
use serde_json::{Value, json};

use super::AdmissionAttributes;

/// The user every devcluster request is attributed to (the devcluster has no authentication).
pub const USERNAME: &str = "devcluster-admin";
/// The groups of [`USERNAME`].
pub const GROUPS: [&str; 2] = ["system:masters", "system:authenticated"];

/// Builds the AdmissionReview for `attrs` with request uid `uid`.
pub fn review(attrs: &AdmissionAttributes, uid: &str) -> Value {
    let kind = json!({"group": attrs.group, "version": attrs.version, "kind": attrs.kind});
    let resource =
        json!({"group": attrs.group, "version": attrs.version, "resource": attrs.resource});
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": {"username": USERNAME, "groups": GROUPS},
        "object": attrs.object.clone().unwrap_or(Value::Null),
        "oldObject": attrs.old_object.clone().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": options(&attrs.operation),
    });
    if !attrs.sub_resource.is_empty() {
        request["subResource"] = json!(attrs.sub_resource);
        request["requestSubResource"] = json!(attrs.sub_resource);
    }
    if let Some(namespace) = &attrs.namespace {
        request["namespace"] = json!(namespace);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

/// The `options` kube sends: the operation's options object.
fn options(operation: &str) -> Value {
    let kind = match operation {
        "CREATE" => "CreateOptions",
        "UPDATE" => "UpdateOptions",
        "DELETE" => "DeleteOptions",
        _ => return Value::Null,
    };
    json!({"apiVersion": "meta.k8s.io/v1", "kind": kind})
}

/// What a webhook decided.
#[derive(Debug)]
pub enum Verdict {
    /// Allowed, with an optional JSON patch to apply (mutating webhooks only).
    Allowed { patch: Option<json_patch::Patch> },
    /// Refused with an HTTP status code and a message.
    Denied { code: u16, message: String },
}

/// Checks a webhook's answer to the review with uid `uid` and reads the verdict.
/// Any malformed answer is an error (subject to the webhook's failurePolicy).
pub fn verdict(answer: &Value, uid: &str) -> Result<Verdict, String> {
    let api_version = answer
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = answer
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {api_version}, Kind={kind}"
        ));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err("webhook response was absent".into());
    };
    let got_uid = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if got_uid != uid {
        return Err(format!("expected response.uid={uid:?}, got {got_uid:?}"));
    }
    let Some(allowed) = response.get("allowed").and_then(Value::as_bool) else {
        return Err("response.allowed is missing or not a boolean".into());
    };
    if !allowed {
        let status = response.get("status");
        let code = status
            .and_then(|s| s.get("code"))
            .and_then(Value::as_u64)
            .and_then(|c| u16::try_from(c).ok())
            // kube never answers a rejection with a code below 400.
            .filter(|c| *c >= 400)
            .unwrap_or(403);
        let text = |field: &str| {
            status
                .and_then(|s| s.get(field))
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
        };
        let message = text("message")
            .or_else(|| text("reason"))
            .unwrap_or("without explanation")
            .to_string();
        return Ok(Verdict::Denied { code, message });
    }
    let patch = match response.get("patch").and_then(Value::as_str) {
        None => None,
        Some(encoded) => {
            match response.get("patchType").and_then(Value::as_str) {
                Some("JSONPatch") => {}
                other => {
                    return Err(format!(
                        "unsupported patch type {:?}; only JSONPatch is",
                        other.unwrap_or("")
                    ));
                }
            }
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("response.patch is not valid base64: {e}"))?;
            let patch: json_patch::Patch = serde_json::from_slice(&bytes)
                .map_err(|e| format!("response.patch is not a valid JSON patch: {e}"))?;
            Some(patch)
        }
    };
    Ok(Verdict::Allowed { patch })
}
