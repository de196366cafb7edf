//! Writes per reconcile: a converged object reconciled again writes nothing
//! (unchanged children are not applied again), and a field of a child that
//! someone else changed is still put back.

use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, deployment_kind, service_kind, webapp_kind};

const NS: &str = "default";
const APPS: [&str; 3] = ["writes-a", "writes-b", "writes-c"];

/// The value of the counter `line` (`name{labels}`) in the host's metrics, 0
/// while it has not been counted.
fn counter(host: &Host, line: &str) -> u64 {
    host.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(line)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The webapp plugin's writes of one kind (`apply`, `status`, …).
fn writes_of(host: &Host, kind: &str) -> u64 {
    counter(
        host,
        &format!("wasm_operator_writes_total{{plugin=\"webapp\",write=\"{kind}\"}}"),
    )
}

fn applies(host: &Host) -> u64 {
    writes_of(host, "apply")
}

/// Every write of the primary and its children (events are not counted).
fn object_writes(host: &Host) -> u64 {
    ["apply", "prune", "status", "finalizer", "annotations"]
        .iter()
        .map(|kind| writes_of(host, kind))
        .sum()
}

fn successes(host: &Host) -> u64 {
    counter(
        host,
        "controller_runtime_reconcile_total{controller=\"webapp\",result=\"success\"}",
    )
}

/// Adds a label of someone else's to every WebApp's Service, which
/// re-triggers the WebApp (a child changed), and waits until that many more
/// reconciles were counted. The plugin answers as before, and the cached
/// Service has a new resourceVersion but still holds every field the host
/// applied: the path of every requeue and resync of a converged object, and
/// of a child changed in fields the host does not manage.
async fn touch_all(host: &Host, round: u32) {
    let services = dynamic_api(&host.client(), &service_kind(), Some(NS));
    let before = successes(host);
    for app in APPS {
        services
            .patch(
                app,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"touched": round.to_string()}}})),
            )
            .await
            .unwrap();
    }
    let wanted = before + APPS.len() as u64;
    wait_until("the touched WebApps to be reconciled", CONVERGE, || async {
        let now = successes(host);
        if now >= wanted {
            Ok(())
        } else {
            Err(format!("{now} successful reconciles, waiting for {wanted}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converged_objects_are_reconciled_without_writes_and_drift_is_repaired() {
    let host = Host::start().await;
    let client = host.client();
    host.load("webapp").await;
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    let services = dynamic_api(&client, &service_kind(), Some(NS));
    for app in APPS {
        let object = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": app, "namespace": NS},
            "spec": {"replicas": 2, "image": "nginx:1.27", "port": 8080},
        }))
        .unwrap();
        webapps
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
    }
    for app in APPS {
        wait_until("the WebApp to be reconciled", CONVERGE, || async {
            let obj = get_json(&webapps, app).await.ok_or("WebApp gone")?;
            let done = obj.pointer("/status/observedGeneration") == Some(&json!(1))
                && condition(&obj, "Ready").is_some()
                && get_json(&deployments, app).await.is_some()
                && get_json(&services, app).await.is_some();
            if done { Ok(()) } else { Err(obj.to_string()) }
        })
        .await;
    }
    // Reconciles the create phase set off (the children's and the status's
    // own events) may still run; one round of touches queues behind them.
    touch_all(&host, 1).await;
    // The children's events trigger each WebApp again, often before the
    // cache shows the status its first reconcile wrote; that reconcile
    // waits for the cache instead of writing the same status again
    // (pods never become ready here, so the status never changes).
    let status = writes_of(&host, "status");
    assert_eq!(
        status,
        APPS.len() as u64,
        "status writes for {} new WebApps",
        APPS.len()
    );

    // Converged: reconciling again calls the plugin and writes nothing.
    let (writes, applied) = (object_writes(&host), applies(&host));
    touch_all(&host, 2).await;
    assert_eq!(
        (object_writes(&host) - writes, applies(&host) - applied),
        (0, 0),
        "a reconcile of converged objects wrote"
    );

    // A field the host manages, changed by someone else, is put back (the
    // apply is not skipped: the cached child no longer contains the
    // document); so is a label of ours they removed.
    let applied = applies(&host);
    deployments
        .patch(
            "writes-a",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "writes-a", "namespace": NS},
                "spec": {"replicas": 5},
            })),
        )
        .await
        .unwrap();
    wait_until(
        "the Deployment's replicas to be put back",
        CONVERGE,
        || async {
            let d = get_json(&deployments, "writes-a").await.ok_or("gone")?;
            if d.pointer("/spec/replicas") == Some(&json!(2)) {
                Ok(())
            } else {
                Err(d.pointer("/spec").map(Value::to_string).unwrap_or_default())
            }
        },
    )
    .await;
    services
        .patch(
            "writes-b",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "remove", "path": "/metadata/labels/app.kubernetes.io~1managed-by"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    wait_until("the Service's label to be put back", CONVERGE, || async {
        let s = get_json(&services, "writes-b").await.ok_or("gone")?;
        if s.pointer("/metadata/labels/app.kubernetes.io~1managed-by")
            == Some(&json!("wasm-operator"))
        {
            Ok(())
        } else {
            Err(s
                .pointer("/metadata")
                .map(Value::to_string)
                .unwrap_or_default())
        }
    })
    .await;
    assert!(applies(&host) >= applied + 2, "the repairs were applies");
}
