//! Every fault a plugin can commit fails that call only: the object gets
//! `Degraded=True` with a searchable reason and a Warning event, the host
//! keeps serving everything else.

use kube::api::PostParams;
use serde_json::{Value, json};

use crate::support::{self, condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, deployment_kind, webapp_kind};

const NS: &str = "default";

/// `spec.mode` of a Fault and the reason its failure must carry.
const FAILING: [(&str, &str); 8] = [
    ("trap", "PluginTrap"),
    ("loop", "PluginTimeout"),
    ("memory", "PluginMemoryExceeded"),
    ("garbage", "PluginInvalidOutput"),
    ("huge", "PluginOutputTooLarge"),
    ("write-undeclared", "CapabilityDenied"),
    ("read-undeclared", "CapabilityDenied"),
    ("permanent", "ReconcilePermanentFailure"),
];

fn fault_kind() -> kube::api::ApiResource {
    support::api_resource("test.wasm-operator.dev", "v1", "Fault", "faults")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fault_degrades_its_object_only() {
    let host = Host::start().await;
    let client = host.client();
    let faulty = host.load("faulty").await;
    host.load("webapp").await;

    let faults = dynamic_api(&client, &fault_kind(), Some(NS));
    let modes = FAILING
        .iter()
        .map(|(m, _)| *m)
        .chain(["ok", "transient-then-ok"]);
    for mode in modes {
        // 2 MiB: over the host's 1 MiB output cap, well under 64 MiB of memory.
        let spec = if mode == "huge" {
            json!({"mode": mode, "hugeMiB": 2})
        } else {
            json!({"mode": mode})
        };
        let fault = serde_json::from_value(json!({
            "apiVersion": "test.wasm-operator.dev/v1", "kind": "Fault",
            "metadata": {"name": mode, "namespace": NS}, "spec": spec,
        }))
        .unwrap();
        faults
            .create(&PostParams::default(), &fault)
            .await
            .unwrap_or_else(|e| panic!("creating Fault {mode}: {e}"));
    }

    // A WebApp created while the faults happen reconciles normally.
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let app = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "calm", "namespace": NS}, "spec": {"replicas": 1, "image": "nginx"},
    }))
    .unwrap();
    webapps.create(&PostParams::default(), &app).await.unwrap();
    let deployments = dynamic_api(&client, &deployment_kind(), Some(NS));
    wait_until(
        "the WebApp's Deployment despite the faults",
        CONVERGE,
        || async {
            get_json(&deployments, "calm")
                .await
                .map(|_| ())
                .ok_or_else(|| "absent".to_string())
        },
    )
    .await;

    for (mode, reason) in FAILING {
        let fault = wait_until(
            &format!("Fault {mode} to be Degraded with {reason}"),
            CONVERGE,
            || async {
                let f = get_json(&faults, mode).await.ok_or("Fault gone")?;
                let degraded = condition(&f, "Degraded").cloned().unwrap_or(Value::Null);
                if degraded["status"] == "True" && degraded["reason"] == reason {
                    Ok(f)
                } else {
                    Err(f.to_string())
                }
            },
        )
        .await;
        let degraded = condition(&fault, "Degraded").unwrap();
        let message = degraded["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("faulty") && message.contains(&faulty.version),
            "Fault {mode}: message {message:?}"
        );
        assert_eq!(
            condition(&fault, "Ready").unwrap()["status"],
            "False",
            "Fault {mode}: {fault}"
        );
        wait_until(
            &format!("a Warning event {reason} on Fault {mode}"),
            CONVERGE,
            || async {
                let events = crate::events_for(&client, NS, mode).await;
                if events
                    .iter()
                    .any(|(kind, r, _)| kind == "Warning" && r == reason)
                {
                    Ok(())
                } else {
                    Err(format!("{events:?}"))
                }
            },
        )
        .await;
    }

    // Nothing was written for the undeclared write: no Secret at all.
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(client.clone(), NS);
    let list = secrets.list(&Default::default()).await.unwrap();
    assert!(
        list.items.is_empty(),
        "write-undeclared must not write anything: {:?}",
        list.items
    );
    let denied = get_json(&faults, "write-undeclared").await.unwrap();
    let message = condition(&denied, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("Secret"),
        "the refusal names the kind: {message}"
    );

    // Transient failures are retried with backoff until they succeed.
    let recovered = wait_until("Fault transient-then-ok to recover", CONVERGE, || async {
        let f = get_json(&faults, "transient-then-ok")
            .await
            .ok_or("Fault gone")?;
        let degraded = condition(&f, "Degraded").map(|c| c["status"].clone());
        let ready = condition(&f, "Ready").map(|c| c["status"].clone());
        if degraded == Some(json!("False")) && ready == Some(json!("True")) {
            Ok(f)
        } else {
            Err(f.to_string())
        }
    })
    .await;
    assert_eq!(
        recovered.pointer("/status/observedGeneration"),
        Some(&json!(1))
    );
    let events = crate::events_for(&client, NS, "transient-then-ok").await;
    assert!(
        events
            .iter()
            .any(|(kind, r, _)| kind == "Warning" && r == "ReconcileFailed"),
        "{events:?}"
    );

    let ok = wait_until("Fault ok to be Ready", CONVERGE, || async {
        let f = get_json(&faults, "ok").await.ok_or("Fault gone")?;
        if condition(&f, "Ready").map(|c| c["status"].clone()) == Some(json!("True")) {
            Ok(f)
        } else {
            Err(f.to_string())
        }
    })
    .await;
    assert_eq!(condition(&ok, "Degraded").unwrap()["status"], "False");

    // The host is alive and still serving both plugins.
    assert_eq!(host.registry.loaded().len(), 2);
    let text = host.metrics.encode();
    for needle in [
        "wasm_operator_plugin_traps_total{plugin=\"faulty\"",
        "wasm_operator_plugin_timeouts_total{plugin=\"faulty\"",
        "reason=\"PluginMemoryExceeded\"",
        "controller_runtime_reconcile_errors_total{controller=\"faulty\"}",
    ] {
        assert!(text.contains(needle), "metrics lack {needle}:\n{text}");
    }
    host.manager.shutdown().await;
}
