//! Issue 23: a plugin owning its own primary kind. Every child is a primary
//! it reconciles again, so one object grew into thousands within seconds.
//! Owning the primary kind is refused at load unless the grant's `own`
//! names it exactly; with that grant, the plugin's creations stop at its
//! creation bounds (`LimitExceeded`, limit `creations`, the breach metric).

use std::time::Duration;

use serde_json::{Value, json};
use wasm_operator::contract::{Grant, GroupKind, ReconcileLimits};
use wasm_operator::registry::{ActivationOptions, RegistryError};

use crate::support;
use crate::{CONVERGE, Host, attack_kind};

/// Every Attack in `default`.
async fn attacks(host: &Host) -> Vec<Value> {
    support::dynamic_api(&host.client(), &attack_kind(), Some("default"))
        .list(&Default::default())
        .await
        .expect("list Attacks")
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("JSON"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owning_the_primary_kind_needs_a_grant_and_growth_stops_at_the_creation_bounds() {
    let host = Host::start().await;
    match host.try_load("hostile_grower").await {
        Err(error @ RegistryError::PermissionDenied(_)) => {
            let message = error.to_string();
            assert!(
                message.contains(
                    "owns test.wasm-operator.dev/v1 Attack (its own primary kind as a child"
                ) && message.contains(
                    r#"{group: "test.wasm-operator.dev", kind: Attack} named exactly in own"#
                ),
                "{message}"
            );
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
    assert!(host.registry.loaded().is_empty());

    // Granted by name, with small creation bounds: 5 at once, one more
    // every 200 ms, 20 in all.
    let path = support::plugin_wasm("hostile_grower");
    let candidate = host
        .registry
        .prepare(
            &format!("file:{}", path.display()),
            support::plugin_bytes("hostile_grower"),
            None,
        )
        .await
        .expect("prepare hostile-grower");
    host.registry
        .activate(
            candidate,
            ActivationOptions {
                grant: Grant {
                    own: Some(vec![GroupKind::new("test.wasm-operator.dev", "Attack")]),
                    ..Grant::default()
                },
                reconcile_limits: Some(ReconcileLimits {
                    creation_burst: 5,
                    creation_refill: Duration::from_millis(200),
                    max_creations: 20,
                    ..ReconcileLimits::default()
                }),
                ..ActivationOptions::default()
            },
        )
        .await
        .expect("the grant names the primary kind");
    // Each Attack begets 3: 3, then 9, then 27 wanted, of which 8 fit.
    host.attack("default", "seed", json!({"mode": "ok", "count": 3}))
        .await;
    let seen = support::wait_until(
        "20 Attacks created beside the seed and the creation bound reported",
        CONVERGE,
        || async {
            let all = attacks(&host).await;
            let reported = all.iter().any(|a| {
                support::condition(a, "Degraded").is_some_and(|c| {
                    c["reason"] == "LimitExceeded"
                        && c["message"].as_str().is_some_and(|m| {
                            m.contains("creations: ") && m.contains("at most 20 in all")
                        })
                })
            });
            if all.len() == 21 && reported {
                Ok(all)
            } else {
                Err(format!("{} Attacks, bound reported: {reported}", all.len()))
            }
        },
    )
    .await;
    let names: Vec<&str> = seen
        .iter()
        .filter_map(|a| a.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    // All of them the seed's offspring (which ones got the budget depends
    // on the order of the reconciles).
    assert!(
        names.contains(&"seed") && names.iter().all(|n| n.starts_with("seed")),
        "{names:?}"
    );
    let breaches = host.metrics.encode();
    assert!(
        breaches.lines().any(
            |line| line.starts_with("wasm_operator_limit_breaches_total{")
                && line.contains(r#"limit="creations""#)
                && line.contains(r#"plugin="hostile-grower""#)
        ),
        "{breaches}"
    );
    // Nothing grew past the bound while the breach was reported.
    assert_eq!(attacks(&host).await.len(), 21);
}
