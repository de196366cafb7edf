//! Rollbacks: forward compatible (v2 → v1 keeps reconciling), refused
//! (v3 declares min_compatible_version 3.0.0), and the per-object guard that
//! holds after a restart with only an old version.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use wasm_operator::registry::RegistryError;

use crate::support::{condition, dynamic_api, get_json, wait_until};
use crate::{
    CONVERGE, Host, NS, V1, V2, V3, annotation, create_webapp, deployment_kind, events,
    wait_managed_by, webapp_kind,
};

async fn wait_deployment(client: &kube::Client, name: &str, replicas: i64, tier: bool) -> Value {
    let deployments = dynamic_api(client, &deployment_kind(), Some(NS));
    wait_until(
        &format!("Deployment {name} with {replicas} replicas (tier label: {tier})"),
        CONVERGE,
        || async {
            let d = get_json(&deployments, name).await.ok_or("no Deployment")?;
            let ok = d.pointer("/spec/replicas") == Some(&json!(replicas))
                && d.pointer("/metadata/labels/example.com~1tier").is_some() == tier;
            if ok { Ok(d) } else { Err(d.to_string()) }
        },
    )
    .await
}

async fn set_replicas(client: &kube::Client, name: &str, replicas: i64) {
    dynamic_api(client, &webapp_kind(), Some(NS))
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_v1_still_reconciles() {
    let host = Host::start().await;
    let client = host.client();
    host.load(V1).await;
    create_webapp(
        &client,
        "back",
        json!({"replicas": 1, "image": "nginx:1.27"}),
        json!({}),
    )
    .await;
    wait_managed_by(&client, "back", "1.0.0").await;
    host.load(V2).await;
    wait_managed_by(&client, "back", "2.0.0").await;
    wait_deployment(&client, "back", 1, true).await;

    // 2.0.0 declares no min_compatible_version: 1.0.0 may take over again.
    let v1 = host.load(V1).await;
    assert_eq!(v1.version, "1.0.0");
    let app = wait_managed_by(&client, "back", "1.0.0").await;
    // What v2's upgrade wrote stays; v1 reconciles it as it is.
    assert_eq!(
        annotation(&app, "example.com/upgraded-from"),
        Some("1.0.0"),
        "{app}"
    );
    assert_eq!(app.pointer("/spec/port"), Some(&json!(80)), "{app}");
    // v1's children carry no tier label (server-side apply drops it).
    wait_deployment(&client, "back", 1, false).await;
    set_replicas(&client, "back", 3).await;
    wait_deployment(&client, "back", 3, false).await;
    assert!(
        !events(&client)
            .await
            .iter()
            .any(|(_, t, _, _)| t == "Warning"),
        "{:?}",
        events(&client).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_below_min_compatible_is_refused_and_guarded_per_object() {
    let mut host = Host::start().await;
    let client = host.client();
    let v3 = host.load(V3).await;
    assert_eq!(v3.version, "3.0.0");
    create_webapp(
        &client,
        "strict",
        json!({"replicas": 2, "image": "nginx:1.27"}),
        json!({}),
    )
    .await;
    let app = wait_managed_by(&client, "strict", "3.0.0").await;
    assert_eq!(
        annotation(&app, "wasm-operator.dev/min-compatible-version"),
        Some("3.0.0"),
        "{app}"
    );
    wait_deployment(&client, "strict", 2, true).await;

    // The swap is refused and names both versions; 3.0.0 keeps serving.
    let error = host
        .try_load(V1)
        .await
        .expect_err("rollback to 1.0.0 must be refused");
    match &error {
        RegistryError::RollbackRefused {
            name,
            running_version,
            new_version,
            min_compatible,
        } => {
            assert_eq!(
                (
                    name.as_str(),
                    running_version.as_str(),
                    new_version.as_str(),
                    min_compatible.as_str()
                ),
                ("webapp", "3.0.0", "1.0.0", "3.0.0")
            );
        }
        other => panic!("expected RollbackRefused, got {other}"),
    }
    assert!(error.is_rejection());
    assert_eq!(error.reason(), "RollbackRefused");
    let message = error.to_string();
    assert!(message.contains("3.0.0 keeps serving"), "{message}");
    let loaded = host.registry.loaded();
    assert_eq!(loaded.len(), 1);
    assert_eq!(loaded[0].version, "3.0.0");
    // Only versions that served show up in the stats.
    let stats = host.registry.stats("webapp");
    assert_eq!(
        stats.iter().map(|s| s.version.as_str()).collect::<Vec<_>>(),
        ["3.0.0"]
    );
    assert!(
        stats[0].reconciles > 0 && stats[0].failures == 0,
        "{stats:?}"
    );
    set_replicas(&client, "strict", 3).await;
    wait_deployment(&client, "strict", 3, true).await;
    wait_managed_by(&client, "strict", "3.0.0").await;

    // After a restart with only 1.0.0 there is no running version to refuse
    // the load; the object's own mark stops 1.0.0 from touching it.
    host.restart().await;
    host.load(V1).await;
    set_replicas(&client, "strict", 5).await;
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let app = wait_until("WebApp strict to be refused by 1.0.0", CONVERGE, || async {
        let app = get_json(&webapps, "strict").await.ok_or("WebApp gone")?;
        let degraded = condition(&app, "Degraded").cloned().unwrap_or(Value::Null);
        let ok = degraded["status"] == "True"
            && degraded["reason"] == "IncompatibleVersion"
            && degraded["observedGeneration"] == app["metadata"]["generation"];
        if ok { Ok(app) } else { Err(app.to_string()) }
    })
    .await;
    let message = condition(&app, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("1.0.0") && message.contains("3.0.0"),
        "{message}"
    );
    // Nothing was written by 1.0.0: the marks and the children are 3.0.0's.
    assert_eq!(
        annotation(&app, "wasm-operator.dev/managed-by-version"),
        Some("3.0.0"),
        "{app}"
    );
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    let d = get_json(&deployments, "strict").await.unwrap();
    assert_eq!(d.pointer("/spec/replicas"), Some(&json!(3)), "{d}");
    assert_eq!(
        d.pointer("/metadata/labels/example.com~1tier"),
        Some(&json!("web")),
        "{d}"
    );
    assert!(
        events(&client)
            .await
            .iter()
            .any(|(o, t, r, _)| o == "strict" && t == "Warning" && r == "IncompatibleVersion")
    );

    // Deploying 3.0.0 again picks the object back up.
    host.load(V3).await;
    wait_managed_by(&client, "strict", "3.0.0").await;
    wait_deployment(&client, "strict", 5, true).await;
}
