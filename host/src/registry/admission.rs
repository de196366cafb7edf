//! How a deployment's admission is served (`spec.admission` of its
//! WasmPlugin; defaults for plugins loaded otherwise): it travels with the
//! serving version ([`super::ActiveVersion::admission`]) to the webhook,
//! which reads it per request, so a mode switch applies to the next one.

use crate::contract::AdmissionOperation;

/// The API server's timeout for one review when the WasmPlugin does not
/// say, in seconds.
pub const DEFAULT_ADMISSION_TIMEOUT_SECONDS: u8 = 10;

/// How often the stored objects are audited against the stable version's
/// `validate` when the WasmPlugin does not say, in seconds (10 minutes).
pub const DEFAULT_AUDIT_INTERVAL_SECONDS: u32 = 600;

/// What a plugin's verdicts do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdmissionMode {
    /// Refusals refuse; defaults apply.
    #[default]
    Enforce,
    /// Refusals become admission warnings; defaults apply.
    Warn,
    /// Nothing is refused or changed; verdicts are recorded.
    Audit,
}

/// What happens when admission cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailurePolicy {
    /// Refuse.
    #[default]
    Fail,
    /// Admit.
    Ignore,
}

/// One CEL match condition of the webhook configurations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatchCondition {
    /// Its name.
    pub name: String,
    /// The CEL expression.
    pub expression: String,
}

/// A deployment's admission settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionSettings {
    /// What verdicts do.
    pub mode: AdmissionMode,
    /// What happens when admission cannot answer.
    pub failure_policy: FailurePolicy,
    /// The API server's timeout for one review (1-30 s).
    pub timeout_seconds: u8,
    /// The operations the API server sends.
    pub operations: Vec<AdmissionOperation>,
    /// CEL conditions the API server checks before sending.
    pub match_conditions: Vec<MatchCondition>,
    /// Seconds between periodic audits of the stored objects; 0: only on
    /// start and when the stable version changes.
    pub audit_interval_seconds: u32,
}

impl Default for AdmissionSettings {
    /// Enforce, fail closed, 10 s, creates and updates, an audit every
    /// 10 minutes.
    fn default() -> AdmissionSettings {
        AdmissionSettings {
            mode: AdmissionMode::Enforce,
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: DEFAULT_ADMISSION_TIMEOUT_SECONDS,
            operations: vec![AdmissionOperation::Create, AdmissionOperation::Update],
            match_conditions: Vec::new(),
            audit_interval_seconds: DEFAULT_AUDIT_INTERVAL_SECONDS,
        }
    }
}
