//! Kinds are what the cluster says they are: a manifest that lies about a
//! plural or names a kind nobody serves is refused before it serves, a
//! plugin loaded after it still reads the real objects, and a cache read
//! that cannot be answered is an error, never an empty list.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, PostParams};
use serde_json::json;
use wasm_operator::cache::{CacheView, SharedCache};
use wasm_operator::contract::{ObjectRef, Reason, ResourceKind, Scope};
use wasm_operator::engine::CacheReader;
use wasm_operator::registry::RegistryError;

use crate::support::{self, wait_until};
use crate::{CONVERGE, Host, attack_kind, full_hostile_grant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lying_manifest_is_refused_naming_the_plural_lie_and_the_unserved_kind() {
    let host = Host::start().await;
    let error = host
        .try_load("hostile_liar")
        .await
        .expect_err("the liar must be refused");
    assert!(error.is_rejection(), "{error}");
    assert!(!error.may_pass(), "a lie does not pass by itself: {error}");
    assert_eq!(error.reason(), Reason::KindMismatch.as_str(), "{error}");
    let RegistryError::Kinds(refusal) = &error else {
        panic!("not a kind refusal: {error}");
    };
    assert_eq!(refusal.problems.len(), 2, "{error}");
    let message = error.to_string();
    for part in [
        "plugin hostile-liar",
        "watches kind v1 ConfigMap is declared as plural \"secrets\"",
        "the cluster serves it as plural \"configmaps\", namespaced",
        "owns kind nowhere.example.com/v1 Ghost is not served",
    ] {
        assert!(message.contains(part), "missing {part:?} in: {message}");
    }
    // Nothing of it runs: no controller, no reflector listing anything.
    assert!(host.registry.loaded().is_empty());
    assert_eq!(host.manager.cache().reflector_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_honest_plugin_loaded_after_the_liar_reads_real_config_maps() {
    let host = Host::start().await;
    let client = host.client();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "real-config"}, "data": {"k": "v"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "real-secret"}, "stringData": {"password": "hunter2"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert!(host.try_load("hostile_liar").await.is_err());

    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap_or_else(|e| panic!("loading hostile with its grant: {e}"));
    host.attack(
        "default",
        "reader",
        json!({"mode": "read-namespace", "target": "default"}),
    )
    .await;
    let attacks = support::dynamic_api(&client, &attack_kind(), Some("default"));
    let seen = wait_until("the reader's status.seen", CONVERGE, || async {
        let o = support::get_json(&attacks, "reader").await;
        o.and_then(|o| o.pointer("/status/seen").cloned())
            .filter(|seen| seen.as_array().is_some_and(|a| !a.is_empty()))
            .ok_or_else(|| "no status.seen yet".to_string())
    })
    .await;
    let names: Vec<&str> = seen
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(names.contains(&"real-config"), "{names:?}");
    assert!(
        !names.contains(&"real-secret"),
        "a Secret was handed over as a ConfigMap: {names:?}"
    );
}

fn config_maps_kind() -> ResourceKind {
    ResourceKind {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
        scope: Scope::Namespaced,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devcluster_only_a_cache_read_before_the_cache_synced_is_an_error_not_an_empty_list() {
    if !crate::support::devcluster_only(
        "devcluster_only_a_cache_read_before_the_cache_synced_is_an_error_not_an_empty_list",
        "fault injection (lists failing with 503)",
    ) {
        return;
    }
    let cluster = support::start_cluster().await;
    let faults = cluster.faults().expect("the devcluster injects faults");
    let client = cluster.client();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    config_maps
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "present"}})).unwrap(),
        )
        .await
        .unwrap();
    // Every list of ConfigMaps fails until the fault is lifted: the
    // reflector cannot finish its initial list.
    faults.fail_next("/api/v1/configmaps", 1_000_000, 503);
    let cache = SharedCache::new(client.clone());
    let lease = cache.acquire(&config_maps_kind(), None);
    let view = CacheView::new(cache.clone(), [config_maps_kind()]);
    // Whether the reflector has tried yet or not, it cannot have synced.
    assert!(!lease.synced());
    let listed = view
        .list("v1", "ConfigMap", Some("default"), None)
        .expect_err("an unsynced cache must not answer an empty list");
    assert!(listed.contains("v1 ConfigMap (configmaps)"), "{listed}");
    assert!(
        listed.contains("has not finished its initial list"),
        "{listed}"
    );
    let got = view
        .get(&ObjectRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("default".into()),
            name: "present".into(),
        })
        .expect_err("an unsynced cache must not answer \"absent\"");
    assert!(got.contains("has not finished its initial list"), "{got}");

    // Once the list works the same reads answer.
    faults.fail_next("/api/v1/configmaps", 0, 503);
    let names = wait_until("the ConfigMap cache to answer", CONVERGE, || async {
        view.list("v1", "ConfigMap", Some("default"), None)
    })
    .await;
    assert!(names.iter().any(|o| o.contains("\"present\"")), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_kind_the_cluster_stopped_serving_is_an_error() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::DeleteParams;
    let host = Host::start().await;
    let client = host.client();
    host.attack("default", "present", json!({"mode": "ok"}))
        .await;
    let attacks = ResourceKind {
        group: "test.wasm-operator.dev".into(),
        version: "v1".into(),
        kind: "Attack".into(),
        plural: "attacks".into(),
        scope: Scope::Namespaced,
    };
    let cache = SharedCache::new(client.clone());
    let _lease = cache.acquire(&attacks, None);
    let view = CacheView::new(cache.clone(), [attacks]);
    let listed = wait_until("the Attack cache to answer", CONVERGE, || async {
        view.list("test.wasm-operator.dev/v1", "Attack", None, None)
    })
    .await;
    assert_eq!(listed.len(), 1, "{listed:?}");

    // The CRD goes away; the API server ends the watches of its resource.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("attacks.test.wasm-operator.dev", &DeleteParams::default())
        .await
        .unwrap();
    // The API server (devcluster or real) ends the watches of the resource.
    let error = wait_until("reads of the gone kind to fail", CONVERGE, || async {
        match view.list("test.wasm-operator.dev/v1", "Attack", None, None) {
            Err(error) => Ok(error),
            Ok(items) => Err(format!("still answered {} items", items.len())),
        }
    })
    .await;
    assert!(
        error.contains("no longer serves test.wasm-operator.dev/v1 Attack (attacks)"),
        "{error}"
    );
}
