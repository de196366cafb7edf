//! The `Backup` and `Restore` resources as Rust types, from which their
//! CRDs (deploy/crds/backup.yaml, [`crd_yaml`]) are generated, and the
//! labels and annotations the host puts on them and on their Jobs.
//!
//! A person (or `wasm-operator backup create`) writes a spec; the host
//! writes everything else: the labels that tie a Backup to its primary,
//! and the status.

use kube::CustomResource;
use kube::api::ApiResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// API group of Backup and Restore.
pub const GROUP: &str = "wasm-operator.dev";
/// Their API version.
pub const VERSION: &str = "v1alpha1";

/// Label on Backups, Restores and their Jobs: the primary's name.
pub const PRIMARY_LABEL: &str = "backup.wasm-operator.dev/primary";
/// Label on Backups: the primary's uid, so a primary deleted and created
/// again under the same name never adopts the old one's Backups.
pub const PRIMARY_UID_LABEL: &str = "backup.wasm-operator.dev/primary-uid";
/// Label on Backups: why it was taken ([`Trigger`]).
pub const TRIGGER_LABEL: &str = "backup.wasm-operator.dev/trigger";
/// Label on backup Jobs and their pod template: the Backup's name.
pub const BACKUP_NAME_LABEL: &str = "backup.wasm-operator.dev/name";
/// Label on restore Jobs and their pod template: the Restore's name.
pub const RESTORE_NAME_LABEL: &str = "backup.wasm-operator.dev/restore";
/// Annotation on scheduled Backups: the slot (RFC 3339) it was taken for.
/// Written when the Backup is created, so the slot survives a crash before
/// the first status write.
pub const SLOT_ANNOTATION: &str = "backup.wasm-operator.dev/slot";
/// Annotation a person sets to `"true"` on a Backup that retention must
/// never delete.
pub const KEEP_ANNOTATION: &str = "backup.wasm-operator.dev/keep";
/// Annotation on a primary while a Restore runs into it: its value names
/// the Restore (`namespace/name`). The primary's reconcile is held while it
/// is there.
pub const RESTORE_HOLD_ANNOTATION: &str = "backup.wasm-operator.dev/restore-hold";
/// Annotation a person sets to `"true"` on a deleting primary whose final
/// backup keeps failing, to let it go without one.
pub const SKIP_FINAL_BACKUP_ANNOTATION: &str = "backup.wasm-operator.dev/skip-final-backup";
/// Finalizer the host puts on primaries whose plan asks for a backup before
/// deletion.
pub const FINAL_BACKUP_FINALIZER: &str = "backup.wasm-operator.dev/final-backup";
/// Env var the host sets in every container of a backup Job: the Backup's
/// name (for the path the data goes to).
pub const BACKUP_NAME_ENV: &str = "WASM_OPERATOR_BACKUP_NAME";
/// Env var the host sets in every container of a restore Job: the name of
/// the Backup it restores.
pub const RESTORE_BACKUP_ENV: &str = "WASM_OPERATOR_RESTORE_BACKUP";

/// Why a Backup was taken (label [`TRIGGER_LABEL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// For a slot of the plan's schedule.
    Scheduled,
    /// Asked for: created by hand or by `wasm-operator backup create`.
    Manual,
    /// Before the primary's deletion.
    Final,
}

impl Trigger {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::Scheduled => "scheduled",
            Trigger::Manual => "manual",
            Trigger::Final => "final",
        }
    }

    /// The trigger a label value names; a missing or unknown one is
    /// `Manual` (a Backup a person wrote).
    pub fn from_label(value: Option<&str>) -> Trigger {
        match value {
            Some("scheduled") => Trigger::Scheduled,
            Some("final") => Trigger::Final,
            _ => Trigger::Manual,
        }
    }
}

/// The object a Backup is of: a primary of a loaded plugin, in the
/// Backup's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimaryRef {
    /// `group/version` of the primary, e.g. `kv.example.com/v1beta1`.
    /// Optional: the kind's group is found from the plugin that serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the primary, e.g. `DistributedKV`.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Name of the primary, in the Backup's namespace.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// `spec` of a Backup: which primary to back up. A Backup created by hand
/// takes one backup now; the host creates the scheduled and final ones.
#[derive(CustomResource, Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "wasm-operator.dev",
    version = "v1alpha1",
    kind = "Backup",
    plural = "backups",
    shortname = "bk",
    namespaced,
    status = "BackupStatus",
    derive = "PartialEq",
    doc = "One backup of a primary, taken by a Job its plugin plans.",
    printcolumn(name = "Primary", type_ = "string", json_path = ".spec.primary.name"),
    printcolumn(
        name = "Trigger",
        type_ = "string",
        json_path = ".metadata.labels.backup\\.wasm-operator\\.dev/trigger"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Location", type_ = "string", json_path = ".status.location"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[allow(clippy::duplicated_attributes)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Which primary to back up.",
    transform = crate::util::schema::kubernetes_schema
)]
pub struct BackupSpec {
    /// The primary to back up.
    pub primary: PrimaryRef,
}

/// What the host records of a Backup.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::util::schema::kubernetes_schema)]
pub struct BackupStatus {
    /// `New`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The schedule slot it was taken for (RFC 3339); absent for a manual
    /// or final backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    /// The primary's uid when the backup was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_uid: Option<String>,
    /// The primary's `metadata.generation` when the backup was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// The plugin and version whose plan took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<String>,
    /// The plugin version whose plan took it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_version: Option<String>,
    /// The Job that takes it, in the Backup's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// When its Job was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub start_time: Option<String>,
    /// When it completed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub completion_time: Option<String>,
    /// Where the data went, as the Job reported it in its termination
    /// message (`{"location": "..."}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<String>,
    /// CamelCase reason of a failure (`DeadlineExceeded`,
    /// `BackoffLimitExceeded`, `PlanRefused`...), or of a note on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The primary's `apiVersion`, `kind`, labels and `spec` when the
    /// backup was taken: what a Restore into a new object creates it from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::util::schema::free_form_object")]
    pub source: Option<Value>,
}

/// Where a Restore puts the data: the Backup's primary (absent fields), or
/// a new object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreTarget {
    /// Name of the object to restore into; default: the Backup's primary.
    /// An object that does not exist is created from the Backup's recorded
    /// spec first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `spec` of a Restore: which Backup, into which object.
#[derive(CustomResource, Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "wasm-operator.dev",
    version = "v1alpha1",
    kind = "Restore",
    plural = "restores",
    shortname = "rst",
    namespaced,
    status = "RestoreStatus",
    derive = "PartialEq",
    doc = "Restores one Backup into its primary or into a new object, holding the object's reconcile meanwhile.",
    printcolumn(name = "Backup", type_ = "string", json_path = ".spec.backup"),
    printcolumn(name = "Target", type_ = "string", json_path = ".status.target"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Reason", type_ = "string", json_path = ".status.reason"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[allow(clippy::duplicated_attributes)]
#[serde(rename_all = "camelCase")]
#[schemars(
    description = "Which Backup to restore, and into which object.",
    transform = crate::util::schema::kubernetes_schema
)]
pub struct RestoreSpec {
    /// Name of a `Completed` Backup in the Restore's namespace.
    #[schemars(length(min = 1))]
    pub backup: String,
    /// Where to restore; default: the Backup's primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<RestoreTarget>,
}

/// What the host records of a Restore.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::util::schema::kubernetes_schema)]
pub struct RestoreStatus {
    /// `New`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Name of the object restored into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// True when the host created the target from the Backup's spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_target: Option<bool>,
    /// The restore Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The plugin version whose `restore` planned the Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin_version: Option<String>,
    /// When the restore started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub start_time: Option<String>,
    /// When it completed or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "date-time"))]
    pub completion_time: Option<String>,
    /// CamelCase reason of a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The Backup API resource.
pub fn backup_resource() -> ApiResource {
    resource("Backup", "backups")
}

/// The Restore API resource.
pub fn restore_resource() -> ApiResource {
    resource("Restore", "restores")
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.to_string(),
        version: VERSION.to_string(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// The comment at the top of deploy/crds/backup.yaml.
const CRD_YAML_HEADER: &str = "\
# Backup and Restore: backups of plugins' primaries and restores from them.
# Generated from the types in host/src/backup/resources.rs; do not edit by hand.
# Regenerate with `wasm-operator crd print backup > deploy/crds/backup.yaml`
# (scripts/render-deploy.sh does it): tests keep it equal to the generated CRDs.
";

/// The Backup and Restore CRDs as the YAML of deploy/crds/backup.yaml: a
/// header comment, then both CRDs as two documents.
///
/// # Errors
///
/// When serde_yaml cannot render a CRD (not expected for these types).
pub fn crd_yaml() -> Result<String, serde_yaml::Error> {
    use kube::CustomResourceExt;
    let backup = serde_yaml::to_string(&Backup::crd())?;
    let restore = serde_yaml::to_string(&Restore::crd())?;
    Ok(format!("{CRD_YAML_HEADER}{backup}---\n{restore}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn the_crds_are_namespaced_with_a_status_subresource_and_columns() {
        for crd in [Backup::crd(), Restore::crd()] {
            let crd = serde_json::to_value(crd).unwrap();
            assert_eq!(crd["spec"]["scope"], "Namespaced");
            let version = &crd["spec"]["versions"][0];
            assert!(version["subresources"]["status"].is_object(), "{crd}");
            assert!(
                version["additionalPrinterColumns"]
                    .as_array()
                    .is_some_and(|c| c.len() >= 4)
            );
            // kube's derive makes the root `status` nullable (as for
            // WasmPlugin); nothing inside it is.
            let status =
                &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
            assert!(!status.to_string().contains("nullable"), "{status}");
        }
        let backup = serde_json::to_value(Backup::crd()).unwrap();
        let status = &backup["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            ["properties"];
        assert_eq!(
            status["source"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(status["startTime"]["format"], "date-time");
    }

    #[test]
    fn the_yaml_holds_both_crds() {
        let yaml = crd_yaml().unwrap();
        assert!(yaml.contains("name: backups.wasm-operator.dev"));
        assert!(yaml.contains("name: restores.wasm-operator.dev"));
    }

    #[test]
    fn triggers_round_trip_their_labels() {
        for trigger in [Trigger::Scheduled, Trigger::Manual, Trigger::Final] {
            assert_eq!(Trigger::from_label(Some(trigger.as_str())), trigger);
        }
        assert_eq!(Trigger::from_label(None), Trigger::Manual);
    }
}
