//! The webhook's certificate lives in a Secret: a restarted host and a
//! second replica serve the same CA bundle, and the CRD follows the host
//! that serves.

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::{Fixture, NS, SECRET, alpha, beta, wait_crd_points_at, webhook_options};
use wasm_operator::webhook::ConversionWebhook;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_survive_a_restart_and_a_second_replica_serves_the_same_bundle() {
    let fx = Fixture::start().await;
    fx.deploy("distributedkv").await;
    fx.create_kv(beta("sessions", 5, 2)).await;
    let first_bundle = fx.webhook.ca_bundle();

    let secrets: Api<Secret> = Api::namespaced(fx.client(), NS);
    let secret = secrets.get(SECRET).await.unwrap();
    assert_eq!(secret.type_.as_deref(), Some("kubernetes.io/tls"));
    let data = secret.data.unwrap();
    assert!(
        data.contains_key("ca.crt") && data.contains_key("tls.crt") && data.contains_key("tls.key")
    );

    // A second replica (same cluster, same Secret) serves the same bundle,
    // from its own address.
    let second = ConversionWebhook::start(fx.client(), fx.registry.clone(), webhook_options())
        .await
        .unwrap();
    assert_eq!(second.ca_bundle(), first_bundle);
    assert_ne!(second.addr(), fx.webhook.addr());

    // The first host goes away; the second points the CRD at itself (here
    // at once; its background task would within a second) and answers.
    fx.webhook.shutdown().await;
    second.sync_crds().await.unwrap();
    let conversion = wait_crd_points_at(&fx.client(), &second).await;
    assert_eq!(
        conversion["webhook"]["clientConfig"]["caBundle"],
        first_bundle
    );
    let sessions = fx.read_kv_after_repoint("v1alpha1", "sessions").await;
    assert_eq!(sessions["spec"]["size"], 5, "{sessions}");

    // A restart of that host: same bundle again, and it keeps answering,
    // writes included.
    second.shutdown().await;
    let restarted = ConversionWebhook::start(fx.client(), fx.registry.clone(), webhook_options())
        .await
        .unwrap();
    assert_eq!(restarted.ca_bundle(), first_bundle);
    wait_crd_points_at(&fx.client(), &restarted).await;
    // Converted by the restarted host once kube-apiserver serves the CRD's
    // new storage; from then on writes convert through it too.
    let sessions = fx.read_kv_after_repoint("v1alpha1", "sessions").await;
    assert_eq!(sessions["spec"]["size"], 5, "{sessions}");
    fx.create_kv(alpha("orders", 2)).await;
    let orders = fx.read_kv("v1beta1", "orders").await;
    assert_eq!(orders["spec"]["replicaCount"], 2, "{orders}");
    restarted.shutdown().await;
}

/// Two hosts starting at once against a cluster without the Secret agree
/// on one certificate (the loser of the create race reads the winner's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_starting_together_share_one_certificate() {
    crate::install_crypto_provider();
    let cluster = crate::support::start_cluster().await;
    let registry = wasm_operator::registry::Registry::new(Default::default()).unwrap();
    let (a, b) = tokio::join!(
        ConversionWebhook::start(cluster.client(), registry.clone(), webhook_options()),
        ConversionWebhook::start(cluster.client(), registry.clone(), webhook_options()),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.ca_bundle(), b.ca_bundle());
    a.shutdown().await;
    b.shutdown().await;
}

/// A Secret planted at the certificate's name before the host first
/// starts (a plugin granted Secrets there, or anyone who may write them)
/// is not the host's: the webhook does not start, never serves the
/// planted key nor writes its CA into a CRD, and says what to delete;
/// once it is gone the host generates and keeps its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_certificate_secret_is_never_served_nor_written_into_crds() {
    use kube::api::{DeleteParams, PostParams};
    use wasm_operator::webhook::{CertError, Certificates, WebhookError};

    crate::install_crypto_provider();
    let cluster = crate::support::start_cluster().await;
    let client = cluster.client();
    crate::install_kv_crd(&client, "v1beta1").await;
    let planted = Certificates::generate(&["attacker.example".to_string()]).unwrap();
    let mut secret = planted.to_secret(SECRET);
    secret.metadata.labels = None;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("plant the Secret");
    let registry = wasm_operator::registry::Registry::new(Default::default()).unwrap();

    let refused =
        ConversionWebhook::start(client.clone(), registry.clone(), webhook_options()).await;
    let message = match refused {
        Err(error @ WebhookError::Certs(CertError::NotTheHosts { .. })) => error.to_string(),
        Err(other) => panic!("expected the squatter to be named, got {other}"),
        Ok(_) => panic!("the webhook started on a planted certificate"),
    };
    assert!(
        message.contains(&format!(
            "Secret {NS}/{SECRET} is named like the host's conversion webhook certificate Secret"
        )) && message.contains(&format!("kubectl -n {NS} delete secret {SECRET}"))
            && message.contains("the conversion webhook does not start"),
        "{message}"
    );
    // Untouched, and its CA is in no CRD.
    let still = secrets.get(SECRET).await.unwrap();
    assert!(still.metadata.labels.is_none(), "{:?}", still.metadata);
    let crd = crate::support::get_json(
        &crate::support::dynamic_api(
            &client,
            &crate::support::api_resource(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
            None,
        ),
        crate::CRD,
    )
    .await
    .expect("the DistributedKV CRD");
    assert!(
        !crd.to_string().contains(&planted.ca_bundle()),
        "the planted CA was written into the CRD: {crd}"
    );

    // Deleted by the cluster operator: the host keeps its own.
    secrets
        .delete(SECRET, &DeleteParams::default())
        .await
        .unwrap();
    let webhook = ConversionWebhook::start(client.clone(), registry, webhook_options())
        .await
        .expect("the webhook starts once the squatter is gone");
    assert_ne!(webhook.ca_bundle(), planted.ca_bundle());
    let mine = secrets.get(SECRET).await.unwrap();
    assert_eq!(
        mine.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("wasm-operator.dev/host-object"))
            .map(String::as_str),
        Some("webhook-cert")
    );
    webhook.shutdown().await;
}
