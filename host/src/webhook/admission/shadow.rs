//! Shadow admission: while a Shadow (or DryRun) canary runs, its candidate
//! answers the same admission requests as the stable version, off the
//! request's path, and the two answers are compared into the candidate's
//! [`CanaryObservations`] — the same counts, diffs and kinds of difference
//! the reconcile shadow records, so `wasm-operator canary diff` shows them
//! and the canary analysis (`maxDiffRatio`) judges them.
//!
//! Only the stable version's answer is ever sent to the API server: a
//! candidate that would refuse what the stable version admits shows up as
//! a diff at `admission.validate.allowed` before it serves anything.
//!
//! # What is compared
//!
//! The plugins' own answers, before the deployment's mode is applied (an
//! `Audit` deployment would otherwise hide every difference):
//!
//! - `validate`: `allowed`, `message`, `fields`, `warnings`, each a path
//!   `admission.validate.<field>`;
//! - `defaults`: the JSON patch the host would apply
//!   (`admission.defaults.patch`).
//!
//! A candidate call that fails (trap, timeout, defaults the host refuses)
//! is recorded as an error, not a comparison. When the stable version's own
//! call failed there is nothing to compare with: nothing is recorded.
//!
//! # Keys
//!
//! An update is keyed by the object's UID (prefixed `admission:` so an
//! object's reconcile comparisons and its admission comparisons agree or
//! differ separately); a create, whose object has no UID yet, by its
//! namespace and name.
//!
//! # Guarantees
//!
//! - Never on the request's path: one spawned task per request holding one
//!   of the candidate's `shadowConcurrency` permits; when none is free the
//!   comparison is skipped and counted, never queued.
//! - The candidate runs with its own call limits; work stops when the
//!   candidate leaves its plugin's version set.

use std::sync::Arc;

use chrono::Utc;
use serde_json::{Value, json};

use crate::contract::{AdmissionOperation, Verdict};
use crate::engine::CacheReader;
use crate::registry::{
    ActiveVersion, CanaryObservations, FieldDiff, ObjectName, RolloutCandidate, ShadowOutcome,
};
use crate::telemetry::{Metrics, ShadowResult};

use super::decide::guarded_patch;

/// One plugin's answer to an admission request, as compared.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `validate`'s verdict.
    Verdict(Verdict),
    /// `defaults`' patch (JSON Patch operations), as the host would send it.
    Patch(Value),
}

impl Answer {
    fn fields(&self) -> Vec<(&'static str, Value)> {
        match self {
            Answer::Verdict(v) => vec![
                ("admission.validate.allowed", json!(v.allowed)),
                ("admission.validate.fields", json!(v.fields)),
                ("admission.validate.message", json!(v.message)),
                ("admission.validate.warnings", json!(v.warnings)),
            ],
            Answer::Patch(patch) => vec![("admission.defaults.patch", patch.clone())],
        }
    }
}

/// The defaults' answer: the patch from `original` to `defaulted`, or why
/// the host would refuse it.
///
/// # Errors
///
/// The sentence [`guarded_patch`] gives.
pub fn patch_answer(original: &Value, defaulted: Value) -> Result<Answer, String> {
    let patch = guarded_patch(original, defaulted)?;
    Ok(Answer::Patch(
        serde_json::to_value(patch).unwrap_or(Value::Null),
    ))
}

/// The fields in which `candidate` differs from `stable`, sorted by path.
/// Pure.
pub fn compare(stable: &Answer, candidate: &Answer) -> Vec<FieldDiff> {
    let theirs = candidate.fields();
    let mut diffs: Vec<FieldDiff> = stable
        .fields()
        .into_iter()
        .filter_map(|(path, ours)| {
            let other = theirs.iter().find(|(p, _)| *p == path).map(|(_, v)| v);
            (other != Some(&ours)).then(|| FieldDiff {
                path: path.to_string(),
                stable: Some(ours),
                candidate: other.cloned(),
            })
        })
        .collect();
    diffs.sort_by(|a, b| a.path.cmp(&b.path));
    diffs
}

/// The name an admission comparison is recorded under (see the module
/// documentation's Keys).
pub fn object_name(operation: AdmissionOperation, object: &Value) -> ObjectName {
    let metadata = &object["metadata"];
    let text = |field: &str| metadata[field].as_str().map(str::to_string);
    let namespace = text("namespace");
    let name = text("name")
        .filter(|n| !n.is_empty())
        .or_else(|| text("generateName").map(|g| format!("{g}*")))
        .unwrap_or_default();
    let uid = match text("uid").filter(|u| !u.is_empty()) {
        Some(uid) if operation != AdmissionOperation::Create => format!("admission:{uid}"),
        _ => format!(
            "admission:{}:{}/{name}",
            operation.as_str(),
            namespace.as_deref().unwrap_or_default()
        ),
    };
    ObjectName {
        namespace,
        name,
        uid,
    }
}

/// What the candidate is asked: the same request the stable version
/// answered.
pub struct ShadowRequest {
    /// `validate` or `defaults`.
    pub function: &'static str,
    /// The operation.
    pub operation: AdmissionOperation,
    /// The object (JSON).
    pub object: Value,
    /// The old object of an update (JSON).
    pub old_object: Option<Value>,
}

/// Compares the candidate's answer to `request` with `stable` off the
/// request's path, when `candidate` shadows and a permit is free (else
/// counted skipped). Returns at once.
pub fn spawn(
    metrics: &Metrics,
    candidate: &RolloutCandidate,
    stable_version: &str,
    request: ShadowRequest,
    stable: Answer,
    cache: Arc<dyn CacheReader>,
) {
    if !candidate.settings.rollout.shadows() {
        return;
    }
    let observations = candidate.observations.clone();
    let version = candidate.version.clone();
    let plugin = version.info.name.clone();
    let Some(permit) = observations.try_permit() else {
        observations.record_skipped();
        metrics.shadow_comparison(
            &plugin,
            stable_version,
            &version.info.version,
            ShadowResult::Skipped,
        );
        return;
    };
    let metrics = metrics.clone();
    let stable_version = stable_version.to_string();
    let stop = observations.stopped();
    let shadow = async move {
        let _permit = permit;
        let answer = tokio::select! {
            _ = stop.cancelled() => return,
            answer = ask(&version, &request, cache) => answer,
        };
        let result = record(&observations, &request, &stable, answer);
        metrics.shadow_comparison(&plugin, &stable_version, &version.info.version, result);
    };
    // On the blocking pool, as the reconcile shadow: the candidate's call
    // never holds a runtime worker the webhook's requests need.
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || runtime.block_on(shadow));
}

/// The candidate's answer, or the reason and message of its failure.
async fn ask(
    version: &ActiveVersion,
    request: &ShadowRequest,
    cache: Arc<dyn CacheReader>,
) -> Result<Answer, (String, String)> {
    let ctx = super::call_context(version, super::managed_by(&request.object));
    let failed = |reason: &str, message: String| (reason.to_string(), message);
    let object = request.object.to_string();
    match request.function {
        "validate" => version
            .plugin
            .validate(
                &ctx,
                request.operation,
                object,
                request.old_object.as_ref().map(Value::to_string),
                cache,
            )
            .await
            .map(Answer::Verdict)
            .map_err(|e| failed(e.reason(), e.to_string())),
        _ => {
            let defaulted = version
                .plugin
                .defaults(&ctx, request.operation, object, cache)
                .await
                .map_err(|e| failed(e.reason(), e.to_string()))?;
            patch_answer(&request.object, defaulted)
                .map_err(|problem| failed("AdmissionDefaultsRefused", problem))
        }
    }
}

/// Records one comparison in `observations`; returns the metric's result.
fn record(
    observations: &CanaryObservations,
    request: &ShadowRequest,
    stable: &Answer,
    candidate: Result<Answer, (String, String)>,
) -> ShadowResult {
    let name = object_name(request.operation, &request.object);
    let (outcome, result) = match candidate {
        Err((reason, message)) => (
            ShadowOutcome::Error { reason, message },
            ShadowResult::Error,
        ),
        Ok(answer) => {
            let fields = compare(stable, &answer);
            if fields.is_empty() {
                (ShadowOutcome::Same, ShadowResult::Same)
            } else {
                let signature = fields
                    .iter()
                    .map(|f| f.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                (
                    ShadowOutcome::Differ { fields, signature },
                    ShadowResult::Differ,
                )
            }
        }
    };
    observations.record_shadow(name, outcome, &Utc::now().to_rfc3339());
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::FieldError;

    fn refusal(message: &str) -> Answer {
        Answer::Verdict(Verdict {
            allowed: false,
            message: message.into(),
            fields: vec![FieldError {
                path: "spec.replicas".into(),
                message: "too many".into(),
            }],
            warnings: vec![],
        })
    }

    fn allowed() -> Answer {
        Answer::Verdict(Verdict {
            allowed: true,
            message: String::new(),
            fields: vec![],
            warnings: vec![],
        })
    }

    #[test]
    fn equal_verdicts_do_not_differ() {
        assert!(compare(&allowed(), &allowed()).is_empty());
        assert!(compare(&refusal("no"), &refusal("no")).is_empty());
    }

    #[test]
    fn a_stricter_candidate_differs_at_allowed_fields_and_message() {
        let diffs = compare(&allowed(), &refusal("spec.replicas too many"));
        let paths: Vec<&str> = diffs.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "admission.validate.allowed",
                "admission.validate.fields",
                "admission.validate.message"
            ]
        );
        assert_eq!(diffs[0].stable, Some(json!(true)));
        assert_eq!(diffs[0].candidate, Some(json!(false)));
    }

    #[test]
    fn patches_are_compared_whole() {
        let original = json!({"apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a"}, "spec": {}});
        let mut port80 = original.clone();
        port80["spec"]["port"] = json!(80);
        let mut port8080 = original.clone();
        port8080["spec"]["port"] = json!(8080);
        let stable = patch_answer(&original, port80.clone()).unwrap();
        assert!(compare(&stable, &patch_answer(&original, port80).unwrap()).is_empty());
        let diffs = compare(&stable, &patch_answer(&original, port8080).unwrap());
        assert_eq!(diffs.len(), 1);
        assert_eq!(diffs[0].path, "admission.defaults.patch");
    }

    #[test]
    fn defaults_touching_status_are_refused() {
        let original = json!({"metadata": {"name": "a"}, "spec": {}});
        let mut changed = original.clone();
        changed["status"] = json!({"phase": "Done"});
        assert!(patch_answer(&original, changed).is_err());
    }

    #[test]
    fn updates_are_keyed_by_uid_and_creates_by_name() {
        let object = json!({"metadata": {"namespace": "ns", "name": "a", "uid": "u1"}});
        let update = object_name(AdmissionOperation::Update, &object);
        assert_eq!(update.uid, "admission:u1");
        assert_eq!(update.to_string(), "ns/a");
        let create = object_name(
            AdmissionOperation::Create,
            &json!({"metadata": {"namespace": "ns", "generateName": "web-"}}),
        );
        assert_eq!(create.name, "web-*");
        assert_eq!(create.uid, "admission:CREATE:ns/web-*");
    }
}
