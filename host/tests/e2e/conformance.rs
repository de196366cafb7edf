//! What a newcomer sees through kubectl, and the limits kube-apiserver
//! enforces, the same on both backends (docs/conformance.md): the host's
//! events (written through events.k8s.io/v1) read, listed, watched and
//! field-selected through core v1 too; a group's preferred version by
//! Kubernetes' version priority; request bodies over 3 MiB and invalid names
//! refused with kube-apiserver's status and words.

use std::path::Path;
use std::process::{Command, Output};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Namespace};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::Role;
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use serde_json::{Value, json};
use wasm_operator::wasmplugin;

use crate::support::{self, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, webapp_kind};

const NS: &str = "default";

/// Runs kubectl against the test cluster; its output, which must be a success.
async fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let mut command = Command::new("kubectl");
    command.arg("--kubeconfig").arg(kubeconfig).args(args);
    let what = format!("kubectl {}", args.join(" "));
    let output: Output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: cannot run kubectl: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{what} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The items of a `kubectl get … -o json` list.
/// The first object a watch adds, within [`CONVERGE`]; panics naming `what`.
async fn first_added<K>(
    stream: &mut (impl futures::Stream<Item = Result<WatchEvent<K>, kube::Error>> + Unpin),
    what: &str,
) -> K {
    let added = tokio::time::timeout(CONVERGE, async {
        while let Some(event) = stream.try_next().await.unwrap() {
            if let WatchEvent::Added(object) = event {
                return Some(object);
            }
        }
        None
    })
    .await;
    match added {
        Ok(Some(object)) => object,
        Ok(None) => panic!("the watch ended before {what} was added"),
        Err(_) => panic!("no watch event for {what} within {CONVERGE:?}"),
    }
}

fn items(list: &str) -> Vec<Value> {
    let list: Value = serde_json::from_str(list).unwrap_or_else(|e| panic!("{e}: {list}"));
    list["items"].as_array().cloned().unwrap_or_default()
}

/// The host records an event about a WasmPlugin (its controller, `Loaded`),
/// and an event about a WebApp is recorded as the host records a plugin's
/// (kube's Recorder), both through events.k8s.io/v1; kubectl shows them through core v1 (`get events
/// --field-selector involvedObject.kind=…`, `describe`), a core v1 watch
/// sees them, and the events.k8s.io field labels select them too; an event
/// written through core v1 is watched and read through events.k8s.io.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_the_hosts_events_through_both_event_apis() {
    let host = Host::builder()
        .crd("wasmplugin")
        .crd("webapp")
        .start()
        .await;
    let client = host.client();
    host.manager.serve_wasmplugins().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("webapp.wasm");
    std::fs::write(&path, support::plugin_bytes("webapp")).unwrap();
    let plugin: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": "webapp"},
        "spec": {"source": {"file": {"path": path.display().to_string()}}},
    }))
    .unwrap();
    Api::<DynamicObject>::all_with(client.clone(), &wasmplugin::api_resource())
        .create(&PostParams::default(), &plugin)
        .await
        .unwrap();
    wait_until("the Loaded event of WasmPlugin webapp", CONVERGE, || {
        let client = client.clone();
        async move {
            let events = support::events_about(&client, NS, Some("WasmPlugin"), "webapp").await;
            match events.iter().any(|(_, reason, _)| reason == "Loaded") {
                true => Ok(()),
                false => Err(format!("{events:?}")),
            }
        }
    })
    .await;
    let kubeconfig = host.cluster.kubeconfig_path().to_path_buf();

    // Core v1, selected on involvedObject.kind, as kubectl users do.
    let core = items(
        &kubectl(
            &kubeconfig,
            &[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "involvedObject.kind=WasmPlugin",
                "-o",
                "json",
            ],
        )
        .await,
    );
    let loaded = core
        .iter()
        .find(|e| e["reason"] == "Loaded" && e["involvedObject"]["name"] == "webapp")
        .unwrap_or_else(|| {
            panic!("no Loaded event about WasmPlugin webapp through core v1: {core:?}")
        });
    assert_eq!(loaded["apiVersion"], "v1", "{loaded}");
    assert_eq!(loaded["involvedObject"]["kind"], "WasmPlugin", "{loaded}");
    assert_eq!(loaded["type"], "Normal", "{loaded}");
    assert!(
        loaded["message"]
            .as_str()
            .is_some_and(|m| m.contains("webapp")),
        "{loaded}"
    );
    let reporter = loaded["reportingComponent"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reporter.starts_with("wasm-operator"), "{loaded}");
    assert!(
        core.iter()
            .all(|e| e["involvedObject"]["kind"] == "WasmPlugin"),
        "the field selector let other kinds through: {core:?}"
    );
    let table = kubectl(
        &kubeconfig,
        &[
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "involvedObject.kind=WasmPlugin",
        ],
    )
    .await;
    assert!(
        table
            .lines()
            .any(|l| l.contains("Loaded") && l.contains("wasmplugin/webapp")),
        "{table}"
    );
    // The same event through events.k8s.io/v1 and its own field labels.
    let selector =
        format!("regarding.kind=WasmPlugin,regarding.name=webapp,reportingController={reporter}");
    let events = items(
        &kubectl(
            &kubeconfig,
            &[
                "get",
                "events.v1.events.k8s.io",
                "-n",
                NS,
                "--field-selector",
                &selector,
                "-o",
                "json",
            ],
        )
        .await,
    );
    let same = events
        .iter()
        .find(|e| e["metadata"]["uid"] == loaded["metadata"]["uid"])
        .unwrap_or_else(|| panic!("the Loaded event is missing through events.k8s.io: {events:?}"));
    assert_eq!(same["note"], loaded["message"], "{same}");
    assert_eq!(same["regarding"], loaded["involvedObject"], "{same}");

    // A WebApp's event, watched through core v1 while it is written through events.k8s.io.
    let webapps = dynamic_api(&client, &webapp_kind(), Some(NS));
    let app: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": NS},
        "spec": {"replicas": 1, "image": "nginx:1.27", "port": 8080},
    }))
    .unwrap();
    let app = webapps.create(&PostParams::default(), &app).await.unwrap();
    let core_events: Api<CoreEvent> = Api::namespaced(client.clone(), NS);
    let watch = WatchParams::default()
        .fields("involvedObject.kind=WebApp,involvedObject.name=shop,reason=Configured");
    let list_rv = core_events
        .list(&ListParams::default().fields("involvedObject.name=shop"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = core_events.watch(&watch, &list_rv).await.unwrap().boxed();
    // What the host's event sink does for a plugin's event (kube's Recorder,
    // events.k8s.io/v1, reporting as the plugin's field manager).
    let reporter = Reporter {
        controller: "wasm-operator/webapp".into(),
        instance: Some("host-0".into()),
    };
    let event = KubeEvent {
        type_: EventType::Normal,
        reason: "Configured".into(),
        note: Some("wrote the settings of shop".into()),
        action: "Reconcile".into(),
        secondary: None,
    };
    Recorder::new(client.clone(), reporter)
        .publish(&event, &app.object_ref(&webapp_kind()))
        .await
        .unwrap();
    let watched = first_added(&mut stream, "the core v1 Event of the WebApp's event").await;
    assert_eq!(
        watched.message.as_deref(),
        Some("wrote the settings of shop")
    );
    assert_eq!(watched.involved_object.uid, app.metadata.uid);
    let described = kubectl(&kubeconfig, &["describe", "webapp", "shop", "-n", NS]).await;
    let events_section = described
        .split("Events:")
        .nth(1)
        .unwrap_or_else(|| panic!("no Events section: {described}"));
    assert!(
        events_section.contains("Configured")
            && events_section.contains("wrote the settings of shop"),
        "{described}"
    );
    // Through events.k8s.io the typed client reads the note.
    let typed: Api<Event> = Api::namespaced(client.clone(), NS);
    let notes: Vec<String> = typed
        .list(&ListParams::default().fields("regarding.name=shop,reason=Configured"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.note)
        .collect();
    assert_eq!(notes, ["wrote the settings of shop"]);

    // The other way: an event written through core v1 (as client-go's legacy
    // recorder writes them), watched and selected through events.k8s.io.
    let list_rv = typed
        .list(&ListParams::default().fields("regarding.name=shop"))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap_or_default();
    let watch =
        WatchParams::default().fields("regarding.kind=WebApp,regarding.name=shop,reason=Scaled");
    let mut stream = typed.watch(&watch, &list_rv).await.unwrap().boxed();
    let legacy: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "shop.legacy", "namespace": NS},
        "involvedObject": {"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop",
                           "namespace": NS, "uid": app.metadata.uid},
        "reason": "Scaled", "message": "scaled shop to 1", "type": "Normal", "count": 3,
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:05:00Z",
        "source": {"component": "legacy-controller"},
    }))
    .unwrap();
    core_events
        .create(&PostParams::default(), &legacy)
        .await
        .unwrap();
    let watched = first_added(&mut stream, "the events.k8s.io Event of the core v1 event").await;
    assert_eq!(watched.note.as_deref(), Some("scaled shop to 1"));
    assert_eq!(watched.deprecated_count, Some(3));
    let source = watched.deprecated_source.and_then(|s| s.component);
    assert_eq!(source.as_deref(), Some("legacy-controller"));
    assert_eq!(watched.regarding.and_then(|r| r.uid), app.metadata.uid);
    let by_source = items(
        &kubectl(
            &kubeconfig,
            &[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "source=legacy-controller",
                "-o",
                "json",
            ],
        )
        .await,
    );
    let names: Vec<&Value> = by_source.iter().map(|e| &e["metadata"]["name"]).collect();
    assert_eq!(names, [&json!("shop.legacy")]);
    host.manager.shutdown().await;
}

/// A CRD serving v1 and v2, listed as [v1, v2]: discovery prefers v2 and
/// lists it first, as kube-apiserver does, so `kubectl patch` of a v2-only
/// field through the plain resource name patches v2 (it used to patch v1,
/// print `patched (no change)` and prune the field).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_prefers_the_highest_version_and_kubectl_patches_through_it() {
    let host = Host::builder().start().await;
    let client = host.client();
    let group = "priority.wasm-operator.test";
    let schema = |fields: Value| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": fields}}}})
    };
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("gadgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false,
                 "schema": schema(json!({"size": {"type": "integer"}}))},
                {"name": "v2", "served": true, "storage": true,
                 "schema": schema(json!({"size": {"type": "integer"}, "color": {"type": "string"}}))},
            ]},
    });
    let dir = tempfile::tempdir().unwrap();
    let crd_path = dir.path().join("crd.yaml");
    std::fs::write(&crd_path, serde_json::to_string(&crd).unwrap()).unwrap();
    support::install_crd(&client, &crd_path).await;

    let doc: Value = wait_until("the group in discovery", CONVERGE, || {
        let client = client.clone();
        async move {
            let request = http::Request::get(format!("/apis/{group}"))
                .body(Vec::new())
                .unwrap();
            client
                .request::<Value>(request)
                .await
                .map_err(|e| e.to_string())
        }
    })
    .await;
    assert_eq!(doc["preferredVersion"]["version"], "v2", "{doc}");
    let order: Vec<&Value> = doc["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["version"])
        .collect();
    assert_eq!(order, [&json!("v2"), &json!("v1")], "{doc}");
    let request = http::Request::get("/apis").body(Vec::new()).unwrap();
    let groups: Value = client.request(request).await.unwrap();
    let listed = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == group)
        .unwrap_or_else(|| panic!("{group} missing from /apis: {groups}"));
    assert_eq!(listed["preferredVersion"]["version"], "v2", "{listed}");

    let kubeconfig = host.cluster.kubeconfig_path().to_path_buf();
    let manifest = dir.path().join("gadget.json");
    let gadget = json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "a", "namespace": NS}, "spec": {"size": 1}});
    std::fs::write(&manifest, gadget.to_string()).unwrap();
    kubectl(&kubeconfig, &["create", "-f", manifest.to_str().unwrap()]).await;
    let patched = kubectl(
        &kubeconfig,
        &[
            "patch",
            "gadgets",
            "a",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"color":"blue"}}"#,
        ],
    )
    .await;
    assert!(!patched.contains("no change"), "{patched}");
    let color = kubectl(
        &kubeconfig,
        &[
            "get",
            "gadget",
            "a",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.color}",
        ],
    )
    .await;
    assert_eq!(color, "blue");
    let plain = kubectl(
        &kubeconfig,
        &["get", "gadgets", "a", "-n", NS, "-o", "json"],
    )
    .await;
    let plain: Value = serde_json::from_str(&plain).unwrap();
    assert_eq!(plain["apiVersion"], format!("{group}/v2"), "{plain}");
    host.manager.shutdown().await;
}

/// The status of a refused write, from the client's error.
fn refusal(result: Result<impl std::fmt::Debug, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected the API server to refuse the write, got {other:?}"),
    }
}

/// kube-apiserver reads at most 3 MiB of a request body (`MaxRequestBodyBytes`):
/// more is 413 `RequestEntityTooLarge`, `Request entity too large: limit is 3145728`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_body_over_three_mebibytes_is_too_large() {
    let host = Host::builder().start().await;
    let config_maps: Api<ConfigMap> = Api::namespaced(host.client(), NS);
    let big: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "big"}, "data": {"blob": "x".repeat(3 * 1024 * 1024 + 1)},
    }))
    .unwrap();
    let status = refusal(config_maps.create(&PostParams::default(), &big).await);
    assert_eq!(status.code, 413, "{status:?}");
    assert_eq!(status.reason, "RequestEntityTooLarge", "{status:?}");
    assert_eq!(status.message, "Request entity too large: limit is 3145728");
    assert!(
        get_json(
            &dynamic_api(
                &host.client(),
                &support::api_resource("", "v1", "ConfigMap", "configmaps"),
                Some(NS)
            ),
            "big"
        )
        .await
        .is_none()
    );
    host.manager.shutdown().await;
}

/// Names are validated as kube-apiserver validates them: a DNS-1123 subdomain
/// for most kinds, a label for Namespaces, a path segment for RBAC objects;
/// `generateName` too, reported with the name it generated (422 Invalid with
/// one cause per problem, upstream's words).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_names_are_refused_with_kube_apiservers_words() {
    let host = Host::builder().start().await;
    let client = host.client();
    let subdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let named = |metadata: Value| -> ConfigMap {
        serde_json::from_value(json!({ "metadata": metadata })).unwrap()
    };

    let status = refusal(
        config_maps
            .create(&PostParams::default(), &named(json!({"name": "Bad_Name"})))
            .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{status:?}"
    );
    assert_eq!(
        status.message,
        format!(
            "ConfigMap \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": {subdomain}"
        )
    );

    let status = refusal(
        config_maps
            .create(
                &PostParams::default(),
                &named(json!({"generateName": "Bad_"})),
            )
            .await,
    );
    assert_eq!(status.code, 422, "{status:?}");
    assert!(
        status.message.starts_with("ConfigMap \"Bad_")
            && status.message.contains(&format!("[metadata.generateName: Invalid value: \"Bad_\": {subdomain}, metadata.name: Invalid value: \"Bad_")),
        "{}",
        status.message
    );

    let namespaces: Api<Namespace> = Api::all(client.clone());
    let dotted: Namespace = serde_json::from_value(json!({"metadata": {"name": "a.b"}})).unwrap();
    let status = refusal(namespaces.create(&PostParams::default(), &dotted).await);
    assert_eq!(
        status.message,
        "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots"
    );

    // RBAC names are path segments: colons are fine, a slash is not.
    let roles: Api<Role> = Api::namespaced(client.clone(), NS);
    let role = |name: &str| -> Role {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    };
    roles
        .create(&PostParams::default(), &role("wasm-operator:reader"))
        .await
        .unwrap();
    let status = refusal(roles.create(&PostParams::default(), &role("a:b/c")).await);
    assert_eq!(
        status.message,
        "Role.rbac.authorization.k8s.io \"a:b/c\" is invalid: metadata.name: Invalid value: \"a:b/c\": may not contain '/'"
    );
    // A generateName may end with '-'.
    let generated = config_maps
        .create(
            &PostParams::default(),
            &named(json!({"generateName": "settings-"})),
        )
        .await
        .unwrap();
    assert!(generated.metadata.name.unwrap().starts_with("settings-"));
    host.manager.shutdown().await;
}
