//! DistributedKV objects written in either API version are served in both,
//! converted by the plugin through the host's webhook, and reconciled.

use std::process::Command;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::wait_until;
use crate::{CONVERGE, Fixture, NS, alpha, beta};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_both_versions_are_served_in_both_and_reconciled() {
    let fx = Fixture::start().await;
    fx.deploy("distributedkv").await;

    fx.create_kv(alpha("orders", 3)).await;
    fx.create_kv(beta("sessions", 5, 2)).await;

    // Each read through the other version.
    let orders = fx.read_kv("v1beta1", "orders").await;
    assert_eq!(orders["apiVersion"], "kv.example.com/v1beta1");
    assert_eq!(orders["spec"]["replicaCount"], 3, "{orders}");
    assert_eq!(orders["spec"]["storageSize"], "2Gi", "{orders}");
    let sessions = fx.read_kv("v1alpha1", "sessions").await;
    assert_eq!(sessions["apiVersion"], "kv.example.com/v1alpha1");
    assert_eq!(sessions["spec"]["size"], 5, "{sessions}");
    assert_eq!(sessions["spec"]["storage"]["size"], "1Gi", "{sessions}");
    assert_eq!(
        sessions["metadata"]["annotations"]["kv.example.com/v1beta1-fields"],
        r#"{"maxUnavailable":2}"#,
        "{sessions}"
    );
    // A list converts every item.
    let listed = fx
        .kvs("v1alpha1")
        .list(&ListParams::default())
        .await
        .unwrap();
    let sizes: Vec<Value> = listed
        .items
        .iter()
        .map(|o| o.data["spec"]["size"].clone())
        .collect();
    assert_eq!(sizes, [json!(3), json!(5)]);

    // A write through v1alpha1 keeps the v1beta1-only field (the annotation
    // carries it back).
    fx.kvs("v1alpha1")
        .patch(
            "sessions",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"size": 7}})),
        )
        .await
        .unwrap();
    let sessions = fx.read_kv("v1beta1", "sessions").await;
    assert_eq!(sessions["spec"]["replicaCount"], 7, "{sessions}");
    assert_eq!(sessions["spec"]["maxUnavailable"], 2, "{sessions}");
    assert!(
        sessions["metadata"]
            .get("annotations")
            .and_then(|a| a.get("kv.example.com/v1beta1-fields"))
            .is_none(),
        "{sessions}"
    );

    // The plugin reconciles both: StatefulSet, headless Service, PDB.
    let client = fx.client();
    for (name, replicas, max_unavailable) in [("orders", 3, 1), ("sessions", 7, 2)] {
        let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), NS);
        let sts = wait_until(
            &format!("StatefulSet {name} with {replicas} replicas"),
            CONVERGE,
            || {
                let statefulsets = statefulsets.clone();
                async move {
                    let sts = statefulsets
                        .get_opt(name)
                        .await
                        .map_err(|e| e.to_string())?;
                    match sts {
                        Some(s) if s.spec.as_ref().and_then(|s| s.replicas) == Some(replicas) => {
                            Ok(s)
                        }
                        other => Err(format!("{other:?}")),
                    }
                }
            },
        )
        .await;
        assert_eq!(
            sts.spec.unwrap().service_name.as_deref(),
            Some(format!("{name}-headless").as_str())
        );
        // The plan's children are applied one after the other: the
        // StatefulSet may exist before the Service and the PDB do (seen on
        // the real control plane).
        let services: Api<Service> = Api::namespaced(client.clone(), NS);
        let headless = format!("{name}-headless");
        let service = wait_until(&format!("Service {headless}"), CONVERGE, || {
            let services = services.clone();
            let headless = headless.clone();
            async move {
                services
                    .get_opt(&headless)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "not yet".to_string())
            }
        })
        .await;
        assert_eq!(service.spec.unwrap().cluster_ip.as_deref(), Some("None"));
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), NS);
        let pdb = wait_until(&format!("PodDisruptionBudget {name}"), CONVERGE, || {
            let pdbs = pdbs.clone();
            async move {
                pdbs.get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "not yet".to_string())
            }
        })
        .await;
        assert_eq!(
            serde_json::to_value(pdb.spec.unwrap().max_unavailable).unwrap(),
            json!(max_unavailable)
        );
    }
    // Status is written whichever version a client reads.
    let orders = wait_until("orders has an Available condition", CONVERGE, || async {
        let o = fx.read_kv("v1alpha1", "orders").await;
        match crate::support::condition(&o, "Available") {
            Some(_) => Ok(o),
            None => Err(o.to_string()),
        }
    })
    .await;
    assert_eq!(orders["status"]["readyReplicas"], 0, "{orders}");

    // kubectl reads either version through the same webhook.
    let kubectl = |resource: &str| {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(fx.cluster.kubeconfig_path())
            .args(["get", resource, "-n", NS, "-o", "json"])
            .output()
    };
    if let Ok(out) = kubectl("distributedkvs.v1alpha1.kv.example.com") {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let versions: Vec<&Value> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| &o["apiVersion"])
            .collect();
        assert_eq!(versions, [&json!("kv.example.com/v1alpha1"); 2]);
        let out = kubectl("distributedkvs.v1beta1.kv.example.com").unwrap();
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(list["items"][0]["spec"]["replicaCount"], 3, "{list}");
    }
}

/// With workloads that run, a DistributedKV becomes Available: the plugin
/// reads `readyReplicas` from the StatefulSet the controller (or the
/// devcluster's simulation of it) updates as its Pods become Ready, their
/// volumes provisioned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributedkv_becomes_available_when_its_stateful_set_is_ready() {
    let fx = Fixture::start_simulating_workloads().await;
    fx.deploy("distributedkv").await;
    fx.create_kv(beta("orders", 3, 1)).await;
    let orders = wait_until(
        "DistributedKV orders to be Available",
        crate::support::workloads::WORKLOAD_READY,
        || async {
            let o = fx.read_kv("v1beta1", "orders").await;
            if crate::condition_is(&o, "Available", "True") {
                Ok(o)
            } else {
                Err(o.to_string())
            }
        },
    )
    .await;
    assert_eq!(orders["status"]["readyReplicas"], 3, "{orders}");
    let available = crate::support::condition(&orders, "Available").unwrap();
    assert_eq!(available["status"], "True", "{orders}");
    assert_eq!(available["reason"], "StatefulSetReady", "{orders}");
    let statefulsets: Api<StatefulSet> = Api::namespaced(fx.client(), NS);
    let statefulset = statefulsets.get("orders").await.unwrap();
    assert_eq!(
        statefulset.status.and_then(|s| s.ready_replicas),
        Some(3),
        "the StatefulSet's own count"
    );
}

/// A review the plugin cannot answer fails with the object, plugin and
/// version named, and the API server reports it to the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_the_plugin_refuses_names_object_plugin_and_version() {
    let fx = Fixture::start().await;
    fx.deploy("distributedkv").await;
    fx.create_kv(beta("broken", 3, 1)).await;
    // Valid for the schema, but the preserved-fields annotation is not JSON:
    // the plugin refuses to convert it back to v1beta1 (a write through
    // v1alpha1 is converted to the storage version first).
    let patch = json!({"metadata": {"annotations": {"kv.example.com/v1beta1-fields": "not json"}}});
    let error = fx
        .kvs("v1alpha1")
        .patch("broken", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("distributedkv 1.0.0"), "{error}");
    assert!(error.contains("DistributedKV default/broken"), "{error}");
    // The object is untouched and still served.
    let object = fx.read_kv("v1alpha1", "broken").await;
    assert_eq!(object["spec"]["size"], 3, "{object}");
}

/// The webhook over HTTPS, called directly: it trusts nothing but its CA,
/// accepts reviews far beyond axum's 2 MiB default (the API server sends a
/// whole list in one review), and answers a malformed review with a Failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_answers_large_and_malformed_reviews_over_https() {
    use base64::Engine as _;
    let fx = Fixture::start().await;
    fx.deploy("distributedkv").await;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(fx.webhook.ca_bundle())
        .unwrap();
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap())
        .build()
        .unwrap();
    let url = format!("https://{}/convert", fx.webhook.addr());
    let mut object = beta("big", 3, 1);
    object["metadata"]["annotations"] = json!({"big": "x".repeat(3 << 20)});
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": "kv.example.com/v1alpha1", "objects": [object]}});
    let answer: Value = client
        .post(&url)
        .json(&review)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["uid"], "u-1");
    assert_eq!(
        answer["response"]["result"]["status"], "Success",
        "{}",
        answer["response"]["result"]
    );
    assert_eq!(answer["response"]["convertedObjects"][0]["spec"]["size"], 3);

    let malformed = json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview",
        "request": {"uid": "u-2", "desiredAPIVersion": "kv.example.com/v1alpha1", "objects": []}});
    let answer: Value = client
        .post(&url)
        .json(&malformed)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["response"]["uid"], "u-2");
    assert_eq!(answer["response"]["result"]["status"], "Failure");
    let unknown = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u-3", "desiredAPIVersion": "other.example.com/v2",
                    "objects": [{"apiVersion": "other.example.com/v1", "kind": "Other", "metadata": {"name": "o"}}]}});
    let answer: Value = client
        .post(&url)
        .json(&unknown)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let message = answer["response"]["result"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(
            "no plugin loaded in this host implements migration for Other.other.example.com"
        ),
        "{message}"
    );
}
