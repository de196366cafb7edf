//! Dev mode hot reload, driven through the library (`wasm_operator::dev`),
//! which is exactly what `wasm-operator dev` runs.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use wasm_operator::dev::{DevOptions, DevSession, LoadEvent, LoadOutcome};

use crate::common::{eventually, plugin_wasm, with_custom_section, workspace};

const NAMES: [&str; 3] = ["alpha", "beta", "gamma"];

fn webapps(client: &kube::Client) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "WebApp"),
        "webapps",
    );
    Api::namespaced_with(client.clone(), "default", &resource)
}

async fn apply_webapp(api: &Api<DynamicObject>, name: &str, replicas: u32) {
    let object = json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "image": "nginx:1.27", "replicas": replicas },
    });
    api.patch(
        name,
        &PatchParams::apply("hot-reload-test").force(),
        &Patch::Apply(&object),
    )
    .await
    .unwrap();
}

/// Starts a dev session on a fresh devcluster serving the plugins in `wasm_dir`.
async fn start_session(wasm_dir: &Path) -> DevSession {
    let mut options = DevOptions::for_workspace(workspace());
    options.port = 0;
    options.build = false;
    // No plugin crates here: every .wasm of the directory is a plugin.
    options.plugins_dir = wasm_dir.join("no-crates");
    options.wasm_dir = wasm_dir.to_path_buf();
    options.apply_examples = false;
    options.debounce = Duration::from_millis(200);
    DevSession::start(options).await.unwrap()
}

fn loaded_digest(event: &LoadEvent) -> Option<String> {
    match &event.outcome {
        LoadOutcome::Loaded { digest, .. } => Some(digest.clone()),
        _ => None,
    }
}

/// Replaces `path` atomically (write aside, rename), as a build tool does.
fn replace_file(path: &Path, bytes: &[u8]) {
    let aside = path.with_extension("wasm.partial");
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

async fn next_outcome(events: &mut broadcast::Receiver<LoadEvent>, file: &Path) -> LoadOutcome {
    let wait = async {
        loop {
            match events.recv().await {
                Ok(event) if event.file == file && event.outcome != LoadOutcome::Unchanged => {
                    return event.outcome;
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => panic!("reloader stopped"),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(300), wait)
        .await
        .expect("the plugin file change was not picked up")
}

/// Fails on any sign of a failed reconcile: a `Degraded=True` condition on a
/// WebApp or a Warning event in the namespace.
async fn assert_no_failed_reconcile(client: &kube::Client) {
    for webapp in webapps(client).list(&ListParams::default()).await.unwrap() {
        let conditions = webapp
            .data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for condition in conditions {
            assert!(
                !(condition["type"] == "Degraded" && condition["status"] == "True"),
                "WebApp {:?} is Degraded: {condition}",
                webapp.metadata.name
            );
        }
    }
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    let modern: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let core = core.list(&ListParams::default()).await;
    let modern = modern.list(&ListParams::default()).await;
    assert!(
        core.is_ok() || modern.is_ok(),
        "cannot list events: {core:?} {modern:?}"
    );
    for event in core.into_iter().flat_map(|list| list.items) {
        assert_ne!(event.type_.as_deref(), Some("Warning"), "{event:?}");
    }
    for event in modern.into_iter().flat_map(|list| list.items) {
        assert_ne!(event.type_.as_deref(), Some("Warning"), "{event:?}");
    }
}

/// Waits until every WebApp's Deployment asks for `replicas`.
async fn await_replicas(client: &kube::Client, replicas: u32) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let apps = webapps(client);
    eventually(
        Duration::from_secs(180),
        "Deployments to follow the WebApps",
        || {
            let deployments = deployments.clone();
            let apps = apps.clone();
            async move {
                let owners: Vec<String> = apps
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter_map(|w| w.metadata.uid)
                    .collect();
                let list = deployments.list(&ListParams::default()).await.ok()?;
                let matching = list
                    .items
                    .iter()
                    .filter(|d| {
                        d.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| owners.contains(&o.uid))
                            && d.spec.as_ref().and_then(|s| s.replicas) == Some(replicas as i32)
                    })
                    .count();
                (matching == NAMES.len()).then_some(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_hot_reload_swaps_versions_without_failed_reconciles() {
    if !crate::support::once_per_run("dev_hot_reload_swaps_versions_without_failed_reconciles") {
        return;
    }
    let original = std::fs::read(plugin_wasm("webapp")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("webapp.wasm");
    std::fs::write(&file, &original).unwrap();

    let session = start_session(dir.path()).await;
    let first = session.summary().plugins.clone();
    assert_eq!(first.len(), 1, "{first:?}");
    let v1 = loaded_digest(&first[0]).expect("webapp loaded at start");
    let mut events = session.subscribe();
    let client = session.client();
    let api = webapps(&client);
    for name in NAMES {
        apply_webapp(&api, name, 1).await;
    }
    await_replicas(&client, 1).await;

    // Keep changing the WebApps while the plugin is swapped underneath.
    let stop = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU32::new(1));
    let changer = {
        let (api, client, stop, last) = (api.clone(), client.clone(), stop.clone(), last.clone());
        tokio::spawn(async move {
            let mut round = 0u32;
            while !stop.load(Ordering::SeqCst) {
                round += 1;
                let replicas = 1 + round % 3;
                for name in NAMES {
                    apply_webapp(&api, name, replicas).await;
                }
                last.store(replicas, Ordering::SeqCst);
                assert_no_failed_reconcile(&client).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            round
        })
    };

    tokio::time::sleep(Duration::from_secs(1)).await;
    let v2_bytes = with_custom_section(&original, "hot-reload-test", b"v2");
    replace_file(&file, &v2_bytes);
    let outcome = next_outcome(&mut events, &file).await;
    let LoadOutcome::Loaded {
        name, digest: v2, ..
    } = outcome
    else {
        panic!("the new build was not loaded: {outcome:?}");
    };
    assert_eq!(name, "webapp");
    assert_ne!(v2, v1, "the digest did not change");

    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let rounds = changer.await.unwrap();
    assert!(rounds > 0);
    await_replicas(&client, last.load(Ordering::SeqCst)).await;
    assert_no_failed_reconcile(&client).await;

    let serving = format!("{:?}", session.registry().loaded());
    assert!(
        serving.contains(&v2),
        "registry does not serve {v2}: {serving}"
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_reload_of_a_broken_build_keeps_the_serving_version() {
    if !crate::support::once_per_run("dev_reload_of_a_broken_build_keeps_the_serving_version") {
        return;
    }
    let original = std::fs::read(plugin_wasm("webapp")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("webapp.wasm");
    std::fs::write(&file, &original).unwrap();

    let session = start_session(dir.path()).await;
    let v1 = loaded_digest(&session.summary().plugins[0]).expect("webapp loaded at start");
    let mut events = session.subscribe();

    replace_file(&file, b"\0asm but truncated");
    let outcome = next_outcome(&mut events, &file).await;
    let LoadOutcome::Failed(message) = outcome else {
        panic!("a broken build must not load: {outcome:?}");
    };
    assert!(message.contains("webapp.wasm"), "{message}");
    assert!(message.contains("keeps serving"), "{message}");

    // The old version still reconciles.
    let client = session.client();
    apply_webapp(&webapps(&client), "after-broken", 2).await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually(
        Duration::from_secs(180),
        "a Deployment from the old version",
        || {
            let deployments = deployments.clone();
            async move {
                let list = deployments.list(&ListParams::default()).await.ok()?;
                list.items
                    .iter()
                    .any(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(2))
                    .then_some(())
            }
        },
    )
    .await;
    let serving = format!("{:?}", session.registry().loaded());
    assert!(
        serving.contains(&v1),
        "registry does not serve {v1}: {serving}"
    );

    // Fixing the build loads it again.
    replace_file(&file, &with_custom_section(&original, "fixed", b"1"));
    let outcome = next_outcome(&mut events, &file).await;
    assert!(matches!(outcome, LoadOutcome::Loaded { .. }), "{outcome:?}");
    session.shutdown().await;
}
