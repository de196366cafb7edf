//! A host that survives bad input: file sources that are not regular files
//! or too large are refused on the WasmPlugin (no read, no crash), a file
//! whose directory appears later loads without a restart, a plugin whose
//! primary kind is not served yet waits for its CRD, and deleting a
//! WasmPlugin whose plugin holds finalizers lets go of its primaries.

use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::json;

use crate::support::{self, condition, wait_until};
use crate::{CONVERGE, Fixture, NS, digest, file_spec, write_atomically};

/// Waits until WasmPlugin `name` is not Ready with `reason` (nothing serves)
/// and returns its Ready condition's message.
async fn wait_refused(fx: &Fixture, name: &str, reason: &str) -> String {
    let o = fx
        .wait_for(name, &format!("Ready=False, reason {reason}"), |o| {
            crate::condition_is(o, "Ready", "False")
                && condition(o, "Ready").and_then(|c| c.get("reason")) == Some(&json!(reason))
        })
        .await;
    condition(&o, "Ready").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sources_must_be_regular_files_of_bounded_size() {
    let fx = Fixture::start().await;
    let fifo = fx.dir.path().join("pipe.wasm");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    // Sparse: 256 MiB + 1 byte of nothing, never read.
    let huge = fx.dir.path().join("huge.wasm");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(wasm_operator::wasmplugin::source::MAX_COMPONENT_BYTES + 1)
        .unwrap();
    let cases = [
        (
            "zero",
            std::path::PathBuf::from("/dev/zero"),
            "SourceNotAFile",
            "a character device",
        ),
        ("fifo", fifo, "SourceNotAFile", "a FIFO"),
        (
            "dir",
            fx.dir.path().to_path_buf(),
            "SourceNotAFile",
            "a directory",
        ),
        ("huge", huge, "InvalidComponent", "larger than"),
    ];
    for (name, path, _, _) in &cases {
        fx.create(name, file_spec(path)).await;
    }
    for (name, path, reason, part) in &cases {
        let message = wait_refused(&fx, name, reason).await;
        assert!(message.contains(part), "{name}: {message}");
        assert!(
            message.contains(&path.display().to_string()),
            "{name}: {message}"
        );
        let (kind, note) = fx.wait_event(name, reason).await;
        assert_eq!(kind, "Warning", "{name}");
        assert!(note.contains(part), "{name}: {note}");
    }
    assert!(
        fx.registry.loaded().is_empty(),
        "{:?}",
        fx.registry.loaded()
    );

    // The host is fine: a good plugin next to them serves.
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &good);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&good)).await;
    fx.assert_reconciles("still-serving").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_source_whose_directory_appears_later_loads_without_a_restart() {
    let fx = Fixture::start().await;
    let dir = fx.dir.path().join("mounted-later");
    let path = dir.join("webapp.wasm");
    fx.create("webapp", file_spec(&path)).await;
    let message = wait_refused(&fx, "webapp", "SourceNotFound").await;
    assert!(message.contains(&path.display().to_string()), "{message}");

    std::fs::create_dir(&dir).unwrap();
    let good = support::plugin_bytes("webapp");
    write_atomically(&path, &good);
    fx.wait_serving("webapp", &digest(&good)).await;
    fx.assert_reconciles("after-mount").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_whose_primary_is_not_served_yet_waits_for_its_crd() {
    let fx = Fixture::start().await;
    let bytes = support::plugin_bytes("faulty");
    let path = fx.dir.path().join("faulty.wasm");
    write_atomically(&path, &bytes);
    fx.create("faulty", file_spec(&path)).await;
    let message = wait_refused(&fx, "faulty", "KindNotServed").await;
    assert!(
        message.contains("primary kind test.wasm-operator.dev/v1 Fault is not served"),
        "{message}"
    );
    assert!(message.contains("Install the CRDs"), "{message}");
    assert!(fx.registry.loaded().is_empty());

    // The CRD arrives: the WasmPlugin recovers by itself.
    support::install_crd(&fx.client(), &support::example_crd("faulty")).await;
    fx.wait_serving("faulty", &digest(&bytes)).await;
}

/// The events.k8s.io/v1 events about WebApp `name`, as `(type, reason, note)`.
async fn webapp_events(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    support::events_about(client, NS, Some("WebApp"), name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_wasmplugin_releases_the_primaries_its_plugin_held() {
    let fx = Fixture::start().await;
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &good);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&good)).await;
    fx.assert_reconciles("kept").await;
    let webapps: Api<DynamicObject> = support::dynamic_api(
        &fx.client(),
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(NS),
    );
    let held = support::get_json(&webapps, "kept").await.unwrap();
    assert!(
        support::finalizers(&held).contains(&"wasm-operator.dev/finalizer".to_string()),
        "{held}"
    );

    fx.wasmplugins()
        .delete("webapp", &DeleteParams::default())
        .await
        .unwrap();
    let api = fx.wasmplugins();
    wait_until("WasmPlugin webapp to disappear", CONVERGE, || async {
        match support::get_json(&api, "webapp").await {
            None => Ok(()),
            Some(o) => Err(format!("{o}")),
        }
    })
    .await;
    let released = support::get_json(&webapps, "kept").await.unwrap();
    assert!(
        !support::finalizers(&released).contains(&"wasm-operator.dev/finalizer".to_string()),
        "the host's finalizer outlived the plugin: {released}"
    );
    let client = fx.client();
    let (kind, note) = wait_until("FinalizeSkipped on WebApp kept", CONVERGE, || {
        let client = client.clone();
        async move {
            let events = webapp_events(&client, "kept").await;
            events
                .iter()
                .find(|(_, reason, _)| reason == "FinalizeSkipped")
                .map(|(t, _, n)| (t.clone(), n.clone()))
                .ok_or_else(|| format!("{events:?}"))
        }
    })
    .await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("WasmPlugin webapp was deleted"), "{note}");
    assert!(note.contains("finalize"), "{note}");
    let (_, unloaded) = fx.wait_event("webapp", "Unloaded").await;
    assert!(unloaded.contains("FinalizeSkipped"), "{unloaded}");

    // Deleting the primary now completes: nothing is left Terminating.
    webapps
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap();
    wait_until("WebApp kept to be gone", CONVERGE, || {
        let webapps = webapps.clone();
        async move {
            match support::get_json(&webapps, "kept").await {
                None => Ok(()),
                Some(o) => Err(format!("{o}")),
            }
        }
    })
    .await;
}
