//! The host's namespace and objects are the host's: a grant's `"*"`, its
//! selector or the restricted default never reaches the host's own
//! namespace (only a `namespaces` list naming it does), for primaries,
//! children and reads alike; and no child may be named like an object the
//! host keeps there (its webhook certificate Secret, a canary diffs
//! ConfigMap, its leader and shard Leases), even where the namespace is
//! granted by name.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::json;
use wasm_operator::contract::{Grant, HostObjects};

use crate::grants::{create_namespace, create_secret, wait_attack};
use crate::support::{self, condition};
use crate::{Host, attack_kind, full_hostile_grant};

/// The namespace the test host runs in (its `POD_NAMESPACE`).
const HOST_NS: &str = "wasm-operator-system";

/// What `run` computes for a host in [`HOST_NS`] with leader election and
/// a webhook certificate Secret.
fn host_objects() -> HostObjects {
    HostObjects::new(Some(HOST_NS))
        .with_leader_election(HOST_NS, "wasm-operator", true)
        .with_webhook_secret(HOST_NS, "wasm-operator-webhook-cert", true)
        .with_canary_diffs(HOST_NS)
}

async fn start() -> Host {
    let host = Host::builder()
        .host_objects(host_objects())
        .crd("hostile")
        .start()
        .await;
    create_namespace(&host, HOST_NS, &[]).await;
    create_namespace(&host, "team-a", &[]).await;
    host
}

fn ready(o: &serde_json::Value) -> bool {
    condition(o, "Ready").is_some_and(|c| c["status"] == "True")
}

fn capability_denied(o: &serde_json::Value) -> bool {
    condition(o, "Degraded").is_some_and(|c| c["reason"] == "CapabilityDenied")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_namespace_is_outside_every_grant_unless_named() {
    let host = start().await;
    // The host's certificate Secret, as the host keeps it.
    create_secret(&host, HOST_NS, "wasm-operator-webhook-cert").await;
    // Everything hostile asks for, in every namespace ("*").
    let grant = Grant {
        namespaces: Some(vec!["*".into()]),
        ..full_hostile_grant()
    };
    host.attack(HOST_NS, "inside", json!({"mode": "ok"})).await;
    host.attack(
        HOST_NS,
        "plant",
        json!({"mode": "secret-child", "target": "planted"}),
    )
    .await;
    host.load_with("hostile", grant).await.unwrap();
    host.attack("team-a", "outside", json!({"mode": "ok"}))
        .await;
    host.attack(
        "team-a",
        "peek",
        json!({"mode": "read-namespace", "target": HOST_NS}),
    )
    .await;
    host.attack("team-a", "loot", json!({"mode": "copy-secrets"}))
        .await;

    // Served elsewhere: the grant works, only the host's namespace is out.
    wait_attack(&host, "team-a", "outside", "a served Attack", ready).await;
    let o = wait_attack(
        &host,
        "team-a",
        "peek",
        "CapabilityDenied on peek",
        capability_denied,
    )
    .await;
    let message = condition(&o, "Degraded").unwrap()["message"].to_string();
    assert!(message.contains(HOST_NS), "{message}");
    assert!(o.pointer("/status/seen").is_none(), "{o}");
    let o = wait_attack(&host, "team-a", "loot", "status.loot on loot", |o| {
        o.pointer("/status/loot").is_some()
    })
    .await;
    let loot = o.pointer("/status/loot").unwrap();
    assert!(
        loot.get(format!("{HOST_NS}.wasm-operator-webhook-cert"))
            .is_none(),
        "the host's Secret was read: {loot}"
    );

    // Primaries in the host's namespace are never served: no finalizer, no
    // status, no child.
    let api = support::dynamic_api(&host.client(), &attack_kind(), Some(HOST_NS));
    for name in ["inside", "plant"] {
        let o = support::get_json(&api, name).await.unwrap();
        assert!(o.pointer("/metadata/finalizers").is_none(), "{o}");
        assert!(o.get("status").is_none(), "{o}");
    }
    let cms = Api::<ConfigMap>::namespaced(host.client(), HOST_NS);
    assert!(cms.get_opt("inside-ok").await.unwrap().is_none());
    let secrets = Api::<Secret>::namespaced(host.client(), HOST_NS);
    assert!(secrets.get_opt("planted").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_named_like_the_hosts_objects_are_refused_even_where_granted() {
    let host = start().await;
    // The cluster operator runs the plugin in the host's namespace, by name.
    let grant = Grant {
        namespaces: Some(vec![HOST_NS.into()]),
        ..full_hostile_grant()
    };
    host.load_with("hostile", grant).await.unwrap();
    host.attack(HOST_NS, "fine", json!({"mode": "ok"})).await;
    host.attack(HOST_NS, "cert", json!({"mode": "secret-child"}))
        .await;
    host.attack(
        HOST_NS,
        "diffs",
        json!({"mode": "takeover", "target": "kv-canary-diffs"}),
    )
    .await;

    wait_attack(&host, HOST_NS, "fine", "a served Attack", ready).await;
    for (name, whose) in [
        ("cert", "the host's conversion webhook certificate Secret"),
        ("diffs", "canary diffs ConfigMap"),
    ] {
        let o = wait_attack(&host, HOST_NS, name, "CapabilityDenied", capability_denied).await;
        let message = condition(&o, "Degraded").unwrap()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.contains(whose) && message.contains("nothing was written"),
            "{message}"
        );
    }
    let secrets = Api::<Secret>::namespaced(host.client(), HOST_NS);
    assert!(
        secrets
            .get_opt("wasm-operator-webhook-cert")
            .await
            .unwrap()
            .is_none(),
        "the planted certificate Secret was written"
    );
    let cms = Api::<ConfigMap>::namespaced(host.client(), HOST_NS);
    assert!(cms.get_opt("kv-canary-diffs").await.unwrap().is_none());
    assert!(cms.get_opt("fine-ok").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_named_like_the_hosts_leader_lease_is_refused_even_where_granted() {
    let host = start().await;
    // The host's Lease namespace, granted by name; Leases are an ordinary
    // kind, which the restricted default lets a plugin own.
    let grant = Grant {
        namespaces: Some(vec![HOST_NS.into()]),
        ..Grant::default()
    };
    host.load_with("hostile_workloads", grant).await.unwrap();
    host.attack(HOST_NS, "fine", json!({"mode": "ok"})).await;
    host.attack(HOST_NS, "leader", json!({"mode": "lease-child"}))
        .await;
    host.attack(
        HOST_NS,
        "shard",
        json!({"mode": "lease-child", "target": "wasm-operator-shard-0"}),
    )
    .await;
    // The same plugin may own a Lease of its own name there.
    host.attack(
        HOST_NS,
        "own",
        json!({"mode": "lease-child", "target": "own-lease"}),
    )
    .await;

    wait_attack(&host, HOST_NS, "fine", "a served Attack", ready).await;
    wait_attack(&host, HOST_NS, "own", "a served Attack", ready).await;
    for (name, whose) in [
        ("leader", "the host's leader-election Lease"),
        ("shard", "a shard Lease of the host's leader election"),
    ] {
        let o = wait_attack(&host, HOST_NS, name, "CapabilityDenied", capability_denied).await;
        let ready_condition = condition(&o, "Ready").expect("a Ready condition");
        assert_eq!(ready_condition["status"], "False", "{o}");
        let message = condition(&o, "Degraded").unwrap()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            message.contains(whose) && message.contains("nothing was written"),
            "{message}"
        );
    }
    let leases = Api::<Lease>::namespaced(host.client(), HOST_NS);
    for planted in ["wasm-operator", "wasm-operator-shard-0"] {
        assert!(
            leases.get_opt(planted).await.unwrap().is_none(),
            "the planted Lease {planted} was written"
        );
    }
    assert!(leases.get_opt("own-lease").await.unwrap().is_some());
    let cms = Api::<ConfigMap>::namespaced(host.client(), HOST_NS);
    assert!(cms.get_opt("fine-ok").await.unwrap().is_some());
}
