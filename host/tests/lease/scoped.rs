//! Fencing tokens name their Lease: a term of another Lease (another
//! namespace or name, as when the host moves to `POD_NAMESPACE`'s Lease) is
//! not a newer term, and a change of the mark re-triggers a reconcile; a
//! term above every one its Lease issued is forged: reported and
//! overwritten (issue 23).

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};

use crate::replica::{
    DEADLINE, Launch, Replica, TOKEN, apply_webapp, install_webapp_crd, sum, tail, transitions,
    wait_for_holder, wait_reconciled_by, wait_token, webapps,
};
use crate::support;

const NS: &str = "default";

/// The annotation naming the Lease of the fencing token.
const LEASE_MARK: &str = "wasm-operator.dev/fencing-lease";

/// The Lease a WebApp's fencing mark names, if any.
async fn lease_mark(client: &kube::Client, name: &str) -> Option<String> {
    let obj = support::get_json(&webapps(client, NS), name).await?;
    obj.pointer(&format!(
        "/metadata/annotations/{}",
        LEASE_MARK.replace('/', "~1")
    ))
    .and_then(Value::as_str)
    .map(str::to_string)
}

/// Sets (a value) or removes (`null`) the fencing annotations of `name`.
async fn mark(client: &kube::Client, name: &str, token: Value, lease: Value) {
    webapps(client, NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {TOKEN: token, LEASE_MARK: lease}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot patch WebApp {name}'s fencing mark: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_of_another_lease_is_no_newer_term_and_a_changed_mark_retriggers() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    // Lease A has seen two changes of holder already: its next term is
    // later than the first term of any new Lease.
    let lease_a = "scoped-a";
    Api::<Lease>::namespaced(client.clone(), NS)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                // A Lease the host created (its label): one it did not
                // create is a squatter it never takes (squatter.rs).
                "metadata": {"name": lease_a, "namespace": NS,
                             "labels": {"wasm-operator.dev/host-object": "leader-lease"}},
                "spec": {"leaseTransitions": 2, "leaseDurationSeconds": 3},
            }))
            .expect("a Lease"),
        )
        .await
        .expect("create Lease A");
    let mut a = Replica::start(&Launch::new(
        "a",
        cluster.kubeconfig_path(),
        NS,
        lease_a,
        dir.path(),
    ));
    let held = wait_for_holder(&client, NS, lease_a, &["a"]).await;
    let term_a = transitions(&held);
    assert!(term_a > 0, "Lease A's term is past 0: {term_a}");
    apply_webapp(&client, NS, "scoped", 1).await;
    wait_reconciled_by(&client, NS, "scoped", &term_a.to_string()).await;
    let mark_a = lease_mark(&client, "scoped")
        .await
        .expect("Lease A is named");
    assert!(mark_a.starts_with(&format!("{NS}/{lease_a}/")), "{mark_a}");
    a.kill();

    // The only leader now elects on Lease B, starting at term 0: the
    // object is its to write (not a newer term), and it overwrites the mark.
    let lease_b = "scoped-b";
    let b = Replica::start(&Launch::new(
        "b",
        cluster.kubeconfig_path(),
        NS,
        lease_b,
        dir.path(),
    ));
    let held = wait_for_holder(&client, NS, lease_b, &["b"]).await;
    let term_b = transitions(&held).to_string();
    wait_token(&client, NS, "scoped", &term_b).await;
    let mark_b = lease_mark(&client, "scoped")
        .await
        .expect("Lease B is named");
    assert!(mark_b.starts_with(&format!("{NS}/{lease_b}/")), "{mark_b}");
    assert!(
        !b.logs().contains("newer than this replica's term"),
        "Lease B's leader refused an object of Lease A:\n{}",
        tail(&b.logs())
    );

    // A later term of Lease B itself is judged against what Lease B has
    // issued (issue 23): 9 is above it (Lease B issued no term past b's), so
    // b reports it as forged and overwrites it; a term the Lease did issue
    // still fences (StaleTerm, host/tests/lease/cutoff.rs). The change of the
    // mark alone is what makes b look again.
    mark(&client, "scoped", json!("9"), json!(mark_b)).await;
    support::wait_until(
        "b to judge the newer term of its own Lease",
        DEADLINE,
        || async {
            if b.logs()
                .contains("it carries fencing token 9, newer than this replica's term")
            {
                Ok(())
            } else {
                Err(tail(&b.logs()))
            }
        },
    )
    .await;
    assert!(
        b.logs()
            .contains("the token is forged, and this leader overwrites it"),
        "{}",
        tail(&b.logs())
    );
    wait_token(&client, NS, "scoped", &term_b).await;
    // Removing the mark by hand (no spec change) re-triggers: b writes it
    // again.
    mark(&client, "scoped", Value::Null, Value::Null).await;
    wait_token(&client, NS, "scoped", &term_b).await;
    assert_eq!(lease_mark(&client, "scoped").await, Some(mark_b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_above_what_the_lease_issued_is_reported_as_forged_and_overwritten() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let lease = "forged";
    let a = Replica::start(&Launch::new(
        "a",
        cluster.kubeconfig_path(),
        NS,
        lease,
        dir.path(),
    ));
    let held = wait_for_holder(&client, NS, lease, &["a"]).await;
    let term = transitions(&held).to_string();
    apply_webapp(&client, NS, "victim", 1).await;
    wait_reconciled_by(&client, NS, "victim", &term).await;
    let named = lease_mark(&client, "victim")
        .await
        .expect("the Lease is named");
    let api = webapps(&client, NS);
    let before = api.get("victim").await.expect("the WebApp");
    let since = before.metadata.resource_version.clone().unwrap_or_default();

    // 2^64-1 of a's own Lease: nobody issued it. Taken as a later term it
    // would make every replica skip the object forever.
    let forged = u64::MAX.to_string();
    mark(&client, "victim", json!(forged), json!(named)).await;
    // a overwrites it with its own term ...
    wait_token(&client, NS, "victim", &term).await;
    assert_eq!(lease_mark(&client, "victim").await, Some(named));
    // ... and reports it: a Warning event, the metric, the log, and
    // Degraded=True/ForgedFencingToken on the object (seen in the watch of
    // its changes: the next reconcile reports Degraded=False again).
    let message_part = format!("the object carried fencing token {forged} of Lease");
    let events = support::wait_until("a ForgedFencingToken event", DEADLINE, || async {
        let events = support::events_about(&client, NS, Some("WebApp"), "victim").await;
        if events.iter().any(|(kind, reason, note)| {
            kind == "Warning" && reason == "ForgedFencingToken" && note.contains(&message_part)
        }) {
            Ok(events)
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    assert!(
        !events.iter().any(|(_, reason, _)| reason == "Fenced"),
        "{events:?}"
    );
    let metrics = a.metrics().await.expect("a's metrics");
    assert!(
        sum(&metrics, "wasm_operator_forged_fencing_tokens_total{") >= 1.0,
        "{metrics}"
    );
    assert!(
        a.logs()
            .contains("the token is forged, and this leader overwrites it"),
        "{}",
        tail(&a.logs())
    );
    let mut changes = api
        .watch(&WatchParams::default(), &since)
        .await
        .expect("watch the WebApps")
        .boxed();
    let degraded = tokio::time::timeout(DEADLINE, async {
        while let Some(event) = changes.try_next().await.expect("the watch") {
            let (WatchEvent::Added(obj) | WatchEvent::Modified(obj)) = event else {
                continue;
            };
            let obj = serde_json::to_value(&obj).expect("JSON");
            let degraded = support::condition(&obj, "Degraded").cloned();
            if obj.pointer("/metadata/name") == Some(&json!("victim"))
                && degraded.as_ref().and_then(|c| c.get("reason"))
                    == Some(&json!("ForgedFencingToken"))
            {
                return degraded;
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .expect("a Degraded=True/ForgedFencingToken condition in the WebApp's changes");
    assert_eq!(degraded["status"], "True", "{degraded}");
    assert!(
        degraded["message"]
            .as_str()
            .is_some_and(|m| m.contains(&message_part)),
        "{degraded}"
    );
}
