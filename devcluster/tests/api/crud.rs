use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};

use crate::{cm, start, status};

#[tokio::test]
async fn create_get_update_delete_with_real_errors() {
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    let created = api
        .create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    let rv1 = created.metadata.resource_version.clone().unwrap();

    let e = status(
        api.create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(e.message, "configmaps \"a\" already exists");

    let e = status(api.get("missing").await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str(), e.message.as_str()),
        (404, "NotFound", "configmaps \"missing\" not found")
    );

    let mut upd = created.clone();
    upd.data = Some([("k".to_string(), "v2".to_string())].into());
    let updated = api
        .replace("a", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_ne!(
        updated.metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );
    // A stale resourceVersion is a 409 Conflict.
    let e = status(
        api.replace("a", &PostParams::default(), &upd)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(
        e.message.contains("the object has been modified"),
        "{}",
        e.message
    );

    api.delete("a", &DeleteParams::default()).await.unwrap();
    assert_eq!(status(api.get("a").await.unwrap_err()).code, 404);
    assert_eq!(
        status(api.delete("a", &DeleteParams::default()).await.unwrap_err()).code,
        404
    );
}

#[tokio::test]
async fn generate_name_dry_run_and_missing_namespace() {
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    let mut obj = cm("", &[]);
    obj.metadata.name = None;
    obj.metadata.generate_name = Some("gen-".into());
    let made = api.create(&PostParams::default(), &obj).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    api.create(&dry, &cm("dry", &[])).await.unwrap();
    assert_eq!(status(api.get("dry").await.unwrap_err()).code, 404);

    let nowhere: Api<ConfigMap> = Api::namespaced(c.client(), "nowhere");
    let e = status(
        nowhere
            .create(&PostParams::default(), &cm("x", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "namespaces \"nowhere\" not found")
    );
}

#[tokio::test]
async fn patch_types_and_unknown_patch_type() {
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    api.create(&PostParams::default(), &cm("p", &[]))
        .await
        .unwrap();
    let pp = PatchParams::default();
    let merged = api
        .patch(
            "p",
            &pp,
            &Patch::Merge(serde_json::json!({"data": {"m": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.data.unwrap()["m"], "1");
    let ops: json_patch_ops::Ops =
        serde_json::from_value(serde_json::json!([{"op": "add", "path": "/data/j", "value": "2"}]))
            .unwrap();
    let jp = api.patch("p", &pp, &Patch::Json::<()>(ops)).await.unwrap();
    assert_eq!(jp.data.unwrap()["j"], "2");
    let sp = api
        .patch(
            "p",
            &pp,
            &Patch::Strategic(serde_json::json!({"data": {"s": "3"}})),
        )
        .await
        .unwrap();
    assert_eq!(sp.data.unwrap()["s"], "3");
    assert_eq!(
        status(
            api.patch("missing", &pp, &Patch::Merge(serde_json::json!({})))
                .await
                .unwrap_err()
        )
        .code,
        404
    );

    // An unknown patch Content-Type answers 415.
    let http = reqwest::Client::new();
    let resp = http
        .patch(format!(
            "{}/api/v1/namespaces/default/configmaps/p",
            c.url()
        ))
        .header("Content-Type", "application/x-nonsense")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 415);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["reason"], "UnsupportedMediaType");

    // Wrongly typed well-known fields are a 422, and the server keeps serving.
    let resp = http
        .post(format!("{}/api/v1/namespaces/default/configmaps", c.url()))
        .header("Content-Type", "application/json")
        .body(r#"{"metadata": {"name": "bad", "labels": "not-a-map"}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 422);
    assert!(api.get("p").await.is_ok());
}

mod json_patch_ops {
    /// The json-patch document type kube's `Patch::Json` carries.
    pub type Ops = json_patch::Patch;
}

#[tokio::test]
async fn scale_subresource_of_deployments() {
    let c = start().await;
    let api: Api<Deployment> = Api::namespaced(c.client(), "default");
    let d: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
    let scale = api.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    api.patch_scale(
        "web",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    assert_eq!(
        api.get("web").await.unwrap().spec.unwrap().replicas,
        Some(4)
    );
    let e = status(api.get("nope").await.unwrap_err());
    assert_eq!(e.message, "deployments.apps \"nope\" not found");
}

/// Like kube-apiserver, a ConfigMap holds at most 1 MiB (keys plus values,
/// binaryData decoded): more is 422 `FieldValueTooLong`, with its message.
#[tokio::test]
async fn a_configmap_over_one_mebibyte_is_invalid_as_on_kube_apiserver() {
    use k8s_openapi::ByteString;
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    let mut big = cm("big", &[]);
    // `cm` holds data {k: v}: 2 bytes; a key of binaryData may not repeat one of data.
    big.binary_data = Some([("b".to_string(), ByteString(vec![0; (1 << 20) - 2]))].into());
    let e = status(api.create(&PostParams::default(), &big).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "ConfigMap \"big\" is invalid: []: Too long: may not be more than 1048576 bytes"
    );
    let mut fits = cm("fits", &[]);
    fits.binary_data = Some([("b".to_string(), ByteString(vec![0; (1 << 20) - 3]))].into());
    api.create(&PostParams::default(), &fits).await.unwrap();
}
