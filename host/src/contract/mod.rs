//! The host's view of the WIT contract (`wit/plugin.wit`): plain Rust types that
//! the engine converts plugin answers into, and that the controller, the apply
//! layer and status writing consume. Nothing here knows about wasmtime.
//!
//! Plugin output is untrusted: [`Desired::validate`] checks an answer against the
//! contract before anything acts on it.

mod grant;
mod host_objects;
pub mod limits;
mod reason;
mod watch_scope;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use grant::{
    Access, CrdAction, CrdRefusal, Excess, ExcessKind, Grant, GroupKind, NamespaceSelector,
    NotAPodSpec, PodSecurityLevel, RbacRefusal, SYSTEM_NAMESPACES, SelectorOperator,
    SelectorRequirement, ServedPlugin, ServiceAccountRef, WorkloadGrant, WorkloadPolicy,
    WorkloadRule, WorkloadViolation, check_workload, host_rules, is_built_in_group, plan_crd,
    pod_spec_path, rbac_objects, sensitivity,
};
pub use host_objects::{
    CANARY_DIFFS_SUFFIX, HOST_OBJECT_LABEL, HostObject, HostObjects, PLUGIN_CHILD_LABEL,
};
pub use limits::ReconcileLimits;
pub use reason::{Reason, ReasonScope};
pub use watch_scope::WatchScope;

/// Whether objects of a kind live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Every object lives in a namespace (`Deployment`, `ConfigMap`).
    Namespaced,
    /// Objects have no namespace (`Namespace`, `ClusterRole`).
    Cluster,
}

/// A Kubernetes resource kind, fully identified.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceKind {
    /// API group; empty for the core group.
    pub group: String,
    /// API version within the group, e.g. `v1`.
    pub version: String,
    /// CamelCase kind, e.g. `Deployment`.
    pub kind: String,
    /// Lower-case plural used in URLs, e.g. `deployments`.
    pub plural: String,
    /// Whether its objects live in a namespace.
    pub scope: Scope,
}

impl ResourceKind {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// True when `api_version`/`kind` name this kind.
    pub fn matches(&self, api_version: &str, kind: &str) -> bool {
        self.kind == kind && self.api_version() == api_version
    }
}

/// Names one object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `group/version`, or just `version` for the core group (`v1`).
    pub api_version: String,
    /// CamelCase kind, e.g. `Secret`.
    pub kind: String,
    /// Absent for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

/// Optional interfaces a plugin really implements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OptionalInterfaces {
    /// The `migration` interface is real: at least one of its functions
    /// (which ones: [`OptionalInterfaces::convert`] and
    /// [`OptionalInterfaces::upgrade`]).
    pub migration: bool,
    /// `migration.convert` is real: the host serves the CRD's conversion
    /// with it.
    #[serde(default)]
    pub convert: bool,
    /// `migration.upgrade` is real: objects managed by older versions are
    /// upgraded through it. Without it they are only marked as managed by
    /// the new version.
    #[serde(default)]
    pub upgrade: bool,
    /// `backup.plan` and `backup.restore` are real.
    pub backup: bool,
}

/// What a plugin is and what it may touch (the WIT `manifest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Stable plugin name, e.g. `webapp`: used in field managers
    /// (`wasm-operator/<name>`), labels and metrics.
    pub name: String,
    /// Semantic version, checked to parse when a version is loaded.
    pub version: String,
    /// One line for humans (`wasm-operator plugin inspect`).
    pub description: String,
    /// The kind this plugin reconciles.
    pub primary: ResourceKind,
    /// The only kinds it may return as children; the host watches them and
    /// prunes strays.
    pub owns: Vec<ResourceKind>,
    /// Kinds it may read without owning them (the primary and owned kinds
    /// are readable anyway).
    pub watches: Vec<ResourceKind>,
    /// The host puts a finalizer on primaries and calls `finalize` before
    /// they are deleted.
    pub finalizer: bool,
    /// Which optional interfaces carry real implementations.
    pub implements: OptionalInterfaces,
    /// Versions older than this one may not serve objects this version has
    /// reconciled: the host refuses such a rollback. `None`: any may.
    pub min_compatible_version: Option<String>,
}

impl Manifest {
    /// Kinds the plugin may read through the cache: primary, owned and watched.
    pub fn readable(&self) -> impl Iterator<Item = &ResourceKind> {
        std::iter::once(&self.primary)
            .chain(&self.owns)
            .chain(&self.watches)
    }

    /// True when the plugin may read `api_version`/`kind`.
    pub fn may_read(&self, api_version: &str, kind: &str) -> bool {
        self.readable().any(|k| k.matches(api_version, kind))
    }

    /// The owned kind named by `api_version`/`kind`, if the plugin owns it.
    pub fn owned(&self, api_version: &str, kind: &str) -> Option<&ResourceKind> {
        self.owns.iter().find(|k| k.matches(api_version, kind))
    }
}

/// What the host knows about a call, beyond the object itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallContext {
    /// Version of the plugin being called, from its manifest.
    pub plugin_version: String,
    /// 1 for the first attempt; grows with every retry of a failing object.
    pub attempt: u32,
    /// The plugin version that last managed the object (annotation
    /// `wasm-operator.dev/managed-by-version`), if any.
    pub managed_by_version: Option<String>,
    /// The deployment's `config`; `{}` when unset.
    pub config: Value,
}

/// One status condition a plugin asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    /// Condition type (`type` in Kubernetes).
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase, searchable, e.g. `DeploymentAvailable`.
    pub reason: String,
    /// What a person reading the condition should know.
    pub message: String,
}

/// One event a plugin asks the host to record on the primary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// `Warning` when true, `Normal` otherwise.
    pub warning: bool,
    /// CamelCase, e.g. `ScaledUp`.
    pub reason: String,
    /// What a person reading the event should know.
    pub message: String,
}

/// A plugin's answer to `reconcile`, parsed from its JSON strings.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Desired {
    /// The complete set of owned children, each a full object; owned
    /// children not in it are deleted.
    pub children: Vec<Value>,
    /// Fields to merge into the primary's `.status`.
    pub status: Option<Value>,
    /// Conditions to set on the primary, merged by `kind`.
    pub conditions: Vec<Condition>,
    /// Events to record on the primary.
    pub events: Vec<Event>,
    /// Reconcile again after this many milliseconds even if nothing changes.
    pub requeue_after_ms: Option<u64>,
}

/// Why a plugin said a call did not produce a result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum Failure {
    /// Worth retrying with backoff.
    #[error("transient failure: {0}")]
    Transient(String),
    /// Wait for the object to change.
    #[error("permanent failure: {0}")]
    Permanent(String),
}

/// A plugin's answer to `finalize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Finalized {
    /// Clean-up is complete: the host removes the finalizer.
    Done,
    /// Call again after this many milliseconds.
    Wait(u64),
}

/// A plugin's backup plan for one primary: `backup.plan` and, when
/// exported, `backup-policy.policy`. The `Option` fields are `None` when the
/// plugin leaves them to the host (always so for a component built before
/// `backup-policy` existed); each field names the default the WIT documents.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupPlan {
    /// Cron expression (standard 5 fields), e.g. `0 3 * * *`.
    pub schedule: String,
    /// IANA time zone the schedule is read in; `None`: UTC.
    pub time_zone: Option<String>,
    /// The `batch/v1` Job (a JSON object) that takes one backup.
    pub job: serde_json::Value,
    /// Which finished Backups are kept.
    pub retention: BackupRetention,
    /// Take a final backup before the primary is deleted.
    pub backup_on_delete: bool,
    /// `activeDeadlineSeconds` of each backup Job; `None`: 3600.
    pub job_deadline_seconds: Option<u64>,
    /// A slot older than this many seconds is missed, not caught up;
    /// `None`: the host's default.
    pub starting_deadline_seconds: Option<u64>,
    /// `activeDeadlineSeconds` of a restore Job; `None`: 3600.
    pub restore_deadline_seconds: Option<u64>,
}

/// Which finished Backups of a primary are kept (a Backup is kept when any
/// rule keeps it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackupRetention {
    /// The newest this many finished Backups (`backup-plan.retain`).
    pub keep_last: u32,
    /// The newest this many failed Backups, for diagnosis; `None`: 1.
    pub keep_failed: Option<u32>,
    /// The newest this many Completed Backups, whatever fails after them;
    /// `None`: 1.
    pub always_keep_completed: Option<u32>,
}

/// The operation of an admission request (the WIT `admission.operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum AdmissionOperation {
    /// An object is being created.
    Create,
    /// An object is being updated (its old version is known).
    Update,
    /// An object is being deleted.
    Delete,
    /// A connection to a subresource (`pods/exec`, a proxy).
    Connect,
}

impl AdmissionOperation {
    /// The Kubernetes spelling (`operation` of an AdmissionReview):
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionOperation::Create => "CREATE",
            AdmissionOperation::Update => "UPDATE",
            AdmissionOperation::Delete => "DELETE",
            AdmissionOperation::Connect => "CONNECT",
        }
    }

    /// The operation the Kubernetes spelling names; `None` for anything
    /// else (the spelling is exact: `create` is not an operation).
    pub fn parse(text: &str) -> Option<AdmissionOperation> {
        Some(match text {
            "CREATE" => AdmissionOperation::Create,
            "UPDATE" => AdmissionOperation::Update,
            "DELETE" => AdmissionOperation::Delete,
            "CONNECT" => AdmissionOperation::Connect,
            _ => return None,
        })
    }
}

impl std::fmt::Display for AdmissionOperation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which functions of the optional `admission` interface a plugin really
/// implements (its `admission.implemented`, read once when a version is
/// loaded). The default, none, is what a component without the interface
/// gets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmissionFunctions {
    /// `admission.validate` is real: the host may serve `/validate` with it.
    pub validate: bool,
    /// `admission.defaults` is real: the host may serve `/mutate` with it.
    pub defaults: bool,
}

impl AdmissionFunctions {
    /// True when the plugin implements either function.
    pub fn any(self) -> bool {
        self.validate || self.defaults
    }
}

/// One field at fault in a [`Verdict`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldError {
    /// The field's path as written in the object, e.g. `spec.replicas`.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// What a plugin's `admission.validate` says about a request.
///
/// A refusal with an empty `message` is passed on as the plugin gave it:
/// explaining it (from `fields`) is the caller's job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// The request may proceed.
    pub allowed: bool,
    /// Why it may not (empty when allowed).
    pub message: String,
    /// The fields at fault.
    pub fields: Vec<FieldError>,
    /// Warnings for the client, whether or not the request is allowed.
    pub warnings: Vec<String>,
}

/// A plugin answer that breaks the contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ContractViolation(pub String);

const CONDITION_STATUSES: [&str; 3] = ["True", "False", "Unknown"];

impl Desired {
    /// Checks the shape of an answer: every child is an object with
    /// `apiVersion`, `kind` and `metadata.name`; status is an object; every
    /// condition has a type, a valid status and a CamelCase-ish reason.
    /// Capability checks (may this plugin write that kind?) are the apply
    /// layer's job, which knows the manifest.
    pub fn validate(&self) -> Result<(), ContractViolation> {
        for (i, child) in self.children.iter().enumerate() {
            let field = |name: &str| {
                child
                    .get(name)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            };
            if !child.is_object() {
                return Err(ContractViolation(format!(
                    "children[{i}] is not a JSON object"
                )));
            }
            if field("apiVersion").is_none() || field("kind").is_none() {
                return Err(ContractViolation(format!(
                    "children[{i}] has no apiVersion or kind"
                )));
            }
            let name = child
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if name.is_empty() {
                return Err(ContractViolation(format!(
                    "children[{i}] has no metadata.name"
                )));
            }
        }
        if let Some(status) = &self.status
            && !status.is_object()
        {
            return Err(ContractViolation("status is not a JSON object".into()));
        }
        for c in &self.conditions {
            if c.kind.is_empty() {
                return Err(ContractViolation("a condition has an empty type".into()));
            }
            if !CONDITION_STATUSES.contains(&c.status.as_str()) {
                return Err(ContractViolation(format!(
                    "condition {:?} has status {:?}; expected True, False or Unknown",
                    c.kind, c.status
                )));
            }
            if c.reason.is_empty()
                || !c
                    .reason
                    .chars()
                    .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ',' || ch == ':')
            {
                return Err(ContractViolation(format!(
                    "condition {:?} has an invalid reason {:?}",
                    c.kind, c.reason
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rejects_child_without_name() {
        let d = Desired {
            children: vec![json!({"apiVersion": "v1", "kind": "Service", "metadata": {}})],
            ..Default::default()
        };
        assert!(d.validate().unwrap_err().0.contains("metadata.name"));
    }

    #[test]
    fn rejects_bad_condition_status() {
        let d = Desired {
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: "yes".into(),
                reason: "Ok".into(),
                message: String::new(),
            }],
            ..Default::default()
        };
        assert!(d.validate().is_err());
    }

    #[test]
    fn admission_operations_use_the_kubernetes_spelling() {
        for op in [
            AdmissionOperation::Create,
            AdmissionOperation::Update,
            AdmissionOperation::Delete,
            AdmissionOperation::Connect,
        ] {
            assert_eq!(AdmissionOperation::parse(op.as_str()), Some(op));
            assert_eq!(serde_json::to_value(op).unwrap(), json!(op.as_str()));
            assert_eq!(op.to_string(), op.as_str());
        }
        assert_eq!(AdmissionOperation::parse("create"), None);
        assert_eq!(AdmissionOperation::parse(""), None);
        assert!(!AdmissionFunctions::default().any());
    }

    #[test]
    fn a_verdict_serializes_in_camel_case() {
        let verdict = Verdict {
            allowed: false,
            message: "no".into(),
            fields: vec![FieldError {
                path: "spec.replicas".into(),
                message: "too many".into(),
            }],
            warnings: vec!["careful".into()],
        };
        let json = serde_json::to_value(&verdict).unwrap();
        assert_eq!(
            json,
            json!({"allowed": false, "message": "no",
                   "fields": [{"path": "spec.replicas", "message": "too many"}],
                   "warnings": ["careful"]})
        );
        assert_eq!(serde_json::from_value::<Verdict>(json).unwrap(), verdict);
    }

    #[test]
    fn accepts_well_formed_answer() {
        let d = Desired {
            children: vec![
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}),
            ],
            status: Some(json!({"phase": "Running"})),
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: "True".into(),
                reason: "Available".into(),
                message: String::new(),
            }],
            ..Default::default()
        };
        d.validate().unwrap();
    }
}
