//! The Pods of a Job: a built-in step standing in for the Job controller's
//! Pod creation. The Job stages (`stages/builtin/job.yaml`) write the Job's
//! status; this step keeps one Pod per attempt the status counts
//! (`active + succeeded + failed`), made from the Job's pod template with the
//! labels and owner reference the Job controller sets. kwok's Pod stages then
//! run them (`pod-complete` for Pods owned by a Job, `pod-fail` for Pods
//! labelled to fail), and garbage collection removes them with the Job.
//! Pure: the driver creates the Pods.

use serde_json::{Map, Value, json};

fn count(status: &Value, field: &str) -> usize {
    status[field]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

/// Whether `pod` is owned by the Job whose uid is `job_uid`.
pub fn owned_by(pod: &Value, job_uid: &str) -> bool {
    pod["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["uid"].as_str() == Some(job_uid))
}

/// The Pods to create for `job` given the Pods that exist in its namespace:
/// as many as the status counts attempts beyond the Pods it owns already.
pub fn missing_pods(job: &Value, pods: &[Value]) -> Vec<Value> {
    let meta = &job["metadata"];
    let (Some(name), Some(uid)) = (meta["name"].as_str(), meta["uid"].as_str()) else {
        return Vec::new();
    };
    if meta["deletionTimestamp"].is_string() {
        return Vec::new();
    }
    let status = &job["status"];
    let attempts = count(status, "active") + count(status, "succeeded") + count(status, "failed");
    let owned = pods.iter().filter(|p| owned_by(p, uid)).count();
    (owned..attempts).map(|_| pod_for(job, name, uid)).collect()
}

/// One Pod of `job` from its template, labelled and owned as the Job controller does.
fn pod_for(job: &Value, name: &str, uid: &str) -> Value {
    let template = &job["spec"]["template"];
    let mut labels = template["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_else(Map::new);
    for (k, v) in [
        ("job-name", name),
        ("batch.kubernetes.io/job-name", name),
        ("controller-uid", uid),
        ("batch.kubernetes.io/controller-uid", uid),
    ] {
        labels.insert(k.to_string(), json!(v));
    }
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "namespace": job["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [{
            "apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true,
        }],
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        metadata["annotations"] = annotations.clone();
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": template["spec"],
    })
}
