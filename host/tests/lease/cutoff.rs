//! A leader whose API calls are cut off (the devcluster stalls every
//! request carrying its bearer token) stops writing before its Lease can
//! expire, the other replica takes over, and when the cut-off ends the old
//! leader writes nothing more.

use devcluster::ClientFault;

use crate::replica::{
    Launch, Replica, apply_webapp, holder_name, install_webapp_crd, kubeconfig_with_token, lease,
    transitions, wait_for_holder, wait_leading, wait_reconciled_by, wait_token,
};
use crate::support;

const NS: &str = "default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_a_cut_off_leader_stops_writing_and_never_writes_after_its_successor() {
    let test =
        "devcluster_only_a_cut_off_leader_stops_writing_and_never_writes_after_its_successor";
    let cluster = support::start_cluster().await;
    let Some(dev) = cluster.skip_unless_devcluster(test, "per-client fault injection") else {
        return;
    };
    let faults = dev.faults();
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-cut";
    // One kubeconfig per replica: the bearer token tells their requests apart.
    let config_a = dir.path().join("a.kubeconfig");
    let config_b = dir.path().join("b.kubeconfig");
    kubeconfig_with_token(cluster.kubeconfig_path(), &config_a, "replica-a");
    kubeconfig_with_token(cluster.kubeconfig_path(), &config_b, "replica-b");
    let a = Replica::start(&Launch::new("a", &config_a, NS, name, dir.path()));
    let first = wait_for_holder(&client, NS, name, &["a"]).await;
    let b = Replica::start(&Launch::new("b", &config_b, NS, name, dir.path()));
    let old = transitions(&first).to_string();
    apply_webapp(&client, NS, "one", 1).await;
    wait_reconciled_by(&client, NS, "one", &old).await;
    wait_leading(&b, name, false).await;
    let writes_before = a.writes().await.expect("a's metrics");
    assert!(writes_before > 0.0, "the leader wrote WebApp one");

    // Cut a off: every request of its hangs. It stops leading on its own
    // clock, before the Lease can expire for b.
    faults.cut_off_client("authorization", "Bearer replica-a", ClientFault::Stall);
    let second = wait_for_holder(&client, NS, name, &["b"]).await;
    assert_eq!(
        a.leading(name).await,
        Some(false),
        "a still reports leading when b took over:\n{}",
        a.logs()
    );
    let new = transitions(&second).to_string();
    assert!(transitions(&second) > transitions(&first));

    // b writes while a is cut off: a new object and a change of the old one.
    apply_webapp(&client, NS, "two", 1).await;
    wait_reconciled_by(&client, NS, "two", &new).await;
    apply_webapp(&client, NS, "one", 2).await;
    wait_reconciled_by(&client, NS, "one", &new).await;

    // The cut-off ends: a's stalled requests go through (its Lease update
    // conflicts, its reads show b), and a stays a standby.
    faults.restore_client("authorization", "Bearer replica-a");
    support::wait_until(
        "a to see b holding the Lease",
        crate::replica::DEADLINE,
        || async {
            match a.readyz().await {
                Some((200, body))
                    if body.contains("[+]leader-election standby")
                        && body.contains("held by b_") =>
                {
                    Ok(())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    // Another change for b to reconcile while a is back: a must not touch it.
    apply_webapp(&client, NS, "two", 3).await;
    wait_reconciled_by(&client, NS, "two", &new).await;
    wait_token(&client, NS, "one", &new).await;
    assert_eq!(
        a.writes().await,
        Some(writes_before),
        "the cut-off leader wrote after it lost the Lease:\n{}",
        a.logs()
    );
    let now = lease(&client, NS, name).await.expect("the Lease");
    assert_eq!(holder_name(&now, &["a", "b"]), "b");
    assert!(a.logs().contains("lost Lease"), "{}", a.logs());
}
