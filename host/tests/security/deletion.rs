//! Deleting a WasmPlugin whose plugin holds finalizers: the host removes
//! its finalizer from every primary of the plugin (with a Warning
//! `FinalizeSkipped` event on each), so nothing is left Terminating because
//! a plugin went away, not even an object whose `finalize` never finishes.

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use wasm_operator::wasmplugin;

use crate::support::{self, get_json, wait_until};
use crate::{CONVERGE, Host, attack_kind, full_hostile_grant};

const HOST_FINALIZER: &str = "wasm-operator.dev/finalizer";

/// The WasmPlugin spec serving the `hostile` plugin from `path`, with the
/// grant it needs.
fn hostile_spec(path: &std::path::Path) -> Value {
    json!({
        "source": {"file": {"path": path.display().to_string()}},
        "permissions": serde_json::to_value(full_hostile_grant()).unwrap(),
    })
}

async fn events_about(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    support::events_about(client, "default", Some("Attack"), name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_wasmplugin_of_a_plugin_that_never_finalizes_leaves_nothing_terminating() {
    let host = Host::start().await;
    let client = host.client();
    support::install_crd(&client, &support::example_crd("wasmplugin")).await;
    host.manager.serve_wasmplugins().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.wasm");
    std::fs::write(&path, support::plugin_bytes("hostile")).unwrap();
    let wasmplugins: Api<DynamicObject> =
        Api::all_with(client.clone(), &wasmplugin::api_resource());
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "hostile"}, "spec": hostile_spec(&path),
    }))
    .unwrap();
    wasmplugins
        .create(&PostParams::default(), &object)
        .await
        .unwrap();

    let attacks = support::dynamic_api(&client, &attack_kind(), Some("default"));
    host.attack("default", "stuck", json!({"mode": "finalize-forever"}))
        .await;
    host.attack("default", "live", json!({"mode": "ok"})).await;
    for name in ["stuck", "live"] {
        wait_until(
            &format!("the host's finalizer on Attack {name}"),
            CONVERGE,
            || {
                let attacks = attacks.clone();
                async move {
                    let o = get_json(&attacks, name).await.ok_or("gone")?;
                    if support::finalizers(&o).iter().any(|f| f == HOST_FINALIZER) {
                        Ok(())
                    } else {
                        Err(o.to_string())
                    }
                }
            },
        )
        .await;
    }
    // `stuck`'s finalize always asks to wait: it stays Terminating.
    attacks
        .delete("stuck", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = get_json(&attacks, "stuck")
        .await
        .expect("held by the finalizer");
    assert!(
        terminating.pointer("/metadata/deletionTimestamp").is_some(),
        "{terminating}"
    );

    wasmplugins
        .delete("hostile", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("Attack stuck to be gone", CONVERGE, || {
        let attacks = attacks.clone();
        async move {
            match get_json(&attacks, "stuck").await {
                None => Ok(()),
                Some(o) => Err(o.to_string()),
            }
        }
    })
    .await;
    let live = get_json(&attacks, "live").await.expect("live stays");
    assert!(
        !support::finalizers(&live)
            .iter()
            .any(|f| f == HOST_FINALIZER),
        "the host's finalizer outlived the plugin: {live}"
    );
    for (name, effect) in [
        ("stuck", "goes away without finalize"),
        ("live", "deleting this object later will not run finalize"),
    ] {
        let client = client.clone();
        let (kind, note) = wait_until(
            &format!("FinalizeSkipped on Attack {name}"),
            CONVERGE,
            || {
                let client = client.clone();
                async move {
                    let events = events_about(&client, name).await;
                    events
                        .iter()
                        .find(|(_, reason, _)| reason == "FinalizeSkipped")
                        .map(|(t, _, n)| (t.clone(), n.clone()))
                        .ok_or_else(|| format!("{events:?}"))
                }
            },
        )
        .await;
        assert_eq!(kind, "Warning", "{name}");
        assert!(
            note.contains("WasmPlugin hostile was deleted"),
            "{name}: {note}"
        );
        assert!(note.contains(effect), "{name}: {note}");
    }
    assert!(host.registry.loaded().is_empty());
}
