//! One test per bad new version: it never replaces the good one. The
//! WasmPlugin shows Degraded with the reason and a Warning event, Ready stays
//! True, status.version is unchanged and new objects still reconcile.

use serde_json::json;

use crate::support::{self, condition, get_json, wait_until};
use crate::{
    CONVERGE, Fixture, condition_is, digest, file_spec, with_custom_section, write_atomically,
};

/// Serves webapp from a file, then replaces the file with `bad`.
async fn rejects_bad_file(case: &str, bad: Vec<u8>, reason: &str, message_part: &str) {
    let fx = Fixture::start().await;
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("plugin.wasm");
    write_atomically(&path, &good);
    fx.create("webapp", file_spec(&path)).await;
    let before = fx.wait_serving("webapp", &digest(&good)).await;
    fx.assert_reconciles("before").await;

    write_atomically(&path, &bad);
    let o = fx.wait_degraded("webapp", reason, &digest(&good)).await;
    assert_eq!(
        o.pointer("/status/version"),
        before.pointer("/status/version"),
        "{case}"
    );
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(message_part), "{case}: {message}");
    assert!(message.contains("keeps serving"), "{case}: {message}");
    let ready = condition(&o, "Ready").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(ready.contains("keeps serving"), "{case}: {ready}");
    let (kind, note) = fx.wait_event("webapp", reason).await;
    assert_eq!(kind, "Warning", "{case}");
    assert!(note.contains(message_part), "{case}: {note}");
    fx.assert_reconciles("after").await;
    assert_eq!(
        fx.registry.current("webapp").unwrap().info.digest,
        digest(&good),
        "{case}"
    );

    // Putting the good build back clears Degraded.
    write_atomically(&path, &good);
    fx.wait_for("webapp", "Degraded cleared", |o| {
        crate::condition_is(o, "Degraded", "False")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_wasm_is_rejected() {
    rejects_bad_file(
        "not wasm",
        b"#!/bin/sh\necho not a plugin\n".to_vec(),
        "InvalidComponent",
        "not a WebAssembly component",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_module_is_rejected_as_wrong_world() {
    // A valid, empty core wasm module: wasm, but not a component of our world.
    rejects_bad_file(
        "core module",
        b"\0asm\x01\0\0\0".to_vec(),
        "InvalidComponent",
        "not a WebAssembly component",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_component_is_rejected_as_wrong_world() {
    // `(component)`: a valid component that exports nothing of our world.
    rejects_bad_file(
        "empty component",
        b"\0asm\x0d\0\x01\0".to_vec(),
        "InvalidComponent",
        "does not implement the wasm-operator:plugin world",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_primary_kind_is_rejected() {
    rejects_bad_file(
        "faulty.wasm",
        support::plugin_bytes("faulty"),
        "PrimaryKindChanged",
        "new WasmPlugin",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_limits_are_rejected() {
    let fx = Fixture::start().await;
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("plugin.wasm");
    write_atomically(&path, &good);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&good)).await;
    // 0 ms passes the schema's pattern; a zero size is refused by nobody,
    // so use an overflow the host must refuse.
    fx.patch_spec(
        "webapp",
        json!({"limits": {"memory": "99999999999999999999Gi"}}),
    )
    .await;
    fx.wait_degraded("webapp", "InvalidSpec", &digest(&good))
        .await;
    fx.assert_reconciles("after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_is_served_by_one_wasmplugin() {
    let fx = Fixture::start().await;
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("plugin.wasm");
    write_atomically(&path, &good);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&good)).await;

    // A second WasmPlugin for the same plugin is refused, the first serves on.
    let copy = fx.dir.path().join("copy.wasm");
    write_atomically(&copy, &with_custom_section(&good, "copy", b"2"));
    fx.create("webapp-copy", file_spec(&copy)).await;
    let o = fx
        .wait_for("webapp-copy", "Ready False (PluginNameConflict)", |o| {
            condition(o, "Ready").and_then(|c| c.get("reason"))
                == Some(&json!("PluginNameConflict"))
        })
        .await;
    assert!(crate::condition_is(&o, "Ready", "False"), "{o}");
    let (kind, note) = fx.wait_event("webapp-copy", "PluginNameConflict").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("WasmPlugin webapp"), "{note}");
    assert_eq!(
        fx.registry.current("webapp").unwrap().info.digest,
        digest(&good)
    );
    fx.assert_reconciles("still-served").await;

    // Once the first is deleted, the second takes over.
    fx.wasmplugins()
        .delete("webapp", &Default::default())
        .await
        .unwrap();
    fx.wait_serving(
        "webapp-copy",
        &digest(&with_custom_section(&good, "copy", b"2")),
    )
    .await;
}

/// Holds the only instance of a pool of one with an endless call of the
/// faulty plugin, loaded straight into `engine`, for up to `hold`. Returns
/// once the slot is taken; the returned thread ends when the call times out.
fn hold_the_only_instance(
    engine: &wasm_operator::engine::Engine,
    hold: std::time::Duration,
) -> std::thread::JoinHandle<()> {
    use wasm_operator::engine::{CallError, CallFailure, CallLimits, EmptyCache};
    let faulty = engine.load(&support::plugin_bytes("faulty")).unwrap();
    let faulty = faulty.with_limits(CallLimits {
        timeout: hold,
        ..faulty.limits()
    });
    let call = move |mode: &str| {
        let kind = &faulty.manifest().primary;
        let object = json!({
            "apiVersion": kind.api_version(), "kind": kind.kind,
            "metadata": {"name": mode, "namespace": "default"}, "spec": {"mode": mode},
        });
        let ctx = wasm_operator::contract::CallContext {
            plugin_version: faulty.manifest().version.clone(),
            attempt: 1,
            managed_by_version: None,
            config: json!({}),
        };
        faulty.reconcile_blocking(
            &ctx,
            object.to_string(),
            Vec::new(),
            std::sync::Arc::new(EmptyCache),
        )
    };
    let holder = {
        let call = call.clone();
        std::thread::spawn(move || {
            // It may find the slot taken by the probes below: it retries.
            while let Err(CallError {
                failure: CallFailure::InstancePoolFull { .. },
                ..
            }) = call("loop")
            {}
        })
    };
    // Probe until a call finds the pool full: the endless call holds the slot.
    while !matches!(
        call("ok"),
        Err(CallError {
            failure: CallFailure::InstancePoolFull { .. },
            ..
        })
    ) {
        assert!(!holder.is_finished(), "the endless call ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    holder
}

/// A new version whose manifest cannot run because every instance of the
/// engine's pool is busy is not refused: Degraded `InstancePoolFull` with a
/// Warning that says the load is retried, then it serves once an instance
/// is free, with no change to the WasmPlugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_that_finds_the_pool_full_is_retried() {
    use wasm_operator::engine::{EngineConfig, InstanceAllocation};
    let fx = Fixture::start_with(EngineConfig {
        allocation: InstanceAllocation::Pooling { max_instances: 1 },
        ..EngineConfig::default()
    })
    .await;
    let webapp = support::plugin_bytes("webapp");
    // Compiled ahead (into the fixture's cache), so the WasmPlugin's load is
    // quick and lands while the pool is held.
    fx.registry.engine().load(&webapp).unwrap();
    let engine = fx.registry.engine().clone();
    let holder = tokio::task::spawn_blocking(move || {
        hold_the_only_instance(&engine, std::time::Duration::from_secs(8))
    })
    .await
    .unwrap();

    let path = fx.dir.path().join("plugin.wasm");
    write_atomically(&path, &webapp);
    fx.create("webapp", file_spec(&path)).await;
    let o = fx
        .wait_for("webapp", "Degraded InstancePoolFull", |o| {
            condition(o, "Degraded").and_then(|c| c.get("reason"))
                == Some(&json!("InstancePoolFull"))
        })
        .await;
    assert!(crate::condition_is(&o, "Ready", "False"), "{o:#}");
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("--max-instances") && message.contains("retried"),
        "{message}"
    );
    let (kind, note) = fx.wait_event("webapp", "InstancePoolFull").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("not loaded yet"), "{note}");

    tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();
    let o = fx.wait_serving("webapp", &digest(&webapp)).await;
    assert!(crate::condition_is(&o, "Degraded", "False"), "{o:#}");
    fx.assert_reconciles("after-pool-full").await;
}

/// Limits under which every call would fail (1Ki of memory, a 0 ms
/// deadline) are refused with `InvalidSpec`; the serving version keeps
/// serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_that_fail_every_call_are_rejected() {
    let fx = Fixture::start().await;
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("plugin.wasm");
    write_atomically(&path, &good);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest(&good)).await;
    for limits in [json!({"memory": "1Ki"}), json!({"callTimeout": "0ms"})] {
        fx.patch_spec("webapp", json!({"limits": limits})).await;
        let wp = fx
            .wait_degraded("webapp", "InvalidSpec", &digest(&good))
            .await;
        let message = condition(&wp, "Degraded").unwrap()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(message.contains("every call would fail"), "{message}");
        fx.patch_spec("webapp", json!({"limits": null})).await;
        fx.wait_for("webapp", "recovered", |o| {
            condition_is(o, "Degraded", "False")
        })
        .await;
    }
    fx.assert_reconciles("after").await;
}

/// `spec.limits` reaches the plugin's reconciles: with `maxChildren: 1` a
/// WebApp (a Deployment and a Service) is refused with `TooManyChildren`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_limits_come_from_the_spec() {
    let fx = Fixture::start().await;
    let good = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("plugin.wasm");
    write_atomically(&path, &good);
    let mut spec = file_spec(&path);
    spec["limits"] = json!({"maxChildren": 1});
    fx.create("webapp", spec).await;
    fx.wait_serving("webapp", &digest(&good)).await;
    fx.create_webapp("small").await;
    let webapps = support::dynamic_api(
        &fx.client(),
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some("default"),
    );
    wait_until("the WebApp to be refused", CONVERGE, || async {
        let app = get_json(&webapps, "small").await.ok_or("gone")?;
        let degraded = condition(&app, "Degraded").cloned().unwrap_or_default();
        if degraded["reason"] == "TooManyChildren" {
            Ok(())
        } else {
            Err(app.to_string())
        }
    })
    .await;
}
