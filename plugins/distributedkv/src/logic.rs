//! The DistributedKV operator's logic, free of plugin exports so that it unit
//! tests natively and the exercise builds can include it by path.
//!
//! # The two API versions
//!
//! | v1alpha1                 | v1beta1 (storage)      |
//! |--------------------------|------------------------|
//! | `spec.size`              | `spec.replicaCount`    |
//! | `spec.image`             | `spec.image`           |
//! | `spec.storage.size`      | `spec.storageSize`     |
//! | `spec.storage.className` | `spec.storageClassName`|
//! | `spec.backup`            | `spec.backup`          |
//! | (none)                   | `spec.maxUnavailable`  |
//!
//! `v1beta1` added `maxUnavailable` (the PodDisruptionBudget's). A
//! `v1alpha1` object cannot hold it, so converting to `v1alpha1` keeps it in
//! the annotation [`PRESERVED_ANNOTATION`] (JSON of the fields `v1alpha1`
//! lacks) and converting back restores it and removes the annotation: the
//! round trip is lossless, as the Kubernetes API conventions recommend.
//!
//! # Backups
//!
//! `spec.backup` (the same in both versions) asks for scheduled backups:
//! [`plan`] turns it into a [`BackupPlan`] whose Job runs
//! `kvctl backup` against the headless Service, and [`restore`] gives the
//! Job that restores a `Backup` from its `status.location`. Both Jobs run
//! under Pod Security `restricted`, like the StatefulSet's pods.
//!
//! # Admission
//!
//! [`validate`] refuses updates the store cannot survive: fewer replicas
//! than the quorum of the current ones, and a smaller volume (a
//! PersistentVolumeClaim cannot shrink). It reads both API versions and
//! names the fields as the object writes them.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Map, Value, json};
use wasm_operator_sdk::{
    BackupPlan, BackupStatus, Children, Condition, Desired, Failure, Kind, Manifest, Operation, Verdict,
};

/// The API group of `DistributedKV`.
pub const GROUP: &str = "kv.example.com";
/// `apiVersion` of the first API version.
pub const V1ALPHA1: &str = "kv.example.com/v1alpha1";
/// `apiVersion` of the storage version, the one the plugin reconciles.
pub const V1BETA1: &str = "kv.example.com/v1beta1";
/// Annotation holding, as JSON, the `v1beta1` fields a `v1alpha1` object cannot hold.
pub const PRESERVED_ANNOTATION: &str = "kv.example.com/v1beta1-fields";
/// The port every node listens on; the headless Service names it `client`.
pub const CLIENT_PORT: i64 = 7000;
/// `maxUnavailable` of the PodDisruptionBudget when the spec does not set one.
pub const DEFAULT_MAX_UNAVAILABLE: i64 = 1;
/// `storageSize` when the spec does not set one.
pub const DEFAULT_STORAGE_SIZE: &str = "1Gi";

/// `spec.backup.backupImage` when the spec does not set one.
pub const DEFAULT_BACKUP_IMAGE: &str = "registry.example.com/kvctl:1.0";
/// `spec.backup.retention.keepLast` when the spec does not set one.
pub const DEFAULT_KEEP_LAST: u32 = 7;
/// Where the backup Job finds the destination (`spec.backup.s3Path`); the
/// host adds `WASM_OPERATOR_BACKUP_NAME`, the Backup's name.
pub const DESTINATION_ENV: &str = "WASM_OPERATOR_BACKUP_DESTINATION";
/// Where the restore Job finds the backup to restore (the Backup's `status.location`).
pub const RESTORE_FROM_ENV: &str = "WASM_OPERATOR_RESTORE_FROM";

/// `v1beta1` spec fields with no `v1alpha1` counterpart.
const BETA_ONLY: &[&str] = &["maxUnavailable"];

/// The manifest of distributedkv `version` without backups: what the
/// exercise builds (`distributedkv-lossy`, `-trap`, `-forger`,
/// `convert-only`) declare, since they do not wire up [`plan`] and
/// [`restore`]. distributedkv itself declares [`manifest_with_backup`].
pub fn manifest(version: &str) -> Manifest {
    Manifest::new("distributedkv", version)
        .description("Runs a replicated key-value store as a StatefulSet, a headless Service and a PodDisruptionBudget")
        .primary(Kind::namespaced(GROUP, "v1beta1", "DistributedKV", "distributedkvs"))
        .owns::<k8s_openapi::api::apps::v1::StatefulSet>()
        .owns::<k8s_openapi::api::core::v1::Service>()
        .owns::<k8s_openapi::api::policy::v1::PodDisruptionBudget>()
        .implements_migration()
}

/// [`manifest`] with backups: it implements `backup` and owns `batch/v1`
/// Jobs (the backup and restore Jobs are written as the plugin, so its grant
/// must allow Jobs; they are controlled by their `Backup`, never by the
/// DistributedKV, so the DistributedKV's pruning never touches them).
pub fn manifest_with_backup(version: &str) -> Manifest {
    manifest(version).owns::<k8s_openapi::api::batch::v1::Job>().implements_backup()
}

fn name_of(object: &Value) -> String {
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("<unnamed>");
    match object.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// Converts a `DistributedKV` (either version) to `to_api_version`. An object
/// already at that version comes back unchanged. Only `apiVersion`, `spec`
/// and the [`PRESERVED_ANNOTATION`] change; everything else (metadata,
/// status) is carried as is.
///
/// # Errors
///
/// An unknown source or target version, or an object that is not a JSON
/// object with an object `spec`.
pub fn convert(mut object: Value, to_api_version: &str) -> Result<Value, String> {
    let name = name_of(&object);
    let from = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    for version in [from.as_str(), to_api_version] {
        if version != V1ALPHA1 && version != V1BETA1 {
            return Err(format!(
                "DistributedKV {name}: cannot convert from {from:?} to {to_api_version:?}; distributedkv serves {V1ALPHA1} and {V1BETA1}"
            ));
        }
    }
    if from == to_api_version {
        return Ok(object);
    }
    let Some(root) = object.as_object_mut() else {
        return Err(format!("DistributedKV {name} is not a JSON object"));
    };
    let spec = match root.remove("spec") {
        Some(Value::Object(spec)) => Some(spec),
        None | Some(Value::Null) => None,
        Some(other) => return Err(format!("DistributedKV {name}: spec is not an object but {other}")),
    };
    if let Some(spec) = spec {
        let converted = if to_api_version == V1BETA1 {
            let preserved = take_preserved(root).map_err(|e| format!("DistributedKV {name}: {e}"))?;
            alpha_to_beta(spec, preserved)
        } else {
            let (spec, beta_only) = beta_to_alpha(spec);
            if !beta_only.is_empty() {
                preserve(root, &beta_only);
            }
            spec
        };
        root.insert("spec".into(), Value::Object(converted));
    }
    root.insert("apiVersion".into(), json!(to_api_version));
    Ok(object)
}

/// `v1alpha1` spec to `v1beta1`, with the fields kept in the annotation.
fn alpha_to_beta(mut spec: Map<String, Value>, preserved: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    if let Some(size) = spec.remove("size") {
        out.insert("replicaCount".into(), size);
    }
    if let Some(image) = spec.remove("image") {
        out.insert("image".into(), image);
    }
    if let Some(Value::Object(mut storage)) = spec.remove("storage") {
        if let Some(size) = storage.remove("size") {
            out.insert("storageSize".into(), size);
        }
        if let Some(class) = storage.remove("className") {
            out.insert("storageClassName".into(), class);
        }
    }
    // Fields both versions share (backup, and any the schema adds later).
    out.extend(spec);
    out.extend(preserved);
    out
}

/// `v1beta1` spec to `v1alpha1`, and the fields `v1alpha1` cannot hold.
fn beta_to_alpha(mut spec: Map<String, Value>) -> (Map<String, Value>, Map<String, Value>) {
    let mut beta_only = Map::new();
    for field in BETA_ONLY {
        if let Some(value) = spec.remove(*field) {
            beta_only.insert((*field).to_string(), value);
        }
    }
    let mut out = Map::new();
    if let Some(count) = spec.remove("replicaCount") {
        out.insert("size".into(), count);
    }
    if let Some(image) = spec.remove("image") {
        out.insert("image".into(), image);
    }
    let mut storage = Map::new();
    if let Some(size) = spec.remove("storageSize") {
        storage.insert("size".into(), size);
    }
    if let Some(class) = spec.remove("storageClassName") {
        storage.insert("className".into(), class);
    }
    if !storage.is_empty() {
        out.insert("storage".into(), Value::Object(storage));
    }
    out.extend(spec);
    (out, beta_only)
}

/// Removes [`PRESERVED_ANNOTATION`] (and an annotation map it leaves empty)
/// and returns the fields it held.
fn take_preserved(root: &mut Map<String, Value>) -> Result<Map<String, Value>, String> {
    let Some(annotations) =
        root.get_mut("metadata").and_then(|m| m.get_mut("annotations")).and_then(Value::as_object_mut)
    else {
        return Ok(Map::new());
    };
    let Some(text) = annotations.remove(PRESERVED_ANNOTATION) else {
        return Ok(Map::new());
    };
    let emptied = annotations.is_empty();
    if emptied && let Some(metadata) = root.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("annotations");
    }
    let parsed: Value = text
        .as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or_else(|| format!("annotation {PRESERVED_ANNOTATION} is not a JSON object: {text}"))?;
    match parsed {
        Value::Object(fields) => Ok(fields.into_iter().filter(|(k, _)| BETA_ONLY.contains(&k.as_str())).collect()),
        other => Err(format!("annotation {PRESERVED_ANNOTATION} is not a JSON object: {other}")),
    }
}

/// Keeps `fields` in [`PRESERVED_ANNOTATION`].
fn preserve(root: &mut Map<String, Value>, fields: &Map<String, Value>) {
    let metadata = root.entry("metadata").or_insert_with(|| json!({}));
    if !metadata.is_object() {
        *metadata = json!({});
    }
    let annotations = &mut metadata["annotations"];
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[PRESERVED_ANNOTATION] = json!(Value::Object(fields.clone()).to_string());
}

/// The spec the plugin works from (`v1beta1` fields).
#[derive(Debug, Clone, PartialEq)]
pub struct KvSpec {
    /// Pods of the StatefulSet, 1..=9.
    pub replica_count: i64,
    /// Container image of every node.
    pub image: String,
    /// Size of each node's volume, e.g. `1Gi`.
    pub storage_size: String,
    /// Storage class of the volumes; the cluster default when unset.
    pub storage_class_name: Option<String>,
    /// `maxUnavailable` of the PodDisruptionBudget.
    pub max_unavailable: i64,
}

/// Reads the spec of `object` (converted to `v1beta1` first when a client
/// stored it another way).
///
/// # Errors
///
/// A permanent failure naming the field when the spec is invalid.
pub fn spec_of(object: &Value) -> Result<KvSpec, Failure> {
    let object = convert(object.clone(), V1BETA1).map_err(Failure::permanent)?;
    let name = name_of(&object);
    let spec = object.get("spec").cloned().unwrap_or(json!({}));
    let invalid = |what: &str| Failure::permanent(format!("DistributedKV {name}: spec is invalid: {what}"));
    let replica_count =
        spec.get("replicaCount").and_then(Value::as_i64).ok_or_else(|| invalid("replicaCount is missing"))?;
    if !(1..=9).contains(&replica_count) {
        return Err(invalid(&format!("replicaCount must be 1..9 (got {replica_count})")));
    }
    let image = spec.get("image").and_then(Value::as_str).unwrap_or_default().to_string();
    if image.is_empty() {
        return Err(invalid("image is empty"));
    }
    let max_unavailable = spec.get("maxUnavailable").and_then(Value::as_i64).unwrap_or(DEFAULT_MAX_UNAVAILABLE);
    if max_unavailable < 0 || max_unavailable >= replica_count.max(2) {
        return Err(invalid(&format!(
            "maxUnavailable must be at least 0 and below replicaCount (got {max_unavailable} of {replica_count})"
        )));
    }
    Ok(KvSpec {
        replica_count,
        image,
        storage_size: spec.get("storageSize").and_then(Value::as_str).unwrap_or(DEFAULT_STORAGE_SIZE).to_string(),
        storage_class_name: spec.get("storageClassName").and_then(Value::as_str).map(str::to_string),
        max_unavailable,
    })
}

/// `pod_spec` made to pass Pod Security `restricted` (the host's default
/// grant) and to run as the namespace's default account without its token
/// (no pod of distributedkv needs API access): non-root, the runtime's
/// seccomp profile, and every container without privilege escalation or
/// capabilities.
fn restricted_pod_spec(mut pod_spec: Value) -> Value {
    pod_spec["automountServiceAccountToken"] = json!(false);
    pod_spec["securityContext"] = json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    if let Some(containers) = pod_spec.get_mut("containers").and_then(Value::as_array_mut) {
        for container in containers {
            container["securityContext"] =
                json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}});
        }
    }
    pod_spec
}

/// The StatefulSet, headless Service and PodDisruptionBudget of a
/// DistributedKV named `name` in `namespace`.
pub fn children(name: &str, namespace: Option<&str>, spec: &KvSpec) -> [Value; 3] {
    let labels = json!({"app.kubernetes.io/name": "distributedkv", "app.kubernetes.io/instance": name});
    let metadata = |object_name: String| {
        let mut m = json!({"name": object_name, "labels": labels.clone()});
        if let Some(ns) = namespace {
            m["namespace"] = json!(ns);
        }
        m
    };
    let headless = format!("{name}-headless");
    let mut claim = json!({
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": spec.storage_size}},
        },
    });
    if let Some(class) = &spec.storage_class_name {
        claim["spec"]["storageClassName"] = json!(class);
    }
    let statefulset = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": metadata(name.to_string()),
        "spec": {
            "replicas": spec.replica_count,
            "serviceName": headless,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels.clone()},
            "template": {
                "metadata": {"labels": labels.clone()},
                "spec": restricted_pod_spec(json!({
                    "containers": [{
                        "name": "kv",
                        "image": spec.image,
                        "ports": [{"name": "client", "containerPort": CLIENT_PORT}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }],
                })),
            },
            "volumeClaimTemplates": [claim],
        },
    });
    let service = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(headless.clone()),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": labels.clone(),
            "ports": [{"name": "client", "port": CLIENT_PORT, "targetPort": CLIENT_PORT}],
        },
    });
    let pdb = json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(name.to_string()),
        "spec": {"maxUnavailable": spec.max_unavailable, "selector": {"matchLabels": labels}},
    });
    [statefulset, service, pdb]
}

/// The desired state of one DistributedKV: its three children, and status
/// (`readyReplicas`, the `Available` condition) read from the StatefulSet.
pub fn reconcile(object: Value, children_now: &Children) -> Result<Desired, Failure> {
    let spec = spec_of(&object)?;
    let name = object.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default().to_string();
    let namespace = object.pointer("/metadata/namespace").and_then(Value::as_str);
    let ready = children_now
        .get_json("apps/v1", "StatefulSet", &name)
        .and_then(|s| s.pointer("/status/readyReplicas"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let available = ready >= spec.replica_count;
    let (status, reason, message) = if available {
        ("True", "StatefulSetReady", format!("StatefulSet {name} is fully ready ({ready}/{})", spec.replica_count))
    } else {
        (
            "False",
            "StatefulSetNotReady",
            format!("StatefulSet {name} is not fully ready ({ready}/{})", spec.replica_count),
        )
    };
    let mut desired = Desired::new();
    for child in children(&name, namespace, &spec) {
        desired = desired.child_json(child);
    }
    let status_fields = KvStatus { ready_replicas: ready, backup: None };
    Ok(desired.status_of(&status_fields)?.condition(Condition::new("Available", status, reason, message)))
}

/// The status distributedkv writes. `backup` is the host's (it writes
/// `status.backup` for plugins that declare backups): always `None` here,
/// so the plugin never writes it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KvStatus {
    /// Ready pods of the StatefulSet.
    pub ready_replicas: i64,
    /// Written by the host, never by the plugin.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupStatus>,
}

/// `spec.backup`: where, when and how backups are taken.
#[derive(Debug, Clone, PartialEq)]
pub struct BackupSpec {
    /// The destination, e.g. `s3://kv-backups/sessions/`.
    pub s3_path: String,
    /// Cron schedule, e.g. `0 3 * * *`.
    pub schedule: String,
    /// IANA time zone of the schedule; UTC when unset.
    pub time_zone: Option<String>,
    /// Image of the backup and restore Jobs (runs `kvctl`).
    pub backup_image: String,
    /// `retention.keepLast`: the newest finished backups kept.
    pub keep_last: u32,
    /// `retention.keepFailed`: the newest failed backups kept.
    pub keep_failed: Option<u32>,
    /// `retention.alwaysKeepCompleted`: completed backups never deleted.
    pub always_keep_completed: Option<u32>,
    /// Take a final backup before the DistributedKV is deleted.
    pub backup_on_delete: bool,
    /// `activeDeadlineSeconds` of each backup Job.
    pub deadline_seconds: Option<u64>,
    /// Labels added to the backup and restore Jobs' pods.
    pub pod_labels: BTreeMap<String, String>,
}

/// Reads `spec.backup` of `object`; `None` when it asks for no backups.
///
/// # Errors
///
/// A message naming the field when `spec.backup` is not what the CRD allows.
pub fn backup_spec_of(object: &Value) -> Result<Option<BackupSpec>, String> {
    let Some(backup) = object.pointer("/spec/backup").filter(|b| !b.is_null()) else {
        return Ok(None);
    };
    let name = name_of(object);
    let invalid = |what: &str| format!("DistributedKV {name}: spec.backup is invalid: {what}");
    if !backup.is_object() {
        return Err(invalid("it is not an object"));
    }
    let text = |field: &str| -> Result<Option<String>, String> {
        match backup.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(invalid(&format!("{field} is not a string but {other}"))),
        }
    };
    let count = |pointer: &str, field: &str| -> Result<Option<u64>, String> {
        match backup.pointer(pointer) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => {
                v.as_u64().map(Some).ok_or_else(|| invalid(&format!("{field} must be a whole number ≥ 0 (got {v})")))
            }
        }
    };
    let small = |pointer: &str, field: &str| -> Result<Option<u32>, String> {
        count(pointer, field)?
            .map(|n| u32::try_from(n).map_err(|_| invalid(&format!("{field} is too large ({n})"))))
            .transpose()
    };
    let s3_path = text("s3Path")?.filter(|s| !s.is_empty()).ok_or_else(|| invalid("s3Path is missing"))?;
    let schedule = text("schedule")?.filter(|s| !s.is_empty()).ok_or_else(|| invalid("schedule is missing"))?;
    let backup_on_delete = match backup.get("backupOnDelete") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => return Err(invalid(&format!("backupOnDelete is not a boolean but {other}"))),
    };
    let pod_labels = match backup.get("podLabels") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(labels)) => labels
            .iter()
            .map(|(k, v)| match v {
                Value::String(v) => Ok((k.clone(), v.clone())),
                other => Err(invalid(&format!("podLabels.{k} is not a string but {other}"))),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(invalid(&format!("podLabels is not an object but {other}"))),
    };
    Ok(Some(BackupSpec {
        s3_path,
        schedule,
        time_zone: text("timeZone")?.filter(|z| !z.is_empty()),
        backup_image: text("backupImage")?.filter(|i| !i.is_empty()).unwrap_or_else(|| DEFAULT_BACKUP_IMAGE.into()),
        keep_last: small("/retention/keepLast", "retention.keepLast")?.unwrap_or(DEFAULT_KEEP_LAST),
        keep_failed: small("/retention/keepFailed", "retention.keepFailed")?,
        always_keep_completed: small("/retention/alwaysKeepCompleted", "retention.alwaysKeepCompleted")?,
        backup_on_delete,
        deadline_seconds: count("/deadlineSeconds", "deadlineSeconds")?,
        pod_labels,
    }))
}

/// A Job (without `metadata.name`: the host names it) whose one container
/// runs `kvctl args…` with `env`, its pods labelled for `component` plus
/// `pod_labels`. The pods' labels differ from the store's nodes', so the
/// headless Service and the PodDisruptionBudget never select them.
fn kvctl_job(
    name: &str,
    component: &str,
    image: &str,
    args: Vec<String>,
    env: Value,
    pod_labels: &BTreeMap<String, String>,
) -> Value {
    let mut labels = Map::new();
    labels.insert("app.kubernetes.io/name".into(), json!("distributedkv-backup"));
    labels.insert("app.kubernetes.io/instance".into(), json!(name));
    labels.insert("app.kubernetes.io/component".into(), json!(component));
    for (k, v) in pod_labels {
        labels.insert(k.clone(), json!(v));
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": restricted_pod_spec(json!({
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": component,
                        "image": image,
                        "command": ["kvctl"],
                        "args": args,
                        "env": env,
                    }],
                })),
            },
        },
    })
}

/// The primary's name, for the Jobs' `--from`/`--to` (its headless Service).
fn primary_name(object: &Value) -> Result<String, String> {
    object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .ok_or_else(|| "the DistributedKV has no metadata.name".to_string())
}

/// The backup plan of a DistributedKV: `None` without `spec.backup`. Its
/// Job runs `kvctl backup` from the headless Service to
/// `$(WASM_OPERATOR_BACKUP_DESTINATION)/$(WASM_OPERATOR_BACKUP_NAME)` and
/// writes `{"location": "..."}` to `/dev/termination-log`.
///
/// # Errors
///
/// An invalid `spec.backup` (see [`backup_spec_of`]).
pub fn plan(object: &Value) -> Result<Option<BackupPlan>, String> {
    let Some(backup) = backup_spec_of(object)? else {
        return Ok(None);
    };
    let name = primary_name(object)?;
    let args = vec![
        "backup".to_string(),
        "--from".into(),
        format!("{name}-headless:{CLIENT_PORT}"),
        "--to".into(),
        format!("$({DESTINATION_ENV})/$(WASM_OPERATOR_BACKUP_NAME)"),
        // kvctl writes {"location": "<where the backup went>"} there.
        "--report".into(),
        "/dev/termination-log".into(),
    ];
    let destination = backup.s3_path.trim_end_matches('/');
    let env = json!([{"name": DESTINATION_ENV, "value": destination}]);
    let job = kvctl_job(&name, "backup", &backup.backup_image, args, env, &backup.pod_labels);
    let mut plan =
        BackupPlan::new(backup.schedule, job).retain(backup.keep_last).backup_on_delete(backup.backup_on_delete);
    if let Some(zone) = backup.time_zone {
        plan = plan.time_zone(zone);
    }
    if let Some(n) = backup.keep_failed {
        plan = plan.keep_failed(n);
    }
    if let Some(n) = backup.always_keep_completed {
        plan = plan.always_keep_completed(n);
    }
    if let Some(seconds) = backup.deadline_seconds {
        plan = plan.job_deadline_seconds(seconds);
    }
    Ok(Some(plan))
}

/// The Job restoring `backup` (a `Backup` object) into the DistributedKV
/// `object`: `kvctl restore` from the Backup's `status.location` to the
/// headless Service, with `spec.backup`'s image and pod labels (the
/// defaults without `spec.backup`).
///
/// # Errors
///
/// A Backup without `status.location` (not Completed), or an invalid
/// `spec.backup`.
pub fn restore(object: &Value, backup: &Value) -> Result<Value, String> {
    let location = backup.pointer("/status/location").and_then(Value::as_str).filter(|l| !l.is_empty());
    let Some(location) = location else {
        return Err(format!(
            "Backup {} has no status.location: only a Completed backup can be restored",
            name_of(backup)
        ));
    };
    let name = primary_name(object)?;
    let (image, pod_labels) = match backup_spec_of(object)? {
        Some(spec) => (spec.backup_image, spec.pod_labels),
        None => (DEFAULT_BACKUP_IMAGE.to_string(), BTreeMap::new()),
    };
    let args = vec![
        "restore".to_string(),
        "--from".into(),
        format!("$({RESTORE_FROM_ENV})"),
        "--to".into(),
        format!("{name}-headless:{CLIENT_PORT}"),
    ];
    let env = json!([{"name": RESTORE_FROM_ENV, "value": location}]);
    Ok(kvctl_job(&name, "restore", &image, args, env, &pod_labels))
}

/// The quorum of `replicas` nodes: a majority, `replicas / 2 + 1`.
pub fn quorum(replicas: i64) -> i64 {
    replicas / 2 + 1
}

/// Admission of a DistributedKV (either API version). An update is refused
/// when it would
///
/// - leave fewer replicas than the quorum of the current ones (the
///   remaining nodes could not form a majority of the old membership and
///   the store would lose writes): `spec.replicaCount` (`spec.size` in
///   `v1alpha1`) below `old / 2 + 1`;
/// - shrink the volumes (a PersistentVolumeClaim cannot shrink):
///   `spec.storageSize` (`spec.storage.size`) below the current size,
///   compared as Kubernetes quantities (`1Gi` is `1024Mi`), the default
///   [`DEFAULT_STORAGE_SIZE`] standing for an unset size.
///
/// The message names the field as the new object writes it, with the old
/// and new values. Creates, deletes and connects are allowed, and so is a
/// rule whose values cannot be read (reconcile reports those).
pub fn validate(operation: Operation, object: &Value, old: Option<&Value>) -> Verdict {
    let (Operation::Update, Some(old)) = (operation, old) else {
        return Verdict::allow();
    };
    let alpha = object.get("apiVersion").and_then(Value::as_str) == Some(V1ALPHA1);
    let (replicas_field, storage_field) =
        if alpha { ("spec.size", "spec.storage.size") } else { ("spec.replicaCount", "spec.storageSize") };
    let (Ok(new), Ok(old)) = (convert(object.clone(), V1BETA1), convert(old.clone(), V1BETA1)) else {
        return Verdict::allow();
    };
    let count = |o: &Value| o.pointer("/spec/replicaCount").and_then(Value::as_i64);
    let size =
        |o: &Value| o.pointer("/spec/storageSize").and_then(Value::as_str).unwrap_or(DEFAULT_STORAGE_SIZE).to_string();
    let mut faults = Vec::new();
    if let (Some(new), Some(old)) = (count(&new), count(&old))
        && new < quorum(old)
    {
        faults.push((
            replicas_field,
            format!(
                "cannot go from {old} to {new}: below the quorum of the current {old} replicas ({}); scale down in steps that keep a quorum",
                quorum(old)
            ),
        ));
    }
    let (new_size, old_size) = (size(&new), size(&old));
    if new_size != old_size {
        match (Quantity::parse(&new_size), Quantity::parse(&old_size)) {
            (Err(problem), _) => faults.push((storage_field, format!("is not a quantity ({new_size:?}: {problem})"))),
            (Ok(new), Ok(old)) if new < old => faults
                .push((storage_field, format!("cannot decrease from {old_size} to {new_size}: volumes cannot shrink"))),
            _ => {}
        }
    }
    if faults.is_empty() {
        return Verdict::allow();
    }
    let message = faults.iter().map(|(path, problem)| format!("{path} {problem}")).collect::<Vec<_>>().join("; ");
    faults.into_iter().fold(Verdict::refuse(message), |verdict, (path, problem)| verdict.field(path, problem))
}

/// A Kubernetes resource quantity (`512Mi`, `1Gi`, `1.5G`, `100m`, `1e3`),
/// exactly: `mantissa × 10^exp10 × 2^exp2`, negative when `negative`.
#[derive(Debug, Clone, Copy)]
pub struct Quantity {
    negative: bool,
    mantissa: u128,
    exp10: i32,
    exp2: u32,
}

impl Quantity {
    /// Parses the Kubernetes quantity syntax: a signed decimal number, then
    /// a binary suffix (`Ki` … `Ei`), a decimal one (`n`, `u`, `m`, `k`,
    /// `M` … `E`) or a decimal exponent (`e3`, `E-2`), or none.
    ///
    /// # Errors
    ///
    /// What is wrong with `text`.
    pub fn parse(text: &str) -> Result<Quantity, String> {
        let (negative, rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        let number_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && fraction.is_empty() {
            return Err("no number".into());
        }
        if fraction.contains('.') {
            return Err("more than one decimal point".into());
        }
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 38 {
            return Err("too many digits".into());
        }
        let mantissa = if digits.is_empty() { 0 } else { digits.parse::<u128>().map_err(|e| e.to_string())? };
        let mut exp10 = -(fraction.len() as i32);
        let mut exp2 = 0;
        match suffix {
            "" => {}
            "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
                exp2 = 10 * (1 + "KMGTPE".find(&suffix[..1]).unwrap_or(0) as u32);
            }
            "n" => exp10 -= 9,
            "u" => exp10 -= 6,
            "m" => exp10 -= 3,
            "k" => exp10 += 3,
            "M" => exp10 += 6,
            "G" => exp10 += 9,
            "T" => exp10 += 12,
            "P" => exp10 += 15,
            "E" => exp10 += 18,
            _ if suffix.starts_with(['e', 'E']) => {
                let exponent: i32 = suffix[1..].parse().map_err(|_| format!("unknown suffix {suffix:?}"))?;
                exp10 = exp10.checked_add(exponent).ok_or("exponent out of range")?;
            }
            _ => return Err(format!("unknown suffix {suffix:?}")),
        }
        Ok(Quantity { negative: negative && mantissa != 0, mantissa, exp10, exp2 })
    }

    /// The magnitude, approximately (for magnitudes too far apart to
    /// compare exactly).
    fn approximate(&self) -> f64 {
        self.mantissa as f64 * 10f64.powi(self.exp10) * 2f64.powi(self.exp2 as i32)
    }

    /// The magnitudes of `self` and `other` scaled to integers with one
    /// decimal exponent, if that fits.
    fn scaled(&self, other: &Quantity) -> Option<(u128, u128)> {
        let common = self.exp10.min(other.exp10);
        let scale = |q: &Quantity| -> Option<u128> {
            let tens = u32::try_from(q.exp10 - common).ok()?;
            q.mantissa.checked_mul(10u128.checked_pow(tens)?)?.checked_mul(1u128.checked_shl(q.exp2)?)
        };
        Some((scale(self)?, scale(other)?))
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    /// Quantities by value: `1Gi` equals `1024Mi`, `512Mi` is less.
    fn cmp(&self, other: &Self) -> Ordering {
        let magnitude = match self.scaled(other) {
            Some((a, b)) => a.cmp(&b),
            None => self.approximate().total_cmp(&other.approximate()),
        };
        match (self.negative, other.negative) {
            (false, false) => magnitude,
            (true, true) => magnitude.reverse(),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beta() -> Value {
        json!({
            "apiVersion": V1BETA1,
            "kind": "DistributedKV",
            "metadata": {"name": "kv", "namespace": "ns", "uid": "u1", "labels": {"a": "b"}},
            "spec": {"replicaCount": 3, "image": "kv:1", "storageSize": "2Gi", "storageClassName": "fast",
                     "maxUnavailable": 2, "backup": {"s3Path": "s3://b/p", "schedule": "0 0 * * *"}},
            "status": {"readyReplicas": 1},
        })
    }

    #[test]
    fn beta_to_alpha_renames_and_keeps_beta_only_fields_in_an_annotation() {
        let alpha = convert(beta(), V1ALPHA1).unwrap();
        assert_eq!(alpha["apiVersion"], V1ALPHA1);
        assert_eq!(
            alpha["spec"],
            json!({"size": 3, "image": "kv:1", "storage": {"size": "2Gi", "className": "fast"},
                   "backup": {"s3Path": "s3://b/p", "schedule": "0 0 * * *"}})
        );
        assert_eq!(alpha["metadata"]["annotations"][PRESERVED_ANNOTATION], r#"{"maxUnavailable":2}"#);
        assert_eq!(alpha["status"], json!({"readyReplicas": 1}));
        assert_eq!(alpha["metadata"]["labels"], json!({"a": "b"}));
    }

    #[test]
    fn round_trips_are_identical() {
        let original = beta();
        let back = convert(convert(original.clone(), V1ALPHA1).unwrap(), V1BETA1).unwrap();
        assert_eq!(back, original);
        let alpha = json!({"apiVersion": V1ALPHA1, "kind": "DistributedKV", "metadata": {"name": "a"},
                           "spec": {"size": 1, "image": "kv:1", "storage": {"size": "1Gi"}}});
        let back = convert(convert(alpha.clone(), V1BETA1).unwrap(), V1ALPHA1).unwrap();
        assert_eq!(back, alpha);
    }

    #[test]
    fn a_beta_object_without_beta_only_fields_gets_no_annotation() {
        let mut object = beta();
        object["spec"].as_object_mut().unwrap().remove("maxUnavailable");
        let alpha = convert(object, V1ALPHA1).unwrap();
        assert!(alpha["metadata"].get("annotations").is_none());
    }

    #[test]
    fn other_annotations_survive_and_same_version_is_a_no_op() {
        let mut object = beta();
        object["metadata"]["annotations"] = json!({"keep": "me"});
        let back = convert(convert(object.clone(), V1ALPHA1).unwrap(), V1BETA1).unwrap();
        assert_eq!(back, object);
        assert_eq!(convert(object.clone(), V1BETA1).unwrap(), object);
    }

    #[test]
    fn unknown_versions_are_refused_with_the_object_named() {
        let error = convert(beta(), "kv.example.com/v2").unwrap_err();
        assert!(error.contains("ns/kv") && error.contains("kv.example.com/v2"), "{error}");
    }

    #[test]
    fn reconcile_makes_three_children_and_reports_availability() {
        let alpha = convert(beta(), V1ALPHA1).unwrap();
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "kv", "namespace": "ns"},
                         "status": {"readyReplicas": 3}});
        let desired = reconcile(alpha, &Children::new(vec![sts])).unwrap().into_json();
        assert_eq!(desired.children.len(), 3);
        let kinds: Vec<String> = desired
            .children
            .iter()
            .map(|c| serde_json::from_str::<Value>(c).unwrap()["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, ["StatefulSet", "Service", "PodDisruptionBudget"]);
        let pdb: Value = serde_json::from_str(&desired.children[2]).unwrap();
        assert_eq!(pdb["spec"]["maxUnavailable"], 2);
        assert_eq!(desired.conditions[0].status, "True");
    }

    #[test]
    fn reconcile_never_writes_the_hosts_backup_status() {
        let desired = reconcile(beta(), &Children::new(vec![])).unwrap().into_json();
        assert_eq!(desired.status.as_deref(), Some(r#"{"readyReplicas":0}"#));
    }

    /// `beta()` with `spec.backup` replaced.
    fn with_backup(backup: Value) -> Value {
        let mut object = beta();
        object["spec"]["backup"] = backup;
        object
    }

    fn container(job: &Value) -> &Value {
        &job["spec"]["template"]["spec"]["containers"][0]
    }

    fn env(job: &Value, name: &str) -> Option<String> {
        container(job)["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    }

    /// Pod Security `restricted`, and no ServiceAccount token.
    fn assert_restricted(job: &Value) {
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(pod["restartPolicy"], "Never");
        let security = &container(job)["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    }

    #[test]
    fn no_spec_backup_means_no_plan() {
        let mut object = beta();
        object["spec"].as_object_mut().unwrap().remove("backup");
        assert_eq!(plan(&object).unwrap(), None);
        object["spec"]["backup"] = Value::Null;
        assert_eq!(plan(&object).unwrap(), None);
    }

    #[test]
    fn a_minimal_spec_backup_plans_with_the_defaults() {
        let plan = plan(&beta()).unwrap().unwrap();
        assert_eq!(plan.schedule, "0 0 * * *");
        assert_eq!((plan.retain, plan.backup_on_delete), (DEFAULT_KEEP_LAST, false));
        assert_eq!((plan.time_zone.as_ref(), plan.keep_failed, plan.always_keep_completed), (None, None, None));
        assert_eq!(
            (plan.job_deadline_seconds, plan.starting_deadline_seconds, plan.restore_deadline_seconds),
            (None, None, None)
        );
        let job = &plan.job;
        assert_eq!((job["apiVersion"].as_str(), job["kind"].as_str()), (Some("batch/v1"), Some("Job")));
        assert!(job.pointer("/metadata/name").is_none(), "the host names the Job: {job}");
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_restricted(job);
        let container = container(job);
        assert_eq!(container["name"], "backup");
        assert_eq!(container["image"], DEFAULT_BACKUP_IMAGE);
        assert_eq!(
            container["args"],
            json!([
                "backup",
                "--from",
                "kv-headless:7000",
                "--to",
                "$(WASM_OPERATOR_BACKUP_DESTINATION)/$(WASM_OPERATOR_BACKUP_NAME)",
                "--report",
                "/dev/termination-log"
            ])
        );
        assert_eq!(env(job, DESTINATION_ENV).as_deref(), Some("s3://b/p"));
        let labels = &job["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/name"], "distributedkv-backup", "never selected by the Service");
        assert_eq!(labels["app.kubernetes.io/instance"], "kv");
    }

    #[test]
    fn every_backup_field_reaches_the_plan() {
        let object = with_backup(json!({
            "s3Path": "s3://kv-backups/sessions/", "schedule": "*/5 * * * *", "backupImage": "kvctl:2",
            "timeZone": "Europe/Berlin", "backupOnDelete": true, "deadlineSeconds": 600,
            "retention": {"keepLast": 3, "keepFailed": 2, "alwaysKeepCompleted": 1},
            "podLabels": {"simulate.wasm-operator.dev/outcome": "fail", "team": "kv"},
        }));
        let plan = plan(&object).unwrap().unwrap();
        assert_eq!(plan.schedule, "*/5 * * * *");
        assert_eq!(plan.time_zone.as_deref(), Some("Europe/Berlin"));
        assert_eq!((plan.retain, plan.keep_failed, plan.always_keep_completed), (3, Some(2), Some(1)));
        assert!(plan.backup_on_delete);
        assert_eq!(plan.job_deadline_seconds, Some(600));
        assert_eq!(container(&plan.job)["image"], "kvctl:2");
        assert_eq!(env(&plan.job, DESTINATION_ENV).as_deref(), Some("s3://kv-backups/sessions"));
        let labels = &plan.job["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["simulate.wasm-operator.dev/outcome"], "fail");
        assert_eq!(labels["team"], "kv");
        assert_eq!(labels["app.kubernetes.io/component"], "backup");
    }

    #[test]
    fn an_invalid_spec_backup_is_refused_naming_the_field() {
        for (backup, field) in [
            (json!({"schedule": "0 0 * * *"}), "s3Path"),
            (
                json!({"s3Path": "s3://b/p", "schedule": "0 0 * * *", "retention": {"keepLast": -1}}),
                "retention.keepLast",
            ),
            (json!({"s3Path": "s3://b/p", "schedule": "0 0 * * *", "podLabels": {"a": 1}}), "podLabels.a"),
            (json!({"s3Path": "s3://b/p", "schedule": "0 0 * * *", "backupOnDelete": "yes"}), "backupOnDelete"),
            (json!("daily"), "not an object"),
        ] {
            let error = plan(&with_backup(backup)).unwrap_err();
            assert!(error.contains(field) && error.contains("ns/kv"), "{field}: {error}");
        }
    }

    #[test]
    fn restore_reads_the_backups_location() {
        let object = with_backup(json!({"s3Path": "s3://b/p", "schedule": "0 0 * * *", "backupImage": "kvctl:2",
                                        "podLabels": {"simulate.wasm-operator.dev/outcome": "hang"}}));
        let backup = json!({"apiVersion": "wasm-operator.dev/v1alpha1", "kind": "Backup",
                            "metadata": {"name": "kv-202611280300", "namespace": "ns"},
                            "status": {"phase": "Completed", "location": "s3://b/p/kv-202611280300"}});
        let job = restore(&object, &backup).unwrap();
        assert!(job.pointer("/metadata/name").is_none());
        assert_restricted(&job);
        assert_eq!(container(&job)["name"], "restore");
        assert_eq!(container(&job)["image"], "kvctl:2");
        assert_eq!(env(&job, RESTORE_FROM_ENV).as_deref(), Some("s3://b/p/kv-202611280300"));
        assert_eq!(
            container(&job)["args"],
            json!(["restore", "--from", "$(WASM_OPERATOR_RESTORE_FROM)", "--to", "kv-headless:7000"])
        );
        assert_eq!(job["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"], "hang");
        // Without spec.backup: the default image, no extra labels.
        let mut plain = beta();
        plain["spec"].as_object_mut().unwrap().remove("backup");
        let job = restore(&plain, &backup).unwrap();
        assert_eq!(container(&job)["image"], DEFAULT_BACKUP_IMAGE);
        // A Backup that has no location yet cannot be restored.
        let running =
            json!({"kind": "Backup", "metadata": {"name": "kv-1", "namespace": "ns"}, "status": {"phase": "Running"}});
        let error = restore(&object, &running).unwrap_err();
        assert!(error.contains("ns/kv-1") && error.contains("status.location"), "{error}");
    }

    #[test]
    fn the_new_backup_fields_round_trip_through_both_versions() {
        let object = with_backup(json!({
            "s3Path": "s3://b/p", "schedule": "0 0 * * *", "backupImage": "kvctl:2", "timeZone": "UTC",
            "backupOnDelete": true, "deadlineSeconds": 60,
            "retention": {"keepLast": 3, "keepFailed": 1, "alwaysKeepCompleted": 2},
            "podLabels": {"a": "b"},
        }));
        let alpha = convert(object.clone(), V1ALPHA1).unwrap();
        assert_eq!(alpha["spec"]["backup"], object["spec"]["backup"]);
        assert_eq!(convert(alpha.clone(), V1BETA1).unwrap(), object);
        assert_eq!(plan(&alpha).unwrap(), plan(&object).unwrap(), "both versions plan alike");
    }

    #[test]
    fn the_manifest_with_backup_owns_jobs() {
        let m = manifest_with_backup("1.0.0");
        assert!(m.implements_backup);
        assert!(m.owns.iter().any(|k| k.group == "batch" && k.kind == "Job"));
        assert!(!manifest("1.0.0").implements_backup);
    }

    fn update(new: Value, old: Value) -> Verdict {
        validate(Operation::Update, &new, Some(&old))
    }

    fn with_spec(mut object: Value, field: &str, value: Value) -> Value {
        object["spec"][field] = value;
        object
    }

    #[test]
    fn quantities_compare_by_value() {
        let q = |t: &str| Quantity::parse(t).unwrap();
        assert_eq!(q("1Gi").cmp(&q("512Mi")), Ordering::Greater);
        assert_eq!(q("1Gi").cmp(&q("1024Mi")), Ordering::Equal);
        assert_eq!(q("1Gi").cmp(&q("1073741824")), Ordering::Equal);
        assert_eq!(q("1G").cmp(&q("1Gi")), Ordering::Less);
        assert_eq!(q("1.5Gi").cmp(&q("1536Mi")), Ordering::Equal);
        assert_eq!(q("1.1G").cmp(&q("1100M")), Ordering::Equal);
        assert_eq!(q("1e3").cmp(&q("1k")), Ordering::Equal);
        assert_eq!(q("1E").cmp(&q("1e18")), Ordering::Equal);
        assert_eq!(q("500m").cmp(&q(".5")), Ordering::Equal);
        assert_eq!(q("-1").cmp(&q("0")), Ordering::Less);
        assert_eq!(q("1Ei").cmp(&q("1n")), Ordering::Greater);
        for bad in ["", "Gi", "1GB", "1..2", "1e", "abc"] {
            assert!(Quantity::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn shrinking_below_the_quorum_is_refused_in_both_versions() {
        let five = with_spec(beta(), "replicaCount", json!(5));
        // The quorum of 5 is 3: down to 3 keeps it, 2 does not.
        assert!(update(with_spec(beta(), "replicaCount", json!(3)), five.clone()).allowed);
        let refused = update(with_spec(beta(), "replicaCount", json!(2)), five.clone());
        assert!(!refused.allowed);
        assert_eq!(
            refused.message,
            "spec.replicaCount cannot go from 5 to 2: below the quorum of the current 5 replicas (3); scale down in steps that keep a quorum"
        );
        assert_eq!(refused.fields[0].path, "spec.replicaCount");
        // A v1alpha1 client names the field spec.size; the old object may be
        // stored in either version.
        let alpha_two = with_spec(convert(beta(), V1ALPHA1).unwrap(), "size", json!(2));
        let refused = update(alpha_two, five);
        assert_eq!(refused.fields[0].path, "spec.size");
        assert!(refused.message.starts_with("spec.size cannot go from 5 to 2"), "{}", refused.message);
        // Growing, or 3 to 2 (quorum 2), is fine.
        assert!(update(with_spec(beta(), "replicaCount", json!(2)), beta()).allowed);
        assert!(update(with_spec(beta(), "replicaCount", json!(9)), beta()).allowed);
    }

    #[test]
    fn decreasing_the_storage_size_is_refused_in_both_versions() {
        let refused =
            update(with_spec(beta(), "storageSize", json!("512Mi")), with_spec(beta(), "storageSize", json!("1Gi")));
        assert!(!refused.allowed);
        assert_eq!(refused.message, "spec.storageSize cannot decrease from 1Gi to 512Mi: volumes cannot shrink");
        assert_eq!(refused.fields[0].path, "spec.storageSize");
        // The same size spelled another way, and growing, are fine.
        assert!(
            update(with_spec(beta(), "storageSize", json!("1024Mi")), with_spec(beta(), "storageSize", json!("1Gi")))
                .allowed
        );
        assert!(update(with_spec(beta(), "storageSize", json!("4Gi")), beta()).allowed);
        // An unset size is the default 1Gi.
        let mut unset = beta();
        unset["spec"].as_object_mut().unwrap().remove("storageSize");
        let refused = update(with_spec(beta(), "storageSize", json!("100Mi")), unset);
        assert_eq!(refused.message, "spec.storageSize cannot decrease from 1Gi to 100Mi: volumes cannot shrink");
        let mut alpha = convert(beta(), V1ALPHA1).unwrap();
        alpha["spec"]["storage"]["size"] = json!("1Gi");
        let refused = update(alpha, beta());
        assert_eq!(refused.fields[0].path, "spec.storage.size");
        assert_eq!(refused.message, "spec.storage.size cannot decrease from 2Gi to 1Gi: volumes cannot shrink");
        let garbage = update(with_spec(beta(), "storageSize", json!("lots")), beta());
        assert!(!garbage.allowed && garbage.message.starts_with("spec.storageSize is not a quantity"), "{garbage:?}");
    }

    #[test]
    fn both_rules_are_reported_together_and_other_operations_are_allowed() {
        let mut shrunk = with_spec(beta(), "replicaCount", json!(1));
        shrunk["spec"]["storageSize"] = json!("1Gi");
        let old = with_spec(beta(), "replicaCount", json!(5));
        let refused = update(shrunk.clone(), old.clone());
        let paths: Vec<&str> = refused.fields.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["spec.replicaCount", "spec.storageSize"]);
        assert!(refused.message.contains("; spec.storageSize cannot decrease from 2Gi to 1Gi"), "{}", refused.message);
        assert!(validate(Operation::Create, &shrunk, None).allowed);
        assert!(validate(Operation::Delete, &shrunk, Some(&old)).allowed);
        assert!(validate(Operation::Update, &shrunk, None).allowed);
        assert_eq!((quorum(1), quorum(3), quorum(4), quorum(5)), (1, 2, 3, 3));
    }

    #[test]
    fn an_invalid_spec_fails_permanently() {
        let mut object = beta();
        object["spec"]["replicaCount"] = json!(12);
        assert!(spec_of(&object).unwrap_err().message().contains("replicaCount must be 1..9"));
    }
}
