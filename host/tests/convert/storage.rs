//! The upgrade path of a CRD version: objects stored in v1alpha1, the
//! storage version switched to v1beta1, the storage migration (stopped
//! midway and resumed), `storedVersions: [v1beta1]`, v1alpha1 removed, and
//! every object still readable and reconciled.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use wasm_operator::webhook::storage::{self, PROGRESS_ANNOTATION, StorageOptions};

use crate::support::wait_until;
use crate::{CONVERGE, CRD, Fixture, NS, alpha, install_kv_crd, install_kv_crd_versions};

async fn crd(client: &kube::Client) -> CustomResourceDefinition {
    Api::<CustomResourceDefinition>::all(client.clone())
        .get(CRD)
        .await
        .unwrap()
}

fn stored_versions(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_move_to_the_new_storage_version_and_the_old_version_can_go() {
    let fx = Fixture::start_with_storage("v1alpha1").await;
    fx.deploy("distributedkv").await;
    let client = fx.client();
    for i in 0..5 {
        fx.create_kv(alpha(&format!("kv-{i}"), 1 + i)).await;
    }
    assert_eq!(stored_versions(&crd(&client).await), ["v1alpha1"]);

    // The new storage version.
    install_kv_crd(&client, "v1beta1").await;
    let stored = stored_versions(&crd(&client).await);
    assert!(
        stored.contains(&"v1alpha1".to_string()) && stored.contains(&"v1beta1".to_string()),
        "{stored:?}"
    );

    // A migration stopped after 2 objects (a host killed midway) keeps its
    // progress and leaves storedVersions alone.
    let stopped = StorageOptions {
        writes_per_second: 0,
        max_objects: Some(2),
    };
    let report = storage::migrate(&client, CRD, &stopped, |_, _| {})
        .await
        .unwrap();
    assert!(!report.done, "{report:?}");
    assert_eq!(report.migrated, 2);
    let midway = crd(&client).await;
    assert!(
        midway
            .metadata
            .annotations
            .as_ref()
            .unwrap()
            .contains_key(PROGRESS_ANNOTATION)
    );
    assert_eq!(stored_versions(&midway).len(), 2);

    // Run again: it resumes and finishes.
    let mut seen = Vec::new();
    let report = storage::migrate(&client, CRD, &StorageOptions::default(), |done, _| {
        seen.push(done)
    })
    .await
    .unwrap();
    assert!(report.done && report.refused.is_empty(), "{report:?}");
    assert_eq!(report.migrated, 5);
    assert_eq!(seen.last(), Some(&5));
    let after = crd(&client).await;
    assert_eq!(stored_versions(&after), ["v1beta1"]);
    assert!(
        after
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| !a.contains_key(PROGRESS_ANNOTATION)),
        "{:?}",
        after.metadata.annotations
    );
    // A second run has nothing to do.
    let again = storage::migrate(&client, CRD, &StorageOptions::default(), |_, _| {})
        .await
        .unwrap();
    assert!(again.done && again.migrated == 0, "{again:?}");

    // v1alpha1 can go: every object is still readable and reconciled.
    install_kv_crd_versions(&client, "v1beta1", &["v1beta1"]).await;
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
    for i in 0..5 {
        let name = format!("kv-{i}");
        let object = fx.read_kv("v1beta1", &name).await;
        assert_eq!(object["spec"]["replicaCount"], 1 + i, "{object}");
        assert_eq!(object["spec"]["storageSize"], "2Gi", "{object}");
        wait_until(&format!("StatefulSet {name}"), CONVERGE, || {
            let statefulsets = statefulsets.clone();
            let name = name.clone();
            async move {
                statefulsets
                    .get_opt(&name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "not yet".to_string())
            }
        })
        .await;
    }
}

/// `wasm-operator migrate storage CRD`, the one-shot command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_migrate_storage_command_narrows_stored_versions() {
    let cluster = crate::support::start_cluster().await;
    let client = cluster.client();
    install_kv_crd(&client, "v1alpha1").await;
    install_kv_crd(&client, "v1beta1").await;
    assert_eq!(stored_versions(&crd(&client).await).len(), 2);
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
            .args(["migrate", "storage", CRD, "--kubeconfig"])
            .arg(kubeconfig)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("now [v1beta1]"), "{stdout}");
    assert_eq!(stored_versions(&crd(&client).await), ["v1beta1"]);
}

/// With `migrate_storage` (`--migrate-storage`, always on in `dev`) the
/// host migrates by itself once the storage version changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_migrates_storage_by_itself_when_asked_to() {
    let fx = Fixture::start_with_storage("v1alpha1").await;
    fx.deploy("distributedkv").await;
    let client = fx.client();
    for i in 0..3 {
        fx.create_kv(alpha(&format!("kv-{i}"), 2)).await;
    }
    install_kv_crd(&client, "v1beta1").await;
    assert_eq!(stored_versions(&crd(&client).await).len(), 2);
    let migrating = wasm_operator::webhook::ConversionWebhook::start(
        client.clone(),
        fx.registry.clone(),
        wasm_operator::webhook::WebhookOptions {
            migrate_storage: true,
            ..crate::webhook_options()
        },
    )
    .await
    .unwrap();
    wait_until("storedVersions [v1beta1]", CONVERGE, || async {
        let stored = stored_versions(&crd(&client).await);
        if stored == ["v1beta1"] {
            Ok(())
        } else {
            Err(format!("{stored:?}"))
        }
    })
    .await;
    for i in 0..3 {
        let object = fx.read_kv("v1beta1", &format!("kv-{i}")).await;
        assert_eq!(object["spec"]["replicaCount"], 2, "{object}");
    }
    migrating.shutdown().await;
}
