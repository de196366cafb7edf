//! The shared caches against a real API server: one reflector per kind,
//! ref-counted, answering plugin reads (get, list, label selectors).

use std::time::Duration;

use futures::StreamExt;
use kube::api::PostParams;
use serde_json::{Value, json};
use wasm_operator::cache::{CacheEvent, CacheView, SharedCache};
use wasm_operator::contract::{ObjectRef, ResourceKind, Scope};
use wasm_operator::engine::CacheReader;

use crate::CONVERGE;
use crate::support::{self, wait_until};

fn configmaps() -> ResourceKind {
    ResourceKind {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        scope: Scope::Namespaced,
    }
}

/// An object as a cache read answers it: its JSON text.
fn parsed(text: &str) -> Value {
    serde_json::from_str(text).expect("cache reads answer JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflectors_are_shared_and_answer_reads() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "web")] {
        let cm = serde_json::from_value(
            json!({"metadata": {"name": name, "labels": {"tier": tier}}, "data": {"k": name}}),
        )
        .unwrap();
        api.create(&PostParams::default(), &cm).await.unwrap();
    }

    let cache = SharedCache::new(client.clone());
    let first = cache.acquire(&configmaps(), None);
    let second = cache.acquire(&configmaps(), None);
    assert_eq!(
        cache.reflector_count(),
        1,
        "two users of one kind share one reflector"
    );
    wait_until("the ConfigMap cache to sync", CONVERGE, || async {
        if first.synced() && second.synced() {
            Ok(())
        } else {
            Err("not synced".to_string())
        }
    })
    .await;

    let view = CacheView::new(cache.clone(), [configmaps()]);
    let got = view
        .get(&ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: "b".into(),
        })
        .expect("the cache has synced")
        .expect("b is cached");
    let got = parsed(&got);
    assert_eq!(got["data"]["k"], "b");
    assert_eq!(got["kind"], "ConfigMap");
    assert_eq!(got["apiVersion"], "v1");
    // Left out as objects enter the cache: plugins never see it.
    assert!(got["metadata"].get("managedFields").is_none(), "{got}");
    let missing = ObjectRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("default".into()),
        name: "zz".into(),
    };
    assert!(view.get(&missing).expect("synced").is_none());
    let web = view
        .list("v1", "ConfigMap", Some("default"), Some("tier=web"))
        .unwrap();
    let web: Vec<Value> = web.iter().map(|text| parsed(text)).collect();
    let names: Vec<_> = web
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["a", "c"]);
    let not_web = view
        .list("v1", "ConfigMap", Some("default"), Some("tier notin (web)"))
        .unwrap();
    let not_web: Vec<Value> = not_web.iter().map(|text| parsed(text)).collect();
    assert!(
        not_web
            .iter()
            .all(|o| o["metadata"]["labels"]["tier"] != "web")
            && !not_web.is_empty()
    );
    assert!(
        view.list("v1", "ConfigMap", None, Some("tier in web"))
            .unwrap_err()
            .contains("invalid label selector")
    );
    assert!(
        view.list("v1", "Secret", None, None)
            .unwrap_err()
            .contains("no cache of v1 Secret")
    );

    // A late subscriber first sees what is already cached, then changes.
    let mut events = Box::pin(second.subscribe());
    let mut seen = Vec::new();
    // Only the test's ConfigMaps (labelled with a tier): a real cluster also
    // has a `kube-root-ca.crt` in every namespace.
    while seen.len() < 3 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        let obj = event.object();
        if obj
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("tier"))
        {
            seen.push(obj.metadata.name.clone().unwrap());
        }
    }
    seen.sort();
    assert_eq!(seen, ["a", "b", "c"]);
    api.delete("a", &Default::default()).await.unwrap();
    let deleted = loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        if let CacheEvent::Deleted(obj) = event {
            break obj;
        }
    };
    assert_eq!(deleted.metadata.name.as_deref(), Some("a"));

    drop(first);
    assert_eq!(
        cache.reflector_count(),
        1,
        "still in use by the second lease"
    );
    drop(second);
    assert_eq!(
        cache.reflector_count(),
        0,
        "the last lease stops the reflector"
    );
}

/// The names of `objects`, sorted.
fn sorted_names(objects: &[std::sync::Arc<wasm_operator::cache::CachedObject>]) -> Vec<String> {
    let mut names: Vec<_> = objects
        .iter()
        .map(|o| o.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

/// A ConfigMap in `ns` controlled by the owner with uid `owner`.
fn child(ns: &str, name: &str, owner: &str) -> k8s_openapi::api::core::v1::ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "ownerReferences": [{
            "apiVersion": "example.com/v1", "kind": "WebApp", "name": "owner",
            "uid": owner, "controller": true,
        }]},
    }))
    .unwrap()
}

/// The owner and namespace indexes follow the store over a real watch:
/// creates, an update that moves a child to another owner, a delete, and a
/// relist (history compacted while the watch was down) that drops an object
/// no event ever announced gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_the_owner_and_namespace_indexes_follow_the_store_through_a_relist() {
    use kube::api::{Patch, PatchParams};
    if !crate::support::devcluster_only(
        "devcluster_only_the_owner_and_namespace_indexes_follow_the_store_through_a_relist",
        "fault injection (closed watches, expired history, failing lists)",
    ) {
        return;
    }
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
        kube::Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
        )
        .await
        .unwrap();
    let default: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let other: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "other");
    for name in ["a", "b", "c"] {
        default
            .create(&PostParams::default(), &child("default", name, "u1"))
            .await
            .unwrap();
    }
    other
        .create(&PostParams::default(), &child("other", "d", "u2"))
        .await
        .unwrap();

    let cache = SharedCache::new(client.clone());
    let lease = cache.acquire(&configmaps(), None);
    let children = |uid: &str| sorted_names(&lease.children_of(uid));
    let in_ns = |ns: &str| sorted_names(&lease.in_namespace(ns));
    wait_until("the initial list to be indexed", CONVERGE, || async {
        let seen = children("u1");
        if lease.synced() && seen == ["a", "b", "c"] {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    assert_eq!(children("u2"), ["d"]);
    assert_eq!(in_ns("other"), ["d"]);
    assert!(children("nobody").is_empty());

    // b changes hands: u1 loses it, u2 gains it.
    default
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": [{
                "apiVersion": "example.com/v1", "kind": "WebApp", "name": "owner",
                "uid": "u2", "controller": true,
            }]}})),
        )
        .await
        .unwrap();
    default.delete("c", &Default::default()).await.unwrap();
    wait_until(
        "the update and the delete to be indexed",
        CONVERGE,
        || async {
            let seen = (children("u1"), children("u2"), in_ns("default"));
            if seen.0 == ["a"] && seen.1 == ["b", "d"] && seen.2 == ["a", "b"] {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        },
    )
    .await;

    // The watch is cut and kept down; "a" is deleted and the history
    // compacted, so the reflector can only learn of it from a relist.
    let mut events = Box::pin(lease.subscribe());
    let faults = cluster.faults().expect("the devcluster injects faults");
    faults.fail_next("/api/v1/configmaps", 1_000, 503);
    faults.close_watches();
    default.delete("a", &Default::default()).await.unwrap();
    faults.expire_history();
    faults.fail_next("/api/v1/configmaps", 0, 503);
    wait_until("the relist to drop a from the index", CONVERGE, || async {
        let seen = (children("u1"), in_ns("default"), children("u2"));
        if seen.0.is_empty() && seen.1 == ["b"] && seen.2 == ["b", "d"] {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    // Subscribers hear of the drop as a deletion (its owner is re-triggered
    // like for any deleted child), though no watch event announced it.
    let deleted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.next().await {
                Some(CacheEvent::Deleted(obj)) => break obj,
                Some(CacheEvent::Applied(_)) => {}
                None => panic!("the cache stopped"),
            }
        }
    })
    .await
    .expect("a deletion of the dropped object");
    assert_eq!(deleted.metadata.name.as_deref(), Some("a"));
}

/// A subscriber that falls far behind (more changes than any buffer a
/// broadcast would keep) still sees every change exactly once, in order,
/// deletions included: it is never resynced from the store, which would
/// announce every object again (and re-trigger every primary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_that_falls_behind_sees_every_change_once() {
    use std::collections::HashMap;
    const OBJECTS: usize = 1_500;
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let cache = SharedCache::new(client.clone());
    let lease = cache.acquire(&configmaps(), None);
    wait_until("the cache to sync", CONVERGE, || async {
        if lease.synced() {
            Ok(())
        } else {
            Err("not synced".to_string())
        }
    })
    .await;
    // Subscribed, and not read until every change has been made.
    let mut events = Box::pin(lease.subscribe());
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm = serde_json::from_value(json!({"metadata": {"name": format!("cm-{i}")}}))
                    .unwrap();
                api.create(&PostParams::default(), &cm).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    api.delete("cm-0", &Default::default()).await.unwrap();
    wait_until("the cache to see every change", CONVERGE, || async {
        let seen = lease
            .in_namespace("default")
            .iter()
            .filter(|o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .count();
        if seen == OBJECTS - 1 {
            Ok(())
        } else {
            Err(format!("{seen} cached"))
        }
    })
    .await;

    let mut applied: HashMap<String, usize> = HashMap::new();
    let deleted = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match events.next().await {
                Some(CacheEvent::Applied(obj))
                    if obj
                        .metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("cm-")) =>
                {
                    *applied
                        .entry(obj.metadata.name.clone().unwrap_or_default())
                        .or_default() += 1;
                }
                Some(CacheEvent::Applied(_)) => {}
                Some(CacheEvent::Deleted(obj)) => break obj,
                None => panic!("the cache stopped"),
            }
        }
    })
    .await
    .expect("the deletion, after every create");
    assert_eq!(deleted.metadata.name.as_deref(), Some("cm-0"));
    assert_eq!(applied.len(), OBJECTS, "every create was announced");
    let repeated: Vec<_> = applied.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "announced more than once: {} objects",
        repeated.len()
    );
}
