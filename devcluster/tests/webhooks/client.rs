//! The webhook client against in-test servers, without a cluster.

use std::collections::BTreeMap;

use devcluster::webhook::{AdmissionAttributes, WebhookClient, WebhookError};
use serde_json::{Value, json};

use crate::reviews;
use crate::servers::{serve_http, serve_https};

fn configmap_create() -> AdmissionAttributes {
    AdmissionAttributes {
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        resource: "configmaps".into(),
        sub_resource: String::new(),
        operation: "CREATE".into(),
        namespace: Some("default".into()),
        name: "settings".into(),
        object: Some(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}),
        ),
        old_object: None,
        dry_run: false,
        namespace_labels: BTreeMap::new(),
    }
}

fn configuration(name: &str, client_config: Value) -> Value {
    json!({
        "metadata": {"name": name},
        "webhooks": [{
            "name": name,
            "clientConfig": client_config,
            "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }],
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn mutating_webhook_over_https_with_ca_bundle() {
    let hook = serve_https(reviews::add_label);
    let config = configuration(
        "label.example.com",
        json!({"url": hook.url, "caBundle": hook.ca_bundle}),
    );
    let mutated = WebhookClient::default()
        .mutate(&[config], &configmap_create())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        mutated["metadata"]["labels"],
        json!({"mutated-by": "webhook"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn https_webhook_with_a_foreign_ca_bundle_fails_the_request() {
    let hook = serve_https(reviews::add_label);
    let other = serve_https(reviews::add_label);
    let config = configuration(
        "label.example.com",
        json!({"url": hook.url, "caBundle": other.ca_bundle}),
    );
    let err = WebhookClient::default()
        .mutate(&[config], &configmap_create())
        .await
        .unwrap_err();
    match err {
        WebhookError::Failed { webhook, message } => {
            assert_eq!(webhook, "label.example.com");
            assert!(
                message.starts_with(&format!("Post {:?}", hook.url)),
                "{message}"
            );
            assert!(message.to_lowercase().contains("certificate"), "{message}");
        }
        other => panic!("expected Failed, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn mutations_chain_into_validation_and_denials_carry_the_message() {
    let client = WebhookClient::default();
    let label = configuration(
        "a-label.example.com",
        json!({"url": serve_http(reviews::add_label).await}),
    );
    let mut attrs = configmap_create();
    attrs.object = client.mutate(&[label], &attrs).await.unwrap();

    let mut deny = configuration(
        "frozen.example.com",
        json!({"url": serve_http(reviews::deny).await}),
    );
    deny["webhooks"][0]["objectSelector"] = json!({"matchLabels": {"mutated-by": "webhook"}});
    let err = client
        .validate(std::slice::from_ref(&deny), &attrs)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WebhookError::Denied { code: 403, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "admission webhook \"frozen.example.com\" denied the request: configmaps labelled frozen=true are read-only"
    );
    // The objectSelector no longer matches an unlabelled object: the webhook is skipped.
    client.validate(&[deny], &configmap_create()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_response_with_the_wrong_uid_is_a_failure_unless_ignored() {
    let url = serve_http(reviews::wrong_uid).await;
    let client = WebhookClient::default();
    let config = configuration("uid.example.com", json!({"url": url}));
    let err = client
        .validate(std::slice::from_ref(&config), &configmap_create())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("expected response.uid="), "{err}");
    let mut ignored = config;
    ignored["webhooks"][0]["failurePolicy"] = json!("Ignore");
    client
        .validate(&[ignored], &configmap_create())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn service_references_are_refused_with_advice() {
    let config = configuration(
        "svc.example.com",
        json!({"service": {"namespace": "default", "name": "hook"}}),
    );
    let err = WebhookClient::default()
        .validate(&[config], &configmap_create())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed calling webhook \"svc.example.com\": clientConfig.service is not supported by devcluster; use clientConfig.url"
    );
}

fn widget(name: &str, uid: &str) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "default", "uid": uid}, "spec": {"size": 3}})
}

#[tokio::test(flavor = "multi_thread")]
async fn conversion_over_https_keeps_order() {
    let hook = serve_https(reviews::convert_widgets);
    let webhook = json!({"clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle}, "conversionReviewVersions": ["v1"]});
    let objects = vec![widget("a", "1"), widget("b", "2")];
    let converted = WebhookClient::default()
        .convert(&webhook, objects, "example.com/v2")
        .await
        .unwrap();
    assert_eq!(converted.len(), 2);
    assert_eq!(converted[0]["metadata"]["name"], "a");
    assert_eq!(converted[1]["metadata"]["name"], "b");
    assert_eq!(converted[1]["apiVersion"], "example.com/v2");
    assert_eq!(converted[1]["spec"], json!({"replicas": 3}));
    assert_eq!(
        converted[1]["metadata"]["annotations"]["converted-to"],
        "example.com/v2"
    );
}

fn drop_last(review: Value) -> Value {
    let mut answer = reviews::convert_widgets(review);
    if let Some(objects) = answer["response"]["convertedObjects"].as_array_mut() {
        objects.pop();
    }
    answer
}

#[tokio::test(flavor = "multi_thread")]
async fn conversion_with_a_missing_object_fails_precisely() {
    let url = serve_http(drop_last).await;
    let webhook = json!({"clientConfig": {"url": url}, "conversionReviewVersions": ["v1"]});
    let objects = vec![widget("a", "1"), widget("b", "2")];
    let err = WebhookClient::default()
        .convert(&webhook, objects, "example.com/v2")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .ends_with("conversion webhook for Widget.example.com returned 1 objects, expected 2"),
        "{err}"
    );
}

/// Serves a webhook that never answers in time; returns its URL.
async fn serve_hanging() -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(|| async {
            tokio::time::sleep(std::time::Duration::from_secs(60)).await;
            "too late"
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_that_does_not_answer_within_timeout_seconds_fails() {
    let mut config = configuration("slow.example.com", json!({"url": serve_hanging().await}));
    config["webhooks"][0]["timeoutSeconds"] = json!(1);
    let err = WebhookClient::default()
        .validate(&[config], &configmap_create())
        .await
        .unwrap_err();
    assert!(matches!(&err, WebhookError::Failed { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("context deadline exceeded (timeout 1s)"),
        "{err}"
    );
}
