use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::Discovery;

use crate::{eventually, start, status};

fn crd(plural: &str, kind: &str, two_versions: bool) -> CustomResourceDefinition {
    let schema = serde_json::json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"replicas": {"type": "integer", "maximum": 10}, "image": {"type": "string"}}},
        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}}}});
    let mut versions = vec![
        serde_json::json!({"name": "v1", "served": true, "storage": true, "schema": schema,
        "subresources": {"status": {}},
        "additionalPrinterColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]}),
    ];
    if two_versions {
        versions.push(serde_json::json!({"name": "v1beta1", "served": true, "storage": false, "schema": schema}));
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{plural}.example.com")},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                 "versions": versions}
    }))
    .unwrap()
}

fn api(client: &kube::Client, version: &str, kind: &str, plural: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", version, kind),
        plural,
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

fn obj(version: &str, kind: &str, name: &str, replicas: i64) -> DynamicObject {
    serde_json::from_value(
        serde_json::json!({"apiVersion": format!("example.com/{version}"), "kind": kind,
        "metadata": {"name": name}, "spec": {"replicas": replicas, "image": "nginx"}}),
    )
    .unwrap()
}

#[tokio::test]
async fn crd_is_established_served_discovered_and_removed() {
    let c = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    let made = crds
        .create(&PostParams::default(), &crd("webapps", "WebApp", false))
        .await
        .unwrap();
    let conds = made.status.unwrap().conditions.unwrap();
    for t in ["NamesAccepted", "Established"] {
        assert!(
            conds.iter().any(|c| c.type_ == t && c.status == "True"),
            "{t}"
        );
    }
    let discovery = Discovery::new(c.client()).run().await.unwrap();
    assert!(discovery.groups().any(|g| g.name() == "example.com"));

    let webapps = api(&c.client(), "v1", "WebApp", "webapps");
    webapps
        .create(&PostParams::default(), &obj("v1", "WebApp", "x", 2))
        .await
        .unwrap();
    // Status subresource isolation and generation for custom resources.
    let s = webapps
        .patch_status(
            "x",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(1));
    let m = webapps
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}, "status": {"ready": false}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.generation, Some(2));
    assert_eq!(m.data["status"]["ready"], true);

    crds.delete("webapps.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let cl = c.client();
    eventually("CRD gone from discovery", || {
        let cl = cl.clone();
        async move {
            !Discovery::new(cl)
                .run()
                .await
                .unwrap()
                .groups()
                .any(|g| g.name() == "example.com")
        }
    })
    .await;
    assert_eq!(status(webapps.get("x").await.unwrap_err()).code, 404);
}

#[tokio::test]
async fn schema_validation_answers_422_with_causes() {
    let c = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    crds.create(
        &PostParams::default(),
        &crd("validated", "Validated", false),
    )
    .await
    .unwrap();
    let a = api(&c.client(), "v1", "Validated", "validated");
    let e = status(
        a.create(&PostParams::default(), &obj("v1", "Validated", "x", 11))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message
            .starts_with("Validated.example.com \"x\" is invalid: spec.replicas"),
        "{}",
        e.message
    );
    let causes = e.details.unwrap().causes;
    assert!(
        causes.iter().any(|c| c.field == "spec.replicas"),
        "{causes:?}"
    );
}

#[tokio::test]
async fn conversion_none_serves_both_versions() {
    let c = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    crds.create(&PostParams::default(), &crd("multis", "Multi", true))
        .await
        .unwrap();
    let v1 = api(&c.client(), "v1", "Multi", "multis");
    let beta = api(&c.client(), "v1beta1", "Multi", "multis");
    beta.create(&PostParams::default(), &obj("v1beta1", "Multi", "m", 1))
        .await
        .unwrap();
    let as_v1 = v1.get("m").await.unwrap();
    assert_eq!(as_v1.types.unwrap().api_version, "example.com/v1");
    assert_eq!(as_v1.data["spec"]["replicas"], 1);
    let as_beta = beta.list(&Default::default()).await.unwrap();
    assert_eq!(
        as_beta.items[0].types.as_ref().unwrap().api_version,
        "example.com/v1beta1"
    );
}

#[tokio::test]
async fn non_structural_crd_is_refused_with_422() {
    let c = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    let mut bad = crd("shapeless", "Shapeless", false);
    // `spec` declares properties but no type: not a structural schema.
    let schema = bad.spec.versions[0].schema.as_mut().unwrap();
    let mut props = serde_json::to_value(&schema.open_api_v3_schema).unwrap();
    props["properties"]["spec"]
        .as_object_mut()
        .unwrap()
        .remove("type");
    schema.open_api_v3_schema = Some(serde_json::from_value(props).unwrap());
    let e = status(crds.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(
        (e.code, e.reason.as_str()),
        (422, "Invalid"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("spec.versions[0].schema.openAPIV3Schema"),
        "{}",
        e.message
    );
    assert!(
        crds.get_opt("shapeless.example.com")
            .await
            .unwrap()
            .is_none()
    );
}

/// When a CRD goes, watches of its resource see the objects deleted and then
/// end, as kube-apiserver ends them (clients relist and find it not served).
#[tokio::test]
async fn watches_of_a_removed_crd_end() {
    use futures::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let c = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    crds.create(&PostParams::default(), &crd("gadgets", "Gadget", false))
        .await
        .unwrap();
    let gadgets = api(&c.client(), "v1", "Gadget", "gadgets");
    let made = gadgets
        .create(&PostParams::default(), &obj("v1", "Gadget", "g", 1))
        .await
        .unwrap();
    let rv = made.metadata.resource_version.clone().unwrap();
    let mut watch = gadgets
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    crds.delete("gadgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    let mut seen = Vec::new();
    // Generous: only a watch that never ends fails here.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(event) = watch.next().await {
            match event.unwrap() {
                WatchEvent::Deleted(o) => seen.push(o.metadata.name.unwrap_or_default()),
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected watch event {other:?}"),
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the watch stayed open after its CRD was deleted"
    );
    assert_eq!(seen, ["g"]);
}

/// A CRD spec change (here a short name; in the host's case the
/// conversion pointed at a webhook) ends the watches of its resource, as
/// kube-apiserver ends the watches of the storage it tears down: the
/// client's next watch sees the new definition (docs/conformance.md #9).
#[tokio::test]
async fn watches_of_a_custom_resource_end_when_its_crd_spec_changes() {
    use futures::StreamExt;
    use kube::api::{Patch, PatchParams, WatchEvent, WatchParams};
    let c = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    crds.create(&PostParams::default(), &crd("gadgets", "Gadget", false))
        .await
        .unwrap();
    let gadgets = api(&c.client(), "v1", "Gadget", "gadgets");
    let made = gadgets
        .create(&PostParams::default(), &obj("v1", "Gadget", "g", 1))
        .await
        .unwrap();
    let rv = made.metadata.resource_version.clone().unwrap();
    let mut watch = gadgets
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    crds.patch(
        "gadgets.example.com",
        &PatchParams::default(),
        &Patch::Merge(&serde_json::json!({"spec": {"names": {"shortNames": ["gdg"]}}})),
    )
    .await
    .unwrap();
    // Generous: only a watch that never ends fails here.
    let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(event) = watch.next().await {
            match event.unwrap() {
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected watch event {other:?}"),
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the watch stayed open after its CRD's spec changed"
    );
    // The object is still served, and a new watch from the same point works.
    assert_eq!(gadgets.get("g").await.unwrap().data["spec"]["replicas"], 1);
    let _resumed = gadgets
        .watch(&WatchParams::default().timeout(1), &rv)
        .await
        .unwrap();
}
