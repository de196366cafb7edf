use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

use crate::{start, status};

fn applied(data: serde_json::Value) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": data})
}

#[tokio::test]
async fn server_side_apply_ownership_conflicts_force_and_removal() {
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    let a = PatchParams::apply("alice");
    let made = api
        .patch(
            "ssa",
            &a,
            &Patch::Apply(applied(serde_json::json!({"x": "1", "y": "1"}))),
        )
        .await
        .unwrap();
    let mf = made.metadata.managed_fields.unwrap_or_default();
    assert!(
        mf.iter()
            .any(|m| m.manager.as_deref() == Some("alice")
                && m.operation.as_deref() == Some("Apply")),
        "{mf:?}"
    );

    // Bob applying a different value for alice's field conflicts.
    let b = PatchParams::apply("bob");
    let e = status(
        api.patch(
            "ssa",
            &b,
            &Patch::Apply(applied(serde_json::json!({"x": "2"}))),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("conflict with \"alice\""),
        "{}",
        e.message
    );
    assert!(
        e.details
            .unwrap()
            .causes
            .iter()
            .any(|c| c.reason == "FieldManagerConflict")
    );

    // With force bob takes the field.
    let forced = api
        .patch(
            "ssa",
            &b.clone().force(),
            &Patch::Apply(applied(serde_json::json!({"x": "2"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["x"], "2");

    // Alice stops applying y: it is removed (she was its only owner).
    let dropped = api
        .patch("ssa", &a, &Patch::Apply(applied(serde_json::json!({}))))
        .await
        .unwrap();
    let data = dropped.data.unwrap_or_default();
    assert!(!data.contains_key("y"), "{data:?}");
    assert_eq!(data["x"], "2");

    // Apply without a field manager is a 400.
    let http = reqwest::Client::new();
    let resp = http
        .patch(format!(
            "{}/api/v1/namespaces/default/configmaps/ssa",
            c.url()
        ))
        .header("Content-Type", "application/apply-patch+yaml")
        .body("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\n")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
}
