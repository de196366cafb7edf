//! `spec.permissions` on a WasmPlugin: a plugin whose manifest asks for more
//! than the WasmPlugin grants is refused with `Degraded` reason
//! `PermissionDenied` naming each excess; a narrower grant for the serving
//! plugin is refused the same way while the serving version keeps serving.

use serde_json::json;

use crate::support::{self, condition};
use crate::{Fixture, condition_is, digest, file_spec, write_atomically};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_refuse_a_manifest_beyond_the_grant() {
    let fx = Fixture::start().await;
    let webapp = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &webapp);

    // webapp owns Deployments and Services; this grant names only Deployments.
    let mut spec = file_spec(&path);
    spec["permissions"] = json!({
        "own": [{"group": "example.com", "kind": "WebApp"}, {"group": "apps", "kind": "Deployment"}],
    });
    fx.create("narrow", spec).await;
    let (o, message) = fx.wait_refused("narrow", "PermissionDenied").await;
    assert!(!condition_is(&o, "Ready", "True"), "{o}");
    assert!(
        message.contains("owns v1 Service") && message.contains("not in the grant's own list"),
        "{message}"
    );
    assert!(fx.registry.current("webapp").is_none());
    let (kind, _) = fx.wait_event("narrow", "PermissionDenied").await;
    assert_eq!(kind, "Warning");

    // Widening the grant lets the same component load.
    fx.patch_spec(
        "narrow",
        json!({"permissions": {"own": [
            {"group": "example.com", "kind": "WebApp"},
            {"group": "apps", "kind": "Deployment"},
            {"group": "", "kind": "Service"},
        ]}}),
    )
    .await;
    fx.wait_serving("narrow", &digest(&webapp)).await;
    fx.assert_reconciles("granted").await;

    // Narrowing it again revokes: the serving version no longer fits its
    // grant, so it stops (it never keeps powers taken back).
    fx.patch_spec(
        "narrow",
        json!({"permissions": {"own": [{"group": "example.com", "kind": "WebApp"}]}}),
    )
    .await;
    let o = fx
        .wait_for("narrow", "not Ready, PermissionDenied", |o| {
            condition(o, "Degraded").and_then(|c| c.get("reason"))
                == Some(&json!("PermissionDenied"))
                && !condition_is(o, "Ready", "True")
                && o.pointer("/status/observedGeneration") == o.pointer("/metadata/generation")
        })
        .await;
    assert!(fx.registry.current("webapp").is_none(), "{o}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_grant_refuses_a_plugin_asking_for_secrets() {
    let fx = Fixture::start().await;
    // The hostile plugins' primary kind: without it discovery refuses
    // them (KindNotServed) before any grant is looked at.
    support::install_crd(&fx.client(), &support::example_crd("hostile")).await;
    let hostile = support::plugin_bytes("hostile");
    let path = fx.dir.path().join("hostile.wasm");
    write_atomically(&path, &hostile);
    fx.create("hostile", file_spec(&path)).await;
    let (_, message) = fx.wait_refused("hostile", "PermissionDenied").await;
    assert!(
        message.contains("owns v1 Secret")
            && message.contains("owns rbac.authorization.k8s.io/v1 ClusterRoleBinding"),
        "{message}"
    );
    assert!(fx.registry.loaded().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_wasmplugin_for_a_served_primary_kind_is_refused() {
    let fx = Fixture::start().await;
    // The hostile plugins' primary kind: without it discovery refuses
    // them (KindNotServed) before any grant is looked at.
    support::install_crd(&fx.client(), &support::example_crd("hostile")).await;
    let hostile = support::plugin_bytes("hostile");
    let liar = support::plugin_bytes("hostile_liar");
    let hostile_path = fx.dir.path().join("hostile.wasm");
    let liar_path = fx.dir.path().join("liar.wasm");
    write_atomically(&hostile_path, &hostile);
    write_atomically(&liar_path, &liar);
    let mut spec = file_spec(&hostile_path);
    spec["permissions"] = json!({
        "own": [
            {"group": "test.wasm-operator.dev", "kind": "Attack"},
            {"kind": "ConfigMap"}, {"kind": "Secret"},
            {"group": "rbac.authorization.k8s.io", "kind": "ClusterRoleBinding"},
        ],
        "clusterScoped": true,
    });
    fx.create("attacks", spec).await;
    fx.wait_serving("attacks", &digest(&hostile)).await;

    fx.create("liar", file_spec(&liar_path)).await;
    let (_, message) = fx.wait_refused("liar", "PrimaryKindConflict").await;
    assert!(
        message.contains("hostile-liar") && message.contains("plugin hostile already serves"),
        "{message}"
    );
    assert!(fx.registry.current("hostile-liar").is_none());
    assert!(fx.registry.current("hostile").is_some());
}
