//! Split and selector candidates: which version serves each object, sticky
//! across weight steps and restarts, and back to stable when dropped.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::DynamicObject;
use serde_json::{Value, json};
use wasm_operator::cache::LabelSelector;
use wasm_operator::registry::{ActivationOptions, RegistryError, Rollout, assign};

use crate::support;
use crate::{FLAKY, Host, NEXT, STABLE, V3, create_webapps, fast, uid, wait_versions, webapps};

/// The version the split at `weight` must give `app`.
fn by_hash(weight: u8) -> impl Fn(&str, &Value) -> &'static str {
    move |_, app| {
        if assign::in_split(uid(app), weight) {
            "1.1.0"
        } else {
            "1.0.0"
        }
    }
}

/// Checks the live version set routes every WebApp as the hash says.
async fn assert_routing(host: &Host, weight: u8) {
    let set = host.registry.versions("webapp").expect("serving").current();
    for (name, app) in webapps(&host.client()).await {
        let object: DynamicObject = serde_json::from_value(app.clone()).unwrap();
        let want = by_hash(weight)(&name, &app);
        assert_eq!(set.serving_for(&object).info.version, want, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_is_sticky_across_steps_and_restarts_and_drops_back_to_stable() {
    let mut host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    create_webapps(&client, "split", 100, |_| json!({})).await;
    wait_versions(&client, |_, _| "1.0.0").await;

    host.canary(NEXT, Rollout::Split { weight_percent: 20 })
        .await;
    let at20 = wait_versions(&client, by_hash(20)).await;
    let picked20: Vec<&String> = at20
        .iter()
        .filter(|(_, app)| assign::in_split(uid(app), 20))
        .map(|(name, _)| name)
        .collect();
    // The hash picks about a fifth; exactly those are on the candidate.
    assert!((8..=35).contains(&picked20.len()), "{}", picked20.len());
    assert_routing(&host, 20).await;

    host.registry
        .set_rollout("webapp", fast(Rollout::Split { weight_percent: 50 }))
        .await
        .unwrap();
    let at50 = wait_versions(&client, by_hash(50)).await;
    // Raising the weight kept every object the candidate already served.
    for name in &picked20 {
        assert_eq!(
            crate::annotation(&at50[*name], "wasm-operator.dev/managed-by-version"),
            Some("1.1.0"),
            "{name}"
        );
    }
    assert_routing(&host, 50).await;
    // Both versions apply with the same field manager: the Deployments of
    // objects on either version have the same managers.
    let deployments = support::dynamic_api(&client, &crate::deployment_kind(), Some(crate::NS));
    let managers: BTreeSet<Vec<String>> = deployments
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|d| {
            d.metadata
                .managed_fields
                .unwrap_or_default()
                .into_iter()
                .map(|m| {
                    format!(
                        "{}/{}",
                        m.manager.unwrap_or_default(),
                        m.operation.unwrap_or_default()
                    )
                })
                // The cluster's own controllers (on a real control plane,
                // the Deployment controller's revision annotation) are not
                // what this checks.
                .filter(|m| m.starts_with("wasm-operator"))
                .collect()
        })
        .collect();
    assert_eq!(managers.len(), 1, "{managers:?}");

    // A restart reproduces the assignment: the same versions serve the same
    // objects, so the new host's first reconcile of every object writes
    // nothing (no resourceVersion moves).
    let before = crate::written_state(&client).await;
    host.restart().await;
    let stable = host.prepare(STABLE).await;
    let candidate = host.prepare(NEXT).await;
    host.registry
        .activate_with(
            stable,
            ActivationOptions::default(),
            Some((
                candidate,
                fast(Rollout::Split { weight_percent: 50 }),
                ActivationOptions::default(),
            )),
        )
        .await
        .unwrap();
    assert_routing(&host, 50).await;
    crate::support::wait_until(
        "every WebApp reconciled after the restart",
        crate::CONVERGE,
        || async {
            let (stable, candidate) = host.registry.counters("webapp").expect("serving");
            let calls = stable.calls + candidate.map_or(0, |c| c.calls);
            if calls >= 100 {
                Ok(())
            } else {
                Err(format!("{calls} reconciles"))
            }
        },
    )
    .await;
    wait_versions(&client, by_hash(50)).await;
    assert_eq!(before, crate::written_state(&client).await);

    // Dropping the candidate returns every object it served to stable.
    let dropped = host.registry.drop_candidate("webapp").await.unwrap();
    assert_eq!(dropped.map(|d| d.version), Some("1.1.0".to_string()));
    wait_versions(&client, |_, _| "1.0.0").await;
    let stats = host.registry.stats("webapp");
    assert!(
        stats.iter().all(|s| s.failures == 0),
        "no reconcile failed: {stats:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selector_split_picks_exactly_the_labelled_objects_then_promotion_takes_all() {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    let labelled = [2usize, 3, 7];
    let names = create_webapps(&client, "sel", 10, |i| {
        if labelled.contains(&i) {
            json!({"track": "canary"})
        } else {
            json!({"track": "stable"})
        }
    })
    .await;
    wait_versions(&client, |_, _| "1.0.0").await;
    let selector = LabelSelector::parse("track=canary").unwrap();
    host.canary(NEXT, Rollout::Selector(selector)).await;
    let chosen: BTreeMap<String, bool> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (n.clone(), labelled.contains(&i)))
        .collect();
    wait_versions(
        &client,
        |name, _| {
            if chosen[name] { "1.1.0" } else { "1.0.0" }
        },
    )
    .await;

    // Promotion: every object moves to the candidate, now stable.
    let promoted = host.registry.promote_candidate("webapp").await.unwrap();
    assert_eq!(promoted.version, "1.1.0");
    assert!(host.registry.canary("webapp").is_none());
    assert_eq!(host.registry.loaded()[0].version, "1.1.0");
    wait_versions(&client, |_, _| "1.1.0").await;
    assert!(matches!(
        host.registry.promote_candidate("webapp").await,
        Err(RegistryError::NoCandidate(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_candidate_may_shadow_but_not_serve() {
    let host = Host::start().await;
    host.load(STABLE).await;
    let refused = host
        .try_canary(
            V3,
            fast(Rollout::Split { weight_percent: 10 }),
            ActivationOptions::default(),
        )
        .await
        .expect_err("3.0.0 declares min_compatible_version 3.0.0");
    assert_eq!(refused.reason(), "CanaryIrreversible");
    assert!(refused.is_rejection());
    let message = refused.to_string();
    assert!(
        message.contains("webapp 3.0.0") && message.contains("1.0.0 keeps serving"),
        "{message}"
    );
    assert!(host.registry.canary("webapp").is_none());

    // Shadowing writes nothing, so it is allowed; serving needs consent.
    host.canary(V3, Rollout::Shadow).await;
    let step = host
        .registry
        .set_rollout("webapp", fast(Rollout::Split { weight_percent: 10 }))
        .await
        .expect_err("still irreversible");
    assert_eq!(step.reason(), "CanaryIrreversible");
    let mut consent = fast(Rollout::Split { weight_percent: 10 });
    consent.accept_irreversible = true;
    host.registry.set_rollout("webapp", consent).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_split_candidate_dropped_hands_every_object_back_to_stable() {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    let failing = [1usize, 4];
    let names = create_webapps(
        &client,
        "flaky",
        6,
        |i| json!({"canary.example.com/fail": if failing.contains(&i) { "true" } else { "false" }}),
    )
    .await;
    wait_versions(&client, |_, _| "1.0.0").await;
    host.canary(
        FLAKY,
        Rollout::Split {
            weight_percent: 100,
        },
    )
    .await;
    // The candidate serves every object and fails on the labelled ones.
    let marked: BTreeSet<String> = failing.iter().map(|i| names[*i].clone()).collect();
    crate::support::wait_until(
        "the candidate served and failed",
        crate::CONVERGE,
        || async {
            let apps = webapps(&client).await;
            let ok = apps.iter().all(|(name, app)| {
                if marked.contains(name) {
                    crate::support::condition(app, "Degraded")
                        .is_some_and(|c| c["status"] == "True" && c["reason"] == "ReconcileFailed")
                } else {
                    crate::reconciled_by(app, "1.3.0")
                }
            });
            if ok { Ok(()) } else { Err(format!("{apps:?}")) }
        },
    )
    .await;
    let (stable, candidate) = host.registry.counters("webapp").expect("serving");
    assert!(candidate.expect("a candidate").failures >= 2);

    // Rollback: every object the candidate touched returns to 1.0.0, with
    // its children, and no stable reconcile failed.
    host.registry.drop_candidate("webapp").await.unwrap();
    let apps = wait_versions(&client, |_, _| "1.0.0").await;
    assert_eq!(apps.len(), 6);
    let deployments = support::dynamic_api(&client, &crate::deployment_kind(), Some(crate::NS));
    assert_eq!(
        deployments
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        6
    );
    let (after, _) = host.registry.counters("webapp").expect("serving");
    assert_eq!(after.failures, stable.failures);
    assert_eq!(after.failures, 0);
}
