//! A Lease planted at the host's leader-election name before the host
//! first starts (by a plugin, or anyone who may write Leases there) is not
//! the host's: the replica neither takes it nor waits out its duration, it
//! reports the squatter (`/readyz` fails naming it and saying what to do)
//! and leads once the cluster operator deletes it. With `--shards N` the
//! same holds for a planted shard Lease (the `shards` check fails naming
//! it), while the replica serves the other shards.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::replica::{
    DEADLINE, Launch, Replica, apply_webapp, holder, install_webapp_crd, lease, tail, transitions,
    wait_for_holder, wait_leading, wait_reconciled_by,
};
use crate::support;

const NS: &str = "default";

/// The body of replica `a`'s `/readyz` once it fails naming a Lease the host
/// did not create (`what`: which, for the timeout message).
async fn wait_squatter_reported(a: &Replica, what: &str) -> String {
    support::wait_until(what, DEADLINE, || async {
        match a.readyz().await {
            Some((status, body)) if status != 200 && body.contains("did not create it") => Ok(body),
            other => Err(format!("{other:?}; log:\n{}", tail(&a.logs()))),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_leader_lease_is_reported_never_taken_nor_waited_on() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-squat";
    let leases = Api::<Lease>::namespaced(client.clone(), NS);
    // Held for an hour by someone who is no replica, renewed just now.
    let planted: Lease = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "holderIdentity": "squatter",
            "leaseDurationSeconds": 3600,
            "renewTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            "leaseTransitions": 7,
        },
    }))
    .expect("a Lease");
    leases
        .create(&PostParams::default(), &planted)
        .await
        .expect("plant the Lease");

    let a = Replica::start(&Launch::new(
        "a",
        cluster.kubeconfig_path(),
        NS,
        name,
        dir.path(),
    ));
    let body = wait_squatter_reported(&a, "replica a to report the planted Lease on /readyz").await;
    assert!(
        body.contains(&format!(
            "[-]leader-election Lease {NS}/{name} is named like the host's leader-election Lease"
        )) && body.contains(&format!("kubectl -n {NS} delete lease {name}")),
        "{body}"
    );
    assert!(
        a.logs().contains("does not lead until it is gone"),
        "{}",
        tail(&a.logs())
    );
    // Neither taken nor written: the squatter's Lease is as planted.
    let still = lease(&client, NS, name).await.expect("the planted Lease");
    assert_eq!(holder(&still).as_deref(), Some("squatter"));
    assert_eq!(transitions(&still), 7);
    assert!(still.metadata.labels.is_none(), "{:?}", still.metadata);
    wait_leading(&a, name, false).await;

    // Deleted by the cluster operator: the replica creates its own Lease
    // (with the host's label) at once, not after the planted hour.
    leases
        .delete(name, &DeleteParams::default())
        .await
        .expect("delete the planted Lease");
    let mine = wait_for_holder(&client, NS, name, &["a"]).await;
    assert_eq!(
        mine.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("wasm-operator.dev/host-object"))
            .map(String::as_str),
        Some("leader-lease")
    );
    apply_webapp(&client, NS, "after-squat", 1).await;
    wait_reconciled_by(&client, NS, "after-squat", &transitions(&mine).to_string()).await;
    let (status, body) = a.readyz().await.expect("a answers /readyz");
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_shard_lease_is_reported_never_taken_while_the_other_shards_serve() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-shard-squat";
    let squatted = format!("{name}-shard-1");
    let leases = Api::<Lease>::namespaced(client.clone(), NS);
    // Shard 1's Lease, held for an hour by someone who is no replica.
    let planted: Lease = serde_json::from_value(json!({
        "metadata": {"name": squatted, "namespace": NS},
        "spec": {
            "holderIdentity": "squatter",
            "leaseDurationSeconds": 3600,
            "renewTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            "leaseTransitions": 7,
        },
    }))
    .expect("a Lease");
    leases
        .create(&PostParams::default(), &planted)
        .await
        .expect("plant the shard Lease");

    let a = Replica::start(
        &Launch::new("a", cluster.kubeconfig_path(), NS, name, dir.path()).with_shards(2),
    );
    // Shard 0 is the host's as usual: its Lease carries the host's label.
    let shard0 = wait_for_holder(&client, NS, &format!("{name}-shard-0"), &["a"]).await;
    assert_eq!(
        shard0
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("wasm-operator.dev/host-object"))
            .map(String::as_str),
        Some("shard-lease")
    );
    let body =
        wait_squatter_reported(&a, "replica a to report the planted shard Lease on /readyz").await;
    assert!(
        body.contains(&format!(
            "[-]shards Lease {NS}/{squatted} is named like a shard Lease of the host's leader election"
        )) && body.contains(&format!("kubectl -n {NS} delete lease {squatted}")),
        "{body}"
    );
    assert!(body.contains("holding shards [0] of 2"), "{body}");
    assert!(
        a.logs().contains("does not lead until it is gone"),
        "{}",
        tail(&a.logs())
    );
    // Neither taken nor written: the squatter's Lease is as planted.
    let still = lease(&client, NS, &squatted)
        .await
        .expect("the planted Lease");
    assert_eq!(holder(&still).as_deref(), Some("squatter"));
    assert_eq!(transitions(&still), 7);
    assert!(still.metadata.labels.is_none(), "{:?}", still.metadata);

    // Deleted by the cluster operator: the replica creates its own shard
    // Lease (with the host's label) at once, and /readyz passes again.
    leases
        .delete(&squatted, &DeleteParams::default())
        .await
        .expect("delete the planted shard Lease");
    let mine = wait_for_holder(&client, NS, &squatted, &["a"]).await;
    assert_eq!(
        mine.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("wasm-operator.dev/host-object"))
            .map(String::as_str),
        Some("shard-lease")
    );
    let body = support::wait_until("replica a ready with both shards", DEADLINE, || async {
        match a.readyz().await {
            Some((200, body)) if body.contains("[+]shards holding shards [0, 1] of 2") => Ok(body),
            other => Err(format!("{other:?}; log:\n{}", tail(&a.logs()))),
        }
    })
    .await;
    assert!(!body.contains("did not create it"), "{body}");
}
