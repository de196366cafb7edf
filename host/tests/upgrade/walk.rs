//! The per-object upgrade walk (pending → in-progress → completed) and its
//! failure/retry path.

use std::sync::{Arc, Mutex};

use futures::{StreamExt, TryStreamExt};
use kube::ResourceExt;
use kube::api::{ListParams, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::support::{self, condition, dynamic_api, get_json, wait_until};
use crate::{
    CONVERGE, Host, NS, V1, V2, annotation, create_webapp, deployment_kind, events,
    wait_managed_by, webapp_kind,
};

/// Records every migration-state value each WebApp shows, in watch order.
fn record_states(client: &kube::Client, from_rv: String) -> Arc<Mutex<Vec<(String, String)>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let api = dynamic_api(client, &webapp_kind(), Some(NS));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut rv = from_rv;
        // Re-watch from the last version seen when the server ends a watch.
        loop {
            let Ok(stream) = api.watch(&WatchParams::default().timeout(290), &rv).await else {
                return;
            };
            let mut stream = stream.boxed();
            while let Ok(Some(event)) = stream.try_next().await {
                if let WatchEvent::Added(o) | WatchEvent::Modified(o) = event {
                    rv = o.resource_version().unwrap_or_default();
                    let state = o
                        .annotations()
                        .get("wasm-operator.dev/migration-state")
                        .cloned()
                        .unwrap_or_default();
                    let mut seen = out.lock().unwrap();
                    let name = o.name_any();
                    if seen.iter().rev().find(|(n, _)| *n == name).map(|(_, s)| s) != Some(&state) {
                        seen.push((name, state));
                    }
                }
            }
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_walk() {
    let host = Host::start().await;
    let client = host.client();
    let v1 = host.load(V1).await;
    assert_eq!(v1.version, "1.0.0");
    create_webapp(
        &client,
        "plain",
        json!({"replicas": 1, "image": "nginx:1.27"}),
        json!({}),
    )
    .await;
    create_webapp(
        &client,
        "ported",
        json!({"replicas": 2, "image": "nginx:1.27", "port": 8080}),
        json!({}),
    )
    .await;
    for name in ["plain", "ported"] {
        let app = wait_managed_by(&client, name, "1.0.0").await;
        assert!(
            annotation(&app, "example.com/upgraded-from").is_none(),
            "{app}"
        );
    }

    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let rv = webapps
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let states = record_states(&client, rv);

    let v2 = host.load(V2).await;
    assert_eq!((v2.name.as_str(), v2.version.as_str()), ("webapp", "2.0.0"));

    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    for name in ["plain", "ported"] {
        let app = wait_managed_by(&client, name, "2.0.0").await;
        assert_eq!(
            annotation(&app, "example.com/upgraded-from"),
            Some("1.0.0"),
            "{app}"
        );
        // The CRD defaults the port to 80 as well; the upgrade keeps a set one.
        let port = if name == "plain" { 80 } else { 8080 };
        assert_eq!(app.pointer("/spec/port"), Some(&json!(port)), "{app}");
        assert!(
            annotation(&app, "wasm-operator.dev/min-compatible-version").is_none(),
            "2.0.0 declares no min_compatible_version: {app}"
        );
        wait_until(
            &format!("the tier label on Deployment {name}"),
            CONVERGE,
            || async {
                let d = get_json(&deployments, name).await.ok_or("no Deployment")?;
                let ok = d.pointer("/metadata/labels/example.com~1tier") == Some(&json!("web"))
                    && d.pointer("/spec/template/spec/containers/0/ports/0/containerPort")
                        == Some(&json!(port));
                if ok { Ok(()) } else { Err(d.to_string()) }
            },
        )
        .await;
        wait_until(
            &format!("the Upgraded event of {name}"),
            CONVERGE,
            || async {
                let all = events(&client).await;
                all.iter()
                    .any(|(o, t, r, n)| {
                        o == name
                            && t == "Normal"
                            && r == "Upgraded"
                            && n == "webapp upgraded this object from 1.0.0 to 2.0.0"
                    })
                    .then_some(())
                    .ok_or_else(|| format!("{all:?}"))
            },
        )
        .await;
    }

    // Every object walked pending → in-progress → completed, in that order.
    let seen = states.lock().unwrap().clone();
    for name in ["plain", "ported"] {
        let walk: Vec<&str> = seen
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| s.as_str())
            .collect();
        let pos = |state: &str| walk.iter().position(|s| *s == state);
        let (p, i) = (pos("pending"), pos("in-progress"));
        let c = walk.iter().rposition(|s| *s == "completed");
        assert!(
            matches!((p, i, c), (Some(p), Some(i), Some(c)) if p < i && i < c),
            "migration-state walk of {name}: {walk:?}"
        );
    }
    assert!(
        !events(&client)
            .await
            .iter()
            .any(|(_, t, _, _)| t == "Warning"),
        "no warnings expected: {:?}",
        events(&client).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_failure_returns_to_pending_then_succeeds() {
    let host = Host::start().await;
    let client = host.client();
    host.load(V1).await;
    create_webapp(
        &client,
        "stuck",
        json!({"replicas": 1, "image": "nginx:1.27"}),
        json!({"example.com/fail-upgrade": "testing"}),
    )
    .await;
    wait_managed_by(&client, "stuck", "1.0.0").await;
    host.load(V2).await;

    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let app = wait_until("WebApp stuck to fail its upgrade", CONVERGE, || async {
        let app = get_json(&webapps, "stuck").await.ok_or("WebApp gone")?;
        let degraded = condition(&app, "Degraded").cloned().unwrap_or(Value::Null);
        let ok = annotation(&app, "wasm-operator.dev/migration-state") == Some("pending")
            && degraded["status"] == "True"
            && degraded["reason"] == "UpgradeFailed";
        if ok { Ok(app) } else { Err(app.to_string()) }
    })
    .await;
    let message = condition(&app, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    for needle in [
        "1.0.0",
        "2.0.0",
        "example.com/fail-upgrade",
        "remove the annotation",
    ] {
        assert!(message.contains(needle), "{needle} missing from: {message}");
    }
    assert_eq!(
        annotation(&app, "wasm-operator.dev/managed-by-version"),
        Some("1.0.0"),
        "{app}"
    );
    assert!(
        annotation(&app, "example.com/upgraded-from").is_none(),
        "{app}"
    );
    let warnings: Vec<_> = events(&client)
        .await
        .into_iter()
        .filter(|(o, t, r, _)| o == "stuck" && t == "Warning" && r == "UpgradeFailed")
        .collect();
    assert!(!warnings.is_empty());
    // The v1 children were not touched by v2 (no reconcile before the upgrade).
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    let d = get_json(&deployments, "stuck").await.unwrap();
    assert!(
        d.pointer("/metadata/labels/example.com~1tier").is_none(),
        "{d}"
    );

    // Fixing the cause lets the next retry (with backoff) through.
    webapps
        .patch(
            "stuck",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/fail-upgrade": null}}})),
        )
        .await
        .unwrap();
    let app = support::wait_until(
        "WebApp stuck upgraded after the fix",
        CONVERGE * 3,
        || async {
            let app = get_json(&webapps, "stuck").await.ok_or("WebApp gone")?;
            let ok = annotation(&app, "wasm-operator.dev/managed-by-version") == Some("2.0.0")
                && annotation(&app, "wasm-operator.dev/migration-state") == Some("completed")
                && condition(&app, "Degraded").map(|c| &c["status"]) == Some(&json!("False"));
            if ok { Ok(app) } else { Err(app.to_string()) }
        },
    )
    .await;
    assert_eq!(
        annotation(&app, "example.com/upgraded-from"),
        Some("1.0.0"),
        "{app}"
    );
    assert_eq!(app.pointer("/spec/port"), Some(&json!(80)), "{app}");
}
