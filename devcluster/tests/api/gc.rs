use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};

use crate::{cm, eventually, namespace, start, status};

async fn owner_and_children(api: &Api<ConfigMap>, block: bool) -> ConfigMap {
    let owner = api
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    for i in 0..2 {
        let mut child = cm(&format!("child-{i}"), &[]);
        child.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            block_owner_deletion: Some(block),
            controller: Some(true),
        }]);
        api.create(&PostParams::default(), &child).await.unwrap();
    }
    owner
}

async fn exists(api: &Api<ConfigMap>, name: &str) -> bool {
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn background_deletes_owner_then_dependents() {
    let c = start().await;
    namespace(&c.client(), "bg").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "bg");
    owner_and_children(&api, false).await;
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(!exists(&api, "owner").await);
    let a = api.clone();
    eventually("dependents collected", || {
        let a = a.clone();
        async move { !exists(&a, "child-0").await && !exists(&a, "child-1").await }
    })
    .await;
}

#[tokio::test]
async fn foreground_waits_for_blocking_dependents() {
    let c = start().await;
    namespace(&c.client(), "fg").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "fg");
    owner_and_children(&api, true).await;
    // A finalizer on one child holds it, and with it the owner.
    api.patch(
        "child-0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["test/hold"]}})),
    )
    .await
    .unwrap();
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let owner = api.get("owner").await.unwrap();
    assert!(owner.metadata.deletion_timestamp.is_some());
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    assert!(!exists(&api, "child-1").await);
    assert!(
        api.get("child-0")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    api.patch(
        "child-0",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let a = api.clone();
    eventually("owner removed after its blocking dependent", || {
        let a = a.clone();
        async move { !exists(&a, "owner").await && !exists(&a, "child-0").await }
    })
    .await;
}

#[tokio::test]
async fn orphan_keeps_dependents_and_drops_owner_references() {
    let c = start().await;
    namespace(&c.client(), "orph").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "orph");
    owner_and_children(&api, false).await;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    api.delete("owner", &dp).await.unwrap();
    let a = api.clone();
    eventually("owner gone", || {
        let a = a.clone();
        async move { !exists(&a, "owner").await }
    })
    .await;
    for i in 0..2 {
        let child = api.get(&format!("child-{i}")).await.unwrap();
        assert!(
            child
                .metadata
                .owner_references
                .unwrap_or_default()
                .is_empty()
        );
    }
}

#[tokio::test]
async fn finalizers_hold_deletion_and_no_new_finalizers_while_deleting() {
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    let mut obj = cm("fin", &[]);
    obj.metadata.finalizers = Some(vec!["test/a".into()]);
    api.create(&PostParams::default(), &obj).await.unwrap();
    api.delete("fin", &DeleteParams::default()).await.unwrap();
    let held = api.get("fin").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let e = status(
        api.patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["test/a", "test/b"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message
            .contains("Forbidden: no new finalizers can be added if the object is being deleted"),
        "{}",
        e.message
    );
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": []}})),
    )
    .await
    .unwrap();
    assert!(!exists(&api, "fin").await);
}

#[tokio::test]
async fn namespace_deletion_terminates_then_removes_everything() {
    let c = start().await;
    namespace(&c.client(), "doomed").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "doomed");
    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["test/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    api.create(&PostParams::default(), &cm("free", &[]))
        .await
        .unwrap();
    let nss: Api<Namespace> = Api::all(c.client());
    nss.delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let ns = nss.get("doomed").await.unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(!exists(&api, "free").await);
    let e = status(
        api.create(&PostParams::default(), &cm("late", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let n = nss.clone();
    eventually("namespace removed", || {
        let n = n.clone();
        async move { n.get_opt("doomed").await.unwrap().is_none() }
    })
    .await;
}
