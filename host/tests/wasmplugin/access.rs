//! What a plugin cannot reach shows on its WasmPlugin: primaries in
//! namespaces its grant excludes are counted and named in
//! `status.outsideGrant` (with an `OutsideGrant` condition) without a write
//! to them, and a list or watch RBAC forbids is a `Forbidden` condition
//! naming the verb, the resource and the identity, which clears once the
//! RBAC is added.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::contract::ServiceAccountRef;
use wasm_operator::engine::EngineConfig;

use crate::support::{self, condition, get_json, wait_until};
use crate::{CONVERGE, Fixture, condition_is, digest, file_spec, write_atomically};

fn webapps(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    support::dynamic_api(
        client,
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(namespace),
    )
}

async fn create_webapp(client: &kube::Client, namespace: &str, name: &str) {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1, "image": "nginx:1.27", "port": 8080},
    }))
    .unwrap();
    webapps(client, namespace)
        .create(&PostParams::default(), &object)
        .await
        .unwrap_or_else(|e| panic!("creating WebApp {namespace}/{name}: {e}"));
}

async fn wait_deployment(client: &kube::Client, namespace: &str, name: &str) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait_until(
        &format!("the Deployment of WebApp {namespace}/{name}"),
        CONVERGE,
        || {
            let deployments = deployments.clone();
            async move {
                deployments
                    .get_opt(name)
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| "no Deployment yet".to_string())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primaries_outside_the_grant_are_counted_and_named_without_a_write_to_them() {
    let fx = Fixture::start().await;
    let client = fx.client();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "team-a"}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let webapp = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &webapp);
    let mut spec = file_spec(&path);
    spec["permissions"] = json!({"namespaces": ["team-a"]});
    fx.create("scoped", spec).await;
    fx.wait_serving("scoped", &digest(&webapp)).await;

    create_webapp(&client, "team-a", "inside").await;
    create_webapp(&client, "default", "b").await;
    create_webapp(&client, "default", "a").await;
    // The granted one is served: the controller saw the primaries.
    wait_deployment(&client, "team-a", "inside").await;

    let o = fx
        .wait_for(
            "scoped",
            "status.outsideGrant counts default/a and default/b",
            |o| {
                o.pointer("/status/outsideGrant/count") == Some(&json!(2))
                    && condition_is(o, "OutsideGrant", "True")
            },
        )
        .await;
    assert_eq!(
        o.pointer("/status/outsideGrant/examples"),
        Some(&json!(["default/a", "default/b"])),
        "{o}"
    );
    let outside = condition(&o, "OutsideGrant").unwrap();
    assert_eq!(outside["reason"], "OutsideGrant", "{o}");
    let message = outside["message"].as_str().unwrap();
    assert!(
        message.contains("default/a, default/b") && message.contains("spec.permissions.namespaces"),
        "{message}"
    );
    assert!(condition_is(&o, "Ready", "True"), "{o}");

    // Nothing was written to the objects outside the grant.
    for name in ["a", "b"] {
        let object = get_json(&webapps(&client, "default"), name)
            .await
            .expect("the WebApp exists");
        assert!(object.pointer("/metadata/finalizers").is_none(), "{object}");
        assert!(object.get("status").is_none(), "{object}");
        let annotations = object
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        assert!(
            !annotations.keys().any(|k| k.contains("wasm-operator")),
            "{object}"
        );
        let deployment = Api::<Deployment>::namespaced(client.clone(), "default")
            .get_opt(name)
            .await
            .unwrap();
        assert!(
            deployment.is_none(),
            "a child of default/{name} was created"
        );
    }
}

/// The host's identity for the RBAC test: everything the host needs except
/// list and watch of the plugin's primary kind (WebApps).
const LIMITED: &str = "host-limited";

fn limited_role(with_webapp_list: bool) -> Value {
    let mut webapp_verbs = vec!["get", "create", "update", "patch", "delete"];
    if with_webapp_list {
        webapp_verbs.extend(["list", "watch"]);
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": LIMITED},
        "rules": [
            {"apiGroups": ["", "apps", "coordination.k8s.io", "events.k8s.io",
                           "apiextensions.k8s.io", "wasm-operator.dev",
                           "admissionregistration.k8s.io", "authorization.k8s.io",
                           "discovery.k8s.io"],
             "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["example.com"], "resources": ["webapps"], "verbs": webapp_verbs},
            {"apiGroups": ["example.com"], "resources": ["webapps/status"], "verbs": ["*"]},
            {"nonResourceURLs": ["*"], "verbs": ["get"]},
        ],
    })
}

async fn apply(client: &kube::Client, group: &str, kind: &str, plural: &str, object: &Value) {
    let ar = support::api_resource(group, "v1", kind, plural);
    let namespace = object["metadata"]["namespace"].as_str();
    let name = object["metadata"]["name"].as_str().unwrap();
    support::dynamic_api(client, &ar, namespace)
        .patch(
            name,
            &PatchParams::apply("access-test").force(),
            &Patch::Apply(object),
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
}

async fn create_limited_identity(client: kube::Client) {
    apply(
        &client,
        "",
        "ServiceAccount",
        "serviceaccounts",
        &json!({"apiVersion": "v1", "kind": "ServiceAccount",
                "metadata": {"name": LIMITED, "namespace": "default"}}),
    )
    .await;
    apply(
        &client,
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        &limited_role(false),
    )
    .await;
    apply(
        &client,
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": LIMITED},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": LIMITED},
            "subjects": [{"kind": "ServiceAccount", "name": LIMITED, "namespace": "default"}],
        }),
    )
    .await;
    // The API server's RBAC authorizer learns of a new binding from its own
    // informers, a moment after the write: the host starts once the
    // identity can list WasmPlugins.
    let limited = wasm_operator::impersonating(
        client.clone(),
        &ServiceAccountRef {
            namespace: "default".into(),
            name: LIMITED.into(),
        },
    );
    let wasmplugins = support::dynamic_api(
        &limited,
        &support::api_resource("wasm-operator.dev", "v1alpha1", "WasmPlugin", "wasmplugins"),
        None,
    );
    wait_until(
        "the limited identity's binding to take effect",
        CONVERGE,
        || async {
            wasmplugins
                .list(&Default::default())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
}

/// The devcluster enforces no RBAC: only the real control plane answers 403.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_only_a_forbidden_list_is_a_forbidden_condition_that_heals_with_rbac() {
    if !support::real_only(
        "real_only_a_forbidden_list_is_a_forbidden_condition_that_heals_with_rbac",
        "RBAC enforced by the real control plane (WASM_OPERATOR_TEST_BACKEND=real)",
    ) {
        return;
    }
    let account = ServiceAccountRef {
        namespace: "default".into(),
        name: LIMITED.into(),
    };
    let fx = Fixture::start_as(EngineConfig::default(), create_limited_identity, |client| {
        wasm_operator::impersonating(client, &account)
    })
    .await;
    let webapp = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &webapp);
    fx.create("limited", file_spec(&path)).await;

    let o = fx
        .wait_for("limited", "a Forbidden condition", |o| {
            condition_is(o, "Forbidden", "True")
        })
        .await;
    let forbidden = condition(&o, "Forbidden").unwrap();
    assert_eq!(forbidden["reason"], "Forbidden", "{o}");
    let message = forbidden["message"].as_str().unwrap();
    for needle in [
        "list",
        "webapps",
        "system:serviceaccount:default:host-limited",
        "wasm-operator plugin rbac --wasm-plugin",
    ] {
        assert!(message.contains(needle), "{needle} in {message}");
    }

    // The RBAC is added: the watcher's retries list, the condition clears
    // and the plugin reconciles.
    apply(
        &fx.client(),
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        &limited_role(true),
    )
    .await;
    let o = fx
        .wait_for("limited", "the Forbidden condition cleared", |o| {
            condition(o, "Forbidden").is_none() && condition_is(o, "Ready", "True")
        })
        .await;
    assert!(o.pointer("/status/conditions").is_some(), "{o}");
    fx.assert_reconciles("healed").await;
}
