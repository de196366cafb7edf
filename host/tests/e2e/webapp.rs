//! The WebApp plugin end to end: children, status (readiness computed by the
//! Deployment controller from Pods that run), drift repair, pruning,
//! finalizer and garbage collection.

use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::workloads::WORKLOAD_READY;
use crate::support::{self, condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, deployment_kind, service_kind, webapp_kind};

const NS: &str = "default";

fn uid(v: &Value) -> String {
    v.pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Waits until WebApp `shop` reports `replicas` ready replicas, phase
/// `Running` and a True Ready condition, then asserts exactly that.
async fn wait_webapp_running(webapps: &kube::Api<kube::api::DynamicObject>, replicas: i64) {
    let app = wait_until(
        &format!("WebApp shop to run {replicas} ready replicas"),
        WORKLOAD_READY,
        || async {
            let app = get_json(webapps, "shop").await.ok_or("WebApp gone")?;
            let running = app.pointer("/status/readyReplicas") == Some(&json!(replicas))
                && app.pointer("/status/phase") == Some(&json!("Running"))
                && condition(&app, "Ready").is_some_and(|c| c["status"] == "True");
            if running {
                Ok(app)
            } else {
                Err(app.to_string())
            }
        },
    )
    .await;
    assert_eq!(
        app.pointer("/spec/replicas"),
        Some(&json!(replicas)),
        "{app}"
    );
    assert_eq!(
        app.pointer("/status/readyReplicas"),
        Some(&json!(replicas)),
        "{app}"
    );
    assert_eq!(
        app.pointer("/status/phase"),
        Some(&json!("Running")),
        "{app}"
    );
    assert_eq!(condition(&app, "Ready").unwrap()["status"], "True", "{app}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webapp_lifecycle() {
    // Workloads run: the WebApp's readiness is the Deployment controller's
    // (real control plane) or the devcluster's simulation of it.
    let host = Host::builder().simulating_workloads().start().await;
    let client = host.client();
    let loaded = host.load("webapp").await;
    assert_eq!(loaded.name, "webapp");

    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    let services = dynamic_api(&client, &service_kind(), Some(NS));
    let app: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": NS},
        "spec": {"replicas": 2, "image": "nginx:1.27", "port": 8080},
    }))
    .unwrap();
    let created = webapps.create(&PostParams::default(), &app).await.unwrap();
    let app_uid = created.metadata.uid.clone().unwrap();

    // Children: controller ownerReference, the two labels, our field manager.
    let deployment = wait_until("the Deployment of WebApp shop", CONVERGE, || async {
        get_json(&deployments, "shop")
            .await
            .ok_or_else(|| "no Deployment yet".to_string())
    })
    .await;
    assert_eq!(deployment.pointer("/spec/replicas"), Some(&json!(2)));
    let owner = &deployment.pointer("/metadata/ownerReferences").unwrap()[0];
    assert_eq!(owner["uid"], json!(app_uid));
    assert_eq!(owner["kind"], "WebApp");
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["blockOwnerDeletion"], true);
    assert_eq!(
        deployment.pointer("/metadata/labels/app.kubernetes.io~1managed-by"),
        Some(&json!("wasm-operator"))
    );
    assert_eq!(
        deployment.pointer("/metadata/labels/wasm-operator.dev~1plugin"),
        Some(&json!("webapp"))
    );
    let managers: Vec<&str> = deployment
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|m| {
            m.iter()
                .filter_map(|f| f.get("manager").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default();
    assert!(
        managers.contains(&"wasm-operator/webapp"),
        "field managers: {managers:?}"
    );
    let service = wait_until("the Service of WebApp shop", CONVERGE, || async {
        get_json(&services, "shop")
            .await
            .ok_or_else(|| "no Service yet".to_string())
    })
    .await;
    assert_eq!(
        service.pointer("/metadata/ownerReferences/0/uid"),
        Some(&json!(app_uid))
    );

    // Status, conditions, finalizer and annotations on the primary.
    let app = wait_until(
        "WebApp shop to report status for generation 1",
        CONVERGE,
        || async {
            let app = get_json(&webapps, "shop").await.ok_or("WebApp gone")?;
            let ok = app.pointer("/status/observedGeneration") == Some(&json!(1))
                && condition(&app, "Ready").is_some()
                && app
                    .pointer("/metadata/annotations/wasm-operator.dev~1last-reconciled-version")
                    .is_some();
            if ok { Ok(app) } else { Err(app.to_string()) }
        },
    )
    .await;
    let ready = condition(&app, "Ready").unwrap();
    let ready_replicas = app
        .pointer("/status/readyReplicas")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let expected = if ready_replicas >= 2 { "True" } else { "False" };
    assert_eq!(ready["status"], expected, "{app}");
    assert!(ready["lastTransitionTime"].is_string(), "{app}");
    assert_eq!(ready["observedGeneration"], 1);
    assert_eq!(
        condition(&app, "Degraded").unwrap()["status"],
        "False",
        "{app}"
    );
    assert_eq!(
        app.pointer("/metadata/annotations/wasm-operator.dev~1managed-by-version"),
        Some(&json!(loaded.version))
    );
    assert_eq!(
        app.pointer("/metadata/annotations/wasm-operator.dev~1last-reconciled-version"),
        Some(&json!(loaded.version))
    );
    let finalizers = app
        .pointer("/metadata/finalizers")
        .cloned()
        .unwrap_or_default();
    assert_eq!(finalizers, json!(["wasm-operator.dev/finalizer"]));
    assert!(
        app.pointer("/status/phase")
            .and_then(Value::as_str)
            .is_some(),
        "{app}"
    );
    // The Pods run, the Deployment reports them ready, the WebApp follows.
    wait_webapp_running(&webapps, 2).await;

    // A spec change: the Deployment follows, observedGeneration moves.
    webapps
        .patch(
            "shop",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    wait_until("the Deployment to follow replicas 3", CONVERGE, || async {
        let d = get_json(&deployments, "shop")
            .await
            .ok_or("Deployment gone")?;
        if d.pointer("/spec/replicas") == Some(&json!(3)) {
            Ok(())
        } else {
            Err(d.to_string())
        }
    })
    .await;
    wait_until("observedGeneration 2", CONVERGE, || async {
        let app = get_json(&webapps, "shop").await.ok_or("WebApp gone")?;
        if app.pointer("/status/observedGeneration") == Some(&json!(2)) {
            Ok(())
        } else {
            Err(app.to_string())
        }
    })
    .await;
    wait_webapp_running(&webapps, 3).await;

    // Drift: a child deleted by hand comes back (a new object).
    let old_service_uid = uid(&get_json(&services, "shop").await.unwrap());
    services
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("the deleted Service to be recreated", CONVERGE, || async {
        match get_json(&services, "shop").await {
            Some(s) if uid(&s) != old_service_uid => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    // A stray child (our label, controlled by the WebApp) is pruned.
    let stray: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "shop-stray", "namespace": NS,
            "labels": {"wasm-operator.dev/plugin": "webapp", "app.kubernetes.io/managed-by": "wasm-operator"},
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop",
                                  "uid": app_uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {"ports": [{"port": 80}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &stray)
        .await
        .unwrap();
    wait_until("the stray Service to be pruned", CONVERGE, || async {
        match get_json(&services, "shop-stray").await {
            None => Ok(()),
            Some(s) => Err(format!("still there: {s}")),
        }
    })
    .await;
    // An object without our label is not ours to prune, even if owned.
    let foreign: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": "shop-foreign", "namespace": NS,
            "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop",
                                  "uid": app_uid, "controller": true}],
        },
        "spec": {"ports": [{"port": 80}]},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    // Deletion: the finalizer path completes, the children are collected.
    webapps
        .delete("shop", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "WebApp shop to be finalized and deleted",
        CONVERGE,
        || async {
            match get_json(&webapps, "shop").await {
                None => Ok(()),
                Some(a) => Err(a.to_string()),
            }
        },
    )
    .await;
    for (api, name) in [
        (&deployments, "shop"),
        (&services, "shop"),
        (&services, "shop-foreign"),
    ] {
        wait_until(
            &format!("child {name} to be garbage-collected"),
            CONVERGE,
            || async {
                match get_json(api, name).await {
                    None => Ok(()),
                    Some(o) => Err(o.to_string()),
                }
            },
        )
        .await;
    }
    let events = crate::events_for(&client, NS, "shop").await;
    assert!(
        events.iter().any(|(_, reason, _)| reason == "ChildPruned"),
        "events: {events:?}"
    );
    assert!(
        events.iter().all(|(kind, _, _)| kind != "Warning"),
        "unexpected warnings: {events:?}"
    );
    host.manager.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_swap_and_unload() {
    let host = Host::start().await;
    let client = host.client();
    let first = host.load("webapp").await;
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    let app: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "blog", "namespace": NS},
        "spec": {"replicas": 1, "image": "ghost:5"},
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &app).await.unwrap();
    wait_until("the Deployment of blog", CONVERGE, || async {
        get_json(&deployments, "blog")
            .await
            .map(|_| ())
            .ok_or_else(|| "absent".to_string())
    })
    .await;

    // Loading again swaps in place: one plugin, same controller, still serving.
    let path = support::plugin_wasm("webapp");
    let second = host
        .registry
        .load(
            &format!("file:{}#again", path.display()),
            &support::plugin_bytes("webapp"),
            json!({"tier": "gold"}),
        )
        .await
        .unwrap();
    assert_eq!(second.digest, first.digest);
    let loaded = host.registry.loaded();
    assert_eq!(loaded.len(), 1, "{loaded:?}");
    assert!(loaded[0].source.ends_with("#again"), "{loaded:?}");
    assert_eq!(
        host.registry.current("webapp").unwrap().config,
        json!({"tier": "gold"})
    );
    webapps
        .patch(
            "blog",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    wait_until("the swapped version to reconcile", CONVERGE, || async {
        let d = get_json(&deployments, "blog")
            .await
            .ok_or("Deployment gone")?;
        if d.pointer("/spec/replicas") == Some(&json!(2)) {
            Ok(())
        } else {
            Err(d.to_string())
        }
    })
    .await;

    // Unload stops the controller and releases its caches.
    assert!(host.manager.cache().reflector_count() >= 3);
    host.registry.unload("webapp").await.unwrap();
    assert!(host.registry.loaded().is_empty());
    assert_eq!(host.manager.cache().reflector_count(), 0);
    let err = host.registry.unload("webapp").await.unwrap_err();
    assert!(err.to_string().contains("no plugin named webapp"), "{err}");
}
