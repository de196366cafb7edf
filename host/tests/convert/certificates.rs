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
