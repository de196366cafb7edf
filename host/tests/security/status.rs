//! Issue 24, item 7: a status the CRD's schema refuses is reported once
//! (one `ApplyRejected` event, pointing at the CRD's status schema), is
//! not reported again when the reconcile runs for another cause, and
//! `observedGeneration` stays at the last generation whose status was
//! written.

use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{self, wait_until};
use crate::{CONVERGE, Host, attack_kind, full_hostile_grant};

const NS: &str = "default";

/// Narrows the Attack CRD's status schema: `status.seen` must be an
/// integer (the `read-namespace` attack answers a list), and waits until
/// the API server enforces it.
async fn refuse_lists_in_status_seen(host: &Host) {
    let crds: Api<CustomResourceDefinition> = Api::all(host.client());
    let name = "attacks.test.wasm-operator.dev";
    let mut crd = serde_json::to_value(crds.get(name).await.unwrap()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] = json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {"seen": {"type": "integer"}},
    });
    let crd: CustomResourceDefinition = serde_json::from_value(crd).unwrap();
    crds.replace(name, &PostParams::default(), &crd)
        .await
        .unwrap();
    // A probe object: the schema is in force once its list status is refused.
    let attacks = support::dynamic_api(&host.client(), &attack_kind(), Some(NS));
    let probe = host.attack(NS, "schema-probe", json!({"mode": "ok"})).await;
    let probe_name = probe.metadata.name.clone().unwrap();
    wait_until("the narrowed status schema in force", CONVERGE, || async {
        match attacks
            .patch_status(
                &probe_name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": {"seen": ["a"]}})),
            )
            .await
        {
            Err(kube::Error::Api(status)) if status.code == 422 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// The host's `ApplyRejected` events about Attack `name`.
async fn rejections(host: &Host, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(host.client(), NS);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("ApplyRejected")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_the_crd_refuses_is_reported_once_and_keeps_the_observed_generation() {
    let host = Host::start().await;
    refuse_lists_in_status_seen(&host).await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap_or_else(|e| panic!("loading hostile: {e}"));
    let attacks = support::dynamic_api(&host.client(), &attack_kind(), Some(NS));

    // Generation 1: an accepted status.
    host.attack(NS, "typed", json!({"mode": "ok"})).await;
    wait_until(
        "Attack typed observed at generation 1",
        CONVERGE,
        || async {
            let o = support::get_json(&attacks, "typed").await;
            match o
                .as_ref()
                .and_then(|o| o.pointer("/status/observedGeneration"))
            {
                Some(g) if *g == json!(1) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;

    // Generation 2: a list in `status.seen`, which the schema refuses.
    attacks
        .patch(
            "typed",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"mode": "read-namespace", "target": NS}})),
        )
        .await
        .unwrap();
    let first = wait_until("one ApplyRejected event", CONVERGE, || async {
        let found = rejections(&host, "typed").await;
        if found.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(found)
        }
    })
    .await;
    let note = first[0].note.clone().unwrap_or_default();
    assert!(note.contains("the CRD's status schema"), "{note}");

    // The reconcile runs again for another cause (a finalizer of someone
    // else's, which triggers the primary without a new generation): no
    // new report.
    let hold = |finalizers: Value| {
        let attacks = attacks.clone();
        async move {
            attacks
                .patch(
                    "typed",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"metadata": {"finalizers": finalizers}})),
                )
                .await
                .unwrap();
        }
    };
    let o = support::get_json(&attacks, "typed").await.unwrap();
    let mut finalizers = support::finalizers(&o);
    finalizers.push("test.example.com/another-cause".into());
    hold(json!(finalizers)).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = rejections(&host, "typed").await;
    assert_eq!(after.len(), 1, "{after:?}");
    let count = after[0].series.as_ref().map_or(1, |s| s.count);
    assert_eq!(count, 1, "no series growth: {after:?}");

    let o: Value = support::get_json(&attacks, "typed").await.unwrap();
    assert_eq!(o["metadata"]["generation"], 2, "{o}");
    assert_eq!(o["status"]["observedGeneration"], 1, "{o}");
    let degraded = support::condition(&o, "Degraded")
        .cloned()
        .unwrap_or_default();
    assert_eq!(degraded["reason"], "ApplyRejected", "{o}");
    finalizers.pop();
    hold(json!(finalizers)).await;
}
