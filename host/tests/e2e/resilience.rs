//! API errors and lost watches: a failed write is reported and retried, a
//! closed or expired watch is resumed, and nothing is lost.

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;

use crate::support::{condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, deployment_kind, webapp_kind};

const NS: &str = "default";

async fn wait_replicas(deployments: &kube::Api<kube::api::DynamicObject>, replicas: i64) {
    wait_until(
        &format!("the Deployment to have {replicas} replicas"),
        CONVERGE,
        || async {
            let d = get_json(deployments, "api")
                .await
                .ok_or("Deployment absent")?;
            if d.pointer("/spec/replicas") == Some(&json!(replicas)) {
                Ok(())
            } else {
                Err(d.to_string())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_api_errors_and_lost_watches_are_survived() {
    if !crate::support::devcluster_only(
        "devcluster_only_api_errors_and_lost_watches_are_survived",
        "fault injection (API errors, closed watches, expired history)",
    ) {
        return;
    }
    let host = Host::start().await;
    let client = host.client();
    host.load("webapp").await;
    let faults = host
        .cluster
        .faults()
        .expect("the devcluster injects faults");
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    let app = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "api", "namespace": NS}, "spec": {"replicas": 1, "image": "nginx"},
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &app).await.unwrap();
    wait_replicas(&deployments, 1).await;

    // The next apply of the Deployment fails with a 500: reported as
    // ApplyFailed, retried with backoff, then converges.
    faults.fail_next(
        &format!("/apis/apps/v1/namespaces/{NS}/deployments"),
        1,
        500,
    );
    webapps
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    wait_until("a Warning event ApplyFailed", CONVERGE, || async {
        let events = crate::events_for(&client, NS, "api").await;
        if events
            .iter()
            .any(|(kind, r, _)| kind == "Warning" && r == "ApplyFailed")
        {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    wait_replicas(&deployments, 2).await;
    wait_until("Degraded to clear after the retry", CONVERGE, || async {
        let a = get_json(&webapps, "api").await.ok_or("WebApp gone")?;
        let ok = condition(&a, "Degraded")
            .map(|c| c["status"] == "False")
            .unwrap_or(false)
            && a.pointer("/status/observedGeneration") == Some(&json!(2));
        if ok { Ok(()) } else { Err(a.to_string()) }
    })
    .await;

    // Every watch is cut and the history compacted (410 Gone on resume):
    // the caches relist and the controller keeps following changes.
    faults.close_watches();
    faults.expire_history();
    webapps
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    wait_replicas(&deployments, 3).await;
    host.manager.shutdown().await;
}
