//! Backup and restore Jobs as values: the Job the host creates from a
//! plugin's template ([`owned_job`]), how a Job ended ([`job_outcome`]),
//! and where a backup Job said its data went ([`reported_location`]).
//!
//! Nothing here calls the API: the runner reads the Job and its Pods, asks
//! these functions, and writes what they say.

use serde_json::{Map, Value, json};

use crate::contract::Reason;

/// `activeDeadlineSeconds` of a backup or restore Job when the plan does
/// not say: one hour. A Job that hangs fails then, and the schedule goes on.
pub const DEFAULT_JOB_DEADLINE_SECONDS: u64 = 3600;

/// The message format a backup Job's container writes to its termination
/// log (`/dev/termination-log`): a JSON object with a string `location`.
pub const TERMINATION_MESSAGE_FORMAT: &str = r#"{"location": "<where the data went>"}"#;

/// The owner of a Job: the Backup or Restore it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOwner<'a> {
    /// `Backup` or `Restore`.
    pub kind: &'a str,
    /// The owner's name.
    pub name: &'a str,
    /// The owner's uid.
    pub uid: &'a str,
}

/// What the host puts on a plugin's Job template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFrame<'a> {
    /// The Job's name.
    pub name: &'a str,
    /// The namespace: the primary's.
    pub namespace: &'a str,
    /// The Backup or Restore that owns the Job (garbage collection deletes
    /// the Job with it).
    pub owner: JobOwner<'a>,
    /// Labels added to the Job and its pod template.
    pub labels: &'a [(&'a str, &'a str)],
    /// Env vars set in every container.
    pub env: &'a [(&'a str, &'a str)],
    /// `activeDeadlineSeconds` (a smaller one in the template is kept).
    pub deadline_seconds: u64,
}

/// Why a plugin's Job template is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobTemplateError {
    /// Not a `batch/v1` Job.
    #[error("the plan's job is {found}, not a batch/v1 Job")]
    NotAJob {
        /// `apiVersion kind` as found.
        found: String,
    },
    /// The template names another namespace.
    #[error(
        "the plan's job names namespace {asked:?}; a backup or restore Job runs in the primary's namespace {namespace:?}"
    )]
    OtherNamespace {
        /// The namespace asked for.
        asked: String,
        /// The primary's namespace.
        namespace: String,
    },
    /// No pod template with containers.
    #[error("the plan's job has no spec.template.spec.containers list")]
    NoContainers,
}

/// The Job to create: `template` (the plugin's) with the host's name,
/// namespace, owner, labels, env and deadline.
///
/// The plugin's own owner references and `generateName` are dropped (the
/// host owns the Job), `restartPolicy` defaults to `Never`.
///
/// # Errors
///
/// [`JobTemplateError`] when the template is not a Job with containers, or
/// names another namespace.
pub fn owned_job(template: &Value, frame: &JobFrame<'_>) -> Result<Value, JobTemplateError> {
    let api_version = template["apiVersion"].as_str().unwrap_or("batch/v1");
    let kind = template["kind"].as_str().unwrap_or("Job");
    if api_version != "batch/v1" || kind != "Job" || !template.is_object() {
        return Err(JobTemplateError::NotAJob {
            found: format!("{api_version} {kind}"),
        });
    }
    if let Some(asked) = template["metadata"]["namespace"].as_str()
        && asked != frame.namespace
    {
        return Err(JobTemplateError::OtherNamespace {
            asked: asked.to_string(),
            namespace: frame.namespace.to_string(),
        });
    }
    let mut job = template.clone();
    job["apiVersion"] = json!("batch/v1");
    job["kind"] = json!("Job");
    let not_a_job = || JobTemplateError::NotAJob {
        found: "a Job whose metadata or spec is not an object".into(),
    };
    let metadata = object_at(&mut job, "metadata").ok_or_else(not_a_job)?;
    metadata.remove("generateName");
    metadata.remove("ownerReferences");
    metadata.remove("resourceVersion");
    metadata.remove("uid");
    metadata.insert("name".into(), json!(frame.name));
    metadata.insert("namespace".into(), json!(frame.namespace));
    add_labels(metadata, frame.labels);
    metadata.insert(
        "ownerReferences".into(),
        json!([{
            "apiVersion": format!("{}/{}", super::resources::GROUP, super::resources::VERSION),
            "kind": frame.owner.kind,
            "name": frame.owner.name,
            "uid": frame.owner.uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }]),
    );
    let spec = object_at(&mut job, "spec").ok_or_else(not_a_job)?;
    let deadline = spec
        .get("activeDeadlineSeconds")
        .and_then(Value::as_u64)
        .filter(|&asked| asked > 0 && asked < frame.deadline_seconds)
        .unwrap_or(frame.deadline_seconds);
    spec.insert("activeDeadlineSeconds".into(), json!(deadline));
    let template = spec
        .get_mut("template")
        .and_then(Value::as_object_mut)
        .ok_or(JobTemplateError::NoContainers)?;
    add_labels(
        template
            .entry("metadata")
            .or_insert_with(|| json!({}))
            .as_object_mut()
            .ok_or(JobTemplateError::NoContainers)?,
        frame.labels,
    );
    let pod = template
        .get_mut("spec")
        .and_then(Value::as_object_mut)
        .ok_or(JobTemplateError::NoContainers)?;
    pod.entry("restartPolicy").or_insert_with(|| json!("Never"));
    let mut any = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for container in containers {
            let Some(container) = container.as_object_mut() else {
                return Err(JobTemplateError::NoContainers);
            };
            any |= list == "containers";
            set_env(container, frame.env);
        }
    }
    if !any {
        return Err(JobTemplateError::NoContainers);
    }
    Ok(job)
}

/// The object at `field` of `value`, made an object if it was not one;
/// `None` when `value` is not an object.
fn object_at<'v>(value: &'v mut Value, field: &str) -> Option<&'v mut Map<String, Value>> {
    let entry = value
        .as_object_mut()?
        .entry(field)
        .or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    entry.as_object_mut()
}

fn add_labels(metadata: &mut Map<String, Value>, labels: &[(&str, &str)]) {
    let entry = metadata.entry("labels").or_insert_with(|| json!({}));
    if !entry.is_object() {
        *entry = json!({});
    }
    if let Some(map) = entry.as_object_mut() {
        for (key, value) in labels {
            map.insert((*key).to_string(), json!(value));
        }
    }
}

fn set_env(container: &mut Map<String, Value>, env: &[(&str, &str)]) {
    let entry = container.entry("env").or_insert_with(|| json!([]));
    if !entry.is_array() {
        *entry = json!([]);
    }
    if let Some(list) = entry.as_array_mut() {
        for (name, value) in env {
            list.retain(|e| e["name"].as_str() != Some(name));
            list.push(json!({ "name": name, "value": value }));
        }
    }
}

/// The reason a failed Job gives a Backup or Restore: the Job's own
/// (`DeadlineExceeded`, `BackoffLimitExceeded`) when the host knows it,
/// else `JobFailed` (the message keeps the Job's).
pub fn failure_reason(job_reason: &str) -> Reason {
    match job_reason {
        "DeadlineExceeded" => Reason::DeadlineExceeded,
        "BackoffLimitExceeded" => Reason::BackoffLimitExceeded,
        _ => Reason::JobFailed,
    }
}

/// How a Job stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// Neither `Complete` nor `Failed` yet.
    Running,
    /// Condition `Complete` is true.
    Complete {
        /// `status.completionTime`, if set.
        at: Option<String>,
    },
    /// Condition `Failed` is true.
    Failed {
        /// Its reason (`DeadlineExceeded`, `BackoffLimitExceeded`, ...).
        reason: String,
        /// Its message.
        message: String,
        /// The condition's `lastTransitionTime`, if set.
        at: Option<String>,
    },
}

/// How `job` stands, from its conditions.
pub fn job_outcome(job: &Value) -> JobOutcome {
    let conditions = job["status"]["conditions"].as_array();
    let true_condition = |kind: &str| {
        conditions
            .into_iter()
            .flatten()
            .find(|c| c["type"] == kind && c["status"] == "True")
    };
    if let Some(failed) = true_condition("Failed") {
        return JobOutcome::Failed {
            reason: failed["reason"].as_str().unwrap_or("JobFailed").to_string(),
            message: failed["message"].as_str().unwrap_or("").to_string(),
            at: failed["lastTransitionTime"].as_str().map(str::to_string),
        };
    }
    if true_condition("Complete").is_some() {
        return JobOutcome::Complete {
            at: job["status"]["completionTime"].as_str().map(str::to_string),
        };
    }
    JobOutcome::Running
}

/// Where a backup Job said its data went: the `location` of the first
/// termination message of a succeeded Pod among `pods`.
///
/// `None` when no succeeded Pod has a termination message yet;
/// `Some(Err(..))` with the message when one is not in the documented
/// format ([`TERMINATION_MESSAGE_FORMAT`]).
pub fn reported_location(pods: &[Value]) -> Option<Result<String, String>> {
    let messages = pods
        .iter()
        .filter(|pod| pod["status"]["phase"] == "Succeeded")
        .flat_map(|pod| {
            pod["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter_map(|status| status["state"]["terminated"]["message"].as_str())
        .map(str::trim)
        .filter(|message| !message.is_empty());
    let mut first_problem = None;
    for message in messages {
        match serde_json::from_str::<Value>(message) {
            Ok(parsed) => match parsed["location"].as_str() {
                Some(location) if !location.is_empty() => return Some(Ok(location.to_string())),
                _ => first_problem.get_or_insert_with(|| message.to_string()),
            },
            Err(_) => first_problem.get_or_insert_with(|| message.to_string()),
        };
    }
    first_problem.map(|message| {
        Err(format!(
            "the backup Job's termination message is not {TERMINATION_MESSAGE_FORMAT}: {}",
            crate::util::truncate(&message, 200)
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame<'a>(labels: &'a [(&'a str, &'a str)], env: &'a [(&'a str, &'a str)]) -> JobFrame<'a> {
        JobFrame {
            name: "kv-202611280300-backup",
            namespace: "shop",
            owner: JobOwner {
                kind: "Backup",
                name: "kv-202611280300",
                uid: "u-1",
            },
            labels,
            env,
            deadline_seconds: 600,
        }
    }

    fn template() -> Value {
        json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"generateName": "x-", "ownerReferences": [{"uid": "forged"}]},
            "spec": {"template": {"spec": {"containers": [
                {"name": "backup", "image": "kvctl", "env": [{"name": "WASM_OPERATOR_BACKUP_NAME", "value": "forged"}]}
            ]}}}
        })
    }

    #[test]
    fn the_host_names_owns_labels_and_bounds_the_job() {
        let labels = [("backup.wasm-operator.dev/name", "kv-202611280300")];
        let env = [("WASM_OPERATOR_BACKUP_NAME", "kv-202611280300")];
        let job = owned_job(&template(), &frame(&labels, &env)).unwrap();
        assert_eq!(job["metadata"]["name"], "kv-202611280300-backup");
        assert_eq!(job["metadata"]["namespace"], "shop");
        assert!(job["metadata"].get("generateName").is_none());
        let owners = job["metadata"]["ownerReferences"].as_array().unwrap();
        assert_eq!(owners.len(), 1);
        assert_eq!(owners[0]["uid"], "u-1");
        assert_eq!(owners[0]["kind"], "Backup");
        assert_eq!(owners[0]["controller"], true);
        assert_eq!(job["spec"]["activeDeadlineSeconds"], 600);
        assert_eq!(
            job["spec"]["template"]["metadata"]["labels"]["backup.wasm-operator.dev/name"],
            "kv-202611280300"
        );
        assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
        let env = job["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap();
        assert_eq!(env.len(), 1, "the plugin's value is replaced: {env:?}");
        assert_eq!(env[0]["value"], "kv-202611280300");
    }

    #[test]
    fn a_smaller_deadline_in_the_template_is_kept_a_larger_one_is_not() {
        let mut small = template();
        small["spec"]["activeDeadlineSeconds"] = json!(30);
        let job = owned_job(&small, &frame(&[], &[])).unwrap();
        assert_eq!(job["spec"]["activeDeadlineSeconds"], 30);
        let mut large = template();
        large["spec"]["activeDeadlineSeconds"] = json!(99_999);
        let job = owned_job(&large, &frame(&[], &[])).unwrap();
        assert_eq!(job["spec"]["activeDeadlineSeconds"], 600);
    }

    #[test]
    fn templates_that_are_not_jobs_or_elsewhere_are_refused() {
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment"});
        assert!(matches!(
            owned_job(&deployment, &frame(&[], &[])),
            Err(JobTemplateError::NotAJob { .. })
        ));
        let mut elsewhere = template();
        elsewhere["metadata"]["namespace"] = json!("kube-system");
        let error = owned_job(&elsewhere, &frame(&[], &[])).unwrap_err();
        assert!(error.to_string().contains("kube-system"), "{error}");
        let empty = json!({"apiVersion": "batch/v1", "kind": "Job", "spec": {}});
        assert_eq!(
            owned_job(&empty, &frame(&[], &[])),
            Err(JobTemplateError::NoContainers)
        );
    }

    #[test]
    fn outcomes_come_from_the_conditions() {
        assert_eq!(job_outcome(&json!({})), JobOutcome::Running);
        let complete = json!({"status": {"completionTime": "t", "conditions": [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"}]}});
        assert_eq!(
            job_outcome(&complete),
            JobOutcome::Complete {
                at: Some("t".into())
            }
        );
        let failed = json!({"status": {"conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"},
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded",
             "message": "Job was active longer than specified deadline"}]}});
        assert!(matches!(
            job_outcome(&failed),
            JobOutcome::Failed { reason, .. } if reason == "DeadlineExceeded"
        ));
        let targeted = json!({"status": {"conditions": [
            {"type": "FailureTarget", "status": "True"}]}});
        assert_eq!(job_outcome(&targeted), JobOutcome::Running);
    }

    fn pod(phase: &str, message: Option<&str>) -> Value {
        let mut terminated = json!({"exitCode": 0});
        if let Some(message) = message {
            terminated["message"] = json!(message);
        }
        json!({"status": {"phase": phase, "containerStatuses": [{"state": {"terminated": terminated}}]}})
    }

    #[test]
    fn the_location_is_read_from_a_succeeded_pods_message() {
        assert_eq!(reported_location(&[]), None);
        assert_eq!(reported_location(&[pod("Succeeded", None)]), None);
        let good = pod("Succeeded", Some(r#"{"location":"s3://b/p/kv-1"}"#));
        assert_eq!(
            reported_location(&[pod("Failed", Some("x")), good]),
            Some(Ok("s3://b/p/kv-1".to_string()))
        );
        let bad = reported_location(&[pod("Succeeded", Some("done"))]).unwrap();
        assert!(bad.unwrap_err().contains("done"));
    }
}
