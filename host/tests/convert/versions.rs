//! Issue 24, items 2 and 3: a version that implements `convert` without
//! `upgrade` takes over objects an older version managed without an
//! upgrade walk and keeps serving the conversion; a new version may move
//! the primary to another served version of the same group and kind, and
//! a version of another kind is still refused.

use serde_json::{Value, json};

use crate::support::{self, condition, wait_until};
use crate::{CONVERGE, Fixture, NS, alpha, beta};

const MANAGED_BY: &str = "wasm-operator.dev/managed-by-version";

/// Waits until DistributedKV `name` (read as v1beta1) is marked as managed
/// by `version` (written after a successful reconcile); returns it.
async fn wait_managed_by(fx: &Fixture, name: &str, version: &str) -> Value {
    let api = fx.kvs("v1beta1");
    wait_until(
        &format!("DistributedKV {name} managed by {version}"),
        CONVERGE,
        || async {
            let kv = support::get_json(&api, name).await;
            match kv {
                Some(kv)
                    if kv
                        .pointer("/metadata/annotations")
                        .and_then(|a| a.get(MANAGED_BY))
                        == Some(&json!(version)) =>
                {
                    Ok(kv)
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

fn assert_no_upgrade_failure(kv: &Value) {
    for kind in ["Degraded", "Ready"] {
        let reason = condition(kv, kind).and_then(|c| c.get("reason"));
        assert_ne!(reason, Some(&json!("UpgradeFailed")), "{kv}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_convert_only_version_takes_over_without_an_upgrade_walk_and_still_converts() {
    let fx = Fixture::start().await;
    fx.deploy("distributedkv").await;
    fx.create_kv(beta("orders", 3, 1)).await;
    wait_managed_by(&fx, "orders", "1.0.0").await;

    // 1.2.0 declares `convert` only (and reconciles v1alpha1).
    let digest = fx.swap_file("convert_only");
    fx.wait_serving(&digest).await;
    let kv = wait_managed_by(&fx, "orders", "1.2.0").await;
    assert_no_upgrade_failure(&kv);
    let events = support::events_about(&fx.client(), NS, Some("DistributedKV"), "orders").await;
    assert!(
        !events
            .iter()
            .any(|(_, reason, _)| reason == "UpgradeFailed"),
        "{events:?}"
    );

    // Its `convert` serves the CRD: both versions read and write.
    let orders = fx.read_kv("v1alpha1", "orders").await;
    assert_eq!(orders["spec"]["size"], 3, "{orders}");
    fx.create_kv(alpha("sessions", 2)).await;
    let sessions = fx.read_kv("v1beta1", "sessions").await;
    assert_eq!(sessions["spec"]["replicaCount"], 2, "{sessions}");
    let sessions = wait_managed_by(&fx, "sessions", "1.2.0").await;
    assert_no_upgrade_failure(&sessions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_primary_moves_to_another_served_version_and_not_to_another_kind() {
    let fx = Fixture::start().await;
    // Primary v1alpha1 first, then distributedkv 1.0.0 on v1beta1.
    let first = fx.deploy("convert_only").await;
    fx.create_kv(alpha("orders", 3)).await;
    wait_managed_by(&fx, "orders", "1.2.0").await;

    let digest = fx.swap_file("distributedkv");
    fx.wait_serving(&digest).await;
    assert_ne!(first, digest);
    // The controller follows v1beta1: a change made there is reconciled.
    fx.kvs("v1beta1")
        .patch(
            "orders",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"replicaCount": 4}})),
        )
        .await
        .unwrap();
    let statefulsets: kube::Api<k8s_openapi::api::apps::v1::StatefulSet> =
        kube::Api::namespaced(fx.client(), NS);
    wait_until("StatefulSet orders with 4 replicas", CONVERGE, || async {
        let sts = statefulsets
            .get_opt("orders")
            .await
            .map_err(|e| e.to_string())?;
        match sts
            .as_ref()
            .and_then(|s| s.spec.as_ref())
            .and_then(|s| s.replicas)
        {
            Some(4) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_managed_by(&fx, "orders", "1.0.0").await;

    // Another kind stays refused; distributedkv keeps serving.
    fx.swap_file("webapp");
    let message = fx.wait_degraded("PrimaryKindChanged", &digest).await;
    assert!(message.contains("reconciles"), "{message}");
}
