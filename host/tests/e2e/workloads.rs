//! Workloads that run, the same on both backends: a Deployment becomes
//! available, a StatefulSet ready, a Job completes, a Job told to fail
//! (the Pod template's `simulate.wasm-operator.dev/outcome: fail`) fails
//! after its retries, a Job told to hang fails when its deadline passes, and
//! a backup Job's Pod reports where the data went in its termination message.
//! On the real control plane the upstream controllers compute every status;
//! on the devcluster its workload simulation does.

use k8s_openapi::api::core::v1::ContainerStateTerminated;

use crate::support::workloads::{
    BACKUP_DESTINATION_ENV, BACKUP_NAME_LABEL, JobOutcome, OUTCOME_FAIL, OUTCOME_HANG,
    OUTCOME_LABEL, create, deployment, job, job_pods, job_with, stateful_set, termination_messages,
    wait_deployment_available, wait_job_outcome, wait_stateful_set_ready,
};

const NS: &str = "default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_becomes_available() {
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let client = cluster.client();
    create(&client, NS, &deployment("web", 3)).await;
    let web = wait_deployment_available(&client, NS, "web").await;
    let status = web.status.unwrap_or_default();
    assert_eq!(status.available_replicas, Some(3), "{status:?}");
    assert_eq!(status.ready_replicas, Some(3), "{status:?}");
    assert_eq!(status.updated_replicas, Some(3), "{status:?}");
    let available = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Available");
    assert_eq!(
        available.map(|c| c.status),
        Some("True".to_string()),
        "the Deployment's Available condition"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stateful_set_becomes_ready() {
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let client = cluster.client();
    create(&client, NS, &stateful_set("db", 2)).await;
    let db = wait_stateful_set_ready(&client, NS, "db").await;
    let status = db.status.unwrap_or_default();
    assert_eq!(status.ready_replicas, Some(2), "{status:?}");
    assert_eq!(status.replicas, 2, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_completes() {
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let client = cluster.client();
    create(&client, NS, &job("backup", false, 1)).await;
    let outcome = wait_job_outcome(&client, NS, "backup").await;
    assert_eq!(
        outcome,
        JobOutcome::Complete {
            succeeded: 1,
            failed: 0
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_told_to_fail_fails_after_its_retries() {
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let client = cluster.client();
    let backoff_limit = 1;
    create(&client, NS, &job("broken", true, backoff_limit)).await;
    let outcome = wait_job_outcome(&client, NS, "broken").await;
    assert_eq!(
        outcome,
        JobOutcome::Failed {
            reason: "BackoffLimitExceeded".to_string(),
            succeeded: 0,
            failed: backoff_limit + 1
        }
    );
    // Every attempt was a Pod of its own that failed as the contract says.
    let pods = job_pods(&client, NS, "broken").await;
    assert_eq!(pods.len(), (backoff_limit + 1) as usize, "{pods:?}");
    for pod in &pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(OUTCOME_LABEL).map(String::as_str),
            Some(OUTCOME_FAIL)
        );
        let status = pod.status.clone().unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
        let terminated: Vec<ContainerStateTerminated> = status
            .container_statuses
            .unwrap_or_default()
            .into_iter()
            .filter_map(|c| c.state.and_then(|s| s.terminated))
            .collect();
        assert_eq!(terminated.len(), 1, "{:?}", pod.status);
        assert_eq!(terminated[0].exit_code, 1, "{terminated:?}");
        assert_eq!(
            terminated[0].reason.as_deref(),
            Some("Error"),
            "{terminated:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_told_to_hang_fails_when_its_deadline_passes() {
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let client = cluster.client();
    let hang = job_with("stuck")
        .outcome(OUTCOME_HANG)
        .active_deadline_seconds(3)
        .build();
    create(&client, NS, &hang).await;
    let started = std::time::Instant::now();
    let outcome = wait_job_outcome(&client, NS, "stuck").await;
    // Its one Pod ran until the deadline, then counted as failed.
    assert_eq!(
        outcome,
        JobOutcome::Failed {
            reason: "DeadlineExceeded".to_string(),
            succeeded: 0,
            failed: 1
        }
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(2),
        "failed after {:?}, before its deadline",
        started.elapsed()
    );
    // The Job controller deleted the Pod that was still running.
    crate::support::wait_until(
        "the Pods of Job stuck to be deleted",
        crate::support::workloads::WORKLOAD_READY,
        || {
            let client = client.clone();
            async move {
                let pods = job_pods(&client, NS, "stuck").await;
                if pods.is_empty() {
                    Ok(())
                } else {
                    Err(format!("{pods:?}"))
                }
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_jobs_pod_reports_the_location_in_its_termination_message() {
    let cluster = devcluster::test_cluster_simulating_workloads().await;
    let client = cluster.client();
    let backup = job_with("kv-1-backup")
        .label(BACKUP_NAME_LABEL, "kv-1")
        .env("WASM_OPERATOR_BACKUP_NAME", "kv-1")
        .env(BACKUP_DESTINATION_ENV, "s3://b/p")
        .build();
    create(&client, NS, &backup).await;
    let outcome = wait_job_outcome(&client, NS, "kv-1-backup").await;
    assert_eq!(
        outcome,
        JobOutcome::Complete {
            succeeded: 1,
            failed: 0
        }
    );
    // The Job is Complete once its Pod has Succeeded, message and all.
    let messages = termination_messages(&client, NS, "kv-1-backup").await;
    assert_eq!(messages, [r#"{"location":"s3://b/p/kv-1"}"#]);
}
