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

use serde_json::{Map, Value, json};
use wasm_operator_sdk::{Children, Condition, Desired, Failure, Kind, Manifest};

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

/// `v1beta1` spec fields with no `v1alpha1` counterpart.
const BETA_ONLY: &[&str] = &["maxUnavailable"];

/// The manifest of distributedkv `version`.
pub fn manifest(version: &str) -> Manifest {
    Manifest::new("distributedkv", version)
        .description("Runs a replicated key-value store as a StatefulSet, a headless Service and a PodDisruptionBudget")
        .primary(Kind::namespaced(GROUP, "v1beta1", "DistributedKV", "distributedkvs"))
        .owns::<k8s_openapi::api::apps::v1::StatefulSet>()
        .owns::<k8s_openapi::api::core::v1::Service>()
        .owns::<k8s_openapi::api::policy::v1::PodDisruptionBudget>()
        .implements_migration()
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
                // Pod Security `restricted` (the host's default grant), and
                // the namespace's default account without its token: the
                // nodes need no API access.
                "spec": {
                    "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "kv",
                        "image": spec.image,
                        "ports": [{"name": "client", "containerPort": CLIENT_PORT}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                    }],
                },
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
    Ok(desired.status(json!({"readyReplicas": ready})).condition(Condition::new("Available", status, reason, message)))
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
    fn an_invalid_spec_fails_permanently() {
        let mut object = beta();
        object["spec"]["replicaCount"] = json!(12);
        assert!(spec_of(&object).unwrap_err().message().contains("replicaCount must be 1..9"));
    }
}
