use super::*;
use serde_json::json;
use std::time::Duration;
fn probe() -> LoadedPlugin { Engine::new(EngineConfig::default()).unwrap().load(&std::fs::read("/tmp/probe/target/wasm32-wasip2/release/probe.wasm").unwrap()).unwrap() }
async fn call(p: &LoadedPlugin, mode: &str) -> Result<contract::Desired, CallError> {
    let o = json!({"apiVersion":"example.com/v1","kind":"Probe","metadata":{"name":"x"},"spec":{"mode": mode}});
    let ctx = contract::CallContext { plugin_version: "0.1.0".into(), attempt: 1, managed_by_version: None, config: json!({}) };
    p.reconcile(&ctx, &o, &[], Arc::new(EmptyCache)).await
}
#[tokio::test]
async fn probe_modes() {
    let p = probe();
    let p = p.with_limits(CallLimits { timeout: Duration::from_secs(1), memory_bytes: 64 << 20, output_bytes: 1 << 20 });
    for mode in ["ok", "trap", "loop", "memory", "read-undeclared", "garbage", "huge", "permanent"] {
        let t = std::time::Instant::now();
        let r = call(&p, mode).await;
        println!("{mode}: {:?} -> {}", t.elapsed(), match &r { Ok(d) => format!("ok {} children", d.children.len()), Err(e) => format!("{} / {e}", e.reason()) });
        call(&p, "ok").await.unwrap();
    }
    let ins = inspect::inspect(&std::fs::read("/tmp/probe/target/wasm32-wasip2/release/probe.wasm").unwrap()).unwrap();
    println!("{}", ins.world);
    let t = std::time::Instant::now();
    for _ in 0..1000 { call(&p, "ok").await.unwrap(); }
    println!("1000 calls: {:?}", t.elapsed());
}
#[test]
fn probe_perf() {
    let bytes = std::fs::read("/tmp/probe/target/wasm32-wasip2/release/probe.wasm").unwrap();
    let o = json!({"apiVersion":"example.com/v1","kind":"Probe","metadata":{"name":"x"},"spec":{"mode": "quiet"}});
    let ctx = contract::CallContext { plugin_version: "0.1.0".into(), attempt: 1, managed_by_version: None, config: json!({}) };
    for alloc in [InstanceAllocation::OnDemand, InstanceAllocation::Pooling { max_instances: 100 }] {
        let p = Engine::new(EngineConfig { allocation: alloc, ..Default::default() }).unwrap().load(&bytes).unwrap();
        let cache: Arc<dyn CacheReader> = Arc::new(EmptyCache);
        for _ in 0..200 { p.reconcile_blocking(&ctx, &o, &[], cache.clone()).unwrap(); }
        let t = std::time::Instant::now();
        for _ in 0..2000 { p.reconcile_blocking(&ctx, &o, &[], cache.clone()).unwrap(); }
        println!("{alloc:?}: {:?}/call", t.elapsed() / 2000);
    }
}
