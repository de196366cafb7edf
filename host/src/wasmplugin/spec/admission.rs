//! `spec.admission` of a WasmPlugin: how the host serves the plugin's
//! `validate` and `defaults` as admission webhooks (docs/admission.md).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::contract::AdmissionOperation;
use crate::registry::{
    AdmissionMode, AdmissionSettings, DEFAULT_ADMISSION_TIMEOUT_SECONDS,
    DEFAULT_AUDIT_INTERVAL_SECONDS, FailurePolicy, MatchCondition,
};

/// `spec.admission`. Every field is optional; absent, the plugin's
/// admission enforces, fails closed, times out after 10 s and sees creates
/// and updates.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSpec {
    /// `Enforce` (refusals refuse, defaults apply), `Warn` (refusals become
    /// warnings) or `Audit` (nothing is refused or changed; what would
    /// have been is recorded). Switchable at any time. Default `Enforce`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ModeSpec>,
    /// What the API server does when the webhook cannot answer, and what
    /// the host answers when the plugin's call fails: `Fail` (refuse) or
    /// `Ignore` (admit). Default `Fail`. Objects in `kube-system` are
    /// never sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicySpec>,
    /// The API server's timeout for one review, 1-30 s. Default 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 30))]
    pub timeout_seconds: Option<u8>,
    /// The operations sent: `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    /// Default `CREATE` and `UPDATE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operations: Option<Vec<OperationSpec>>,
    /// CEL match conditions passed to the webhook configurations (the API
    /// server evaluates them before calling the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_conditions: Option<Vec<MatchConditionSpec>>,
    /// Seconds between audits of the stored objects against the serving
    /// version's `validate` (besides the audit on load and on each new
    /// version); 0 turns the periodic audit off. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_interval_seconds: Option<u32>,
}

/// `spec.admission.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum ModeSpec {
    /// Refusals refuse; defaults apply.
    Enforce,
    /// Refusals become admission warnings; defaults apply.
    Warn,
    /// Nothing is refused or changed; verdicts are recorded.
    Audit,
}

/// `spec.admission.failurePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub enum FailurePolicySpec {
    /// Refuse when admission cannot answer.
    Fail,
    /// Admit when admission cannot answer.
    Ignore,
}

/// One operation of `spec.admission.operations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum OperationSpec {
    /// Creates.
    Create,
    /// Updates.
    Update,
    /// Deletes.
    Delete,
    /// Connects (exec, attach, port-forward of Pods).
    Connect,
}

/// One CEL match condition.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
pub struct MatchConditionSpec {
    /// Its name (unique in the list).
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// A CEL expression over `object`, `oldObject`, `request`, returning a bool.
    #[schemars(length(min = 1))]
    pub expression: String,
}

impl AdmissionSpec {
    /// The settings the host serves with.
    pub fn settings(&self) -> AdmissionSettings {
        let defaults = AdmissionSettings::default();
        AdmissionSettings {
            mode: match self.mode {
                None | Some(ModeSpec::Enforce) => AdmissionMode::Enforce,
                Some(ModeSpec::Warn) => AdmissionMode::Warn,
                Some(ModeSpec::Audit) => AdmissionMode::Audit,
            },
            failure_policy: match self.failure_policy {
                None | Some(FailurePolicySpec::Fail) => FailurePolicy::Fail,
                Some(FailurePolicySpec::Ignore) => FailurePolicy::Ignore,
            },
            timeout_seconds: self
                .timeout_seconds
                .unwrap_or(DEFAULT_ADMISSION_TIMEOUT_SECONDS)
                .clamp(1, 30),
            operations: self.operations.as_ref().map_or(defaults.operations, |ops| {
                ops.iter()
                    .map(|op| match op {
                        OperationSpec::Create => AdmissionOperation::Create,
                        OperationSpec::Update => AdmissionOperation::Update,
                        OperationSpec::Delete => AdmissionOperation::Delete,
                        OperationSpec::Connect => AdmissionOperation::Connect,
                    })
                    .collect()
            }),
            match_conditions: self
                .match_conditions
                .iter()
                .flatten()
                .map(|c| MatchCondition {
                    name: c.name.clone(),
                    expression: c.expression.clone(),
                })
                .collect(),
            audit_interval_seconds: self
                .audit_interval_seconds
                .unwrap_or(DEFAULT_AUDIT_INTERVAL_SECONDS),
        }
    }
}

/// `status.admissionAudit`: the latest audit of the stored objects against
/// the serving version's `validate` (docs/admission.md).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionAuditStatus {
    /// The version whose `validate` judged.
    #[serde(default)]
    pub version: String,
    /// `sha256:<hex>` of its component.
    #[serde(default)]
    pub digest: String,
    /// Objects evaluated.
    #[serde(default)]
    pub checked: i64,
    /// Objects the plugin refuses.
    #[serde(default)]
    pub violations: i64,
    /// Objects whose call failed (trap, deadline, memory, invalid answer).
    #[serde(default)]
    pub errors: i64,
    /// The first 10 violations, sorted by namespace and name.
    #[serde(default)]
    pub first: Vec<AuditFindingStatus>,
    /// The first failed call of the run (`null` when none).
    #[serde(default)]
    pub first_error: Option<AuditFindingStatus>,
    /// When the run started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub started_at: Option<String>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub finished_at: Option<String>,
}

/// One object of `status.admissionAudit`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditFindingStatus {
    /// Its namespace (absent for a cluster-scoped object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// The plugin's refusal, or the failure of its call.
    #[serde(default)]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_fields_are_the_safe_defaults() {
        let settings = AdmissionSpec::default().settings();
        assert_eq!(settings, AdmissionSettings::default());
        assert_eq!(settings.mode, AdmissionMode::Enforce);
        assert_eq!(settings.failure_policy, FailurePolicy::Fail);
        assert_eq!(settings.timeout_seconds, 10);
        assert_eq!(
            settings.operations,
            vec![AdmissionOperation::Create, AdmissionOperation::Update]
        );
    }

    #[test]
    fn the_spec_reads_as_written() {
        let spec: AdmissionSpec = serde_json::from_value(serde_json::json!({
            "mode": "Warn", "failurePolicy": "Ignore", "timeoutSeconds": 3,
            "operations": ["CREATE"],
            "matchConditions": [{"name": "not-test", "expression": "!object.metadata.name.startsWith('test-')"}],
        }))
        .unwrap();
        let settings = spec.settings();
        assert_eq!(settings.mode, AdmissionMode::Warn);
        assert_eq!(settings.failure_policy, FailurePolicy::Ignore);
        assert_eq!(settings.timeout_seconds, 3);
        assert_eq!(settings.operations, vec![AdmissionOperation::Create]);
        assert_eq!(settings.match_conditions[0].name, "not-test");
        assert_eq!(settings.audit_interval_seconds, 600);
        let off: AdmissionSpec =
            serde_json::from_value(serde_json::json!({"auditIntervalSeconds": 0})).unwrap();
        assert_eq!(off.settings().audit_interval_seconds, 0);
    }
}
