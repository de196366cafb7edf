//! The Pods of a Job: built-in steps standing in for the Job controller's
//! work on Pods. The Job stages (`stages/builtin/job.yaml`) write the Job's
//! status; these steps
//! - keep one Pod per attempt the status counts (`active + succeeded +
//!   failed`), made from the Job's pod template with the labels and owner
//!   reference the Job controller sets ([`missing_pods`]); kwok's Pod stages
//!   then run them (`pod-complete` for Pods owned by a Job, `pod-fail`,
//!   `pod-hang` and `pod-complete-backup` for Pods labelled so), and garbage
//!   collection removes them with the Job;
//! - record a Pod that Succeeded in the Job's
//!   `status.uncountedTerminatedPods.succeeded`, as the Job controller does
//!   before counting it ([`record_succeeded`]): `job-complete` waits for it;
//! - delete the active Pods of a Job that failed its deadline
//!   ([`pods_to_delete`]), and create none for it.
//!
//! Pure: the driver creates, updates and deletes.

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
    if meta["deletionTimestamp"].is_string() || past_deadline(job) {
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

/// Whether a condition of `job` of one of `types` is True (with `reason`, when given).
fn has_condition(job: &Value, types: &[&str], reason: Option<&str>) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| {
            c["type"].as_str().is_some_and(|t| types.contains(&t))
                && c["status"] == "True"
                && reason.is_none_or(|r| c["reason"] == r)
        })
}

/// Whether `job` is finished: condition `Complete` or `Failed` True.
pub fn finished(job: &Value) -> bool {
    has_condition(job, &["Complete", "Failed"], None)
}

/// Whether `job` failed its `activeDeadlineSeconds` (`job-deadline` wrote
/// `FailureTarget`/`Failed` with reason `DeadlineExceeded`).
pub fn past_deadline(job: &Value) -> bool {
    has_condition(job, &["FailureTarget", "Failed"], Some("DeadlineExceeded"))
}

/// The name and uid of the Job that controls `pod`, if one does.
pub fn owner_job(pod: &Value) -> Option<(&str, &str)> {
    pod["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["kind"] == "Job" && r["controller"] == true)
        .and_then(|r| Some((r["name"].as_str()?, r["uid"].as_str()?)))
}

/// `job` with `pod`'s uid added to `status.uncountedTerminatedPods.succeeded`,
/// as the Job controller records a Pod that Succeeded before counting it;
/// `None` when there is nothing to record: the Pod has not Succeeded, is not
/// the Job's, is recorded already, or the Job is finished or deleted.
pub fn record_succeeded(job: &Value, pod: &Value) -> Option<Value> {
    let uid = pod["metadata"]["uid"].as_str()?;
    let job_uid = job["metadata"]["uid"].as_str()?;
    if pod["status"]["phase"] != "Succeeded"
        || owner_job(pod).map(|(_, u)| u) != Some(job_uid)
        || job["metadata"]["deletionTimestamp"].is_string()
        || finished(job)
    {
        return None;
    }
    let recorded = &job["status"]["uncountedTerminatedPods"]["succeeded"];
    if recorded
        .as_array()
        .is_some_and(|a| a.iter().any(|u| u == uid))
    {
        return None;
    }
    let mut out = job.clone();
    let mut uids = recorded.as_array().cloned().unwrap_or_default();
    uids.push(json!(uid));
    if !out["status"].is_object() {
        out["status"] = json!({});
    }
    if !out["status"]["uncountedTerminatedPods"].is_object() {
        out["status"]["uncountedTerminatedPods"] = json!({});
    }
    out["status"]["uncountedTerminatedPods"]["succeeded"] = Value::Array(uids);
    Some(out)
}

/// The names of `job`'s active Pods (neither Succeeded nor Failed, not being
/// deleted) among `pods` when the Job failed its deadline: the Job controller
/// deletes them.
pub fn pods_to_delete(job: &Value, pods: &[Value]) -> Vec<String> {
    let Some(uid) = job["metadata"]["uid"].as_str() else {
        return Vec::new();
    };
    if !past_deadline(job) {
        return Vec::new();
    }
    pods.iter()
        .filter(|p| owned_by(p, uid))
        .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
        .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect()
}
