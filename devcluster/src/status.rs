//! `metav1.Status` errors with the codes, reasons and messages kube-apiserver uses.

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// An error answered as a `metav1.Status` body.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `metav1.StatusReason`, e.g. `NotFound`.
    pub reason: String,
    /// Human-readable message, worded like kube-apiserver's.
    pub message: String,
    /// `details` (name, group, kind, causes), if any.
    pub details: Option<Box<Value>>,
}

impl ApiError {
    /// An error without details.
    pub fn new(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message: message.into(),
            details: None,
        }
    }

    fn with(mut self, rt: &ResourceType, name: &str) -> Self {
        self.details = Some(Box::new(
            json!({"name": name, "group": rt.group, "kind": rt.plural}),
        ));
        self
    }

    /// 404 `deployments.apps "web" not found`.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified()),
        )
        .with(rt, name)
    }

    /// 404 for a namespace that does not exist.
    pub fn namespace_not_found(ns: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"));
        e.details = Some(Box::new(json!({"name": ns, "kind": "namespaces"})));
        e
    }

    /// 409 AlreadyExists.
    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified()),
        )
        .with(rt, name)
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                rt.qualified()
            ),
        )
        .with(rt, name)
    }

    /// 409 Conflict with a custom explanation (failed preconditions).
    pub fn conflict_msg(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                rt.qualified()
            ),
        )
        .with(rt, name)
    }

    /// 422 Invalid with field causes `(reason, field, message)`; message like
    /// `WebApp.example.com "x" is invalid: spec.replicas: Invalid value: ...`.
    pub fn invalid(rt: &ResourceType, name: &str, causes: &[(String, String, String)]) -> Self {
        let gk = if rt.group.is_empty() {
            rt.kind.clone()
        } else {
            format!("{}.{}", rt.kind, rt.group)
        };
        let parts: Vec<String> = causes
            .iter()
            .map(|(_, field, msg)| {
                if field.is_empty() {
                    msg.clone()
                } else {
                    format!("{field}: {msg}")
                }
            })
            .collect();
        let summary = if parts.len() == 1 {
            parts[0].clone()
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{gk} \"{name}\" is invalid: {summary}"),
        );
        let causes: Vec<Value> = causes
            .iter()
            .map(|(r, f, m)| json!({"reason": r, "message": m, "field": f}))
            .collect();
        e.details = Some(Box::new(
            json!({"name": name, "group": rt.group, "kind": rt.kind, "causes": causes}),
        ));
        e
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 410 Gone with reason Expired, for watches from a compacted resourceVersion.
    pub fn expired(requested: u64, oldest: u64) -> Self {
        Self::new(
            410,
            "Expired",
            format!("too old resource version: {requested} ({oldest})"),
        )
    }

    /// The `metav1.Status` body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = (**d).clone();
        }
        s
    }
}
