//! Version transitions through a WasmPlugin: a swap to a newer version, a
//! rollback that is allowed (RolledBack) and one the newer version's
//! manifest forbids (RollbackRefused: the newer version keeps serving).

use crate::support::{self, condition};
use crate::{Fixture, digest, file_spec, write_atomically};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollbacks_are_recorded_or_refused() {
    let fx = Fixture::start().await;
    let v1 = support::plugin_bytes("webapp");
    let v2 = support::plugin_bytes("webapp_v2");
    let v3 = support::plugin_bytes("webapp_v3");
    let path = fx.dir.path().join("webapp.wasm");

    write_atomically(&path, &v2);
    fx.create("webapp", file_spec(&path)).await;
    let o = fx.wait_serving("webapp", &digest(&v2)).await;
    assert_eq!(o["status"]["version"], "2.0.0", "{o}");

    // 2.0.0 declares no minimum: rolling back to 1.0.0 is allowed.
    write_atomically(&path, &v1);
    fx.wait_serving("webapp", &digest(&v1)).await;
    let (kind, note) = fx.wait_event("webapp", "RolledBack").await;
    assert_eq!(kind, "Normal");
    assert!(note.contains("2.0.0") && note.contains("1.0.0"), "{note}");

    // 3.0.0 declares min_compatible_version 3.0.0: going back is refused.
    write_atomically(&path, &v3);
    fx.wait_serving("webapp", &digest(&v3)).await;
    write_atomically(&path, &v1);
    let o = fx
        .wait_degraded("webapp", "RollbackRefused", &digest(&v3))
        .await;
    assert_eq!(o["status"]["version"], "3.0.0", "{o}");
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("3.0.0") && message.contains("1.0.0"),
        "{message}"
    );
    let (kind, _) = fx.wait_event("webapp", "RollbackRefused").await;
    assert_eq!(kind, "Warning");
    assert_eq!(fx.registry.current("webapp").unwrap().info.version, "3.0.0");
}
