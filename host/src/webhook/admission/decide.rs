//! What the host answers an admission request, as a value: the plugin's
//! verdict or defaults, then the deployment's mode and failure policy
//! applied to them. Pure: the handler ([`super::answer`]) calls the plugin
//! and sends what this decides.
//!
//! - [`Mode::Enforce`]: a refusal refuses; defaults are applied.
//! - [`Mode::Warn`]: a refusal becomes an admission warning and the object
//!   is admitted; defaults are applied.
//! - [`Mode::Audit`]: nothing is refused or changed; what would have been
//!   is recorded (metric, log) and returned as a warning.
//!
//! A call that fails (trap, timeout, memory, invalid output) gets the
//! failure policy: `Fail` refuses with a message naming the plugin, its
//! version and what failed; `Ignore` admits with a warning saying the same.

use serde_json::{Value, json};

use crate::contract::{FieldError, Verdict};
use crate::plan::marks::keep_host_marks;
use crate::registry::{AdmissionMode as Mode, FailurePolicy};

/// The plugin that answered, for messages.
#[derive(Debug, Clone, Copy)]
pub struct Answerer<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// Its serving version.
    pub version: &'a str,
    /// The deployment's mode.
    pub mode: Mode,
    /// The deployment's failure policy.
    pub failure_policy: FailurePolicy,
}

/// What the host answers one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Decision {
    /// Whether the object is admitted.
    pub allowed: bool,
    /// Why not (shown by kubectl), or empty.
    pub message: String,
    /// The fields at fault (`status.details.causes`).
    pub causes: Vec<FieldError>,
    /// Warnings for the client.
    pub warnings: Vec<String>,
    /// The JSON patch to apply (mutation only).
    pub patch: Option<json_patch::Patch>,
    /// What happened, for the metric's `result` label: `allowed`,
    /// `refused`, `warned`, `audited`, `mutated`, `error`.
    pub result: &'static str,
}

impl Decision {
    fn admit(result: &'static str) -> Decision {
        Decision {
            allowed: true,
            result,
            ..Decision::default()
        }
    }
}

/// The most warnings (and their length) an answer carries; the API server
/// truncates beyond about this anyway.
const MAX_WARNINGS: usize = 16;
const MAX_WARNING_CHARS: usize = 256;

fn bounded(warnings: Vec<String>) -> Vec<String> {
    warnings
        .into_iter()
        .take(MAX_WARNINGS)
        .map(|w| crate::util::truncate(&w, MAX_WARNING_CHARS))
        .collect()
}

/// The answer to a validation, from the plugin's `verdict` (or its
/// failure).
pub fn validation(by: Answerer<'_>, verdict: Result<Verdict, String>) -> Decision {
    let verdict = match verdict {
        Ok(verdict) => verdict,
        Err(failure) => return failed(by, "validate", &failure),
    };
    if verdict.allowed {
        return Decision {
            warnings: bounded(verdict.warnings),
            ..Decision::admit("allowed")
        };
    }
    let message = refusal_message(by, &verdict);
    match by.mode {
        Mode::Enforce => Decision {
            allowed: false,
            message,
            // kubectl prints the causes instead of the message when there
            // are any: each names the plugin too.
            causes: verdict
                .fields
                .into_iter()
                .map(|field| FieldError {
                    message: format!("{} (plugin {} {})", field.message, by.plugin, by.version),
                    path: field.path,
                })
                .collect(),
            warnings: bounded(verdict.warnings),
            patch: None,
            result: "refused",
        },
        Mode::Warn => {
            let mut warnings = vec![message];
            warnings.extend(verdict.warnings);
            Decision {
                warnings: bounded(warnings),
                ..Decision::admit("warned")
            }
        }
        Mode::Audit => Decision {
            warnings: bounded(vec![format!("audit only, not enforced: {message}")]),
            ..Decision::admit("audited")
        },
    }
}

/// The message of a refusal: the plugin's, or one naming the fields when
/// the plugin gave none.
fn refusal_message(by: Answerer<'_>, verdict: &Verdict) -> String {
    let said = if verdict.message.trim().is_empty() {
        let fields: Vec<String> = verdict
            .fields
            .iter()
            .map(|f| format!("{}: {}", f.path, f.message))
            .collect();
        if fields.is_empty() {
            "refused without a reason".to_string()
        } else {
            fields.join("; ")
        }
    } else {
        verdict.message.clone()
    };
    crate::util::truncate(
        &format!("{said} (plugin {} {})", by.plugin, by.version),
        2000,
    )
}

/// A failed call under the failure policy (in `Audit`, nothing is ever
/// refused: admitted with a warning whatever the policy).
fn failed(by: Answerer<'_>, function: &str, failure: &str) -> Decision {
    let message = crate::util::truncate(
        &format!(
            "admission by plugin {} {} failed: {function}: {failure}",
            by.plugin, by.version
        ),
        2000,
    );
    if by.mode == Mode::Audit {
        return Decision {
            warnings: bounded(vec![format!("audit only: {message}")]),
            ..Decision::admit("error")
        };
    }
    match by.failure_policy {
        FailurePolicy::Fail => Decision {
            allowed: false,
            message,
            result: "error",
            ..Decision::default()
        },
        FailurePolicy::Ignore => Decision {
            warnings: bounded(vec![format!("{message}; admitted (failurePolicy Ignore)")]),
            ..Decision::admit("error")
        },
    }
}

/// The answer to a mutation: the patch from `original` to the plugin's
/// `defaulted` object, if the host accepts it.
pub fn mutation(by: Answerer<'_>, original: &Value, defaulted: Result<Value, String>) -> Decision {
    let defaulted = match defaulted {
        Ok(defaulted) => defaulted,
        Err(failure) => return failed(by, "defaults", &failure),
    };
    let patch = match guarded_patch(original, defaulted) {
        Ok(patch) => patch,
        Err(problem) => return failed(by, "defaults", &problem),
    };
    if patch.0.is_empty() {
        return Decision::admit("allowed");
    }
    match by.mode {
        Mode::Enforce | Mode::Warn => Decision {
            patch: Some(patch),
            ..Decision::admit("mutated")
        },
        Mode::Audit => {
            let paths: Vec<String> = patch.0.iter().map(|op| op.path().to_string()).collect();
            Decision {
                warnings: bounded(vec![format!(
                    "audit only, not applied: plugin {} {} would set {}",
                    by.plugin,
                    by.version,
                    paths.join(", ")
                )]),
                ..Decision::admit("audited")
            }
        }
    }
}

/// The patch from `original` to `defaulted`, refused when it touches what
/// the host owns or what defaults may not change: `apiVersion`, `kind`,
/// `status`, metadata other than labels and annotations, and the host's
/// marks among those.
///
/// # Errors
///
/// A sentence naming the first field the defaults may not touch.
pub fn guarded_patch(original: &Value, mut defaulted: Value) -> Result<json_patch::Patch, String> {
    if !defaulted.is_object() {
        return Err("the defaulted object is not a JSON object".into());
    }
    for field in ["apiVersion", "kind", "status"] {
        if original.get(field) != defaulted.get(field) {
            return Err(format!(
                "the defaults change `{field}`, which defaults may not touch"
            ));
        }
    }
    let without_labels = |metadata: &Value| {
        let mut metadata = metadata.clone();
        if let Some(fields) = metadata.as_object_mut() {
            fields.remove("labels");
            fields.remove("annotations");
        }
        metadata
    };
    if without_labels(&original["metadata"]) != without_labels(&defaulted["metadata"]) {
        return Err(
            "the defaults change metadata other than labels and annotations, which the host and the API server own"
                .into(),
        );
    }
    let marks = keep_host_marks(original, &mut defaulted);
    if !marks.is_empty() {
        return Err(format!(
            "the defaults change the host's marks ({}), which only the host writes",
            marks.join(", ")
        ));
    }
    Ok(json_patch::diff(original, &defaulted))
}

/// Why an update of an object is refused by the serving `version` when
/// the version that last wrote it declared that only `needed` or later may
/// serve it (its `wasm-operator.dev/min-compatible-version` annotation,
/// the same rule the registry applies to a rollback): the lifecycle
/// reference's rule. An object written by a newer, forward-compatible
/// version (no such annotation) is not refused: the registry let the
/// serving version take it over. `None` when either is not semver or the
/// serving version suffices.
pub fn too_new(plugin: &str, version: &str, needed: Option<&str>) -> Option<String> {
    let needed_text = needed?;
    let needed = semver::Version::parse(needed_text).ok()?;
    let serving = semver::Version::parse(version).ok()?;
    (needed > serving).then(|| {
        format!(
            "this object was last written by a version of plugin {plugin} that needs {needed_text} or later to serve it, newer than the serving version {version}: it may hold state {version} cannot handle. Update it once {plugin} {needed_text} or later serves again"
        )
    })
}

/// The AdmissionReview answering request `uid` with `decision`.
pub fn review(uid: &str, decision: &Decision) -> Value {
    let mut response = json!({"uid": uid, "allowed": decision.allowed});
    if !decision.allowed {
        let causes: Vec<Value> = decision
            .causes
            .iter()
            .take(32)
            .map(|c| json!({"field": c.path, "message": c.message, "reason": "FieldValueInvalid"}))
            .collect();
        response["status"] = json!({
            "code": 422,
            "reason": "Invalid",
            "message": decision.message,
            "details": {"causes": causes},
        });
    }
    if !decision.warnings.is_empty() {
        response["warnings"] = json!(decision.warnings);
    }
    if let Some(patch) = &decision.patch {
        use base64::Engine as _;
        let bytes = serde_json::to_vec(patch).unwrap_or_default();
        response["patchType"] = json!("JSONPatch");
        response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn by(mode: Mode, failure_policy: FailurePolicy) -> Answerer<'static> {
        Answerer {
            plugin: "webapp",
            version: "1.2.0",
            mode,
            failure_policy,
        }
    }

    fn refused() -> Verdict {
        Verdict {
            allowed: false,
            message: "spec.replicas must be between 1 and 100, got 0".into(),
            fields: vec![FieldError {
                path: "spec.replicas".into(),
                message: "must be between 1 and 100".into(),
            }],
            warnings: vec![],
        }
    }

    #[test]
    fn enforce_refuses_naming_the_plugin_and_fields() {
        let decision = validation(by(Mode::Enforce, FailurePolicy::Fail), Ok(refused()));
        assert!(!decision.allowed);
        assert_eq!(decision.result, "refused");
        assert!(
            decision
                .message
                .contains("spec.replicas must be between 1 and 100")
        );
        assert!(decision.message.contains("webapp 1.2.0"));
        let review = review("u-1", &decision);
        assert_eq!(review["response"]["allowed"], false);
        assert_eq!(review["response"]["status"]["code"], 422);
        assert_eq!(
            review["response"]["status"]["details"]["causes"][0]["field"],
            "spec.replicas"
        );
        let cause = review["response"]["status"]["details"]["causes"][0]["message"]
            .as_str()
            .unwrap();
        assert!(cause.contains("webapp 1.2.0"), "{cause}");
    }

    #[test]
    fn warn_admits_with_the_refusal_as_a_warning_and_audit_admits_quietly() {
        let warned = validation(by(Mode::Warn, FailurePolicy::Fail), Ok(refused()));
        assert!(warned.allowed);
        assert_eq!(warned.result, "warned");
        assert!(warned.warnings[0].contains("spec.replicas"));
        let audited = validation(by(Mode::Audit, FailurePolicy::Fail), Ok(refused()));
        assert!(audited.allowed);
        assert_eq!(audited.result, "audited");
        assert!(audited.warnings[0].starts_with("audit only"));
    }

    #[test]
    fn a_failed_call_gets_the_failure_policy() {
        let fail = validation(
            by(Mode::Enforce, FailurePolicy::Fail),
            Err("the call timed out after 1s".into()),
        );
        assert!(!fail.allowed);
        assert_eq!(fail.result, "error");
        assert!(
            fail.message
                .contains("webapp 1.2.0 failed: validate: the call timed out")
        );
        let ignore = validation(by(Mode::Enforce, FailurePolicy::Ignore), Err("trap".into()));
        assert!(ignore.allowed);
        assert!(ignore.warnings[0].contains("failurePolicy Ignore"));
        let audit = validation(by(Mode::Audit, FailurePolicy::Fail), Err("trap".into()));
        assert!(audit.allowed, "Audit never refuses, even a failed call");
        assert!(audit.warnings[0].starts_with("audit only"));
    }

    fn object() -> Value {
        json!({"apiVersion": "example.com/v1", "kind": "WebApp",
               "metadata": {"name": "a", "namespace": "default", "labels": {"x": "1"},
                            "annotations": {"wasm-operator.dev/managed-by-version": "1.0.0"}},
               "spec": {"replicas": 2}})
    }

    #[test]
    fn defaults_become_a_patch_of_the_spec() {
        let mut defaulted = object();
        defaulted["spec"]["port"] = json!(8080);
        let decision = mutation(
            by(Mode::Enforce, FailurePolicy::Fail),
            &object(),
            Ok(defaulted.clone()),
        );
        assert_eq!(decision.result, "mutated");
        let patch = decision.patch.clone().unwrap();
        let mut patched = object();
        json_patch::patch(&mut patched, &patch).unwrap();
        assert_eq!(patched, defaulted);
        let review = review("u-2", &decision);
        assert_eq!(review["response"]["patchType"], "JSONPatch");
        let audited = mutation(
            by(Mode::Audit, FailurePolicy::Fail),
            &object(),
            Ok(defaulted),
        );
        assert!(audited.patch.is_none() && audited.allowed);
        assert!(
            audited.warnings[0].contains("/spec/port"),
            "{:?}",
            audited.warnings
        );
    }

    #[test]
    fn defaults_may_not_touch_what_the_host_or_the_api_server_owns() {
        let mut renamed = object();
        renamed["metadata"]["name"] = json!("b");
        let mut marked = object();
        marked["metadata"]["annotations"]["wasm-operator.dev/managed-by-version"] = json!("9.9.9");
        let mut status = object();
        status["status"] = json!({"ready": true});
        for bad in [renamed, marked, status] {
            let decision = mutation(by(Mode::Enforce, FailurePolicy::Fail), &object(), Ok(bad));
            assert!(!decision.allowed, "{decision:?}");
            assert!(
                decision.message.contains("defaults"),
                "{}",
                decision.message
            );
        }
        let mut labelled = object();
        labelled["metadata"]["labels"]["tier"] = json!("web");
        assert!(guarded_patch(&object(), labelled).is_ok());
    }

    #[test]
    fn an_object_needing_a_newer_version_is_refused_on_update() {
        assert!(
            too_new("webapp", "1.2.0", Some("1.3.0"))
                .unwrap()
                .contains("1.3.0")
        );
        assert_eq!(too_new("webapp", "1.2.0", Some("1.2.0")), None);
        assert_eq!(too_new("webapp", "1.2.0", Some("1.0.0")), None);
        assert_eq!(too_new("webapp", "1.2.0", Some("not-semver")), None);
        assert_eq!(too_new("webapp", "1.2.0", None), None);
    }
}
