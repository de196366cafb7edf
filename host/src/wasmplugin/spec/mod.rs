//! The WasmPlugin resource as Rust types: its `spec` (from which the CRD in
//! deploy/crds/wasmplugin.yaml is generated, see [`super::crd_yaml`]), its
//! `status`, and the parsing of its limits (`"5s"`, `"256Mi"`) into engine
//! limits.
//!
//! The schema carries every check the API server can make (exactly one
//! source, patterns, ranges); [`WasmPluginSpec::call_limits`] and
//! [`OciSpec::poll_interval`] make the ones it cannot (a duration or size
//! that overflows), with the [`SpecError`] messages the WasmPlugin status
//! shows.

use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::{Grant, ReconcileLimits};
use crate::engine::CallLimits;

mod admission;
mod canary;

pub use admission::{
    AdmissionAuditStatus, AdmissionSpec, AuditFindingStatus, FailurePolicySpec, MatchConditionSpec,
    ModeSpec, OperationSpec,
};
pub use canary::{
    AnalysisSpec, AnalysisStatus, CanaryMode, CanarySelector, CanarySpec, CanaryStatus,
    CanaryVersion, DiffSample, DryRunStatus, ObjectProblem, Promotion, SelectorRequirement,
    ShadowStatus,
};

/// `spec` of a WasmPlugin. The derive generates the [`WasmPlugin`] object
/// type and its CRD (`WasmPlugin::crd()`, printed by [`super::crd_yaml`]).
#[derive(CustomResource, Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "wasm-operator.dev",
    version = "v1alpha1",
    kind = "WasmPlugin",
    plural = "wasmplugins",
    shortname = "wp",
    status = "WasmPluginStatus",
    derive = "PartialEq",
    doc = "A plugin component the host serves: where it comes from, its config and limits.",
    printcolumn(name = "Plugin", type_ = "string", json_path = ".status.plugin"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.version"),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.sourceKind"),
    printcolumn(
        name = "Stable",
        type_ = "string",
        json_path = ".status.canary.stable.version"
    ),
    printcolumn(
        name = "Canary",
        type_ = "string",
        json_path = ".status.canary.candidate.version"
    ),
    printcolumn(name = "Mode", type_ = "string", json_path = ".status.canary.mode"),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".status.canary.weight"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.canary.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
// clippy takes the repeated `type_ = "string"` of the printer columns for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Which plugin component to serve: its source, config and limits.",
    transform = crate::util::schema::kubernetes_schema
)]
pub struct WasmPluginSpec {
    /// Where the component comes from; exactly one of file, configMap, oci.
    pub source: Source,
    /// Free JSON handed to the plugin on every call.
    // `default` keeps the field optional in the schema: with `schema_with`,
    // schemars cannot see that the type is an `Option`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::util::schema::free_form_object")]
    pub config: Option<Value>,
    /// Per-call resource limits (engine defaults where unset).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,
    /// Reconciles of this plugin running at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 256))]
    pub concurrency: Option<usize>,
    /// What the cluster operator grants the plugin: kinds it may own and
    /// read, namespaces, cluster-scoped kinds, and a ServiceAccount its
    /// writes impersonate. Absent: the restricted default (non-sensitive
    /// namespaced kinds, every namespace but the system ones). A manifest
    /// asking for more is refused (PermissionDenied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<Grant>,
    /// Serve a version whose `convert` does not bring every stored object
    /// back identical through the other served API versions (the host
    /// logs the differences). A `convert` that fails on an
    /// object is refused regardless. Absent: false (docs/conversion.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_lossy_conversion: Option<bool>,
    /// A second version rolled out next to the one `source` serves: shadowed
    /// (computes, never writes; its answers are compared) or split (serves a
    /// sticky share of the objects), analysed, then promoted or rolled back.
    /// See docs/canary.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanarySpec>,
    /// How the plugin's `validate` and `defaults` are served as admission
    /// webhooks for its primary kind: mode (`Enforce`, `Warn`, `Audit`),
    /// failure policy, timeout, operations. Absent: enforce, fail closed.
    /// See docs/admission.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionSpec>,
    /// The signatures an OCI source's manifest must carry before it loads
    /// (cosign 3 bundles or cosign 2 tag-based signatures, verified offline
    /// against these keys and certificate identities): for the stable
    /// version, every canary candidate and every moved tag. Absent: the
    /// host-wide policy of `wasm-operator run --verification-policy`, if
    /// any. Only for `source.oci` (and `canary.source.oci`). See
    /// docs/security.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<crate::oci::signature::VerificationPolicy>,
}

/// `spec.source`: exactly one of the three. The schema enforces it twice:
/// the derived `oneOf` of the variants, and `minProperties`/`maxProperties`
/// as in the hand-written CRD this one replaced.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub enum Source {
    /// A file on the host's filesystem.
    File {
        /// Absolute path of the .wasm file on the host's filesystem; watched for changes.
        #[schemars(length(min = 1))]
        path: String,
    },
    /// `binaryData[key]` of a ConfigMap (plain or gzip).
    ConfigMap {
        /// Namespace of the ConfigMap.
        #[schemars(length(min = 1))]
        namespace: String,
        /// Name of the ConfigMap.
        #[schemars(length(min = 1))]
        name: String,
        /// Key under binaryData holding the component (plain or gzip).
        #[schemars(length(min = 1))]
        key: String,
    },
    /// An OCI artifact.
    Oci(OciSpec),
}

/// `spec.source.oci`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OciSpec {
    /// Image reference, e.g. registry.example.com/plugins/webapp:1.2 or ...@sha256:<hex>.
    #[schemars(length(min = 1))]
    pub reference: String,
    /// Pins the manifest to this sha256 digest; nothing else is accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^sha256:[a-f0-9]{64}$"))]
    pub digest: Option<String>,
    /// A kubernetes.io/dockerconfigjson Secret.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<SecretRef>,
    /// How often an unpinned tag is checked for a new digest (default 5m).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub poll_interval: Option<String>,
}

/// A namespaced Secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct SecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

/// `spec.limits`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Deadline of one call, e.g. 5s.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m)$"))]
    pub call_timeout: Option<String>,
    /// Largest linear memory of one call, e.g. 256Mi.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(Ki|Mi|Gi)?$"))]
    pub memory: Option<String>,
    /// Largest answer of one call, e.g. 16Mi.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(Ki|Mi|Gi)?$"))]
    pub output_size: Option<String>,
    /// Log bytes one call may emit (log import and stdout/stderr); the rest
    /// is truncated. Default 64Ki.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(Ki|Mi|Gi)?$"))]
    pub log_size: Option<String>,
    /// Children one answer may desire; more is refused (TooManyChildren).
    /// Default 500.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100_000))]
    pub max_children: Option<u32>,
    /// Largest status patch of one answer; larger is refused
    /// (StatusTooLarge). Default 256Ki.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(Ki|Mi|Gi)?$"))]
    pub max_status_size: Option<String>,
    /// Longest condition message; longer ones are truncated. Default 32Ki.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(Ki|Mi|Gi)?$"))]
    pub max_condition_message: Option<String>,
    /// Events one answer may record; the rest are dropped. Default 20.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub max_events_per_reconcile: Option<u32>,
    /// Events one object may receive in a burst. Default 25.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub event_burst: Option<u32>,
    /// One more event for an object per this interval. Default 5m.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub event_refill: Option<String>,
    /// Shortest requeue-after honoured; sooner is delayed to it. Default 1s.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub min_requeue_after: Option<String>,
    /// Reconciles of one unchanged object in a burst before
    /// it is a hot loop. Default 50.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub reconcile_burst: Option<u32>,
    /// One more reconcile of an object per this interval. Default 2s.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub reconcile_refill: Option<String>,
    /// Children the plugin may create at once, over all its primaries;
    /// beyond it new children wait (LimitExceeded). Default 1000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1_000_000))]
    pub creation_burst: Option<u32>,
    /// One more creation per this interval. Default 100ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[0-9]+(ms|s|m|h)$"))]
    pub creation_refill: Option<String>,
    /// Children the plugin may create in all while a replica's controller
    /// of it runs; beyond it new children are not created
    /// (LimitExceeded). Default 100000.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100_000_000))]
    pub max_creations: Option<u64>,
}

/// `status` of a WasmPlugin, as the WasmPlugin controller writes it: what
/// serves, the `Ready` and `Degraded` conditions, per-version counts, the
/// canary and the storage migration.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "What serves, the Ready and Degraded conditions, and per-version counts.",
    transform = crate::util::schema::kubernetes_schema
)]
pub struct WasmPluginStatus {
    /// Manifest name of the plugin that serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// Manifest version that serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of the component that serves.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// For an OCI source: `sha256:<hex>` of the OCI manifest pulled (what
    /// `REFERENCE@sha256:` and `spec.source.oci.digest` pin; it wraps the
    /// component, so it differs from `digest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oci_manifest_digest: Option<String>,
    /// Who signed the serving version's OCI manifest, as verified at its
    /// fetch against `spec.verification` (or the host-wide policy); absent
    /// when no policy applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<SignatureStatus>,
    /// Where the serving component came from, e.g. `file:/plugins/webapp.wasm`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `file`, `configMap` or `oci` (the Source printer column).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_kind: Option<String>,
    /// When the serving version was loaded (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub loaded_at: Option<String>,
    /// The generation of the spec this status describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` and `Degraded`; the canary's; `StorageMigration`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<WasmPluginCondition>>,
    /// Every version this host ran for the WasmPlugin, with its counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub versions: Option<Vec<VersionStatus>>,
    /// The canary of `spec.canary`: where it stands and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStatus>,
    /// The storage-version migration of the plugin's CRD this host ran
    /// last (see the `StorageMigration` condition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_migration: Option<StorageMigrationStatus>,
    /// Primaries of the plugin's kind in namespaces its grant excludes (not
    /// reconciled; see the `OutsideGrant` condition). Absent when none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside_grant: Option<OutsideGrantStatus>,
    /// The latest audit of the stored primaries against the serving
    /// version's `validate` (docs/admission.md). Absent while the serving
    /// version does not implement `validate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission_audit: Option<AdmissionAuditStatus>,
}

/// `status.signature`: the verified signature of the serving version.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignatureStatus {
    /// The OCI manifest digest the signature names.
    pub digest: String,
    /// Who signed: `key sha256:<fingerprint> (name)` or
    /// `<subject> (issuer <issuer>)`.
    pub signer: String,
    /// `bundle` (cosign 3, by referrers) or `tag` (`sha256-<hex>.sig`).
    pub format: String,
    /// When it was verified (RFC 3339).
    #[schemars(extend("format" = "date-time"))]
    pub verified_at: String,
}

/// `status.outsideGrant`: the primaries the grant's namespaces leave out.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutsideGrantStatus {
    /// How many primaries lie outside the grant.
    #[serde(default)]
    pub count: i64,
    /// A few of them (`namespace/name`, sorted, at most 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// `status.storageMigration`: the objects of the plugin's CRD rewritten in
/// its storage version so far.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageMigrationStatus {
    /// The CRD (`<plural>.<group>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd: Option<String>,
    /// The version every object is rewritten in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_version: Option<String>,
    /// The CRD's `status.storedVersions` when the migration started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored_versions: Option<Vec<String>>,
    /// Objects rewritten so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migrated: Option<i64>,
    /// Objects to rewrite in all, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// Objects the API server refused to rewrite (`namespace/name: why`,
    /// at most 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Vec<String>>,
}

/// One condition of a WasmPlugin's status.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginCondition {
    /// `Ready` or `Degraded`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why, in one word an on-call engineer can search for (`Loaded`, `SourceNotFound`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What is wrong and what to do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the condition last changed status (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub last_transition_time: Option<String>,
    /// The generation of the spec the condition describes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Reconcile and failure counts of one version a WasmPlugin ran.
///
/// The fields are optional in the schema, as in the hand-written CRD this
/// one replaced; the controller always writes all four.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(description = "Reconcile and failure counts of one version this host ran.")]
pub struct VersionStatus {
    /// The manifest's version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `sha256:<hex>` of the component.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Finished reconciles served by this version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reconciles: Option<i64>,
    /// Reconciles of this version that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failures: Option<i64>,
}

/// The comment at the top of deploy/crds/wasmplugin.yaml: the file is
/// generated, and how to regenerate it.
const CRD_YAML_HEADER: &str = "\
# WasmPlugin: how a cluster operator deploys a wasm-operator plugin.
# Generated from the types in host/src/wasmplugin/spec/; do not edit by hand.
# Regenerate with `wasm-operator crd print > deploy/crds/wasmplugin.yaml`
# (or `cargo run -p wasm-operator -- crd print`), then copy it to
# examples/wasmplugin/crd.yaml: tests keep both equal to the generated CRD.
";

/// The WasmPlugin CRD as the YAML of deploy/crds/wasmplugin.yaml: a header
/// comment, then `WasmPlugin::crd()`. `wasm-operator crd print` prints it.
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    let crd = serde_yaml::to_string(&WasmPlugin::crd())?;
    Ok(format!("{CRD_YAML_HEADER}{crd}"))
}

/// Shortest `limits.callTimeout`: one tick of the epoch ticker; a shorter
/// deadline would fail every call.
pub const MIN_CALL_TIMEOUT: Duration = Duration::from_millis(10);
/// Smallest `limits.memory`: below it no component built with our SDK even
/// instantiates (its data and a stack take about a megabyte).
pub const MIN_MEMORY: usize = 1 << 20;
/// Smallest `limits.outputSize` and `limits.maxStatusSize`: room for an
/// empty answer.
pub const MIN_OUTPUT: usize = 1 << 10;
/// Smallest `limits.maxConditionMessage`.
pub const MIN_MESSAGE: usize = 64;

/// Refuses a limit below `minimum`.
fn at_least<T: PartialOrd>(
    field: &'static str,
    value: &str,
    parsed: T,
    minimum: T,
    shown: &'static str,
) -> Result<(), SpecError> {
    if parsed < minimum {
        return Err(SpecError::TooSmall {
            field,
            value: value.to_string(),
            minimum: shown,
        });
    }
    Ok(())
}

/// Default poll interval of an unpinned OCI tag.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// Why a spec value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `spec` does not match the WasmPlugin schema.
    #[error("spec is not a valid WasmPlugin spec: {0}; see deploy/crds/wasmplugin.yaml")]
    Invalid(String),
    /// A duration such as `callTimeout` is malformed.
    #[error("{field} {value:?} is not a duration; write e.g. \"500ms\", \"5s\", \"5m\" or \"1h\"")]
    Duration {
        /// The spec field, e.g. `limits.callTimeout`.
        field: &'static str,
        /// The value as written.
        value: String,
    },
    /// A limit so small that every call would fail.
    #[error(
        "{field} {value:?} is below the minimum of {minimum}: every call would fail; raise it (or leave it unset for the default)"
    )]
    TooSmall {
        /// The spec field, e.g. `limits.memory`.
        field: &'static str,
        /// The value as written.
        value: String,
        /// The smallest accepted value, as written in a spec.
        minimum: &'static str,
    },
    /// `spec.canary` is contradictory or out of range.
    #[error("spec.canary.{field} {message}")]
    Canary {
        /// The field under `spec.canary`, e.g. `steps`.
        field: &'static str,
        /// What is wrong and what to write instead.
        message: String,
    },
    /// A size such as `memory` is malformed.
    #[error(
        "{field} {value:?} is not a size; write e.g. \"65536\", \"512Ki\", \"256Mi\" or \"1Gi\""
    )]
    Size {
        /// The spec field, e.g. `limits.memory`.
        field: &'static str,
        /// The value as written.
        value: String,
    },
}

impl WasmPluginSpec {
    /// Reads `spec` from an object's JSON.
    pub fn from_object(object: &Value) -> Result<WasmPluginSpec, SpecError> {
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        let spec: WasmPluginSpec =
            serde_json::from_value(spec).map_err(|e| SpecError::Invalid(e.to_string()))?;
        if spec.verification.is_some() && !matches!(spec.source, Source::Oci(_)) {
            return Err(SpecError::Invalid(
                "spec.verification applies to OCI sources only (a file or ConfigMap carries no signature); remove it or use source.oci".to_string(),
            ));
        }
        Ok(spec)
    }

    /// The call limits: `defaults` overridden by what the spec sets.
    pub fn call_limits(&self, defaults: CallLimits) -> Result<CallLimits, SpecError> {
        let mut limits = defaults;
        let Some(spec) = &self.limits else {
            return Ok(limits);
        };
        if let Some(value) = &spec.call_timeout {
            limits.timeout = parse_duration("limits.callTimeout", value)?;
            at_least(
                "limits.callTimeout",
                value,
                limits.timeout,
                MIN_CALL_TIMEOUT,
                "10ms",
            )?;
        }
        if let Some(value) = &spec.memory {
            limits.memory_bytes = parse_size("limits.memory", value)?;
            at_least(
                "limits.memory",
                value,
                limits.memory_bytes,
                MIN_MEMORY,
                "1Mi",
            )?;
        }
        if let Some(value) = &spec.output_size {
            limits.output_bytes = parse_size("limits.outputSize", value)?;
            at_least(
                "limits.outputSize",
                value,
                limits.output_bytes,
                MIN_OUTPUT,
                "1Ki",
            )?;
        }
        if let Some(value) = &spec.log_size {
            limits.log_bytes = parse_size("limits.logSize", value)?;
        }
        Ok(limits)
    }

    /// The limits per reconcile: the defaults overridden by what the spec
    /// sets.
    pub fn reconcile_limits(&self) -> Result<ReconcileLimits, SpecError> {
        let mut limits = ReconcileLimits::default();
        let Some(spec) = &self.limits else {
            return Ok(limits);
        };
        let count = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
        if let Some(n) = spec.max_children {
            limits.max_children = count(n);
        }
        if let Some(value) = &spec.max_status_size {
            limits.max_status_bytes = parse_size("limits.maxStatusSize", value)?;
            at_least(
                "limits.maxStatusSize",
                value,
                limits.max_status_bytes,
                MIN_OUTPUT,
                "1Ki",
            )?;
        }
        if let Some(value) = &spec.max_condition_message {
            limits.max_condition_message_bytes = parse_size("limits.maxConditionMessage", value)?;
            at_least(
                "limits.maxConditionMessage",
                value,
                limits.max_condition_message_bytes,
                MIN_MESSAGE,
                "64",
            )?;
        }
        if let Some(n) = spec.max_events_per_reconcile {
            limits.max_events_per_reconcile = count(n);
        }
        if let Some(n) = spec.event_burst {
            limits.event_burst = n.max(1);
        }
        if let Some(value) = &spec.event_refill {
            limits.event_refill = parse_duration("limits.eventRefill", value)?;
        }
        if let Some(value) = &spec.min_requeue_after {
            limits.min_requeue = parse_duration("limits.minRequeueAfter", value)?;
        }
        if let Some(n) = spec.reconcile_burst {
            limits.reconcile_burst = n.max(1);
        }
        if let Some(value) = &spec.reconcile_refill {
            limits.reconcile_refill = parse_duration("limits.reconcileRefill", value)?;
        }
        if let Some(n) = spec.creation_burst {
            limits.creation_burst = n.max(1);
        }
        if let Some(value) = &spec.creation_refill {
            limits.creation_refill = parse_duration("limits.creationRefill", value)?;
        }
        if let Some(n) = spec.max_creations {
            limits.max_creations = n;
        }
        Ok(limits)
    }

    /// The config handed to the plugin (`{}` when unset).
    pub fn plugin_config(&self) -> Value {
        match &self.config {
            Some(Value::Null) | None => Value::Object(Default::default()),
            Some(config) => config.clone(),
        }
    }
}

impl Source {
    /// `file`, `configMap` or `oci` (the Source printer column).
    pub fn kind(&self) -> &'static str {
        match self {
            Source::File { .. } => "file",
            Source::ConfigMap { .. } => "configMap",
            Source::Oci(_) => "oci",
        }
    }

    /// A short description for status, events and logs, e.g.
    /// `configMap:plugins/webapp#webapp.wasm`.
    pub fn describe(&self) -> String {
        match self {
            Source::File { path } => format!("file:{path}"),
            Source::ConfigMap {
                namespace,
                name,
                key,
            } => format!("configMap:{namespace}/{name}#{key}"),
            Source::Oci(oci) => match &oci.digest {
                Some(digest) => format!("oci:{}@{digest}", oci.reference),
                None => format!("oci:{}", oci.reference),
            },
        }
    }
}

impl OciSpec {
    /// The poll interval of an unpinned tag.
    pub fn poll_interval(&self) -> Result<Duration, SpecError> {
        match &self.poll_interval {
            None => Ok(DEFAULT_POLL_INTERVAL),
            Some(value) => parse_duration("source.oci.pollInterval", value),
        }
    }

    /// True when the reference or `digest` pins one manifest.
    pub fn pinned(&self) -> bool {
        self.digest.is_some() || self.reference.contains("@sha256:")
    }
}

/// Parses `"500ms"`, `"5s"`, `"5m"`, `"1h"`.
pub fn parse_duration(field: &'static str, value: &str) -> Result<Duration, SpecError> {
    let err = || SpecError::Duration {
        field,
        value: value.to_string(),
    };
    let split = value.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
    let (number, unit) = value.split_at(split);
    let n: u64 = number.parse().map_err(|_| err())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(err()),
    }
}

/// Parses `"65536"`, `"512Ki"`, `"256Mi"`, `"1Gi"`.
pub fn parse_size(field: &'static str, value: &str) -> Result<usize, SpecError> {
    let err = || SpecError::Size {
        field,
        value: value.to_string(),
    };
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let n: usize = number.parse().map_err(|_| err())?;
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(err()),
    };
    n.checked_mul(1usize << shift).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_specs_and_limits() {
        let spec = WasmPluginSpec::from_object(&json!({"spec": {
            "source": {"oci": {"reference": "r/x:1", "pollInterval": "1s"}},
            "limits": {"callTimeout": "250ms", "memory": "64Mi", "outputSize": "512Ki"},
            "concurrency": 2,
        }}))
        .unwrap();
        let Source::Oci(oci) = &spec.source else {
            panic!("{spec:?}")
        };
        assert_eq!(oci.poll_interval().unwrap(), Duration::from_secs(1));
        assert!(!oci.pinned());
        let limits = spec.call_limits(CallLimits::default()).unwrap();
        assert_eq!(limits.timeout, Duration::from_millis(250));
        assert_eq!(limits.memory_bytes, 64 << 20);
        assert_eq!(limits.output_bytes, 512 << 10);
        assert_eq!(spec.plugin_config(), json!({}));
        assert!(parse_duration("f", "5").is_err());
        assert!(parse_size("f", "5Xi").is_err());
        let cm = WasmPluginSpec::from_object(&json!({"spec": {
            "source": {"configMap": {"namespace": "n", "name": "c", "key": "k"}}
        }}))
        .unwrap();
        assert_eq!(cm.source.describe(), "configMap:n/c#k");
        assert!(WasmPluginSpec::from_object(&json!({"spec": {}})).is_err());
    }

    #[test]
    fn limits_that_fail_every_call_are_refused() {
        let spec = |limits: Value| {
            WasmPluginSpec::from_object(&json!({"spec": {
                "source": {"file": {"path": "/p.wasm"}}, "limits": limits,
            }}))
            .unwrap()
        };
        for (limits, field) in [
            (json!({"memory": "1Ki"}), "limits.memory"),
            (json!({"callTimeout": "0s"}), "limits.callTimeout"),
            (json!({"outputSize": "10"}), "limits.outputSize"),
        ] {
            let err = spec(limits).call_limits(CallLimits::default()).unwrap_err();
            assert!(matches!(err, SpecError::TooSmall { .. }), "{err}");
            assert!(
                err.to_string().contains(field)
                    && err.to_string().contains("every call would fail"),
                "{err}"
            );
        }
        assert!(
            spec(json!({"memory": "1Mi", "callTimeout": "10ms"}))
                .call_limits(CallLimits::default())
                .is_ok()
        );
    }

    #[test]
    fn reconcile_limits_default_and_override() {
        let unset = WasmPluginSpec::from_object(
            &json!({"spec": {"source": {"file": {"path": "/p.wasm"}}}}),
        )
        .unwrap();
        assert_eq!(
            unset.reconcile_limits().unwrap(),
            ReconcileLimits::default()
        );
        let set = WasmPluginSpec::from_object(&json!({"spec": {
            "source": {"file": {"path": "/p.wasm"}},
            "limits": {"maxChildren": 10, "maxStatusSize": "4Ki", "maxConditionMessage": "1Ki",
                       "maxEventsPerReconcile": 3, "eventBurst": 5, "eventRefill": "1m",
                       "minRequeueAfter": "2s", "reconcileBurst": 7, "reconcileRefill": "500ms",
                       "logSize": "1Ki", "creationBurst": 4, "creationRefill": "1s",
                       "maxCreations": 40},
        }}))
        .unwrap();
        let limits = set.reconcile_limits().unwrap();
        assert_eq!(
            limits,
            ReconcileLimits {
                max_children: 10,
                max_status_bytes: 4 << 10,
                max_condition_message_bytes: 1 << 10,
                max_events_per_reconcile: 3,
                event_burst: 5,
                event_refill: Duration::from_secs(60),
                min_requeue: Duration::from_secs(2),
                reconcile_burst: 7,
                reconcile_refill: Duration::from_millis(500),
                creation_burst: 4,
                creation_refill: Duration::from_secs(1),
                max_creations: 40,
            }
        );
        assert_eq!(
            set.call_limits(CallLimits::default()).unwrap().log_bytes,
            1 << 10
        );
    }

    #[test]
    fn the_type_is_the_resource_the_controller_watches() {
        use kube::{CustomResourceExt, Resource};
        assert_eq!(WasmPlugin::group(&()), super::super::GROUP);
        assert_eq!(WasmPlugin::version(&()), super::super::VERSION);
        assert_eq!(WasmPlugin::kind(&()), super::super::KIND);
        assert_eq!(WasmPlugin::plural(&()), super::super::PLURAL);
        assert_eq!(WasmPlugin::crd_name(), super::super::CRD_NAME);
        assert_eq!(WasmPlugin::api_resource(), super::super::api_resource());
    }

    #[test]
    fn the_crd_keeps_the_validations_of_the_hand_written_one() {
        use kube::CustomResourceExt;
        let crd = serde_json::to_value(WasmPlugin::crd()).unwrap();
        assert_eq!(crd["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["names"]["shortNames"], json!(["wp"]));
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["subresources"]["status"], json!({}));
        let root = &version["schema"]["openAPIV3Schema"];
        assert_eq!(root["required"], json!(["spec"]));
        let spec = &root["properties"]["spec"];
        assert_eq!(spec["required"], json!(["source"]));
        let source = &spec["properties"]["source"];
        assert_eq!(
            (&source["minProperties"], &source["maxProperties"]),
            (&json!(1), &json!(1))
        );
        let oci = &source["properties"]["oci"]["properties"];
        assert_eq!(oci["digest"]["pattern"], "^sha256:[a-f0-9]{64}$");
        assert_eq!(oci["pollInterval"]["pattern"], "^[0-9]+(ms|s|m|h)$");
        assert_eq!(oci["reference"]["minLength"], 1);
        // schemars sorts `required`.
        assert_eq!(
            source["properties"]["configMap"]["required"],
            json!(["key", "name", "namespace"])
        );
        let limits = &spec["properties"]["limits"]["properties"];
        assert_eq!(limits["callTimeout"]["pattern"], "^[0-9]+(ms|s|m)$");
        assert_eq!(limits["memory"]["pattern"], "^[0-9]+(Ki|Mi|Gi)?$");
        assert_eq!(limits["outputSize"]["pattern"], "^[0-9]+(Ki|Mi|Gi)?$");
        let concurrency = &spec["properties"]["concurrency"];
        assert_eq!(concurrency["type"], "integer");
        // k8s-openapi holds the bounds as f64.
        let bounds = (
            concurrency["minimum"].as_f64(),
            concurrency["maximum"].as_f64(),
        );
        assert_eq!(bounds, (Some(1.0), Some(256.0)));
        assert!(concurrency.get("format").is_none(), "{concurrency}");
        let config = &spec["properties"]["config"];
        assert_eq!(config["type"], "object");
        assert_eq!(config["x-kubernetes-preserve-unknown-fields"], true);
        // Optional is not nullable: the API server drops a `null`, as before.
        assert!(!spec.to_string().contains("nullable"), "{spec}");
        let status = &root["properties"]["status"]["properties"];
        assert!(!status.to_string().contains("nullable"), "{status}");
        assert_eq!(status["loadedAt"]["format"], "date-time");
        assert_eq!(
            status["conditions"]["items"]["required"],
            json!(["status", "type"])
        );
    }
}
