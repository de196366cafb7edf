//! Two replicas: one leads and reconciles, the other stands by warm and
//! takes over when the leader dies (`kill -9`: the Lease expires) or stops
//! (SIGTERM: the Lease is released).

use crate::replica::{
    Launch, Replica, apply_webapp, holder, holder_name, install_webapp_crd, lease, transitions,
    wait_for_holder, wait_leading, wait_reconciled, wait_reconciled_by, wait_token,
};
use crate::support;

/// Waits until `replica` has loaded the webapp plugin (a warm standby).
async fn wait_loaded(replica: &Replica) {
    support::wait_until(
        &format!("replica {} to load the webapp plugin", replica.name),
        crate::replica::DEADLINE,
        || async {
            if replica.logs().contains("plugin loaded") {
                Ok(())
            } else {
                Err(crate::replica::tail(&replica.logs()))
            }
        },
    )
    .await;
}

/// Waits until `replica` counts a successful reconcile. The fencing mark a
/// test waits for is a reconcile's first write; the reconcile is counted
/// once its status write is done too, a moment later.
async fn wait_counted_success(replica: &Replica) {
    support::wait_until(
        &format!("replica {} to count a successful reconcile", replica.name),
        crate::replica::DEADLINE,
        || async {
            match replica.reconciles("success").await {
                Some(done) if done >= 1.0 => Ok(()),
                other => Err(format!(
                    "{other:?}; log:\n{}",
                    crate::replica::tail(&replica.logs())
                )),
            }
        },
    )
    .await;
}

const NS: &str = "default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_reconciles_and_a_killed_leader_is_replaced() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-kill";
    let launch = |n| Launch::new(n, cluster.kubeconfig_path(), NS, name, dir.path());
    let mut a = Replica::start(&launch("a"));
    let mut b = Replica::start(&launch("b"));

    let first = wait_for_holder(&client, NS, name, &["a", "b"]).await;
    let leader_name = holder_name(&first, &["a", "b"]);
    let (leader, standby) = if leader_name == "a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    let token = transitions(&first).to_string();
    apply_webapp(&client, NS, "one", 1).await;
    wait_reconciled_by(&client, NS, "one", &token).await;

    // Exactly one reconciles: the standby has compiled the plugin and
    // serves telemetry, but runs no controller and wrote nothing.
    wait_leading(leader, name, true).await;
    wait_leading(standby, name, false).await;
    wait_loaded(standby).await;
    wait_counted_success(leader).await;
    assert_eq!(standby.reconciles("success").await, Some(0.0));
    assert_eq!(standby.writes().await, Some(0.0));
    let (status, body) = standby.readyz().await.expect("the standby answers /readyz");
    assert_eq!(status, 200, "a standby is ready: {body}");
    assert!(body.contains("[+]leader-election standby"), "{body}");
    let (_, body) = leader.readyz().await.expect("the leader answers /readyz");
    assert!(
        body.contains(&format!(
            "[+]leader-election leading (Lease {NS}/{name}, fencing token {token})"
        )),
        "{body}"
    );

    // kill -9: nothing is released; the Lease expires and the standby
    // takes it with the next fencing token, then reconciles.
    leader.kill();
    let second = wait_for_holder(&client, NS, name, &[&standby.name]).await;
    assert!(transitions(&second) > transitions(&first));
    let next = transitions(&second).to_string();
    apply_webapp(&client, NS, "two", 1).await;
    wait_reconciled_by(&client, NS, "two", &next).await;
    // The object the dead leader wrote is the new leader's now.
    wait_token(&client, NS, "one", &next).await;
    wait_counted_success(standby).await;
    assert_eq!(standby.reconciles("error").await, Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_leader_drains_and_releases_the_lease() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-term";
    let launch = |n| Launch::new(n, cluster.kubeconfig_path(), NS, name, dir.path());
    // The first replica leads before the second starts: which one is
    // terminated is known.
    let mut a = Replica::start(&launch("a"));
    let first = wait_for_holder(&client, NS, name, &["a"]).await;
    let b = Replica::start(&launch("b"));
    apply_webapp(&client, NS, "one", 1).await;
    wait_reconciled(&client, NS, "one").await;
    wait_leading(&b, name, false).await;

    assert!(
        a.terminate().await,
        "the leader exits cleanly on SIGTERM:\n{}",
        a.logs()
    );
    // Released on the way out: once the process is gone the Lease is not
    // a's any more (cleared, or already b's), so b did not wait for expiry.
    let after = lease(&client, NS, name).await.expect("the Lease");
    let holder_now = holder(&after).unwrap_or_default();
    assert!(
        !holder_now.starts_with("a_"),
        "the terminated leader still holds the Lease: {holder_now:?}\n{}",
        a.logs()
    );
    assert!(a.logs().contains("released Lease"), "{}", a.logs());

    let second = wait_for_holder(&client, NS, name, &["b"]).await;
    assert_eq!(transitions(&second), transitions(&first) + 1);
    apply_webapp(&client, NS, "two", 1).await;
    wait_reconciled_by(&client, NS, "two", &transitions(&second).to_string()).await;
    let events = support::events_about(&client, NS, Some("Lease"), name).await;
    let reasons: Vec<&str> = events
        .iter()
        .map(|(_, reason, _)| reason.as_str())
        .collect();
    assert!(
        reasons.contains(&"LeaderReleased") && reasons.contains(&"LeaderElected"),
        "events on the Lease: {events:?}"
    );
}
