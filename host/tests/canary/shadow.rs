//! Shadow mode and dry runs: the candidate computes, the host compares,
//! nothing of the candidate is written.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use wasm_operator::engine::CallLimits;
use wasm_operator::registry::{
    ActivationOptions, DryRunState, Rollout, RolloutSettings, VersionRole,
};

use crate::support::wait_until;
use crate::{
    CONVERGE, DIFFER, FLAKY, Host, LOOP, NEXT, NS, STABLE, create_webapps, events, fast,
    wait_versions, written_state,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_catches_every_difference_and_writes_nothing() {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    let names = create_webapps(&client, "shadow", 5, |_| json!({})).await;
    let apps = wait_versions(&client, |_, _| "1.0.0").await;
    let before = written_state(&client).await;
    let events_before = events(&client).await;

    let candidate = host.canary(DIFFER, Rollout::Shadow).await;
    assert_eq!(candidate.version, "1.2.0");
    let observations = host.registry.canary("webapp").expect("a candidate");
    // Setting a shadow candidate compares every object once (both versions
    // compute, neither writes), without waiting for a change.
    wait_until("every WebApp compared", CONVERGE, || async {
        let counts = observations.shadow_counts();
        if counts.objects_differing == names.len() as u64 {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;

    let diffs = observations.differing_objects();
    assert_eq!(
        diffs
            .iter()
            .map(|d| d.object.name.clone())
            .collect::<Vec<_>>(),
        names
    );
    for diff in &diffs {
        let name = &diff.object.name;
        assert_eq!(diff.object.uid, crate::uid(&apps[name]));
        let fields: Vec<(&str, Option<&Value>, Option<&Value>)> = diff
            .fields
            .iter()
            .map(|f| (f.path.as_str(), f.stable.as_ref(), f.candidate.as_ref()))
            .collect();
        let deployment = format!("children[apps/v1/Deployment/{NS}/{name}].spec.replicas");
        let service = format!("children[v1/Service/{NS}/{name}]");
        assert_eq!(fields.len(), 3, "{name}: {fields:#?}");
        assert_eq!(
            fields[0],
            (deployment.as_str(), Some(&json!(1)), Some(&json!(2)))
        );
        assert_eq!(fields[1].0, service);
        assert_eq!(
            fields[1].1.and_then(|s| s.pointer("/kind")),
            Some(&json!("Service"))
        );
        assert_eq!(fields[1].2, None);
        assert_eq!(
            fields[2],
            (
                "conditions[Ready].message",
                Some(&json!("0/1 replicas ready")),
                Some(&json!("0/2 replicas ready"))
            )
        );
    }
    // One kind of difference for all five objects.
    let kinds = observations.diff_kinds();
    assert_eq!(kinds.len(), 1, "{kinds:#?}");
    assert_eq!(
        kinds[0].signature,
        "children[apps/v1/Deployment].spec.replicas, children[v1/Service], conditions[Ready].message"
    );
    assert!(kinds[0].occurrences >= 5);

    // Nothing written: every primary and child as before (no resourceVersion
    // bumped, no field manager added), the Services still there, no event.
    let after = written_state(&client).await;
    assert_eq!(before, after);
    let new_events: Vec<_> = events(&client)
        .await
        .into_iter()
        .filter(|e| !events_before.contains(e))
        .collect();
    assert!(new_events.is_empty(), "{new_events:?}");
    assert!(
        !events(&client).await.iter().any(|e| e.3.contains("1.2.0")),
        "an event names the candidate"
    );

    let stats = host.registry.stats("webapp");
    let role = |v: &str| stats.iter().find(|s| s.version == v).and_then(|s| s.role);
    assert_eq!(role("1.0.0"), Some(VersionRole::Stable));
    assert_eq!(role("1.2.0"), Some(VersionRole::Candidate));
    let (_, candidate) = host.registry.counters("webapp").expect("serving");
    let candidate = candidate.expect("a candidate");
    assert_eq!(candidate.shadow_compared, candidate.shadow_differing);
    assert!(candidate.shadow_compared >= 5 && candidate.p95().is_some());
    let metrics = host.metrics.encode();
    assert!(
        metrics.contains(
            "wasm_operator_shadow_comparisons_total{plugin=\"webapp\",stable=\"1.0.0\",candidate=\"1.2.0\",result=\"differ\"}"
        ),
        "{metrics}"
    );
    assert!(!metrics.contains("result=\"same\""), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identical_candidate_shows_no_difference() {
    shadows_without_a_difference(NEXT, "same").await;
}

/// The Python, TypeScript and Go ports of the webapp (plugins/webapp-py,
/// webapp-ts, webapp-go) as the Rust webapp's shadow candidate: every
/// object compared on the cluster, not one difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_typescript_and_go_ports_shadow_the_rust_webapp_without_a_difference() {
    shadows_without_a_difference("webapp_py", "py").await;
    shadows_without_a_difference("webapp_ts", "ts").await;
    shadows_without_a_difference("webapp_go", "go").await;
}

/// Five WebApps served by the Rust webapp with the built plugin `candidate`
/// in shadow: each compared once, all agreeing, nothing of the candidate's
/// served.
async fn shadows_without_a_difference(candidate: &str, prefix: &str) {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    let names = create_webapps(&client, prefix, 5, |_| json!({})).await;
    wait_versions(&client, |_, _| "1.0.0").await;
    host.canary(candidate, Rollout::Shadow).await;
    let observations = host.registry.canary("webapp").expect("a candidate");
    wait_until("every WebApp compared", CONVERGE, || async {
        let counts = observations.shadow_counts();
        if counts.objects_agreeing == names.len() as u64 {
            Ok(counts)
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
    let counts = observations.shadow_counts();
    assert_eq!(
        (counts.differing, counts.errors, counts.objects_differing),
        (0, 0, 0)
    );
    assert!(observations.differing_objects().is_empty());
    assert!(observations.diff_kinds().is_empty());
    // Shadow candidates serve nothing.
    wait_versions(&client, |_, _| "1.0.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_looping_shadow_candidate_leaves_the_stable_version_alone() {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    // The candidate's own call limits stop its loop; one call at a time.
    let settings = RolloutSettings {
        shadow_concurrency: 1,
        ..fast(Rollout::Shadow)
    };
    let options = ActivationOptions {
        limits: Some(CallLimits {
            timeout: Duration::from_millis(300),
            ..CallLimits::default()
        }),
        ..ActivationOptions::default()
    };
    host.try_canary(LOOP, settings, options).await.unwrap();
    // Objects created while the candidate loops are all served by 1.0.0.
    let names = create_webapps(&client, "busy", 8, |_| json!({})).await;
    wait_versions(&client, |_, _| "1.0.0").await;
    let observations = host.registry.canary("webapp").expect("a candidate");
    wait_until("a shadow call timed out", CONVERGE, || async {
        let counts = observations.shadow_counts();
        if counts.errors >= 1 {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
    let counts = observations.shadow_counts();
    assert_eq!(counts.compared, 0, "{counts:?}");
    // The looping candidate was busy, so some reconciles were not shadowed
    // (counted) rather than waited for.
    assert!(counts.errors + counts.skipped >= 1, "{counts:?}");
    let (stable, candidate) = host.registry.counters("webapp").expect("serving");
    assert_eq!(stable.failures, 0, "{stable:?}");
    assert!(stable.calls >= names.len() as u64);
    assert!(candidate.expect("a candidate").failures >= 1);
    assert!(
        !events(&client).await.iter().any(|e| e.1 == "Warning"),
        "{:?}",
        events(&client).await
    );
    // Dropping it stops its work; the stable version keeps serving.
    let dropped = host.registry.drop_candidate("webapp").await.unwrap();
    assert_eq!(dropped.map(|d| d.version), Some("1.4.0".to_string()));
    assert!(observations.stopped().is_cancelled());
    assert!(host.registry.canary("webapp").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_names_exactly_the_objects_the_candidate_fails_on() {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    let failing: BTreeSet<usize> = [1, 4, 6].into();
    let labels = |i: usize| {
        if failing.contains(&i) {
            json!({"canary.example.com/fail": "true"})
        } else {
            json!({"canary.example.com/fail": "false"})
        }
    };
    let names = create_webapps(&client, "dry", 8, labels).await;
    wait_versions(&client, |_, _| "1.0.0").await;
    host.canary(FLAKY, Rollout::DryRun).await;
    let observations = host.registry.canary("webapp").expect("a candidate");
    let report = wait_until("the dry run finished", CONVERGE, || async {
        let report = observations.dry_run();
        if report.state == DryRunState::Finished {
            Ok(report)
        } else {
            Err(format!("{report:?}"))
        }
    })
    .await;
    assert_eq!(
        (report.total, report.done, report.failed),
        (8, 8, 3),
        "{report:?}"
    );
    let expected: Vec<String> = failing.iter().map(|i| names[*i].clone()).collect();
    assert_eq!(
        report
            .failures
            .iter()
            .map(|f| f.object.name.clone())
            .collect::<Vec<_>>(),
        expected
    );
    for failure in &report.failures {
        assert_eq!(failure.reason, "ReconcileFailed", "{failure:?}");
        assert!(
            failure.message.contains("webapp 1.3.0")
                && failure.message.contains(&failure.object.name),
            "{failure:?}"
        );
    }
    assert!(!report.passed());
    // Nothing served or written by the candidate.
    wait_versions(&client, |_, _| "1.0.0").await;
    assert!(
        !events(&client).await.iter().any(|e| e.3.contains("1.3.0")),
        "{:?}",
        events(&client).await
    );

    // DryRun → Shadow: every object is compared once; the labelled ones
    // are errors, the others agree. The dry-run report stays.
    host.registry
        .set_rollout("webapp", fast(Rollout::Shadow))
        .await
        .unwrap();
    let counts = wait_until("every WebApp compared", CONVERGE, || async {
        let counts = observations.shadow_counts();
        if counts.objects_agreeing >= 5 && counts.errors >= 3 {
            Ok(counts)
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
    assert_eq!(
        (counts.differing, counts.objects_differing),
        (0, 0),
        "{counts:?}"
    );
    assert_eq!(observations.dry_run().failed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_candidate_upgrades_in_memory_only() {
    let host = Host::start().await;
    let client = host.client();
    host.load(STABLE).await;
    let names = create_webapps(&client, "up", 3, |_| json!({})).await;
    let apps = wait_versions(&client, |_, _| "1.0.0").await;
    let before = written_state(&client).await;
    // webapp 2.0.0 upgrades objects 1.0.0 managed, then adds a tier label.
    host.canary(crate::V2, Rollout::Shadow).await;
    let observations = host.registry.canary("webapp").expect("a candidate");
    wait_until("every WebApp compared", CONVERGE, || async {
        let counts = observations.shadow_counts();
        if counts.objects_differing == names.len() as u64 {
            Ok(())
        } else {
            Err(format!("{counts:?}"))
        }
    })
    .await;
    for diff in observations.differing_objects() {
        assert!(
            diff.fields
                .iter()
                .any(|f| f.path.contains("example.com/tier")),
            "{diff:#?}"
        );
    }
    // The upgrade was computed, never written: no migration mark, no
    // upgraded spec, nothing else written.
    assert_eq!(before, written_state(&client).await);
    for (name, app) in crate::webapps(&client).await {
        assert_eq!(app.get("spec"), apps[&name].get("spec"), "{name}");
        assert_eq!(
            crate::annotation(&app, "wasm-operator.dev/managed-by-version"),
            Some("1.0.0")
        );
        assert_eq!(
            crate::annotation(&app, "wasm-operator.dev/migration-state"),
            Some("completed")
        );
        assert_eq!(crate::annotation(&app, "example.com/upgraded-from"), None);
    }
}
