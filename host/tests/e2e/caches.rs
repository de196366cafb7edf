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
    for _ in 0..3 {
        let event = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        seen.push(event.object().metadata.name.clone().unwrap());
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
