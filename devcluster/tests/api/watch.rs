use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};

use crate::{cm, eventually, namespace, start};

fn spawn_reflector(
    api: Api<ConfigMap>,
) -> (reflector::Store<ConfigMap>, tokio::task::JoinHandle<()>) {
    let (reader, writer) = reflector::store();
    let stream =
        reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let task = tokio::spawn(async move {
        stream.for_each(|_| futures::future::ready(())).await;
    });
    (reader, task)
}

fn count(reader: &reflector::Store<ConfigMap>) -> usize {
    reader.state().len()
}

#[tokio::test]
async fn reflector_converges_on_creates_updates_and_deletes() {
    let c = start().await;
    namespace(&c.client(), "refl").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "refl");
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("pre-{i}"), &[]))
            .await
            .unwrap();
    }
    let (reader, task) = spawn_reflector(api.clone());
    reader.wait_until_ready().await.unwrap();
    assert_eq!(count(&reader), 3);
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("post-{i}"), &[]))
            .await
            .unwrap();
    }
    api.delete("pre-0", &Default::default()).await.unwrap();
    let r = reader.clone();
    eventually("reflector sees 7 objects", || {
        let r = r.clone();
        async move { count(&r) == 7 }
    })
    .await;
    let names: Vec<String> = reader
        .state()
        .iter()
        .map(|o: &Arc<ConfigMap>| o.metadata.name.clone().unwrap())
        .collect();
    assert!(!names.contains(&"pre-0".to_string()));
    task.abort();
}

#[tokio::test]
async fn watcher_recovers_from_expired_history_and_closed_watches() {
    let c = start().await;
    namespace(&c.client(), "gone").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "gone");
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("a-{i}"), &[]))
            .await
            .unwrap();
    }
    let (reader, task) = spawn_reflector(api.clone());
    reader.wait_until_ready().await.unwrap();
    // Outage: history compacted and every watch closed, objects created meanwhile.
    c.faults().expire_history();
    c.faults().close_watches();
    for i in 0..5 {
        api.create(&PostParams::default(), &cm(&format!("b-{i}"), &[]))
            .await
            .unwrap();
    }
    let r = reader.clone();
    eventually("the re-listed store holds all 8 objects", || {
        let r = r.clone();
        async move { count(&r) == 8 }
    })
    .await;
    task.abort();
}

#[tokio::test]
async fn watch_from_compacted_resource_version_is_410_expired() {
    let c = start().await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    let made = api
        .create(&PostParams::default(), &cm("x", &[]))
        .await
        .unwrap();
    let rv = made.metadata.resource_version.unwrap();
    api.create(&PostParams::default(), &cm("y", &[]))
        .await
        .unwrap();
    c.faults().expire_history();
    let mut s = api
        .watch(&WatchParams::default().timeout(5), &rv)
        .await
        .unwrap()
        .boxed();
    match s.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version"),
                "{}",
                e.message
            );
        }
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
}

#[tokio::test]
async fn bookmarks_and_selector_transitions() {
    let c = start().await;
    namespace(&c.client(), "bm").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "bm");
    let made = api
        .create(&PostParams::default(), &cm("x", &[("app", "web")]))
        .await
        .unwrap();
    let rv = made.metadata.resource_version.clone().unwrap();
    let wp = WatchParams::default().labels("app=web").timeout(10);
    let mut s = api.watch(&wp, &rv).await.unwrap().boxed();
    // Relabel so the object stops matching: the watcher sees DELETED.
    let mut changed = made.clone();
    changed.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
    api.replace("x", &PostParams::default(), &changed)
        .await
        .unwrap();
    // Bookmarks may come at any time; the first real event must be DELETED.
    loop {
        match s.try_next().await.unwrap() {
            Some(WatchEvent::Bookmark(_)) => continue,
            Some(WatchEvent::Deleted(o)) => {
                break assert_eq!(o.metadata.name.as_deref(), Some("x"));
            }
            other => panic!("expected DELETED, got {other:?}"),
        }
    }

    let wp = WatchParams::default().timeout(10);
    let mut s = api.watch(&wp, &rv).await.unwrap().boxed();
    let mut bookmark = None;
    while let Some(ev) = s.try_next().await.unwrap() {
        if let WatchEvent::Bookmark(b) = ev {
            bookmark = Some(b.metadata.resource_version);
            break;
        }
    }
    let bookmark: u64 = bookmark
        .expect("a bookmark within the timeout")
        .parse()
        .unwrap();
    assert!(bookmark >= rv.parse::<u64>().unwrap());
}

#[tokio::test]
async fn streaming_list_ends_with_initial_events_bookmark() {
    let c = start().await;
    namespace(&c.client(), "sl").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "sl");
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("s-{i}"), &[]))
            .await
            .unwrap();
    }
    let wp = WatchParams::streaming_lists().timeout(10);
    let mut s = api.watch(&wp, "0").await.unwrap().boxed();
    let mut added = 0;
    loop {
        match s.try_next().await.unwrap() {
            Some(WatchEvent::Added(_)) => added += 1,
            Some(WatchEvent::Bookmark(b)) => {
                assert_eq!(
                    b.metadata
                        .annotations
                        .get("k8s.io/initial-events-end")
                        .map(String::as_str),
                    Some("true")
                );
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(added, 3);

    // The streaming-list watcher of kube-runtime converges too.
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().streaming_lists()),
    );
    let task = tokio::spawn(
        stream
            .default_backoff()
            .for_each(|_| futures::future::ready(())),
    );
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 3);
    task.abort();
}

#[tokio::test]
async fn metadata_only_lists_gets_and_watches() {
    let c = start().await;
    namespace(&c.client(), "meta").await;
    let api: Api<ConfigMap> = Api::namespaced(c.client(), "meta");
    api.create(&PostParams::default(), &cm("m", &[("app", "web")]))
        .await
        .unwrap();
    let list = api.list_metadata(&Default::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].metadata.labels.as_ref().unwrap()["app"],
        "web"
    );
    let one = api.get_metadata("m").await.unwrap();
    assert_eq!(one.metadata.name.as_deref(), Some("m"));
    let meta_api: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(c.client(), "meta");
    let stream = watcher(meta_api, watcher::Config::default())
        .applied_objects()
        .boxed();
    let first = stream.take(1).try_collect::<Vec<_>>().await.unwrap();
    assert_eq!(first[0].metadata.name.as_deref(), Some("m"));
}
