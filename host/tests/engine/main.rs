//! The engine against the real plugin components built by
//! `scripts/build-plugins.sh` (webapp and faulty; backups and admission:
//! distributedkv and backup-v1 too).

mod admission;
mod backup;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use wasm_operator::contract::{CallContext, Failure, ObjectRef};
use wasm_operator::engine::{
    CacheReader, CallError, CallFailure, CallLimits, CallObserver, CallReport, EmptyCache, Engine,
    EngineConfig, EngineError, InstanceAllocation, LoadedPlugin,
};

fn component(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../target/wasm32-wasip2/release/{name}.wasm"));
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read {}: {e}; run scripts/build-plugins.sh first to build the test plugins",
            path.display()
        )
    })
}

fn engine() -> Engine {
    Engine::new(EngineConfig::default()).unwrap()
}

fn ctx(plugin: &LoadedPlugin) -> CallContext {
    CallContext {
        plugin_version: plugin.manifest().version.clone(),
        attempt: 1,
        managed_by_version: None,
        config: json!({}),
    }
}

/// A primary object of the plugin's primary kind.
fn primary(plugin: &LoadedPlugin, name: &str, spec: Value) -> Value {
    let k = &plugin.manifest().primary;
    json!({
        "apiVersion": k.api_version(),
        "kind": k.kind,
        "metadata": {"name": name, "namespace": "default", "uid": "0b6f1c2e-1111-4c1e-9a35-2f0c6d7a8b90", "generation": 1},
        "spec": spec,
    })
}

fn webapp_spec() -> Value {
    json!({"image": "nginx:1.27", "replicas": 2, "port": 8080})
}

/// A cache that answers every read with one object of the asked kind.
struct OneObjectCache;

impl CacheReader for OneObjectCache {
    fn get(&self, r: &ObjectRef) -> Result<Option<String>, String> {
        Ok(Some(
            json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": {"name": r.name, "namespace": r.namespace}})
                .to_string(),
        ))
    }
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<String>, String> {
        Ok(vec![
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "one", "namespace": namespace}})
                .to_string(),
        ])
    }
}

fn cache() -> Arc<dyn CacheReader> {
    Arc::new(OneObjectCache)
}

async fn faulty_call(
    plugin: &LoadedPlugin,
    mode: &str,
) -> Result<wasm_operator::contract::Desired, CallError> {
    let object = primary(plugin, &format!("obj-{mode}"), json!({"mode": mode}));
    plugin
        .reconcile(&ctx(plugin), object.to_string(), Vec::new(), cache())
        .await
}

/// After any fault the same plugin still serves a well-behaved object.
async fn still_serves(plugin: &LoadedPlugin) {
    faulty_call(plugin, "ok")
        .await
        .expect("the plugin must keep serving after a faulty call");
}

#[test]
fn webapp_manifest_loads() {
    let plugin = engine().load(&component("webapp")).unwrap();
    let m = plugin.manifest();
    assert_eq!(m.name, "webapp");
    semver::Version::parse(&m.version).unwrap();
    assert!(m.owns.iter().any(|k| k.kind == "Deployment"), "{m:?}");
    assert!(m.owns.iter().any(|k| k.kind == "Service"), "{m:?}");
    assert!(plugin.digest().starts_with("sha256:") && plugin.digest().len() == 71);
}

#[tokio::test]
async fn webapp_reconcile_gives_deployment_and_service() {
    let plugin = engine().load(&component("webapp")).unwrap();
    let object = primary(&plugin, "shop", webapp_spec());
    let desired = plugin
        .reconcile(&ctx(&plugin), object.to_string(), Vec::new(), cache())
        .await
        .unwrap();
    let kinds: Vec<&str> = desired
        .children
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert!(kinds.contains(&"Deployment"), "{kinds:?}");
    assert!(kinds.contains(&"Service"), "{kinds:?}");
    desired.validate().unwrap();
}

/// The SDK allocates a call's memory from a bump arena of static memory and
/// carries on in the standard allocator once it is full. A call far larger
/// than the arena (a 1.5 MiB annotation), then a small one in the same pooled
/// slot, must both answer exactly as the same logic does natively.
#[test]
fn calls_beyond_the_sdk_arena_answer_like_native_code() {
    let engine = Engine::new(EngineConfig {
        allocation: InstanceAllocation::Pooling { max_instances: 1 },
        ..Default::default()
    })
    .unwrap();
    let plugin = engine.load(&component("webapp")).unwrap();
    let native = |object: &Value| {
        let answer = wasm_operator_sdk::reconcile_json::<webapp::WebAppPlugin>(
            &wasm_operator_sdk::Context::new("1.0.0"),
            &object.to_string(),
            &[],
        )
        .unwrap();
        let children: Vec<Value> = answer
            .children
            .iter()
            .map(|c| serde_json::from_str(c).unwrap())
            .collect();
        (
            children,
            answer
                .status
                .map(|s| serde_json::from_str::<Value>(&s).unwrap()),
        )
    };
    let mut large = primary(&plugin, "large", webapp_spec());
    large["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(3 << 19)});
    let small = primary(&plugin, "small", webapp_spec());
    for object in [&large, &small, &large] {
        let desired = plugin
            .reconcile_blocking(&ctx(&plugin), object.to_string(), Vec::new(), cache())
            .unwrap();
        assert_eq!((desired.children, desired.status), native(object));
    }
}

#[tokio::test]
async fn observer_sees_every_call() {
    #[derive(Default)]
    struct Record(Mutex<Vec<(String, &'static str)>>);
    impl CallObserver for Record {
        fn observe(&self, r: &CallReport<'_>) {
            self.0
                .lock()
                .unwrap()
                .push((r.function.to_string(), r.outcome));
        }
    }
    let record = Arc::new(Record::default());
    let engine = Engine::new(EngineConfig {
        observer: Some(record.clone()),
        ..Default::default()
    })
    .unwrap();
    let plugin = engine.load(&component("faulty")).unwrap();
    faulty_call(&plugin, "ok").await.unwrap();
    faulty_call(&plugin, "trap").await.unwrap_err();
    let seen = record.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("manifest".to_string(), "Ok"),
            ("reconcile".to_string(), "Ok"),
            ("reconcile".to_string(), "PluginTrap")
        ]
    );
}

#[tokio::test]
async fn trap_is_a_trap() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let err = faulty_call(&plugin, "trap").await.unwrap_err();
    assert!(matches!(err.failure, CallFailure::Trap { .. }), "{err}");
    assert_eq!(err.reason(), "PluginTrap");
    assert!(err.to_string().contains(&plugin.manifest().name), "{err}");
    // One short line: the panic message the plugin printed and where, with
    // neither mangled symbols nor a hint a sandboxed plugin cannot act on.
    let text = err.to_string();
    assert!(text.contains("mode trap panics on purpose"), "{text}");
    assert!(
        text.contains("panicked at faulty/src/lib.rs:"),
        "the panic's source location: {text}"
    );
    assert!(!text.contains('\n') && text.chars().count() < 200, "{text}");
    assert!(
        !text.contains("_ZN") && !text.contains("RUST_BACKTRACE"),
        "{text}"
    );
    still_serves(&plugin).await;
}

#[tokio::test]
async fn endless_loop_times_out() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let plugin = plugin.with_limits(CallLimits {
        timeout: Duration::from_secs(1),
        ..plugin.limits()
    });
    let err = faulty_call(&plugin, "loop").await.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::Timeout { timeout } if timeout == Duration::from_secs(1)),
        "{err}"
    );
    still_serves(&plugin).await;
}

/// With the pooling allocator, a call that finds every slot taken fails
/// with `InstancePoolFull` (transient, retried by the controller) instead of
/// waiting or crashing, and the pool serves again once the slot is free.
/// Loading a plugin meanwhile (its `manifest` needs an instance too) fails
/// as transient, not as an invalid plugin, and succeeds once a slot is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_instance_pool_is_a_clear_transient_error() {
    let compiled = tempfile::tempdir().unwrap();
    let engine = Engine::new(EngineConfig {
        allocation: InstanceAllocation::Pooling { max_instances: 1 },
        cache_dir: Some(compiled.path().to_path_buf()),
        ..Default::default()
    })
    .unwrap();
    // Compiled ahead, so loading it while the pool is full is quick.
    engine.load(&component("webapp")).unwrap();
    let plugin = engine.load(&component("faulty")).unwrap();
    let plugin = plugin.with_limits(CallLimits {
        timeout: Duration::from_secs(3),
        ..plugin.limits()
    });
    let looping = {
        let plugin = plugin.clone();
        // It may itself find the pool taken by the calls below: it retries
        // like the controller would.
        tokio::spawn(async move {
            loop {
                match faulty_call(&plugin, "loop").await {
                    Err(CallError {
                        failure: CallFailure::InstancePoolFull { .. },
                        ..
                    }) => tokio::time::sleep(Duration::from_millis(5)).await,
                    ended => break ended,
                }
            }
        })
    };
    // Until the endless call holds the only slot, other calls still succeed.
    let full = loop {
        match faulty_call(&plugin, "ok").await {
            Ok(_) if !looping.is_finished() => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(_) => panic!("the endless call ended before the pool was seen full"),
            Err(e) => break e,
        }
    };
    assert!(
        matches!(
            full.failure,
            CallFailure::InstancePoolFull { max_instances: 1 }
        ),
        "{full}"
    );
    assert_eq!(full.reason(), "InstancePoolFull");
    assert!(!full.is_permanent());
    let text = full.with_remedy().to_string();
    assert!(
        text.contains("faulty") && text.contains("--max-instances"),
        "{text}"
    );
    let busy = engine.load(&component("webapp")).unwrap_err();
    assert!(
        matches!(
            busy,
            EngineError::InstancePoolFull {
                max_instances: 1,
                ..
            }
        ),
        "{busy}"
    );
    assert!(busy.is_transient());
    assert!(
        busy.with_remedy().to_string().contains("--max-instances"),
        "{busy}"
    );
    let ended = looping.await.unwrap().unwrap_err();
    assert!(
        matches!(ended.failure, CallFailure::Timeout { .. }),
        "{ended}"
    );
    still_serves(&plugin).await;
    engine.load(&component("webapp")).unwrap();
}

#[tokio::test]
async fn unbounded_allocation_hits_the_memory_limit() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let plugin = plugin.with_limits(CallLimits {
        memory_bytes: 64 << 20,
        ..plugin.limits()
    });
    let err = faulty_call(&plugin, "memory").await.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::MemoryExceeded { limit } if limit == 64 << 20),
        "{err}"
    );
    still_serves(&plugin).await;
}

#[tokio::test]
async fn garbage_is_invalid_output() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let err = faulty_call(&plugin, "garbage").await.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::InvalidOutput { .. }),
        "{err}"
    );
    still_serves(&plugin).await;
}

#[tokio::test]
async fn huge_output_is_too_large() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let plugin = plugin.with_limits(CallLimits {
        output_bytes: 1 << 20,
        ..plugin.limits()
    });
    let err = faulty_call(&plugin, "huge").await.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::OutputTooLarge { size, limit } if size > limit),
        "{err}"
    );
    still_serves(&plugin).await;
}

#[tokio::test]
async fn undeclared_read_is_denied() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let err = faulty_call(&plugin, "read-undeclared").await.unwrap_err();
    match &err.failure {
        CallFailure::CapabilityDenied { kind } => {
            let (api_version, name) = kind.rsplit_once('/').unwrap();
            assert!(!plugin.manifest().may_read(api_version, name), "{kind}");
        }
        _ => panic!("expected CapabilityDenied, got {err}"),
    }
    assert_eq!(err.reason(), "CapabilityDenied");
    still_serves(&plugin).await;
}

#[tokio::test]
async fn plugin_failures_are_passed_through() {
    let plugin = engine().load(&component("faulty")).unwrap();
    let err = faulty_call(&plugin, "permanent").await.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::Failed(Failure::Permanent(_))),
        "{err}"
    );
    assert!(err.is_permanent());
    let err = faulty_call(&plugin, "transient-then-ok").await.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::Failed(Failure::Transient(_))),
        "{err}"
    );
    assert!(!err.is_permanent());
    still_serves(&plugin).await;
}

#[test]
fn non_wasm_bytes_are_rejected() {
    let err = engine().load(b"#!/bin/sh\necho not wasm\n").unwrap_err();
    assert!(matches!(err, EngineError::NotAComponent { .. }), "{err}");
    assert!(err.to_string().contains("not WebAssembly"), "{err}");
}

#[test]
fn core_module_is_rejected() {
    // `(module)` in binary form.
    let err = engine().load(b"\0asm\x01\0\0\0").unwrap_err();
    assert!(matches!(err, EngineError::NotAComponent { .. }), "{err}");
    assert!(err.to_string().contains("core wasm module"), "{err}");
}

#[test]
fn component_of_another_world_is_rejected() {
    // `(component)`: a valid component that exports nothing.
    let err = engine().load(b"\0asm\x0d\0\x01\0").unwrap_err();
    match &err {
        EngineError::WrongWorld { missing, .. } => {
            assert!(missing.contains("reconciler"), "{missing}")
        }
        other => panic!("expected WrongWorld, got {other}"),
    }
}

#[test]
fn second_engine_loads_from_the_disk_cache() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let bytes = component("webapp");
    let first = Engine::new(config.clone()).unwrap();
    let a = first.load(&bytes).unwrap();
    assert!(a.load_stats().compiled);
    assert_eq!(first.cache_stats().misses, 1);
    let second = Engine::new(config).unwrap();
    let b = second.load(&bytes).unwrap();
    assert!(!b.load_stats().compiled, "a restart must not recompile");
    assert_eq!(second.cache_stats().hits, 1);
    assert_eq!(second.cache_stats().misses, 0);
    assert_eq!(a.manifest(), b.manifest());
    assert_eq!(a.digest(), b.digest());
}

#[test]
fn corrupt_cache_entry_is_recompiled() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        ..Default::default()
    };
    let bytes = component("webapp");
    Engine::new(config.clone()).unwrap().load(&bytes).unwrap();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        std::fs::write(entry.unwrap().path(), b"not an artifact").unwrap();
    }
    let engine = Engine::new(config).unwrap();
    let plugin = engine.load(&bytes).unwrap();
    assert!(plugin.load_stats().compiled);
    assert_eq!(plugin.manifest().name, "webapp");
}

#[test]
fn inspect_describes_the_world() {
    let inspection = wasm_operator::engine::inspect::inspect(&component("webapp")).unwrap();
    assert_eq!(inspection.manifest.name, "webapp");
    assert!(
        inspection.world.contains("wasm-operator:plugin/reconciler"),
        "{}",
        inspection.world
    );
    assert!(
        inspection.world.contains("reconcile: func("),
        "{}",
        inspection.world
    );
    let json = serde_json::to_value(&inspection).unwrap();
    assert_eq!(json["digest"], inspection.digest);
}

#[tokio::test]
async fn empty_cache_reader_serves_reads() {
    let plugin = engine().load(&component("webapp")).unwrap();
    let object = primary(&plugin, "shop", webapp_spec());
    plugin
        .reconcile(
            &ctx(&plugin),
            object.to_string(),
            Vec::new(),
            Arc::new(EmptyCache),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn the_manifest_call_is_reported_under_the_manifests_name_and_version() {
    #[derive(Default)]
    struct Record(Mutex<Vec<(String, String, String)>>);
    impl CallObserver for Record {
        fn observe(&self, r: &CallReport<'_>) {
            self.0.lock().unwrap().push((
                r.plugin.to_string(),
                r.version.to_string(),
                r.function.to_string(),
            ));
        }
    }
    let record = Arc::new(Record::default());
    let engine = Engine::new(EngineConfig {
        observer: Some(record.clone()),
        ..Default::default()
    })
    .unwrap();
    let plugin = engine.load(&component("faulty")).unwrap();
    let manifest = plugin.manifest();
    let seen = record.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![(
            manifest.name.clone(),
            manifest.version.clone(),
            "manifest".to_string()
        )]
    );
    // A component whose manifest cannot be read reports nothing: no series
    // under a placeholder name.
    let before = record.0.lock().unwrap().len();
    assert!(engine.load(b"\0asm\x0d\0\x01\0").is_err());
    assert_eq!(record.0.lock().unwrap().len(), before);
}
