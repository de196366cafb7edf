//! The upgrade path of a CRD version: objects stored in v1alpha1, the
//! storage version switched to v1beta1, the storage migration (stopped
//! midway and resumed), `storedVersions: [v1beta1]`, v1alpha1 removed, and
//! every object still readable and reconciled.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use wasm_operator::webhook::storage::{self, PROGRESS_ANNOTATION, StorageOptions};

use serde_json::json;

use crate::support::{condition, wait_until};
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
    let migrating = wasm_operator::webhook::ConversionWebhook::start_with(
        client.clone(),
        fx.registry.clone(),
        fx.manager.webhook_board().clone(),
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
    // The WasmPlugin of the plugin that converts shows the outcome and the
    // counts (the migration publishes them, the WasmPlugin controller
    // writes them).
    let plugin = fx
        .wait_for("StorageMigration Completed, 3/3", |o| {
            condition(o, "StorageMigration").and_then(|c| c.get("reason"))
                == Some(&json!("Completed"))
                && o.pointer("/status/storageMigration/migrated") == Some(&json!(3))
        })
        .await;
    let migration = &plugin["status"]["storageMigration"];
    assert_eq!(migration["total"], 3, "{migration}");
    assert_eq!(migration["crd"], CRD, "{migration}");
    assert_eq!(migration["storageVersion"], "v1beta1", "{migration}");
    assert_eq!(migration["refused"], json!([]), "{migration}");
    let finished = condition(&plugin, "StorageMigration").unwrap();
    assert_eq!(finished["status"], "False", "{finished}");
    let message = finished["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("3 objects") && message.contains("now [v1beta1]"),
        "{message}"
    );
    migrating.shutdown().await;
}

/// An object the API server refuses to rewrite (a validating admission
/// webhook over HTTPS denies it) is named in the WasmPlugin's
/// `StorageMigration` condition, the others are rewritten, `storedVersions`
/// is kept; once the refusal stops, the next attempt completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_api_server_refuses_to_rewrite_are_named_in_the_wasmplugin_status() {
    let fx = Fixture::start_with_storage("v1alpha1").await;
    fx.deploy("distributedkv").await;
    let client = fx.client();
    for i in 0..3 {
        fx.create_kv(alpha(&format!("kv-{i}"), 2)).await;
    }
    let mut locked = alpha("kv-locked", 1);
    locked["metadata"]["labels"] = json!({ admission::LOCKED_LABEL: "true" });
    fx.create_kv(locked).await;
    // Declared after the fixture: dropped (disarmed) before the cluster is.
    let denier = admission::DenyUpdates::install(&client).await;
    install_kv_crd(&client, "v1beta1").await;

    let migrating = wasm_operator::webhook::ConversionWebhook::start_with(
        client.clone(),
        fx.registry.clone(),
        fx.manager.webhook_board().clone(),
        wasm_operator::webhook::WebhookOptions {
            migrate_storage: true,
            ..crate::webhook_options()
        },
    )
    .await
    .unwrap();
    let plugin = fx
        .wait_for(
            "StorageMigration ObjectsRefused naming default/kv-locked",
            |o| {
                condition(o, "StorageMigration").and_then(|c| c.get("reason"))
                    == Some(&json!("ObjectsRefused"))
            },
        )
        .await;
    let refused = condition(&plugin, "StorageMigration").unwrap();
    assert_eq!(refused["status"], "True", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(message.contains("1 of 4 objects"), "{message}");
    assert!(message.contains("default/kv-locked"), "{message}");
    assert!(message.contains(admission::DENIAL), "{message}");
    let migration = &plugin["status"]["storageMigration"];
    assert_eq!(migration["migrated"], 4, "{migration}");
    assert_eq!(migration["total"], 4, "{migration}");
    let named = migration["refused"].as_array().unwrap();
    assert_eq!(named.len(), 1, "{migration}");
    assert!(
        named[0].as_str().unwrap().starts_with("default/kv-locked:"),
        "{migration}"
    );
    // The refused object keeps storedVersions as it was.
    assert_eq!(stored_versions(&crd(&client).await).len(), 2);

    // The refusal ends: the next attempt (every 10 s) finishes.
    denier.disarm();
    fx.wait_for("StorageMigration Completed", |o| {
        condition(o, "StorageMigration").and_then(|c| c.get("reason")) == Some(&json!("Completed"))
    })
    .await;
    assert_eq!(stored_versions(&crd(&client).await), ["v1beta1"]);
    migrating.shutdown().await;
}

/// A validating admission webhook over HTTPS (its own CA, in the
/// configuration's `caBundle`, as in a real cluster) that denies updates
/// of DistributedKVs labelled [`LOCKED_LABEL`] while armed.
mod admission {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use axum::routing::post;
    use axum::{Json, Router};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use kube::api::{Api, DynamicObject, PostParams};
    use serde_json::{Value, json};
    use tokio_util::sync::CancellationToken;
    use wasm_operator::webhook::Certificates;

    use crate::support;

    pub const LOCKED_LABEL: &str = "test.wasm-operator.dev/locked";
    pub const DENIAL: &str = "this DistributedKV is locked by the test";

    /// Disarms the webhook and stops serving when dropped.
    pub struct DenyUpdates {
        armed: Arc<AtomicBool>,
        stop: CancellationToken,
    }

    impl DenyUpdates {
        pub async fn install(client: &kube::Client) -> DenyUpdates {
            let certs = Certificates::generate(&[]).unwrap();
            let tls = certs.server_config("the test's admission webhook").unwrap();
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url = format!("https://{}/validate", listener.local_addr().unwrap());
            let armed = Arc::new(AtomicBool::new(true));
            let stop = CancellationToken::new();
            tokio::spawn(serve(listener, tls, armed.clone(), stop.clone()));
            let configuration: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "deny-locked-distributedkvs"},
                "webhooks": [{
                    "name": "deny-locked.kv.example.com",
                    "clientConfig": {"url": url, "caBundle": certs.ca_bundle()},
                    "rules": [{
                        "apiGroups": ["kv.example.com"], "apiVersions": ["*"],
                        "operations": ["UPDATE"], "resources": ["distributedkvs"],
                        "scope": "Namespaced",
                    }],
                    "objectSelector": {"matchLabels": {LOCKED_LABEL: "true"}},
                    // Once the test is over nothing may be held up by it.
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 5,
                }],
            }))
            .unwrap();
            let api: Api<DynamicObject> = Api::all_with(
                client.clone(),
                &support::api_resource(
                    "admissionregistration.k8s.io",
                    "v1",
                    "ValidatingWebhookConfiguration",
                    "validatingwebhookconfigurations",
                ),
            );
            api.create(&PostParams::default(), &configuration)
                .await
                .unwrap();
            DenyUpdates { armed, stop }
        }

        /// From now on every update is allowed.
        pub fn disarm(&self) {
            self.armed.store(false, Ordering::SeqCst);
        }
    }

    impl Drop for DenyUpdates {
        fn drop(&mut self) {
            self.disarm();
            self.stop.cancel();
        }
    }

    fn review(armed: &AtomicBool, review: &Value) -> Value {
        let uid = review.pointer("/request/uid").cloned().unwrap_or_default();
        let deny = armed.load(Ordering::SeqCst)
            && review.pointer("/request/operation") == Some(&json!("UPDATE"));
        let mut response = json!({"uid": uid, "allowed": !deny});
        if deny {
            response["status"] = json!({"code": 403, "message": DENIAL});
        }
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": response,
        })
    }

    async fn serve(
        listener: tokio::net::TcpListener,
        tls: Arc<rustls::ServerConfig>,
        armed: Arc<AtomicBool>,
        stop: CancellationToken,
    ) {
        let router = Router::new().route(
            "/validate",
            post(move |Json(body): Json<Value>| {
                let armed = armed.clone();
                async move { Json(review(&armed, &body)) }
            }),
        );
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        loop {
            let tcp = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(_) => continue,
                },
            };
            let acceptor = acceptor.clone();
            let router = router.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(router);
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    }
}
