//! Workloads that run, on either backend: manifests of a Deployment, a
//! StatefulSet and a Job (one that succeeds or one told to fail), and waits
//! for the state the controllers compute. The cluster comes from
//! `devcluster::test_cluster_simulating_workloads()` (or
//! `Host::builder().simulating_workloads()`): on the devcluster its workload
//! simulation plays the Pods and the controllers' status, on the real control
//! plane kube-scheduler places the Pods on fake Nodes, kwok runs them and
//! kube-controller-manager computes the status.
//!
//! Failure on demand: a Pod labelled [`OUTCOME_LABEL`]` = `[`OUTCOME_FAIL`]
//! (here through the Job's Pod template) has its containers exit with code 1,
//! reason `Error`; with restartPolicy `Never` its phase becomes `Failed`.
//! [`OUTCOME_HANG`] keeps its containers running: the Job never completes,
//! and fails `DeadlineExceeded` when it has an `activeDeadlineSeconds`.
//!
//! The backup tool: a Pod of a Job labelled [`BACKUP_NAME_LABEL`] completes
//! with each container that has env [`BACKUP_DESTINATION_ENV`] terminated
//! with the message `{"location":"<destination>/<Backup name>"}`
//! ([`termination_messages`]).

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::wait_until;

/// The label that makes a Pod's containers fail (the shared contract).
pub const OUTCOME_LABEL: &str = "simulate.wasm-operator.dev/outcome";

/// [`OUTCOME_LABEL`]'s value for "fail".
pub const OUTCOME_FAIL: &str = "fail";

/// [`OUTCOME_LABEL`]'s value for "run, never complete".
pub const OUTCOME_HANG: &str = "hang";

/// The label the host puts on a backup Job and its Pod template: the Backup's name.
pub const BACKUP_NAME_LABEL: &str = "backup.wasm-operator.dev/name";

/// The env of a plugin's backup container that says where to write.
pub const BACKUP_DESTINATION_ENV: &str = "WASM_OPERATOR_BACKUP_DESTINATION";

/// How long a workload may take to become Ready, Complete or Failed. A Job
/// told to fail waits out the Job controller's retry back-off (10 s for the
/// first retry) once per retry.
pub const WORKLOAD_READY: Duration = Duration::from_secs(120);

/// How a Job ended, with the counters the Job controller wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutcome {
    /// Condition `Complete` is True.
    Complete {
        /// `status.succeeded`.
        succeeded: i32,
        /// `status.failed`.
        failed: i32,
    },
    /// Condition `Failed` is True.
    Failed {
        /// The `Failed` condition's reason (e.g. `BackoffLimitExceeded`).
        reason: String,
        /// `status.succeeded`.
        succeeded: i32,
        /// `status.failed`.
        failed: i32,
    },
}

fn pod_template(labels: serde_json::Value, restart_policy: &str) -> serde_json::Value {
    json!({
        "metadata": {"labels": labels},
        "spec": {
            "restartPolicy": restart_policy,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    })
}

/// A Job of one Pod that succeeds, or with `fail` one whose every Pod fails
/// (the template carries [`OUTCOME_LABEL`]), retried `backoff_limit` times.
pub fn job(name: &str, fail: bool, backoff_limit: i32) -> Job {
    let builder = job_with(name).backoff_limit(backoff_limit);
    if fail {
        builder.outcome(OUTCOME_FAIL).build()
    } else {
        builder.build()
    }
}

/// A Job of one Pod (container `main`, restartPolicy `Never`), built up with
/// [`JobBuilder`]'s methods; without any, a Job that succeeds.
pub fn job_with(name: &str) -> JobBuilder {
    JobBuilder {
        name: name.to_string(),
        labels: serde_json::Map::from_iter([("app".to_string(), json!(name))]),
        outcome: None,
        env: Vec::new(),
        backoff_limit: None,
        active_deadline_seconds: None,
    }
}

/// What [`job_with`] builds.
#[derive(Debug, Clone)]
pub struct JobBuilder {
    name: String,
    labels: serde_json::Map<String, serde_json::Value>,
    outcome: Option<String>,
    env: Vec<(String, String)>,
    backoff_limit: Option<i32>,
    active_deadline_seconds: Option<i64>,
}

impl JobBuilder {
    /// [`OUTCOME_LABEL`]` = outcome` on the Pod template ([`OUTCOME_FAIL`], [`OUTCOME_HANG`]).
    pub fn outcome(mut self, outcome: &str) -> Self {
        self.outcome = Some(outcome.to_string());
        self
    }

    /// A label on the Job and on its Pod template, as the host labels backup Jobs.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.to_string(), json!(value));
        self
    }

    /// An env var of the container.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_string(), value.to_string()));
        self
    }

    /// `spec.backoffLimit`.
    pub fn backoff_limit(mut self, limit: i32) -> Self {
        self.backoff_limit = Some(limit);
        self
    }

    /// `spec.activeDeadlineSeconds`.
    pub fn active_deadline_seconds(mut self, seconds: i64) -> Self {
        self.active_deadline_seconds = Some(seconds);
        self
    }

    /// The Job.
    pub fn build(self) -> Job {
        let mut template_labels = json!(self.labels);
        if let Some(outcome) = &self.outcome {
            template_labels[OUTCOME_LABEL] = json!(outcome);
        }
        let mut template = pod_template(template_labels, "Never");
        let env: Vec<_> = self
            .env
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        if !env.is_empty() {
            template["spec"]["containers"][0]["env"] = json!(env);
        }
        let mut spec = json!({"template": template});
        if let Some(limit) = self.backoff_limit {
            spec["backoffLimit"] = json!(limit);
        }
        if let Some(seconds) = self.active_deadline_seconds {
            spec["activeDeadlineSeconds"] = json!(seconds);
        }
        serde_json::from_value(json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": self.name, "labels": self.labels},
            "spec": spec,
        }))
        .expect("a Job manifest")
    }
}

/// A Deployment of `replicas` Pods labelled `app: <name>`.
pub fn deployment(name: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(json!({"app": name}), "Always"),
        },
    }))
    .expect("a Deployment manifest")
}

/// A StatefulSet of `replicas` Pods labelled `app: <name>`.
pub fn stateful_set(name: &str, replicas: i32) -> StatefulSet {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": pod_template(json!({"app": name}), "Always"),
        },
    }))
    .expect("a StatefulSet manifest")
}

/// Creates `object` in `namespace`, panicking with the API server's answer.
pub async fn create<K>(client: &Client, namespace: &str, object: &K) -> K
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client.clone(), namespace);
    match api.create(&PostParams::default(), object).await {
        Ok(created) => created,
        Err(e) => panic!("creating {object:?} in {namespace}: {e}"),
    }
}

/// Whether condition `kind` of a Job is True.
fn job_condition_true<'a>(job: &'a Job, kind: &str) -> Option<&'a str> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind && c.status == "True")
        .map(|c| c.reason.as_deref().unwrap_or_default())
}

/// Waits until Job `name` is `Complete` or `Failed` (up to [`WORKLOAD_READY`])
/// and returns how it ended.
pub async fn wait_job_outcome(client: &Client, namespace: &str, name: &str) -> JobOutcome {
    let jobs: Api<Job> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("Job {namespace}/{name} to finish"),
        WORKLOAD_READY,
        || {
            let jobs = jobs.clone();
            async move {
                let job = jobs
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("no such Job")?;
                let status = job.status.clone().unwrap_or_default();
                let (succeeded, failed) =
                    (status.succeeded.unwrap_or(0), status.failed.unwrap_or(0));
                if job_condition_true(&job, "Complete").is_some() {
                    return Ok(JobOutcome::Complete { succeeded, failed });
                }
                if let Some(reason) = job_condition_true(&job, "Failed") {
                    return Ok(JobOutcome::Failed {
                        reason: reason.to_string(),
                        succeeded,
                        failed,
                    });
                }
                Err(format!("{status:?}"))
            }
        },
    )
    .await
}

/// Waits until Deployment `name` has observed its generation and has
/// `availableReplicas == spec.replicas`; returns it.
pub async fn wait_deployment_available(client: &Client, namespace: &str, name: &str) -> Deployment {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("Deployment {namespace}/{name} to be available"),
        WORKLOAD_READY,
        || {
            let api = api.clone();
            async move {
                let d = api
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("no such Deployment")?;
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let status = d.status.clone().unwrap_or_default();
                let observed = status.observed_generation == d.metadata.generation;
                if observed && status.available_replicas == Some(want) {
                    Ok(d)
                } else {
                    Err(format!("{status:?}"))
                }
            }
        },
    )
    .await
}

/// Waits until StatefulSet `name` has `readyReplicas == spec.replicas`;
/// returns it.
pub async fn wait_stateful_set_ready(client: &Client, namespace: &str, name: &str) -> StatefulSet {
    let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("StatefulSet {namespace}/{name} to be ready"),
        WORKLOAD_READY,
        || {
            let api = api.clone();
            async move {
                let s = api
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or("no such StatefulSet")?;
                let want = s.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let status = s.status.clone().unwrap_or_default();
                if status.ready_replicas == Some(want) {
                    Ok(s)
                } else {
                    Err(format!("{status:?}"))
                }
            }
        },
    )
    .await
}

/// The Pods of Job `name` (label `job-name`, which the Job controller sets).
pub async fn job_pods(client: &Client, namespace: &str, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match pods
        .list(&ListParams::default().labels(&format!("job-name={name}")))
        .await
    {
        Ok(list) => list.items,
        Err(e) => panic!("listing the Pods of Job {namespace}/{name}: {e}"),
    }
}

/// The termination messages of the containers of Job `name`'s Pods
/// (`status.containerStatuses[].state.terminated.message`), Pod by Pod in
/// container order; containers that have none are left out.
pub async fn termination_messages(client: &Client, namespace: &str, name: &str) -> Vec<String> {
    job_pods(client, namespace, name)
        .await
        .into_iter()
        .flat_map(|pod| {
            pod.status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default()
        })
        .filter_map(|c| c.state?.terminated?.message)
        .collect()
}
