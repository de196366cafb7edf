//! The DistributedKV fixtures the conversion tests and the `convert`
//! benchmark (`host/benches/convert.rs`) share: the CRD, objects of both
//! versions, the webhook's options, and waiting for the CRD to point at it.

use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};
use wasm_operator::webhook::{CertSource, ConversionWebhook, WebhookOptions};

use crate::support::{self, wait_until};

/// How long a test waits for the host to converge before failing.
pub const CONVERGE: Duration = Duration::from_secs(60);

pub const NS: &str = "default";

pub const CRD: &str = "distributedkvs.kv.example.com";

pub const SECRET: &str = "wasm-operator-webhook-cert";

pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The webhook options every test uses: loopback, a free port, the
/// certificates in Secret `default/wasm-operator-webhook-cert`.
pub fn webhook_options() -> WebhookOptions {
    WebhookOptions {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        client_config: None,
        certs: CertSource::Secret {
            namespace: NS.into(),
            name: SECRET.into(),
        },
        migrate_storage: false,
        limits: Default::default(),
    }
}

pub fn kvs(client: &kube::Client, version: &str) -> Api<DynamicObject> {
    support::dynamic_api(
        client,
        &support::api_resource("kv.example.com", version, "DistributedKV", "distributedkvs"),
        Some(NS),
    )
}

/// Installs the example DistributedKV CRD with `storage` as the storage
/// version (both versions served).
pub async fn install_kv_crd(client: &kube::Client, storage: &str) {
    install_kv_crd_versions(client, storage, &["v1alpha1", "v1beta1"]).await;
}

/// Installs the example DistributedKV CRD serving `versions`, `storage`
/// the storage version, and waits until it is served.
pub async fn install_kv_crd_versions(client: &kube::Client, storage: &str, versions: &[&str]) {
    let text = std::fs::read_to_string(support::example_crd("distributedkv")).unwrap();
    let mut crd: Value = serde_yaml::from_str(&text).unwrap();
    let all = crd["spec"]["versions"].as_array().unwrap().clone();
    crd["spec"]["versions"] = Value::Array(
        all.into_iter()
            .filter(|v| versions.contains(&v["name"].as_str().unwrap()))
            .map(|mut v| {
                v["storage"] = json!(v["name"] == storage);
                v
            })
            .collect(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crd.yaml");
    std::fs::write(&path, serde_yaml::to_string(&crd).unwrap()).unwrap();
    support::install_crd(client, &path).await;
}

pub async fn wait_crd_points_at(client: &kube::Client, webhook: &ConversionWebhook) -> Value {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let bundle = webhook.ca_bundle();
    let url = format!("https://{}/convert", webhook.addr());
    wait_until(
        &format!("CRD {CRD} converting through {url}"),
        CONVERGE,
        || async {
            let crd = crds.get(CRD).await.map_err(|e| e.to_string())?;
            let conversion = serde_json::to_value(&crd.spec.conversion).unwrap();
            let config = &conversion["webhook"]["clientConfig"];
            if conversion["strategy"] == "Webhook"
                && config["url"] == url
                && config["caBundle"] == bundle
            {
                Ok(conversion)
            } else {
                Err(conversion.to_string())
            }
        },
    )
    .await
}

/// A v1alpha1 DistributedKV.
pub fn alpha(name: &str, size: i64) -> Value {
    json!({
        "apiVersion": "kv.example.com/v1alpha1", "kind": "DistributedKV",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"size": size, "image": "kv:1.4", "storage": {"size": "2Gi"}},
    })
}

/// A v1beta1 DistributedKV with a field v1alpha1 cannot hold.
pub fn beta(name: &str, replicas: i64, max_unavailable: i64) -> Value {
    json!({
        "apiVersion": "kv.example.com/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicaCount": replicas, "image": "kv:1.4", "storageSize": "1Gi",
                 "maxUnavailable": max_unavailable},
    })
}
