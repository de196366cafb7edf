use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::start;

fn deployment() -> Deployment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
        "status": {"replicas": 99}
    }))
    .unwrap()
}

#[tokio::test]
async fn status_is_isolated_both_ways_and_generation_follows_spec() {
    let c = start().await;
    let api: Api<Deployment> = Api::namespaced(c.client(), "default");
    let created = api
        .create(&PostParams::default(), &deployment())
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    // Status in a create is dropped for types with a status subresource.
    assert!(created.status.as_ref().and_then(|s| s.replicas).is_none());

    // A write to /status changes only status and does not bump generation.
    let s = api
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 7}, "status": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(s.status.as_ref().unwrap().replicas, Some(3));
    assert_eq!(s.spec.as_ref().unwrap().replicas, Some(1));
    assert_eq!(s.metadata.generation, Some(1));

    // A write to the main resource keeps the stored status and bumps generation on spec change.
    let m = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 2}, "status": {"replicas": 50}})),
        )
        .await
        .unwrap();
    assert_eq!(m.status.as_ref().unwrap().replicas, Some(3));
    assert_eq!(m.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(m.metadata.generation, Some(2));

    // Metadata-only changes do not bump generation.
    let l = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.generation, Some(2));

    // A no-op write does not bump the resourceVersion.
    let again = api
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, l.metadata.resource_version);
}
