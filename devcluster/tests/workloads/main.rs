//! The devcluster's workload simulation end to end, through the real `kube`
//! client over HTTP: fake nodes, Pods that run or fail, Deployments,
//! StatefulSets and Jobs whose status moves, custom stage files, and the
//! simulation being off unless asked for.
//!
//! `cargo test -p wasm-operator-devcluster --test workloads`.

use std::path::PathBuf;
use std::time::Duration;

use devcluster::{DevCluster, DevClusterOptions};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::json;

/// How long a state may take to arrive (generous: the simulation's delays are below 2 s).
const DEADLINE: Duration = Duration::from_secs(60);

async fn simulating(stages: Vec<PathBuf>) -> DevCluster {
    DevCluster::start(DevClusterOptions {
        simulate_workloads: true,
        stages,
        ..DevClusterOptions::default()
    })
    .await
    .unwrap()
}

/// Polls `name` until `done` holds; panics with the last state after [`DEADLINE`].
async fn wait_for<K>(api: &Api<K>, name: &str, what: &str, done: impl Fn(&K) -> bool) -> K
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let start = std::time::Instant::now();
    loop {
        let obj = api.get(name).await.unwrap();
        if done(&obj) {
            return obj;
        }
        if start.elapsed() > DEADLINE {
            panic!("{name} did not reach {what} within {DEADLINE:?}; last state: {obj:#?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod(name: &str, restart_policy: &str, fail: bool) -> Pod {
    let labels = if fail {
        json!({"simulate.wasm-operator.dev/outcome": "fail"})
    } else {
        json!({"app": name})
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"restartPolicy": restart_policy, "containers": [{"name": "main", "image": "busybox"}]},
    }))
    .unwrap()
}

fn template(app: &str, fail: bool) -> serde_json::Value {
    let mut labels = json!({"app": app});
    if fail {
        labels["simulate.wasm-operator.dev/outcome"] = json!("fail");
    }
    json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "main", "image": "nginx"}]}})
}

fn deployment(name: &str, replicas: i32, fail: bool) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template(name, fail)},
    }))
    .unwrap()
}

fn job(name: &str, backoff_limit: i32, fail: bool) -> Job {
    let mut t = template(name, fail);
    t["spec"]["restartPolicy"] = json!("Never");
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"backoffLimit": backoff_limit, "template": t},
    }))
    .unwrap()
}

fn condition(conditions: Option<&Vec<impl serde::Serialize>>, type_: &str) -> Option<String> {
    conditions?.iter().find_map(|c| {
        let c = serde_json::to_value(c).ok()?;
        (c["type"] == type_).then(|| c["status"].as_str().unwrap_or_default().to_string())
    })
}

#[tokio::test]
async fn three_fake_nodes_become_ready() {
    let cluster = simulating(Vec::new()).await;
    let nodes: Api<Node> = Api::all(cluster.client());
    for i in 0..3 {
        let name = format!("kwok-node-{i}");
        let node = wait_for(&nodes, &name, "Ready", |n| {
            condition(
                n.status.as_ref().and_then(|s| s.conditions.as_ref()),
                "Ready",
            )
            .as_deref()
                == Some("True")
        })
        .await;
        let meta = &node.metadata;
        assert_eq!(
            meta.annotations.as_ref().unwrap()["kwok.x-k8s.io/node"],
            "fake"
        );
        assert_eq!(meta.labels.as_ref().unwrap()["type"], "kwok");
        let allocatable = node.status.unwrap().allocatable.unwrap();
        assert_eq!(allocatable["cpu"].0, "32");
        assert_eq!(allocatable["memory"].0, "256Gi");
        assert_eq!(allocatable["pods"].0, "110");
    }
}

#[tokio::test]
async fn a_pod_is_bound_to_a_fake_node_and_becomes_running_and_ready() {
    let cluster = simulating(Vec::new()).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("web", "Always", false))
        .await
        .unwrap();
    let running = wait_for(&pods, "web", "Running and Ready", |p| {
        let status = p.status.as_ref();
        status.and_then(|s| s.phase.as_deref()) == Some("Running")
            && condition(status.and_then(|s| s.conditions.as_ref()), "Ready").as_deref()
                == Some("True")
    })
    .await;
    let node = running.spec.unwrap().node_name.unwrap();
    assert!(node.starts_with("kwok-node-"), "{node}");
    let status = running.status.unwrap();
    assert!(status.pod_ip.unwrap().starts_with("10.244."));
    let container = &status.container_statuses.unwrap()[0];
    assert!(container.ready);
    assert!(container.state.as_ref().unwrap().running.is_some());
}

#[tokio::test]
async fn a_pod_with_the_failure_label_fails_with_exit_code_1() {
    let cluster = simulating(Vec::new()).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("broken", "Never", true))
        .await
        .unwrap();
    let failed = wait_for(&pods, "broken", "phase Failed", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
    })
    .await;
    let status = failed.status.unwrap();
    let terminated = status.container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(terminated.exit_code, 1);
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
    assert_eq!(
        condition(status.conditions.as_ref(), "Ready").as_deref(),
        Some("False")
    );
}

#[tokio::test]
async fn a_deployment_becomes_available_and_moves_again_after_scaling() {
    let cluster = simulating(Vec::new()).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .create(&PostParams::default(), &deployment("web", 3, false))
        .await
        .unwrap();
    let available = |want: i32| {
        move |d: &Deployment| {
            let s = d.status.clone().unwrap_or_default();
            s.available_replicas == Some(want)
                && s.ready_replicas == Some(want)
                && s.observed_generation == d.metadata.generation
        }
    };
    let d = wait_for(&deployments, "web", "3 available replicas", available(3)).await;
    let status = d.status.unwrap();
    assert_eq!(status.updated_replicas, Some(3));
    let conditions = status.conditions.unwrap();
    let reason = |t: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == t)
            .and_then(|c| c.reason.clone())
    };
    assert_eq!(
        reason("Available").as_deref(),
        Some("MinimumReplicasAvailable")
    );
    assert_eq!(
        reason("Progressing").as_deref(),
        Some("NewReplicaSetAvailable")
    );
    deployments
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    wait_for(&deployments, "web", "5 available replicas", available(5)).await;
}

#[tokio::test]
async fn a_deployment_told_to_fail_keeps_ready_replicas_at_zero() {
    let cluster = simulating(Vec::new()).await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "default");
    deployments
        .create(&PostParams::default(), &deployment("broken", 2, true))
        .await
        .unwrap();
    let d = wait_for(&deployments, "broken", "an observed generation", |d| {
        d.status.as_ref().and_then(|s| s.observed_generation) == d.metadata.generation
    })
    .await;
    let status = d.status.unwrap();
    assert_eq!(status.ready_replicas.unwrap_or(0), 0);
    assert_eq!(status.unavailable_replicas, Some(2));
}

#[tokio::test]
async fn a_statefulset_reaches_ready_replicas() {
    let cluster = simulating(Vec::new()).await;
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), "default");
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template("db", false)},
    }))
    .unwrap();
    sets.create(&PostParams::default(), &set).await.unwrap();
    let s = wait_for(&sets, "db", "2 ready replicas", |s| {
        s.status.as_ref().and_then(|s| s.ready_replicas) == Some(2)
    })
    .await;
    let status = s.status.unwrap();
    assert_eq!(status.current_replicas, Some(2));
    assert_eq!(status.current_revision, status.update_revision);
}

#[tokio::test]
async fn a_job_completes() {
    let cluster = simulating(Vec::new()).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("backup", 1, false))
        .await
        .unwrap();
    let done = wait_for(&jobs, "backup", "Complete", |j| {
        condition(
            j.status.as_ref().and_then(|s| s.conditions.as_ref()),
            "Complete",
        )
        .as_deref()
            == Some("True")
    })
    .await;
    let status = done.status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert!(status.start_time.is_some());
    assert!(status.completion_time.is_some());
    assert_eq!(
        condition(status.conditions.as_ref(), "SuccessCriteriaMet").as_deref(),
        Some("True")
    );
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let attempts = pods
        .list(&ListParams::default().labels("job-name=backup"))
        .await
        .unwrap()
        .items;
    assert_eq!(attempts.len(), 1, "{attempts:#?}");
    let name = attempts[0].metadata.name.clone().unwrap();
    wait_for(&pods, &name, "phase Succeeded", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded")
    })
    .await;
}

#[tokio::test]
async fn a_job_told_to_fail_ends_failed_after_its_backoff_limit() {
    let cluster = simulating(Vec::new()).await;
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("broken", 1, true))
        .await
        .unwrap();
    let failed = wait_for(&jobs, "broken", "Failed", |j| {
        condition(
            j.status.as_ref().and_then(|s| s.conditions.as_ref()),
            "Failed",
        )
        .as_deref()
            == Some("True")
    })
    .await;
    let status = failed.status.unwrap();
    assert_eq!(status.failed, Some(2), "backoffLimit + 1");
    let conditions = status.conditions.unwrap();
    let failed = conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason.as_deref(), Some("BackoffLimitExceeded"));
    assert!(conditions.iter().any(|c| c.type_ == "FailureTarget"));
    assert_eq!(status.succeeded.unwrap_or(0), 0);
    // One Pod per attempt, each failed as the contract says.
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let attempts = pods
        .list(&ListParams::default().labels("job-name=broken"))
        .await
        .unwrap()
        .items;
    assert_eq!(attempts.len(), 2, "{attempts:#?}");
    for attempt in attempts {
        let name = attempt.metadata.name.clone().unwrap();
        wait_for(&pods, &name, "phase Failed", |p| {
            p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
        })
        .await;
    }
}

#[tokio::test]
async fn a_custom_stage_file_replaces_a_default_by_name() {
    let file =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("stages/testdata/custom-pod-ready.yaml");
    let cluster = simulating(vec![file]).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("custom", "Always", false))
        .await
        .unwrap();
    let p = wait_for(&pods, "custom", "the custom stage's status", |p| {
        p.status.as_ref().and_then(|s| s.message.as_deref()) == Some("custom-ready")
    })
    .await;
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
}

#[tokio::test]
async fn a_broken_stage_file_fails_the_start_with_its_name() {
    let file = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("stages/testdata/uses-cel.yaml");
    let err = DevCluster::start(DevClusterOptions {
        simulate_workloads: true,
        stages: vec![file],
        ..DevClusterOptions::default()
    })
    .await
    .err()
    .expect("a stage using CEL is refused");
    let message = err.to_string();
    assert!(message.contains("uses-cel"), "{message}");
}

#[tokio::test]
async fn the_simulation_is_off_by_default() {
    assert!(!DevClusterOptions::default().simulate_workloads);
    let cluster = DevCluster::start(DevClusterOptions::default())
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("idle", "Always", false))
        .await
        .unwrap();
    // A Job created after the Pod: were the simulation on, it would run both.
    let jobs: Api<Job> = Api::namespaced(cluster.client(), "default");
    jobs.create(&PostParams::default(), &job("idle", 1, false))
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(cluster.client());
    assert!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    let p = pods.get("idle").await.unwrap();
    assert!(p.spec.unwrap().node_name.is_none());
    assert!(p.status.is_none_or(|s| s.phase.is_none()));
    assert!(
        jobs.get("idle")
            .await
            .unwrap()
            .status
            .is_none_or(|s| s.start_time.is_none())
    );
}

#[tokio::test]
async fn the_simulation_carries_on_after_a_restart_closed_its_watches() {
    let mut cluster = simulating(Vec::new()).await;
    cluster.restart().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("after", "Always", false))
        .await
        .unwrap();
    let running = wait_for(&pods, "after", "Running", |p| {
        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    })
    .await;
    assert!(running.spec.unwrap().node_name.is_some());
}
