//! Never take over, never delete what is not ours; the host controls its
//! children's metadata; children the API server would refuse are refused
//! before any write. The `hostile` plugin attacks, the devcluster answers.

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{api_resource, condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, attack_kind, full_hostile_grant};

const NS: &str = "default";

fn configmaps(host: &Host) -> Api<kube::api::DynamicObject> {
    dynamic_api(
        &host.client(),
        &api_resource("", "v1", "ConfigMap", "configmaps"),
        Some(NS),
    )
}

/// Waits until the Attack `name` shows `Degraded` with `status` and
/// `reason`; returns the Attack.
async fn degraded(host: &Host, name: &str, status: &str, reason: &str) -> Value {
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    wait_until(
        &format!("Attack {name} to be Degraded={status} with {reason}"),
        CONVERGE,
        || async {
            let a = get_json(&attacks, name).await.ok_or("Attack gone")?;
            let d = condition(&a, "Degraded").cloned().unwrap_or(Value::Null);
            if d["status"] == status && d["reason"] == reason {
                Ok(a)
            } else {
                Err(a.to_string())
            }
        },
    )
    .await
}

fn degraded_message(attack: &Value) -> String {
    condition(attack, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A user's ConfigMap named like a desired child: refused with
/// `ChildConflict` naming it; the ConfigMap unchanged, and not pruned once
/// the plugin stops desiring it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_of_a_users_configmap_is_refused_and_it_is_never_pruned() {
    let host = Host::start().await;
    let cms = configmaps(&host);
    let users: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "users-config", "namespace": NS},
        "data": {"owner": "a user"},
    }))
    .unwrap();
    cms.create(&PostParams::default(), &users).await.unwrap();
    let before = get_json(&cms, "users-config").await.unwrap();
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();

    host.attack(
        NS,
        "grab",
        json!({"mode": "takeover", "target": "users-config"}),
    )
    .await;
    let attack = degraded(&host, "grab", "True", "ChildConflict").await;
    let message = degraded_message(&attack);
    assert!(
        message.contains("ConfigMap default/users-config")
            && message.contains("no controlling owner")
            && message.contains("hostile"),
        "{message}"
    );
    assert_eq!(condition(&attack, "Ready").unwrap()["status"], "False");
    let after = get_json(&cms, "users-config").await.unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "{after}"
    );
    assert_eq!(after["data"], json!({"owner": "a user"}));

    // The plugin stops desiring it: the Attack recovers, the user's
    // ConfigMap stays as it was (it was never the Attack's child).
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    attacks
        .patch(
            "grab",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "ok"}})),
        )
        .await
        .unwrap();
    degraded(&host, "grab", "False", "ReconcileSucceeded").await;
    wait_until("the ok child", CONVERGE, || async {
        get_json(&cms, "grab-ok")
            .await
            .map(|_| ())
            .ok_or_else(|| "absent".to_string())
    })
    .await;
    let still = get_json(&cms, "users-config")
        .await
        .expect("the user's ConfigMap was deleted");
    assert_eq!(
        still["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
        "{still}"
    );

    let metrics = host.metrics.encode();
    assert!(
        metrics
            .contains("wasm_operator_refusals_total{plugin=\"hostile\",reason=\"ChildConflict\"}"),
        "{metrics}"
    );
}

/// A child's own finalizers, ownerReferences and host labels are replaced
/// by the host's, so the child is pruned without hanging in Terminating.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_childs_metadata_is_the_hosts_and_it_prunes_cleanly() {
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    let attack = host
        .attack(NS, "meta", json!({"mode": "child-metadata"}))
        .await;
    let uid = attack.metadata.uid.clone().unwrap();
    let cms = configmaps(&host);
    let sticky = wait_until("the sticky child", CONVERGE, || async {
        get_json(&cms, "meta-sticky")
            .await
            .ok_or_else(|| "absent".to_string())
    })
    .await;
    let meta = &sticky["metadata"];
    assert!(
        meta.get("finalizers").is_none_or(|f| f == &json!([])),
        "{meta}"
    );
    let owners = meta["ownerReferences"].as_array().unwrap();
    assert_eq!(owners.len(), 1, "{meta}");
    assert_eq!(
        (owners[0]["uid"].as_str(), owners[0]["kind"].as_str()),
        (Some(uid.as_str()), Some("Attack"))
    );
    assert_eq!(meta["labels"]["wasm-operator.dev/plugin"], "hostile");
    assert_eq!(
        meta["labels"]["app.kubernetes.io/managed-by"],
        "wasm-operator"
    );
    assert_eq!(sticky["data"], json!({"sticky": "true"}));

    // No longer desired: pruned, and gone (no finalizer holds it).
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    attacks
        .patch(
            "meta",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "ok"}})),
        )
        .await
        .unwrap();
    wait_until("the sticky child to be gone", CONVERGE, || async {
        match get_json(&cms, "meta-sticky").await {
            None => Ok(()),
            Some(obj) => Err(obj.to_string()),
        }
    })
    .await;
}

/// A child name the API server would refuse: `PluginInvalidOutput` naming
/// the child and the rule, nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_child_name_is_refused_before_any_write() {
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    host.attack(NS, "badname", json!({"mode": "bad-name"}))
        .await;
    let attack = degraded(&host, "badname", "True", "PluginInvalidOutput").await;
    let message = degraded_message(&attack);
    assert!(
        message.contains("Not_A_DNS_Name") && message.contains("DNS-1123 subdomain"),
        "{message}"
    );
    let written = configmaps(&host)
        .list(&ListParams::default().labels("wasm-operator.dev/plugin=hostile"))
        .await
        .unwrap();
    assert!(written.items.is_empty(), "{:?}", written.items);
}

/// An existing ClusterRoleBinding named like a desired child: refused with
/// `ChildConflict`, the binding unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_of_an_existing_cluster_role_binding_is_refused() {
    let host = Host::start().await;
    let crbs = dynamic_api(
        &host.client(),
        &api_resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
        None,
    );
    let existing: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "system:readers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "Group", "name": "readers", "apiGroup": "rbac.authorization.k8s.io"}],
    }))
    .unwrap();
    crbs.create(&PostParams::default(), &existing)
        .await
        .unwrap();
    let before = get_json(&crbs, "system:readers").await.unwrap();
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    host.attack(
        NS,
        "escalate",
        json!({"mode": "cluster-takeover", "target": "system:readers"}),
    )
    .await;
    let attack = degraded(&host, "escalate", "True", "ChildConflict").await;
    let message = degraded_message(&attack);
    assert!(
        message.contains("ClusterRoleBinding system:readers")
            && message.contains("no controlling owner"),
        "{message}"
    );
    let after = get_json(&crbs, "system:readers").await.unwrap();
    assert_eq!(
        after["metadata"]["resourceVersion"],
        before["metadata"]["resourceVersion"]
    );
    assert_eq!(after["roleRef"]["name"], "view");
}

/// A write the API server refuses with a status retrying cannot fix (422)
/// is `ApplyRejected` carrying the server's message, not retried until the
/// object changes; the change then converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_an_unfixable_api_refusal_is_permanent_with_the_servers_message() {
    if !crate::support::devcluster_only(
        "devcluster_only_an_unfixable_api_refusal_is_permanent_with_the_servers_message",
        "fault injection (a write refused with 422)",
    ) {
        return;
    }
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    host.attack(NS, "refused", json!({"mode": "ok"})).await;
    // Settled first: adding the finalizer retriggers the first reconcile.
    degraded(&host, "refused", "False", "ReconcileSucceeded").await;
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    host.cluster
        .faults()
        .expect("the devcluster injects faults")
        .fail_next(&format!("/api/v1/namespaces/{NS}/configmaps"), 1, 422);
    // A change that makes the next reconcile write a child (an unchanged
    // child is not applied again): a new ConfigMap, refused.
    attacks
        .patch(
            "refused",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "takeover", "target": "refused-new"}})),
        )
        .await
        .unwrap();
    let attack = degraded(&host, "refused", "True", "ApplyRejected").await;
    let message = degraded_message(&attack);
    assert!(
        message.contains("ConfigMap default/refused-new")
            && message.contains("422")
            && message.contains("injected fault")
            && message.contains("does not retry"),
        "{message}"
    );
    let metrics = host.metrics.encode();
    assert!(
        metrics
            .contains("wasm_operator_refusals_total{plugin=\"hostile\",reason=\"ApplyRejected\"}"),
        "{metrics}"
    );
    // A change of the object is reconciled again, and converges.
    attacks
        .patch(
            "refused",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"mode": "ok", "target": "again"}})),
        )
        .await
        .unwrap();
    degraded(&host, "refused", "False", "ReconcileSucceeded").await;
    assert!(get_json(&configmaps(&host), "refused-ok").await.is_some());
}
