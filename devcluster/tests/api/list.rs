use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};

use crate::{cm, namespace, start, status};

fn names(l: &kube::core::ObjectList<ConfigMap>) -> Vec<String> {
    l.items
        .iter()
        .map(|o| o.metadata.name.clone().unwrap())
        .collect()
}

#[tokio::test]
async fn label_and_field_selectors() {
    let c = start().await;
    namespace(&c.client(), "sel").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "sel");
    for (n, app, tier) in [("a", "web", "fe"), ("b", "web", "be"), ("c", "db", "be")] {
        api.create(
            &PostParams::default(),
            &cm(n, &[("app", app), ("tier", tier)]),
        )
        .await
        .unwrap();
    }
    api.create(&PostParams::default(), &cm("d", &[]))
        .await
        .unwrap();
    let q = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(&api.list(&q("app=web")).await.unwrap()), ["a", "b"]);
    assert_eq!(
        names(&api.list(&q("app==web,tier!=fe")).await.unwrap()),
        ["b"]
    );
    assert_eq!(
        names(&api.list(&q("tier in (be)")).await.unwrap()),
        ["b", "c"]
    );
    assert_eq!(
        names(&api.list(&q("app notin (web)")).await.unwrap()),
        ["c", "d"]
    );
    assert_eq!(names(&api.list(&q("app")).await.unwrap()), ["a", "b", "c"]);
    assert_eq!(names(&api.list(&q("!app")).await.unwrap()), ["d"]);
    let f = ListParams::default().fields("metadata.name=c");
    assert_eq!(names(&api.list(&f).await.unwrap()), ["c"]);
    let all: Api<ConfigMap> = Api::all(c.client());
    let f = ListParams::default().fields("metadata.namespace=sel");
    assert_eq!(all.list(&f).await.unwrap().items.len(), 4);
    let e = status(
        api.list(&ListParams::default().fields("data.k=v"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));

    // deletecollection with a selector
    api.delete_collection(&DeleteParams::default(), &q("app=web"))
        .await
        .unwrap();
    assert_eq!(
        names(&api.list(&ListParams::default()).await.unwrap()),
        ["c", "d"]
    );
}

#[tokio::test]
async fn limit_and_continue_page_in_stable_order() {
    let c = start().await;
    namespace(&c.client(), "pages").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "pages");
    for i in 0..7 {
        api.create(&PostParams::default(), &cm(&format!("cm-{i}"), &[]))
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(3);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = api.list(&lp).await.unwrap();
        assert!(page.items.len() <= 3);
        assert!(page.metadata.resource_version.is_some());
        seen.extend(names(&page));
        token = page.metadata.continue_.clone().filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    let want: Vec<String> = (0..7).map(|i| format!("cm-{i}")).collect();
    assert_eq!(seen, want);
}

/// The pages of one list show the objects as the first page saw them, as
/// kube-apiserver's do: a change between pages shows in the watch from the
/// list's resourceVersion, never on a later page (a client that watched
/// from there would otherwise see the object go back in time).
#[tokio::test]
async fn later_pages_come_from_the_first_pages_snapshot() {
    let c = start().await;
    namespace(&c.client(), "snap").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "snap");
    for i in 0..4 {
        api.create(
            &PostParams::default(),
            &cm(&format!("cm-{i}"), &[("v", "old")]),
        )
        .await
        .unwrap();
    }
    let first = api.list(&ListParams::default().limit(2)).await.unwrap();
    let token = first.metadata.continue_.clone().expect("a continue token");
    // Changed, created and deleted after the first page.
    api.patch(
        "cm-3",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"labels": {"v": "new"}}})),
    )
    .await
    .unwrap();
    api.create(&PostParams::default(), &cm("cm-9", &[]))
        .await
        .unwrap();
    api.delete("cm-2", &Default::default()).await.unwrap();
    let second = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(&second), ["cm-2", "cm-3"]);
    assert_eq!(
        second.items[1].metadata.labels.as_ref().unwrap()["v"],
        "old",
        "the second page shows cm-3 as of the first page"
    );
    assert_eq!(
        second.metadata.resource_version,
        first.metadata.resource_version
    );
    assert!(
        second
            .metadata
            .continue_
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    );
    // The snapshot is gone after its last page: the token is refused as
    // too old, and the client lists again.
    let again = api
        .list(&ListParams::default().limit(10).continue_token(&token))
        .await
        .expect_err("a spent continue token");
    assert!(
        matches!(again, kube::Error::Api(ref e) if e.code == 410),
        "{again:?}"
    );
}
