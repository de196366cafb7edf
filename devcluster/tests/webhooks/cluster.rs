//! Admission and conversion webhooks end to end: webhook configurations and a
//! CRD are created through the real `kube` client, and the devcluster calls
//! the in-test webhook servers while serving ordinary requests.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use devcluster::{DevCluster, DevClusterOptions};

use crate::reviews;
use crate::servers::{serve_http, serve_https};

async fn cluster() -> DevCluster {
    DevCluster::start(DevClusterOptions::default())
        .await
        .unwrap()
}

fn configmap(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn webhook(name: &str, url: &str) -> Value {
    json!({
        "name": name,
        "clientConfig": {"url": url},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"], "scope": "Namespaced"}],
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "failurePolicy": "Fail",
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn validating_webhook_denies_a_configmap() {
    let cluster = cluster().await;
    let client = cluster.client();
    let mut hook = webhook("frozen.example.com", &serve_http(reviews::deny).await);
    hook["objectSelector"] = json!({"matchLabels": {"frozen": "true"}});
    let config: ValidatingWebhookConfiguration =
        serde_json::from_value(json!({"metadata": {"name": "frozen"}, "webhooks": [hook]}))
            .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .unwrap();

    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let err = configmaps
        .create(
            &PostParams::default(),
            &configmap("frozen", json!({"frozen": "true"})),
        )
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert_eq!(
                status.message,
                "admission webhook \"frozen.example.com\" denied the request: configmaps labelled frozen=true are read-only"
            );
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    assert!(
        configmaps.get_opt("frozen").await.unwrap().is_none(),
        "a denied object must not be stored"
    );
    // Objects the objectSelector does not match are not sent to the webhook.
    configmaps
        .create(
            &PostParams::default(),
            &configmap("thawed", json!({"frozen": "false"})),
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mutating_webhook_adds_a_label() {
    let cluster = cluster().await;
    let client = cluster.client();
    let config: MutatingWebhookConfiguration = serde_json::from_value(
        json!({"metadata": {"name": "labeller"}, "webhooks": [webhook("labeller.example.com", &serve_http(reviews::add_label).await)]}),
    )
    .unwrap();
    Api::<MutatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &config)
        .await
        .unwrap();

    let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = configmaps
        .create(
            &PostParams::default(),
            &configmap("settings", json!({"app": "demo"})),
        )
        .await
        .unwrap();
    let labels = created.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("mutated-by").map(String::as_str),
        Some("webhook"),
        "{labels:?}"
    );
    assert_eq!(labels.get("app").map(String::as_str), Some("demo"));
    let stored = configmaps.get("settings").await.unwrap();
    assert_eq!(stored.metadata.labels, created.metadata.labels);
}

const GROUP: &str = "hooks.example.com";

fn widget_crd(conversion: Value) -> CustomResourceDefinition {
    let version = |name: &str, storage: bool, field: &str| {
        json!({
            "name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {field: {"type": "integer", "maximum": 10}}},
            }}},
        })
    };
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [version("v1", true, "size"), version("v2", false, "replicas")],
            "conversion": conversion,
        },
    }))
    .unwrap()
}

fn widgets(client: &kube::Client, version: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(GROUP, version, "Widget"),
        "widgets",
    );
    Api::namespaced_with(client.clone(), "default", &resource)
}

fn widget(version: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(
        json!({"apiVersion": format!("{GROUP}/{version}"), "kind": "Widget", "metadata": {"name": name}, "spec": spec}),
    )
    .unwrap()
}

/// Creates `obj`, retrying while the just-created CRD is not served yet.
async fn create_when_served(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    for _ in 0..50 {
        match api.create(&PostParams::default(), obj).await {
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
    api.create(&PostParams::default(), obj).await
}

#[tokio::test(flavor = "multi_thread")]
async fn conversion_webhook_over_https_serves_both_versions() {
    let cluster = cluster().await;
    let client = cluster.client();
    let hook = serve_https(reviews::convert_widgets);
    let conversion = json!({
        "strategy": "Webhook",
        "webhook": {"clientConfig": {"url": hook.url, "caBundle": hook.ca_bundle}, "conversionReviewVersions": ["v1"]},
    });
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &widget_crd(conversion))
        .await
        .unwrap();

    let v1 = widgets(&client, "v1");
    let v2 = widgets(&client, "v2");
    create_when_served(&v1, &widget("v1", "small", json!({"size": 3})))
        .await
        .unwrap();
    // Written as v2, stored as v1 (the storage version): converted on the way in and out.
    create_when_served(&v2, &widget("v2", "large", json!({"replicas": 7})))
        .await
        .unwrap();

    let small = v2.get("small").await.unwrap();
    assert_eq!(
        small.types.as_ref().map(|t| t.api_version.as_str()),
        Some("hooks.example.com/v2")
    );
    assert_eq!(small.data["spec"], json!({"replicas": 3}));
    let large = v1.get("large").await.unwrap();
    assert_eq!(large.data["spec"], json!({"size": 7}));

    let listed = v2.list(&Default::default()).await.unwrap();
    let mut specs: Vec<(String, Value)> = listed
        .items
        .iter()
        .map(|w| {
            (
                w.metadata.name.clone().unwrap_or_default(),
                w.data["spec"].clone(),
            )
        })
        .collect();
    specs.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        specs,
        vec![
            ("large".to_string(), json!({"replicas": 7})),
            ("small".to_string(), json!({"replicas": 3}))
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_violations_are_422_with_kube_wording_and_unknown_fields_pruned() {
    let cluster = cluster().await;
    let client = cluster.client();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(
            &PostParams::default(),
            &widget_crd(json!({"strategy": "None"})),
        )
        .await
        .unwrap();
    let v1 = widgets(&client, "v1");
    let err = create_when_served(&v1, &widget("v1", "big", json!({"size": 11})))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.ends_with("spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"),
                "{}",
                status.message
            );
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    let created = create_when_served(
        &v1,
        &widget("v1", "ok", json!({"size": 2, "unknown": true})),
    )
    .await
    .unwrap();
    assert_eq!(created.data["spec"], json!({"size": 2}));
}
