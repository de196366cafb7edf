//! Admission from plugin logic (issue 30): `/validate` and `/mutate` on the
//! webhook's HTTPS server, answered by the stable version of the plugin
//! whose primary kind the object is, through its `admission.validate` and
//! `admission.defaults`.
//!
//! One request is one call: the handler finds the serving version, calls
//! it (with that deployment's call limits and its cache view), and hands
//! the answer to [`decide`], which applies the deployment's mode
//! (`Enforce`, `Warn`, `Audit`) and failure policy. [`config`] keeps the
//! API server's webhook configurations pointed here.
//!
//! # Guarantees
//!
//! - An object in `kube-system` is always admitted unchanged, whatever the
//!   configuration says.
//! - A request for a kind no plugin admits (a stale configuration), or for
//!   an object in a namespace outside the admitting plugin's grant, is
//!   admitted unchanged (a grant that selects namespaces by label is asked
//!   about every namespace: the webhook keeps no Namespace cache).
//! - A plugin's defaults never touch `apiVersion`, `kind`, `status`,
//!   metadata other than labels and annotations, or the host's marks
//!   ([`decide::guarded_patch`]).
//! - An update of an object whose last writer declared that only a newer
//!   version than the one serving may serve it (its
//!   `min-compatible-version` mark, the registry's rollback rule) is
//!   refused ([`decide::too_new`]).
//! - An update that changes only metadata (a finalizer, a label, the
//!   host's marks), and any write to an object being deleted, is admitted
//!   without calling the plugin: admission never blocks the controllers'
//!   own writes or a deletion.

pub mod audit;
pub mod config;
pub mod decide;
pub mod shadow;

use std::sync::Arc;

use serde_json::Value;

use crate::cache::{CacheView, NamespaceGate, SharedCache};
use crate::contract::{AdmissionOperation, CallContext};
use crate::engine::CacheReader;
use crate::plan::MANAGED_BY_VERSION_ANNOTATION;
use crate::plan::names::MIN_COMPATIBLE_VERSION_ANNOTATION;
use crate::registry::{ActiveVersion, Registry, RolloutCandidate};

use decide::{Answerer, Decision};
use shadow::{Answer, ShadowRequest};

/// Which review a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    /// `/validate`: `admission.validate`.
    Validate,
    /// `/mutate`: `admission.defaults`.
    Mutate,
}

impl Review {
    fn function(self) -> &'static str {
        match self {
            Review::Validate => "validate",
            Review::Mutate => "defaults",
        }
    }
}

/// The fields of an AdmissionReview request the host reads.
struct Request {
    uid: String,
    group: String,
    kind: String,
    namespace: Option<String>,
    operation: AdmissionOperation,
    object: Value,
    old_object: Option<Value>,
}

fn parse(review: &Value) -> Result<Request, String> {
    let request = review
        .get("request")
        .filter(|r| r.is_object())
        .ok_or("the AdmissionReview has no request")?;
    let text = |field: &str| request[field].as_str().unwrap_or_default().to_string();
    let operation = AdmissionOperation::parse(&text("operation"))
        .ok_or_else(|| format!("unknown operation {:?}", request["operation"]))?;
    let old_object = Some(request["oldObject"].clone()).filter(Value::is_object);
    // A DELETE carries the object as oldObject only.
    let object = match &request["object"] {
        object if object.is_object() => object.clone(),
        _ => old_object.clone().ok_or("the request carries no object")?,
    };
    Ok(Request {
        uid: text("uid"),
        group: request["kind"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        kind: request["kind"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        namespace: request["namespace"].as_str().map(str::to_string),
        operation,
        object,
        old_object,
    })
}

/// The stable version of the plugin admitting `group`/`kind` with
/// `review`'s function, if any.
pub fn admitting(
    registry: &Registry,
    group: &str,
    kind: &str,
    review: Review,
) -> Option<Arc<ActiveVersion>> {
    registry.loaded().into_iter().find_map(|info| {
        let stable = registry.versions(&info.name)?.current().stable.clone();
        let manifest = stable.plugin.manifest();
        let functions = stable.plugin.admission_functions();
        let implements = match review {
            Review::Validate => functions.validate,
            Review::Mutate => functions.defaults,
        };
        (implements && manifest.primary.group == group && manifest.primary.kind == kind)
            .then_some(stable)
    })
}

/// True for an update that changes only metadata (finalizers, labels,
/// annotations: the controllers' own writes, the host's among them) or an
/// object being deleted: admitted without a call, so a stricter version
/// can never block a finalizer's removal or the host's marks.
fn metadata_only(request: &Request) -> bool {
    if request.operation != AdmissionOperation::Update {
        return false;
    }
    let Some(old) = &request.old_object else {
        return false;
    };
    let deleting = request.object["metadata"]["deletionTimestamp"].is_string();
    let without_metadata = |object: &Value| {
        let mut object = object.clone();
        if let Some(fields) = object.as_object_mut() {
            fields.remove("metadata");
        }
        object
    };
    deleting || without_metadata(&request.object) == without_metadata(old)
}

/// A cache reader for a webhook started without the host's caches.
struct NoCaches;

impl CacheReader for NoCaches {
    fn get(&self, r: &crate::contract::ObjectRef) -> Result<Option<String>, String> {
        Err(format!(
            "{} {} cannot be read during admission: this webhook was started without the host's caches",
            r.api_version, r.kind
        ))
    }
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<String>, String> {
        Err(format!(
            "{api_version} {kind} cannot be listed during admission: this webhook was started without the host's caches"
        ))
    }
}

/// The cache view `version`'s calls read: its readable kinds, in its
/// grant's namespaces (a grant selecting namespaces by label reads none:
/// the webhook keeps no Namespace cache, and a selector never matches
/// unknown labels).
fn cache_view(caches: Option<&SharedCache>, version: &ActiveVersion) -> Arc<dyn CacheReader> {
    match caches {
        Some(cache) => Arc::new(
            CacheView::new(cache.clone(), version.plugin.manifest().readable().cloned())
                .confined_to(NamespaceGate::new(version.grant.clone(), None)),
        ),
        None => Arc::new(NoCaches),
    }
}

/// Answers one AdmissionReview `body` (JSON) as `review`.
pub async fn answer(
    registry: &Registry,
    caches: Option<&SharedCache>,
    review: Review,
    body: &[u8],
) -> Vec<u8> {
    let parsed = serde_json::from_slice::<Value>(body)
        .map_err(|e| format!("the AdmissionReview is not JSON: {e}"))
        .and_then(|v| parse(&v));
    let request = match parsed {
        Ok(request) => request,
        Err(problem) => {
            let decision = Decision {
                allowed: false,
                message: problem,
                result: "error",
                ..Decision::default()
            };
            return serde_json::to_vec(&decide::review("", &decision)).unwrap_or_default();
        }
    };
    let decision = decide_request(registry, caches, review, &request).await;
    serde_json::to_vec(&decide::review(&request.uid, &decision)).unwrap_or_default()
}

async fn decide_request(
    registry: &Registry,
    caches: Option<&SharedCache>,
    review: Review,
    request: &Request,
) -> Decision {
    let admit = Decision {
        allowed: true,
        result: "allowed",
        ..Decision::default()
    };
    if request
        .namespace
        .as_deref()
        .is_some_and(|ns| config::EXEMPT_NAMESPACES.contains(&ns))
    {
        return admit;
    }
    if metadata_only(request) {
        return admit;
    }
    let Some(version) = admitting(registry, &request.group, &request.kind, review) else {
        return admit;
    };
    // Objects outside the plugin's grant are none of its business (its
    // controller never sees them either). A grant selecting namespaces by
    // label cannot be decided here (no Namespace cache): its plugin is
    // asked about every namespace.
    if let Some(namespace) = &request.namespace
        && !version.grant.needs_namespace_labels()
        && !NamespaceGate::new(version.grant.clone(), None).allows(namespace)
    {
        return admit;
    }
    let manifest = version.plugin.manifest();
    let by = Answerer {
        plugin: &manifest.name,
        version: &manifest.version,
        mode: version.admission.mode,
        failure_policy: version.admission.failure_policy,
    };
    let ctx = call_context(&version, managed_by(&request.object));
    let cache = cache_view(caches, &version);
    let object_text = request.object.to_string();
    let candidate = registry
        .versions(&manifest.name)
        .and_then(|v| v.current().candidate.clone());
    let newest_serving = newest_serving(&manifest.version, candidate.as_ref());
    let shadow = |stable: Answer| {
        if let Some(candidate) = &candidate {
            let request = ShadowRequest {
                function: review.function(),
                operation: request.operation,
                object: request.object.clone(),
                old_object: request.old_object.clone(),
            };
            let cache = cache_view(caches, &candidate.version);
            shadow::spawn(
                registry.metrics(),
                candidate,
                &manifest.version,
                request,
                stable,
                cache,
            );
        }
    };
    let decision = match review {
        Review::Validate => {
            let refused_as_too_new = (request.operation == AdmissionOperation::Update)
                .then(|| {
                    let old = request.old_object.as_ref()?;
                    let needed =
                        old["metadata"]["annotations"][MIN_COMPATIBLE_VERSION_ANNOTATION].as_str();
                    decide::too_new(&manifest.name, &newest_serving, needed)
                })
                .flatten();
            let verdict = match refused_as_too_new {
                Some(message) => Ok(crate::contract::Verdict {
                    allowed: false,
                    message,
                    fields: vec![],
                    warnings: vec![],
                }),
                None => {
                    let verdict = version
                        .plugin
                        .validate(
                            &ctx,
                            request.operation,
                            object_text,
                            request.old_object.as_ref().map(Value::to_string),
                            cache,
                        )
                        .await
                        .map_err(|error| error.to_string());
                    if let Ok(verdict) = &verdict {
                        shadow(Answer::Verdict(verdict.clone()));
                    }
                    verdict
                }
            };
            decide::validation(by, verdict)
        }
        Review::Mutate => {
            let defaulted = version
                .plugin
                .defaults(&ctx, request.operation, object_text, cache)
                .await
                .map_err(|error| error.to_string());
            if let Ok(Ok(answer)) = defaulted
                .as_ref()
                .map(|d| shadow::patch_answer(&request.object, d.clone()))
            {
                shadow(answer);
            }
            decide::mutation(by, &request.object, defaulted)
        }
    };
    registry
        .metrics()
        .admission(&manifest.name, review.function(), decision.result);
    match decision.result {
        "error" => {
            tracing::warn!(plugin = %manifest.name, version = %manifest.version, message = %decision.message, warnings = ?decision.warnings, "admission call failed");
        }
        "audited" | "warned" => {
            tracing::info!(plugin = %manifest.name, version = %manifest.version, result = decision.result, warnings = ?decision.warnings, "admission verdict not enforced");
        }
        _ => {}
    }
    decision
}

/// The newest version serving objects of the plugin whose stable version is
/// `stable`: a split canary's candidate may have written its newer version
/// on objects it serves, so only an object newer than every serving
/// version is refused.
fn newest_serving(stable: &str, candidate: Option<&RolloutCandidate>) -> String {
    candidate
        .map(|c| c.version.plugin.manifest().version.clone())
        .filter(|candidate| {
            matches!(
                (semver::Version::parse(candidate), semver::Version::parse(stable)),
                (Ok(candidate), Ok(stable)) if candidate > stable
            )
        })
        .unwrap_or_else(|| stable.to_string())
}

/// The `managed-by-version` mark of `object` (JSON), if any.
fn managed_by(object: &Value) -> Option<String> {
    object["metadata"]["annotations"][MANAGED_BY_VERSION_ANNOTATION]
        .as_str()
        .map(str::to_string)
}

/// The context of one admission call of `version` (the webhook's, the
/// shadow's and the audit's): its version, its deployment config, and the
/// object's `managed-by-version` mark.
fn call_context(version: &ActiveVersion, managed_by_version: Option<String>) -> CallContext {
    CallContext {
        plugin_version: version.plugin.manifest().version.clone(),
        attempt: 1,
        managed_by_version,
        config: version.config.clone(),
    }
}
