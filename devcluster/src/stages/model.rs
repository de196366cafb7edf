//! The `kwok.x-k8s.io/v1alpha1` `Stage` resource, as kwok v0.8.0 defines it
//! (`pkg/apis/v1alpha1/stage_types.go`), for the fields the devcluster's
//! engine runs. Fields the engine does not run (CEL expressions, `steps`,
//! `apply`, impersonation) are kept so that a stage using them is refused
//! with a clear error instead of silently behaving differently.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One stage: which objects it applies to, when, and what it does to them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// `kwok.x-k8s.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `Stage`.
    #[serde(default)]
    pub kind: String,
    /// Only `name` is used: stages are replaced by name.
    pub metadata: StageMeta,
    /// What the stage does.
    pub spec: StageSpec,
}

/// The metadata of a stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageMeta {
    /// The stage's name, unique within a stage set.
    pub name: String,
}

/// `spec` of a stage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSpec {
    /// The kind of object the stage applies to.
    pub resource_ref: ResourceRef,
    /// Which objects of that kind match; kwok ignores a stage without one.
    #[serde(default)]
    pub selector: Option<StageSelector>,
    /// Relative weight among several matching stages.
    #[serde(default)]
    pub weight: i64,
    /// Reads the weight from the object (a jq expression).
    #[serde(default)]
    pub weight_from: Option<ExpressionFrom>,
    /// How long to wait before applying `next`.
    #[serde(default)]
    pub delay: Option<StageDelay>,
    /// What to do.
    #[serde(default)]
    pub next: StageNext,
    /// Evaluate the next stage at once after this one (kwok's flag; the
    /// devcluster's engine always re-evaluates an object after changing it).
    #[serde(default)]
    pub immediate_next_stage: Option<bool>,
    /// kwok's step list; not run by the devcluster's engine (refused when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Value>,
}

/// `resourceRef`: `apiGroup` is the group/version (`v1`, `apps/v1`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// `v1` for core, `apps/v1`, `batch/v1`, …
    #[serde(default)]
    pub api_group: String,
    /// E.g. `Pod`.
    pub kind: String,
}

/// `selector`: every part must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSelector {
    /// Labels the object must carry with these values.
    #[serde(default)]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Annotations the object must carry with these values.
    #[serde(default)]
    pub match_annotations: Option<BTreeMap<String, String>>,
    /// jq expressions over the object.
    #[serde(default)]
    pub match_expressions: Option<Vec<MatchExpression>>,
}

/// One requirement: the values a jq `key` yields, tested by `operator`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MatchExpression {
    /// A jq expression, e.g. `.status.phase`.
    #[serde(default)]
    pub key: String,
    /// How the values are tested.
    #[serde(default)]
    pub operator: Option<SelectorOperator>,
    /// The values for `In`/`NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
    /// A CEL expression; not run by the devcluster's engine (refused when set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cel: Option<Value>,
}

/// The operators of a match expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SelectorOperator {
    /// Some value is one of `values`.
    In,
    /// No value is one of `values`.
    NotIn,
    /// Some non-null value exists.
    Exists,
    /// No non-null value exists.
    DoesNotExist,
}

/// `delay`: a duration, optionally raised at random up to a jitter bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageDelay {
    /// The base delay.
    #[serde(default)]
    pub duration_milliseconds: Option<i64>,
    /// Reads the base delay from the object (a duration like `5s` or an RFC 3339 time).
    #[serde(default)]
    pub duration_from: Option<ExpressionFrom>,
    /// The upper bound of the delay.
    #[serde(default)]
    pub jitter_duration_milliseconds: Option<i64>,
    /// Reads the upper bound from the object.
    #[serde(default)]
    pub jitter_duration_from: Option<ExpressionFrom>,
}

/// A value read from the object by a jq expression.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionFrom {
    /// The jq expression.
    #[serde(default)]
    pub expression_from: String,
}

/// `next`: what the stage does, in kwok's order: event, finalizers, delete, patches.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StageNext {
    /// An event to record about the object.
    #[serde(default)]
    pub event: Option<StageEvent>,
    /// Finalizers to add or remove.
    #[serde(default)]
    pub finalizers: Option<StageFinalizers>,
    /// Delete the object.
    #[serde(default)]
    pub delete: bool,
    /// Patches rendered from templates.
    #[serde(default)]
    pub patches: Vec<StagePatch>,
    /// A Go template rendering the new `status` (a patch of the status subresource).
    #[serde(default)]
    pub status_template: String,
    /// The subresource the status template patches (`status` by default).
    #[serde(default)]
    pub status_subresource: Option<String>,
}

/// An event recorded about the object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageEvent {
    /// `Normal` or `Warning`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// A CamelCase reason.
    #[serde(default)]
    pub reason: String,
    /// A human-readable message.
    #[serde(default)]
    pub message: String,
}

/// Finalizer changes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StageFinalizers {
    /// Finalizers to add.
    #[serde(default)]
    pub add: Vec<FinalizerItem>,
    /// Finalizers to remove.
    #[serde(default)]
    pub remove: Vec<FinalizerItem>,
    /// Remove every finalizer.
    #[serde(default)]
    pub empty: bool,
}

/// One finalizer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FinalizerItem {
    /// The finalizer's name.
    #[serde(default)]
    pub value: String,
}

/// A patch rendered from a template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StagePatch {
    /// `status` to patch the status subresource; empty for the main resource.
    #[serde(default)]
    pub subresource: String,
    /// Wraps the rendered document under this key (e.g. `status`).
    #[serde(default)]
    pub root: String,
    /// A Go template rendering the patch document (YAML or JSON).
    #[serde(default)]
    pub template: String,
    /// `merge`, `strategic` or `json`; by default strategic for Pods and
    /// Nodes and merge otherwise, as kwok does.
    #[serde(default, rename = "type")]
    pub type_: Option<PatchType>,
}

/// How a rendered patch applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum PatchType {
    /// RFC 6902 JSON patch.
    #[serde(rename = "json")]
    Json,
    /// RFC 7386 JSON merge patch.
    #[serde(rename = "merge")]
    Merge,
    /// Kubernetes strategic merge patch.
    #[serde(rename = "strategic")]
    Strategic,
}

impl Stage {
    /// The stage's name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// Whether this stage applies to objects of `api_version`/`kind`.
    pub fn applies_to(&self, api_version: &str, kind: &str) -> bool {
        let r = &self.spec.resource_ref;
        r.kind == kind && (r.api_group.is_empty() || r.api_group == api_version)
    }

    /// The patches `next` implies: the status template (as kwok turns it into
    /// a patch of the status subresource rooted at `status`) then `patches`.
    pub fn patches(&self) -> Vec<StagePatch> {
        let next = &self.spec.next;
        let mut out = Vec::new();
        if !next.status_template.is_empty() {
            out.push(StagePatch {
                subresource: next
                    .status_subresource
                    .clone()
                    .unwrap_or_else(|| "status".to_string()),
                root: "status".to_string(),
                template: next.status_template.clone(),
                type_: None,
            });
        }
        out.extend(next.patches.iter().cloned());
        out
    }
}
