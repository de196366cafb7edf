//! Issue 23: Events are the host's recorder's, never a plugin's children. A
//! plugin owning `events.k8s.io` (and core) Events would write a
//! `CanaryPromoted` about a WasmPlugin attributed to the host; it is refused
//! at load whatever its grant says, and nothing is written.

use serde_json::json;
use wasm_operator::contract::{Grant, GroupKind};
use wasm_operator::registry::{LoadedVersion, RegistryError};

use crate::support;
use crate::{Host, attack_kind};

fn permission_denied(result: Result<LoadedVersion, RegistryError>) -> String {
    match result {
        Err(error @ RegistryError::PermissionDenied(_)) => {
            assert_eq!(error.reason(), "PermissionDenied");
            assert!(error.is_rejection());
            error.to_string()
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_owning_events_is_refused_at_load_whatever_the_grant_and_writes_nothing() {
    let host = Host::start().await;
    let gk = GroupKind::new;
    let everything = Grant {
        own: Some(vec![
            gk("test.wasm-operator.dev", "Attack"),
            gk("events.k8s.io", "Event"),
            gk("", "Event"),
        ]),
        namespaces: Some(vec!["*".into()]),
        cluster_scoped: true,
        ..Grant::default()
    };
    for grant in [Grant::default(), everything] {
        let message = permission_denied(host.load_with("hostile_recorder", grant).await);
        for excess in [
            "owns events.k8s.io/v1 Event (never granted: Events are the host's recorder's",
            "owns v1 Event (never granted: Events are the host's recorder's",
        ] {
            assert!(message.contains(excess), "{excess} missing from: {message}");
        }
        assert!(
            message.contains("plugin hostile-recorder 1.0.0"),
            "{message}"
        );
        assert!(
            message.contains("no grant allows them") && !message.contains("widen the grant"),
            "{message}"
        );
    }
    assert!(host.registry.loaded().is_empty());

    // The Attack the plugin would answer with a forged promotion: nobody
    // reconciles it, and no Event about a WasmPlugin exists.
    host.attack("default", "promote", json!({"mode": "ok"}))
        .await;
    let attack = support::get_json(
        &support::dynamic_api(&host.client(), &attack_kind(), Some("default")),
        "promote",
    )
    .await
    .expect("the Attack exists");
    assert!(support::finalizers(&attack).is_empty(), "{attack}");
    assert!(attack.get("status").is_none(), "{attack}");
    let events = support::host_events(&host.client(), "default").await;
    assert!(
        !events
            .iter()
            .any(|(regarding, _, reason, _)| reason == "CanaryPromoted" || regarding == "webapp"),
        "{events:?}"
    );
}
