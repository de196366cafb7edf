//! Hot swaps under churn: many WebApps change continuously while webapp
//! 1.0.0 and 2.0.0 are swapped back and forth; no reconcile may fail and
//! everything converges on the last version.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kube::api::{Patch, PatchParams};
use serde_json::json;

use crate::support::{dynamic_api, get_json, wait_until};
use crate::{
    CONVERGE, Host, NS, V1, V2, create_webapp, deployment_kind, events, wait_managed_by,
    webapp_kind,
};

const APPS: usize = 20;
const SWAPS: usize = 7;

fn replicas_for(round: usize, app: usize) -> i64 {
    ((round + app) % 10 + 1) as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swap_under_churn() {
    let host = Host::start().await;
    let client = host.client();
    host.load(V1).await;
    let names: Vec<String> = (0..APPS).map(|i| format!("churn-{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        create_webapp(
            &client,
            name,
            json!({"replicas": replicas_for(0, i), "image": "nginx:1.27"}),
            json!({}),
        )
        .await;
    }

    // Continuous spec changes until the swaps are done.
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let (client, names, stop) = (client.clone(), names.clone(), stop.clone());
        tokio::spawn(async move {
            let api = dynamic_api(&client, &webapp_kind(), Some(NS));
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                for (i, name) in names.iter().enumerate() {
                    let spec = json!({"spec": {"replicas": replicas_for(round, i)}});
                    api.patch(name, &PatchParams::default(), &Patch::Merge(spec))
                        .await
                        .unwrap();
                }
            }
            round
        })
    };

    // v1 → v2 → v1 → … ending on v2; pacing only, nothing is timed.
    for swap in 0..SWAPS {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let file = if swap % 2 == 0 { V2 } else { V1 };
        host.load(file).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    stop.store(true, Ordering::Relaxed);
    let rounds = churn.await.unwrap();
    assert!(rounds > 0);
    let final_version = if SWAPS % 2 == 1 { "2.0.0" } else { "1.0.0" };
    assert_eq!(host.registry.loaded()[0].version, final_version);

    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    for (i, name) in names.iter().enumerate() {
        let app = wait_managed_by(&client, name, final_version).await;
        assert_eq!(
            app.pointer("/spec/replicas"),
            Some(&json!(replicas_for(rounds, i))),
            "{app}"
        );
        let replicas = replicas_for(rounds, i);
        let tier = final_version == "2.0.0";
        wait_until(
            &format!("Deployment {name} at its final spec"),
            CONVERGE,
            || async {
                let d = get_json(&deployments, name).await.ok_or("no Deployment")?;
                let ok = d.pointer("/spec/replicas") == Some(&json!(replicas))
                    && (d.pointer("/metadata/labels/example.com~1tier") == Some(&json!("web")))
                        == tier;
                if ok { Ok(()) } else { Err(d.to_string()) }
            },
        )
        .await;
    }

    // No reconcile failed: no warnings, no failures counted for any version,
    // no controller errors.
    let warnings: Vec<_> = events(&client)
        .await
        .into_iter()
        .filter(|(_, t, _, _)| t == "Warning")
        .collect();
    assert!(warnings.is_empty(), "{warnings:?}");
    let stats = host.registry.stats("webapp");
    let versions: Vec<&str> = stats.iter().map(|s| s.version.as_str()).collect();
    assert_eq!(versions, ["1.0.0", "2.0.0"], "{stats:?}");
    assert!(
        stats.iter().all(|s| s.failures == 0 && s.reconciles > 0),
        "{stats:?}"
    );
    let metrics = host.metrics.encode();
    let errors = metrics
        .lines()
        .find(|l| {
            l.starts_with("controller_runtime_reconcile_errors_total{") && l.contains("\"webapp\"")
        })
        .unwrap_or_else(|| panic!("no error counter in:\n{metrics}"));
    assert!(errors.ends_with(" 0"), "{errors}");
}
