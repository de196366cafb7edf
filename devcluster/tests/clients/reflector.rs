//! kube-runtime reflectors in both initial-list strategies the host may use: classic
//! list-then-watch, and streaming lists (`sendInitialEvents=true`, ended by the
//! `k8s.io/initial-events-end` bookmark). Each must fill its cache, follow later changes and
//! recover from closed watches and expired history without missing an object.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::common::TestCluster;

/// How long the cache may take to reflect a change before the test gives up (a bound only).
const CONVERGE: Duration = Duration::from_secs(60);

fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("suite".to_string(), "reflector".to_string())].into()),
            ..Default::default()
        },
        data: Some([("name".to_string(), name.to_string())].into()),
        ..Default::default()
    }
}

/// Waits until the cache holds exactly `expected` (sorted names).
async fn cache_holds(store: &Store<ConfigMap>, expected: &[String], what: &str) {
    let deadline = tokio::time::Instant::now() + CONVERGE;
    loop {
        let mut names: Vec<String> = store
            .state()
            .iter()
            .filter_map(|cm| cm.metadata.name.clone())
            .collect();
        names.sort();
        if names == expected {
            println!("ok: {what} ({} objects)", names.len());
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the cache holds {names:?}, expected {expected:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn reflector_follows_the_server(config: watcher::Config, label: &str) {
    let tc = TestCluster::start().await;
    let api: Api<ConfigMap> = Api::namespaced(tc.cluster.client(), "default");
    let mut expected: Vec<String> = (0..40).map(|i| format!("{label}-{i:02}")).collect();
    for name in &expected {
        api.create(&PostParams::default(), &configmap(name))
            .await
            .unwrap();
    }
    expected.sort();

    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api.clone(), config))
        .default_backoff()
        .for_each(|event| async move {
            // 410 Gone after expire_history shows up here; the watcher relists by itself.
            if let Err(e) = event {
                println!("watcher error (it retries): {e}");
            }
        });
    let task = tokio::spawn(stream);
    tokio::time::timeout(CONVERGE, store.wait_until_ready())
        .await
        .expect("the reflector never finished its initial list")
        .unwrap();
    cache_holds(&store, &expected, "the initial list filled the cache").await;

    let added = format!("{label}-added");
    api.create(&PostParams::default(), &configmap(&added))
        .await
        .unwrap();
    expected.push(added);
    expected.sort();
    cache_holds(&store, &expected, "a create reached the cache").await;

    // A write in another namespace moves the cluster's resourceVersion past the watcher's own
    // (its namespaced watch never sees it), so after compaction the resumed watch gets 410 Gone.
    let namespaces: Api<Namespace> = Api::all(tc.cluster.client());
    let other = Namespace {
        metadata: ObjectMeta {
            name: Some("elsewhere".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &other)
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(tc.cluster.client(), "elsewhere")
        .create(&PostParams::default(), &configmap("unrelated"))
        .await
        .unwrap();
    tc.cluster.faults().expire_history();
    tc.cluster.faults().close_watches();
    let gone = expected.remove(0);
    api.delete(&gone, &DeleteParams::default()).await.unwrap();
    let late = format!("{label}-late");
    api.create(&PostParams::default(), &configmap(&late))
        .await
        .unwrap();
    expected.push(late);
    expected.sort();
    cache_holds(
        &store,
        &expected,
        "the cache relisted after 410 Gone and saw the delete and the create",
    )
    .await;
    task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_with_list_then_watch() {
    reflector_follows_the_server(watcher::Config::default(), "listwatch").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflector_with_streaming_lists() {
    reflector_follows_the_server(watcher::Config::default().streaming_lists(), "streaming").await;
}
