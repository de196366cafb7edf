//! The `status` of a WasmPlugin: what serves, the Ready and Degraded
//! conditions, and the per-version counts.

use serde_json::{Value, json};

use super::spec::CanaryStatus;
use crate::contract::Reason;
use crate::registry::VersionStats;

/// The version a WasmPlugin serves now.
#[derive(Debug, Clone, PartialEq)]
pub struct Serving {
    /// Manifest name.
    pub plugin: String,
    /// Manifest version.
    pub version: String,
    /// `sha256:<hex>` of the component.
    pub digest: String,
    /// Source description, e.g. `file:/plugins/webapp.wasm`.
    pub source: String,
    /// `file`, `configMap` or `oci`.
    pub source_kind: String,
    /// RFC 3339 time of the load.
    pub loaded_at: String,
}

/// Why the latest source content was not (or could not be) loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason (`SourceNotFound`, `InvalidComponent`, ...).
    pub reason: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The canary's share of the status: its conditions and `status.canary`.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryPart {
    /// `CanaryProgressing`, `CanaryFailed`, `CanaryPromoted`.
    pub conditions: Vec<Condition>,
    /// `status.canary`.
    pub status: CanaryStatus,
}

/// Builds the status from what serves, the current problem, the counts and
/// the canary. `previous` is the status as last written: condition
/// transition times are kept while a condition's status does not change.
pub fn build(
    serving: Option<&Serving>,
    problem: Option<&Problem>,
    versions: &[VersionStats],
    canary: Option<&CanaryPart>,
    generation: Option<i64>,
    previous: &Value,
    now: &str,
) -> Value {
    let (ready, degraded) = conditions(serving, problem);
    let mut all = vec![ready, degraded];
    if let Some(canary) = canary {
        all.extend(canary.conditions.iter().cloned());
    }
    let conditions: Vec<Value> = all
        .into_iter()
        .map(|(kind, status, reason, message)| {
            let since = previous
                .get("conditions")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter().find(|c| {
                        c.get("type").and_then(Value::as_str) == Some(kind)
                            && c.get("status").and_then(Value::as_str) == Some(status)
                    })
                })
                .and_then(|c| c.get("lastTransitionTime"))
                .and_then(Value::as_str)
                .unwrap_or(now);
            json!({
                "type": kind, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": since, "observedGeneration": generation,
            })
        })
        .collect();
    let mut status = json!({
        "observedGeneration": generation,
        "conditions": conditions,
        "versions": versions,
    });
    match canary {
        Some(canary) => status["canary"] = super::canary_run::status_json(&canary.status),
        // A merge patch removes `canary` only when told to.
        None if previous.get("canary").is_some() => status["canary"] = Value::Null,
        None => {}
    }
    if let Some(s) = serving {
        status["plugin"] = json!(s.plugin);
        status["version"] = json!(s.version);
        status["digest"] = json!(s.digest);
        status["source"] = json!(s.source);
        status["sourceKind"] = json!(s.source_kind);
        status["loadedAt"] = json!(s.loaded_at);
    }
    status
}

/// A condition: type, status, reason, message.
pub type Condition = (&'static str, &'static str, String, String);

fn conditions(serving: Option<&Serving>, problem: Option<&Problem>) -> (Condition, Condition) {
    match (serving, problem) {
        (Some(s), None) => (
            (
                "Ready",
                "True",
                Reason::Loaded.as_str().into(),
                format!(
                    "{} {} ({}) from {} serves",
                    s.plugin, s.version, s.digest, s.source
                ),
            ),
            (
                "Degraded",
                "False",
                Reason::Loaded.as_str().into(),
                String::new(),
            ),
        ),
        (Some(s), Some(p)) => (
            (
                "Ready",
                "True",
                Reason::Loaded.as_str().into(),
                format!(
                    "the last good version {} {} ({}) keeps serving; the new one was rejected ({})",
                    s.plugin, s.version, s.digest, p.reason
                ),
            ),
            (
                "Degraded",
                "True",
                p.reason.clone(),
                format!(
                    "{} The last good version {} {} keeps serving.",
                    p.message, s.plugin, s.version
                ),
            ),
        ),
        (None, Some(p)) => (
            (
                "Ready",
                "False",
                p.reason.clone(),
                format!("no version serves: {}", p.message),
            ),
            ("Degraded", "True", p.reason.clone(), p.message.clone()),
        ),
        (None, None) => (
            (
                "Ready",
                "False",
                "Loading".into(),
                "the plugin is being fetched and compiled".into(),
            ),
            ("Degraded", "False", "Loading".into(), String::new()),
        ),
    }
}

/// A serving version and a rejection, as the tests of status and of the
/// typed status use them.
#[cfg(test)]
pub(super) fn sample() -> (Serving, Problem) {
    let serving = Serving {
        plugin: "webapp".into(),
        version: "0.1.0".into(),
        digest: "sha256:ab".into(),
        source: "file:/x".into(),
        source_kind: "file".into(),
        loaded_at: "2026-01-01T00:00:00Z".into(),
    };
    let problem = Problem {
        reason: Reason::InvalidComponent.as_str().into(),
        message: "not wasm.".into(),
    };
    (serving, problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_keeps_ready_while_a_version_serves() {
        let (serving, problem) = sample();
        let first = build(Some(&serving), None, &[], None, Some(1), &Value::Null, "t1");
        assert_eq!(first["conditions"][0]["status"], "True");
        assert_eq!(first["conditions"][1]["status"], "False");
        let second = build(
            Some(&serving),
            Some(&problem),
            &[],
            None,
            Some(2),
            &first,
            "t2",
        );
        assert_eq!(second["conditions"][0]["status"], "True");
        assert_eq!(second["conditions"][0]["lastTransitionTime"], "t1");
        assert_eq!(second["conditions"][1]["status"], "True");
        assert_eq!(second["conditions"][1]["reason"], "InvalidComponent");
        assert_eq!(second["conditions"][1]["lastTransitionTime"], "t2");
        assert_eq!(second["version"], "0.1.0");
        let none = build(None, Some(&problem), &[], None, Some(1), &Value::Null, "t");
        assert_eq!(none["conditions"][0]["status"], "False");
        assert!(none.get("version").is_none());
    }
}
