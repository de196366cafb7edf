//! The canary's part of the WasmPlugin resource: `spec.canary` (where the
//! candidate comes from, how it is rolled out and analysed) and
//! `status.canary` (where the canary stands). The canary itself lives in
//! `wasmplugin::canary`; these are only the types the CRD is generated
//! from.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Source;

/// `spec.canary`: a candidate version next to the stable one.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanarySpec {
    /// Where the candidate comes from; the same shape as `spec.source`. It
    /// is fetched, compiled and checked like a new version (same plugin,
    /// same primary kind, the rollback rule, `spec.permissions`).
    pub source: Source,
    /// `Shadow`: the candidate computes an answer for every reconcile the
    /// stable version serves and writes nothing; the answers are compared.
    /// `Split`: the candidate serves a sticky share of the objects
    /// (`weight` or `steps`) or the objects a `selector` picks.
    pub mode: CanaryMode,
    /// Split: percent of the primaries the candidate serves (0-100), picked
    /// by a hash of their UID, so raising it only moves objects to the
    /// candidate. Not with `steps` (the first step is the starting weight)
    /// or `selector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub weight: Option<u8>,
    /// Split: the candidate serves the primaries whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<CanarySelector>,
    /// Split: weights to walk through, strictly increasing, e.g. [5, 25, 50,
    /// 100]; the weight advances one step per `stepInterval` while analysis
    /// passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 20))]
    pub steps: Option<Vec<u8>>,
    /// Split with `steps`: the least time at each step (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub step_interval: Option<String>,
    /// How the candidate is judged against the stable version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub analysis: Option<AnalysisSpec>,
    /// `Manual` (default): after passing analysis the canary waits in phase
    /// `Paused` for `wasm-operator canary promote` (or the annotation
    /// `wasm-operator.dev/canary-action: promote`). `Auto`: it is promoted
    /// by itself (Split: at the last step; Shadow: after a passing check).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promotion: Option<Promotion>,
    /// Objects per second re-reconciled when they change version (a step,
    /// a promotion, a rollback). Default 20.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.1, max = 10000.0))]
    pub rollout_rate: Option<f64>,
    /// Shadow computations of the candidate running at once (default 2);
    /// they never take a slot of the stable version's reconciles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub shadow_concurrency: Option<usize>,
    /// Skip the pre-flight dry run over every existing primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_dry_run: Option<bool>,
    /// Accept a candidate whose `min-compatible-version` makes a rollback
    /// to the stable version impossible (refused as `CanaryIrreversible`
    /// otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept_irreversible: Option<bool>,
    /// The signer a candidate must be signed by to be promoted,
    /// automatically or by hand (a `publicKey` or `certificate` rule, as in
    /// `spec.verification`). The candidate still loads under
    /// `spec.verification` and may shadow or serve its share unsigned or
    /// signed by anyone that policy allows; a promotion it fails is refused
    /// (`CanaryPromotionRefused`, event and condition) and the canary
    /// pauses. Needs an OCI `source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_signer: Option<crate::oci::signature::SignerRule>,
}

/// `spec.canary.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum CanaryMode {
    /// Computes beside the stable version, writes nothing.
    Shadow,
    /// Serves a share of the objects.
    Split,
}

/// `spec.canary.promotion`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum Promotion {
    /// Promoted by itself once analysis passes at the end.
    Auto,
    /// Waits for a person (annotation or CLI).
    #[default]
    Manual,
}

/// `spec.canary.selector`: a Kubernetes label selector on the primaries.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanarySelector {
    /// Labels a primary must carry with these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<std::collections::BTreeMap<String, String>>,
    /// Requirements a primary's labels must meet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<SelectorRequirement>>,
}

/// One requirement of a [`CanarySelector`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SelectorRequirement {
    /// The label key.
    #[schemars(length(min = 1))]
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    #[schemars(regex(pattern = r"^(In|NotIn|Exists|DoesNotExist)$"))]
    pub operator: String,
    /// Values for `In`/`NotIn`; empty for `Exists`/`DoesNotExist`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<Vec<String>>,
}

/// `spec.canary.analysis`: thresholds on the candidate compared with the
/// stable version over the window since the last conclusive check.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisSpec {
    /// How often a check runs (default 1m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub interval: Option<String>,
    /// Candidate calls (Shadow: compared answers) a window needs for a
    /// verdict (default 20); fewer is inconclusive: the canary pauses and
    /// the window grows, it does not fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub min_calls: Option<u64>,
    /// Largest share of failed candidate calls above the stable version's
    /// share over the same window, 0-1 (default 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub max_failure_ratio: Option<f64>,
    /// Shadow: largest share of compared answers that differ, 0-1 (default
    /// 0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub max_diff_ratio: Option<f64>,
    /// Largest candidate p95 call latency as a multiple of the stable
    /// version's (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1.0, max = 1000.0))]
    pub max_latency_ratio: Option<f64>,
    /// Failed checks before the candidate is rolled back (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub failure_limit: Option<u32>,
}

/// `status.canary`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// The stable version (the one `spec.source` serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable: Option<CanaryVersion>,
    /// The candidate (the one `spec.canary.source` serves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate: Option<CanaryVersion>,
    /// `Shadow` or `Split`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// `DryRun`, `Shadowing`, `Progressing`, `Paused`, `Promoted`,
    /// `RolledBack` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Percent of the objects the candidate serves (Split by weight; 100
    /// once promoted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i64>,
    /// Split by label: the selector, as `kubectl get -l` writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// What happened last, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Failed analysis checks so far (rolled back at `failureLimit`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_checks: Option<i64>,
    /// The last analysis check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_analysis: Option<AnalysisStatus>,
    /// The dry run's progress and the objects it found would fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRunStatus>,
    /// Shadow comparisons: counts and a few samples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
    /// The ConfigMap holding every object's latest field diff (read it
    /// with `wasm-operator canary diff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diffs_config_map: Option<String>,
    /// Set when a ConfigMap the host did not create holds the diffs
    /// ConfigMap's name: what it is and what to do. Its content is not the
    /// canary's diffs; the host neither writes nor reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diffs_not_the_hosts: Option<String>,
}

/// One version of a canary, with its figures.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CanaryVersion {
    /// The manifest's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of the component.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Where it comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Calls since the canary started (Shadow candidate: shadow calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<i64>,
    /// Calls that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<i64>,
    /// p95 call latency in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p95_millis: Option<f64>,
    /// The candidate: who signed it as `spec.canary.requireSigner` names
    /// (absent without `requireSigner`, or while it is not so signed: then
    /// the message says why a promotion is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
}

/// The last analysis check of a canary.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisStatus {
    /// `Passed`, `Failed` or `Inconclusive`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    /// When it ran (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub time: Option<String>,
    /// The verdict with its figures, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Candidate calls in the window (Shadow: compared answers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calls: Option<i64>,
    /// Candidate failures / calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_failure_ratio: Option<f64>,
    /// Stable failures / calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_failure_ratio: Option<f64>,
    /// Shadow: differing / compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_ratio: Option<f64>,
    /// Candidate p95 / stable p95.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ratio: Option<f64>,
}

/// A canary's dry run.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DryRunStatus {
    /// Primaries checked so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked: Option<i64>,
    /// Primaries to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// Primaries that would fail (at most a few; `failedCount` has all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<Vec<ObjectProblem>>,
    /// How many primaries would fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_count: Option<i64>,
}

/// One object and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectProblem {
    /// `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// The reason (`PluginTrap`, `ReconcileFailed`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Shadow comparisons of a canary.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// Answers compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared: Option<i64>,
    /// Compared answers that differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differing: Option<i64>,
    /// Objects whose latest answers differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub differing_objects: Option<i64>,
    /// A few differing objects and the paths that differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples: Option<Vec<DiffSample>>,
}

/// One differing object, in short.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiffSample {
    /// `namespace/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// The JSON paths that differ (at most a few).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<String>>,
}
