//! Limits per reconcile: every flood of the `hostile` plugin ends in the
//! documented condition and metric, with nothing written that the limits
//! refuse. Refusals (too many children, too large a status) write nothing
//! but the failure; clamps (messages, events, requeue) write and show
//! `Degraded=True` with reason `LimitExceeded` naming the limit.

use kube::api::ListParams;
use serde_json::{Value, json};

use crate::support::{api_resource, condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, attack_kind, full_hostile_grant};

const NS: &str = "default";

/// Waits until the Attack `name` shows `Degraded=True` with `reason`.
async fn degraded(host: &Host, name: &str, reason: &str) -> Value {
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    wait_until(
        &format!("Attack {name} to be Degraded with {reason}"),
        CONVERGE,
        || async {
            let a = get_json(&attacks, name).await.ok_or("Attack gone")?;
            let d = condition(&a, "Degraded").cloned().unwrap_or(Value::Null);
            if d["status"] == "True" && d["reason"] == reason {
                Ok(a)
            } else {
                // Shortened: some attacks carry megabytes.
                Err(d.to_string().chars().take(2000).collect())
            }
        },
    )
    .await
}

fn message<'a>(attack: &'a Value, kind: &str) -> &'a str {
    condition(attack, kind)
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
}

async fn events_for(host: &Host, name: &str) -> Vec<(String, String, String)> {
    use k8s_openapi::api::events::v1::Event;
    let api: kube::Api<Event> = kube::Api::namespaced(host.client(), NS);
    api.list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// 32 KiB and the `…` truncation mark.
const MESSAGE_MAX: usize = (32 << 10) + 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flood_ends_in_its_condition_and_metric() {
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    for (name, spec) in [
        // The plugin's defaults: 5000 children, a 2 MiB status, 10,000
        // events, 15 MiB messages.
        ("many", json!({"mode": "many-children"})),
        ("status", json!({"mode": "huge-status"})),
        ("events", json!({"mode": "events-flood"})),
        ("long", json!({"mode": "long-message"})),
        ("failure", json!({"mode": "huge-failure"})),
        ("requeue", json!({"mode": "requeue-zero"})),
    ] {
        host.attack(NS, name, spec).await;
    }

    // Refusals: nothing but the failure is written.
    let many = degraded(&host, "many", "TooManyChildren").await;
    assert!(message(&many, "Degraded").contains("5000 children, more than its limit of 500"));
    let cms = dynamic_api(
        &host.client(),
        &api_resource("", "v1", "ConfigMap", "configmaps"),
        Some(NS),
    );
    let written = cms
        .list(&ListParams::default().labels("wasm-operator.dev/plugin=hostile"))
        .await
        .unwrap();
    assert!(
        written.items.iter().all(|c| !c
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .starts_with("many-")),
        "no child of the refused answer may exist"
    );
    let status = degraded(&host, "status", "StatusTooLarge").await;
    assert!(
        status["status"].get("blob").is_none(),
        "the blob was written"
    );
    assert!(message(&status, "Degraded").contains("more than its limit of 262144"));

    // Clamps: written, and said so.
    let events = degraded(&host, "events", "LimitExceeded").await;
    assert!(
        message(&events, "Degraded").contains("eventsPerReconcile"),
        "{}",
        message(&events, "Degraded")
    );
    let recorded = events_for(&host, "events").await;
    let floods = recorded.iter().filter(|(_, r, _)| r == "Flood").count();
    assert!((1..=25).contains(&floods), "{floods} Flood events recorded");

    let long = degraded(&host, "long", "LimitExceeded").await;
    assert!(message(&long, "Degraded").contains("conditionMessage"));
    let ready = message(&long, "Ready");
    assert!(
        ready.len() <= MESSAGE_MAX && ready.ends_with('…'),
        "{} bytes",
        ready.len()
    );

    let failure = degraded(&host, "failure", "ReconcilePermanentFailure").await;
    let text = message(&failure, "Degraded");
    assert!(
        text.len() <= MESSAGE_MAX && text.contains("hostile"),
        "{} bytes",
        text.len()
    );

    let requeue = degraded(&host, "requeue", "LimitExceeded").await;
    assert!(message(&requeue, "Degraded").contains("requeue-after 0 ms raised to 1000 ms"));
    assert_eq!(condition(&requeue, "Ready").unwrap()["status"], "True");

    let metrics = host.metrics.encode();
    for limit in [
        "children",
        "statusSize",
        "eventsPerReconcile",
        "conditionMessage",
        "requeueAfter",
    ] {
        let series =
            format!("wasm_operator_limit_breaches_total{{plugin=\"hostile\",limit=\"{limit}\"}}");
        assert!(metrics.contains(&series), "missing {series}");
    }
    for series in [
        "wasm_operator_refusals_total{plugin=\"hostile\",reason=\"TooManyChildren\"}",
        "wasm_operator_events_total{plugin=\"hostile\",outcome=\"dropped\"}",
        "wasm_operator_writes_total{plugin=\"hostile\",write=\"status\"}",
    ] {
        assert!(metrics.contains(series), "missing {series}");
    }
}

/// A 50 MiB log line through the `log` import and on stdout is cut to the
/// call's log limit (64 KiB, shared by both) and counted; the call itself
/// succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_flood_is_truncated_and_counted() {
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    host.attack(NS, "logs", json!({"mode": "log-flood"})).await;
    let cms = dynamic_api(
        &host.client(),
        &api_resource("", "v1", "ConfigMap", "configmaps"),
        Some(NS),
    );
    wait_until("the flooding Attack's child", CONVERGE, || async {
        get_json(&cms, "logs-ok")
            .await
            .map(|_| ())
            .ok_or_else(|| "absent".to_string())
    })
    .await;
    wait_until("the log breach metric", CONVERGE, || async {
        let metrics = host.metrics.encode();
        if metrics
            .contains("wasm_operator_limit_breaches_total{plugin=\"hostile\",limit=\"logBytes\"}")
        {
            Ok(())
        } else {
            Err("no logBytes breach".to_string())
        }
    })
    .await;
    let metrics = host.metrics.encode();
    let logged: u64 = metrics
        .lines()
        .find(|l| l.starts_with("wasm_operator_plugin_log_bytes_total{plugin=\"hostile\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("log bytes counted");
    let calls: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("wasm_operator_plugin_call_duration_seconds_count{plugin=\"hostile\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(
        logged <= calls * (64 << 10) + calls * 512,
        "{logged} bytes logged in {calls} calls"
    );
}

/// An object reconciled faster than its rate limit (here 2 at once, one
/// more per second, with requeue-after 0 raised to 100 ms) is a hot loop: a
/// `HotLoop` Warning event, the `reconcileRate` metric, and the next
/// reconcile that runs says so in `Degraded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_loop_is_reported() {
    use std::time::Duration;
    use wasm_operator::contract::ReconcileLimits;
    use wasm_operator::registry::ActivationOptions;

    let host = Host::start().await;
    let path = crate::support::plugin_wasm("hostile");
    let candidate = host
        .registry
        .prepare(
            &format!("file:{}", path.display()),
            crate::support::plugin_bytes("hostile"),
            None,
        )
        .await
        .unwrap();
    let limits = ReconcileLimits {
        reconcile_burst: 2,
        reconcile_refill: Duration::from_secs(1),
        min_requeue: Duration::from_millis(100),
        ..ReconcileLimits::default()
    };
    host.registry
        .activate(
            candidate,
            ActivationOptions {
                reconcile_limits: Some(limits),
                grant: full_hostile_grant(),
                ..ActivationOptions::default()
            },
        )
        .await
        .unwrap();
    host.attack(NS, "spin", json!({"mode": "requeue-zero"}))
        .await;
    wait_until("a HotLoop Warning event", CONVERGE, || async {
        let events = events_for(&host, "spin").await;
        if events
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "HotLoop")
        {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    wait_until("Degraded to name the hot loop", CONVERGE, || async {
        let a = get_json(&attacks, "spin").await.ok_or("gone")?;
        let text = message(&a, "Degraded").to_string();
        if text.contains("reconcileRate") && text.contains("hot loop") {
            Ok(())
        } else {
            Err(text)
        }
    })
    .await;
    let metrics = host.metrics.encode();
    assert!(
        metrics.contains(
            "wasm_operator_limit_breaches_total{plugin=\"hostile\",limit=\"reconcileRate\"}"
        ),
        "{metrics}"
    );
}
