//! Version-aware handoff: a newer host asks the older leader (through the
//! Lease) to hand over; the older one stops taking work, finishes what is
//! in flight, releases, and the newer one takes the Lease at once. The
//! older one never takes it back while the newer one is alive.

use std::time::Duration;

use crate::replica::{
    Launch, Replica, apply_webapp, holder_name, install_webapp_crd, lease, transitions,
    wait_for_holder, wait_leading, wait_reconciled_by, wait_token,
};
use crate::support;

const NS: &str = "default";
const HOST_VERSION: &str = "wasm-operator.dev/host-version";
const HANDOFF: &str = "wasm-operator.dev/handoff-requested-by";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_leader_hands_over_to_a_newer_host_and_never_takes_the_lease_back() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-handoff";
    let launch = |n, version| {
        Launch::new(n, cluster.kubeconfig_path(), NS, name, dir.path()).with_version(version)
    };
    let old = Replica::start(&launch("old", "0.1.0"));
    let first = wait_for_holder(&client, NS, name, &["old"]).await;
    assert_eq!(
        first
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(HOST_VERSION))
            .map(String::as_str),
        Some("0.1.0")
    );
    for object in ["one", "two", "three"] {
        apply_webapp(&client, NS, object, 1).await;
    }
    let old_token = transitions(&first).to_string();
    for object in ["one", "two", "three"] {
        wait_reconciled_by(&client, NS, object, &old_token).await;
    }

    let new = Replica::start(&launch("new", "0.2.0"));
    let second = wait_for_holder(&client, NS, name, &["new"]).await;
    let annotations = second.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get(HOST_VERSION).map(String::as_str),
        Some("0.2.0")
    );
    assert_eq!(annotations.get(HANDOFF), None, "the request is answered");
    assert!(transitions(&second) > transitions(&first));
    let new_token = transitions(&second).to_string();
    wait_leading(&old, name, false).await;
    let old_log = old.logs();
    assert!(old_log.contains("hands Lease"), "{old_log}");
    assert!(old_log.contains("released Lease"), "{old_log}");

    // The newer host reconciles: a change, and every object it touches
    // carries its token.
    apply_webapp(&client, NS, "two", 2).await;
    wait_reconciled_by(&client, NS, "two", &new_token).await;
    apply_webapp(&client, NS, "four", 1).await;
    wait_reconciled_by(&client, NS, "four", &new_token).await;
    wait_token(&client, NS, "one", &new_token).await;

    // Several lease durations later the older host has still not taken it
    // back (an absence: waited for, then checked once).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let later = lease(&client, NS, name).await.expect("the Lease");
    assert_eq!(holder_name(&later, &["old", "new"]), "new");
    assert_eq!(transitions(&later), transitions(&second));
    assert_eq!(old.leading(name).await, Some(false));

    // No failed reconcile on either side: nothing overlapped.
    assert_eq!(old.reconciles("error").await, Some(0.0), "{}", old.logs());
    assert_eq!(new.reconciles("error").await, Some(0.0), "{}", new.logs());
    let events = support::events_about(&client, NS, Some("Lease"), name).await;
    let reasons: Vec<&str> = events
        .iter()
        .map(|(_, reason, _)| reason.as_str())
        .collect();
    for reason in [
        "HandoffRequested",
        "HandingOver",
        "LeaderReleased",
        "LeaderElected",
    ] {
        assert!(
            reasons.contains(&reason),
            "no {reason} event on the Lease: {events:?}"
        );
    }
}
