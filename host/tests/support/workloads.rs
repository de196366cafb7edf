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
    let mut labels = json!({"app": name});
    if fail {
        labels[OUTCOME_LABEL] = json!(OUTCOME_FAIL);
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": backoff_limit,
            "template": pod_template(labels, "Never"),
        },
    }))
    .expect("a Job manifest")
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
