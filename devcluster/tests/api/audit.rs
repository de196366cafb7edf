use devcluster::{DevCluster, DevClusterOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};

use crate::{cm, status};

fn webapp_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "metadata": {"name": "webapps.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "webapps", "singular": "webapp", "kind": "WebApp"},
                 "versions": [{"name": "v1", "served": true, "storage": true,
                     "subresources": {"status": {}},
                     "schema": {"openAPIV3Schema": {"type": "object",
                         "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))
    .unwrap()
}

/// `(verb, objectRef, code)` of every line, after checking the fields every line has.
fn read_audit(path: &std::path::Path) -> Vec<(String, Value, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "every line is complete");
    text.lines()
        .map(|line| {
            let e: Value = serde_json::from_str(line).unwrap();
            assert_eq!(e["kind"], "Event", "{line}");
            assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
            assert_eq!(e["level"], "Metadata");
            assert_eq!(e["stage"], "ResponseComplete");
            assert_eq!(e["sourceIPs"], json!(["127.0.0.1"]), "{line}");
            assert!(e["requestURI"].as_str().unwrap().starts_with("/api"));
            // The kube client sends no User-Agent: the field is left out then.
            assert!(e.get("userAgent").is_none_or(Value::is_string), "{line}");
            let t = |k: &str| {
                chrono::DateTime::parse_from_rfc3339(e[k].as_str().unwrap())
                    .unwrap_or_else(|err| panic!("{k} in {line}: {err}"))
            };
            assert!(
                t("requestReceivedTimestamp") <= t("stageTimestamp"),
                "{line}"
            );
            assert!(e["stageTimestamp"].as_str().unwrap().ends_with('Z'));
            (
                e["verb"].as_str().unwrap().to_string(),
                e["objectRef"].clone(),
                e["responseStatus"]["code"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn audit_log_records_every_write_with_its_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("audit.log");
    let c = DevCluster::start(DevClusterOptions {
        audit_log: Some(log.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(c.client());
    crds.create(&PostParams::default(), &webapp_crd())
        .await
        .unwrap();
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "WebApp"),
        "webapps",
    );
    let webapps: Api<DynamicObject> = Api::namespaced_with(c.client(), "default", &ar);
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"generateName": "app-"}, "spec": {"replicas": 1}
    }))
    .unwrap();
    let made = webapps.create(&PostParams::default(), &app).await.unwrap();
    let name = made.metadata.name.clone().unwrap();
    let patched = webapps
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    let mut with_status = patched.clone();
    with_status.data["status"] = json!({"ready": true});
    webapps
        .replace_status(&name, &PostParams::default(), &with_status)
        .await
        .unwrap();
    // Reads are not audited.
    webapps.get(&name).await.unwrap();
    webapps
        .delete(&name, &DeleteParams::default())
        .await
        .unwrap();

    let cms: Api<ConfigMap> = Api::namespaced(c.client(), "default");
    cms.create(&PostParams::default(), &cm("a", &[]))
        .await
        .unwrap();
    // A write refused by the server, and one answered by fault injection.
    let e = status(
        cms.create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);
    let mut config = kube::Config::new(c.url().parse().unwrap());
    config.default_retry = false;
    let no_retry: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    c.faults()
        .fail_next("/api/v1/namespaces/default/configmaps/a", 1, 500);
    let e = status(
        no_retry
            .patch(
                "a",
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": "w"}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 500);
    cms.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();

    let webapp = |name: Option<&str>, sub: Option<&str>| {
        let mut r = json!({"resource": "webapps", "namespace": "default",
            "apiGroup": "example.com", "apiVersion": "v1"});
        if let Some(n) = name {
            r["name"] = json!(n);
        }
        if let Some(s) = sub {
            r["subresource"] = json!(s);
        }
        r
    };
    let configmap = |name: Option<&str>| {
        let mut r = json!({"resource": "configmaps", "namespace": "default", "apiVersion": "v1"});
        if let Some(n) = name {
            r["name"] = json!(n);
        }
        r
    };
    let expected = vec![
        (
            "create",
            json!({"resource": "customresourcedefinitions", "name": "webapps.example.com",
                   "apiGroup": "apiextensions.k8s.io", "apiVersion": "v1"}),
            201,
        ),
        // The name of a create with generateName comes from the response.
        ("create", webapp(Some(&name), None), 201),
        ("patch", webapp(Some(&name), None), 200),
        ("update", webapp(Some(&name), Some("status")), 200),
        ("delete", webapp(Some(&name), None), 200),
        ("create", configmap(Some("a")), 201),
        // A refused create is named by its Status details.
        ("create", configmap(Some("a")), 409),
        ("patch", configmap(Some("a")), 500),
        ("deletecollection", configmap(None), 200),
    ];
    let got = read_audit(&log);
    let expected: Vec<(String, Value, u64)> = expected
        .into_iter()
        .map(|(v, r, code)| (v.to_string(), r, code))
        .collect();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn an_unwritable_audit_log_fails_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let err = DevCluster::start(DevClusterOptions {
        audit_log: Some(dir.path().join("missing").join("audit.log")),
        ..Default::default()
    })
    .await
    .err()
    .unwrap();
    assert!(
        matches!(err, devcluster::DevClusterError::AuditLog { .. }),
        "{err}"
    );
}
