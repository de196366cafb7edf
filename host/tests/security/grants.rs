//! Grants: the cluster operator decides, the plugin asks. A manifest asking
//! for more than its grant is refused at load (PermissionDenied, naming each
//! excess, nothing written); a grant naming the kinds lets the same plugin
//! load (the check is the grant, not a hardcoded ban); namespaces in the
//! grant bound the primaries served and the cache reads; one primary kind is
//! served by one plugin (PrimaryKindConflict).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::contract::{Grant, GroupKind};
use wasm_operator::registry::{LoadedVersion, RegistryError};

use crate::support::{self, condition};
use crate::{CONVERGE, Host, attack_kind, full_hostile_grant};

fn gk(group: &str, kind: &str) -> GroupKind {
    GroupKind::new(group, kind)
}

pub(crate) async fn create_namespace(host: &Host, name: &str, labels: &[(&str, &str)]) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(host.client())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
}

pub(crate) async fn create_config_map(host: &Host, namespace: &str, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("k".to_string(), "v".to_string())])),
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(host.client(), namespace)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap_or_else(|e| panic!("creating ConfigMap {namespace}/{name}: {e}"));
}

pub(crate) async fn create_secret(host: &Host, namespace: &str, name: &str) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(namespace.to_string()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(
            "password".to_string(),
            "hunter2".to_string(),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(host.client(), namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("creating Secret {namespace}/{name}: {e}"));
}

/// The Attack `namespace/name` once `pred` holds.
pub(crate) async fn wait_attack(
    host: &Host,
    namespace: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let api = support::dynamic_api(&host.client(), &attack_kind(), Some(namespace));
    support::wait_for_value(
        what,
        CONVERGE,
        || {
            let api = api.clone();
            async move { support::get_json(&api, name).await.unwrap_or(Value::Null) }
        },
        |o| pred(o),
    )
    .await
}

fn permission_denied(result: Result<LoadedVersion, RegistryError>) -> String {
    match result {
        Err(error @ RegistryError::PermissionDenied(_)) => {
            assert_eq!(error.reason(), "PermissionDenied");
            assert!(error.is_rejection());
            error.to_string()
        }
        other => panic!("expected PermissionDenied, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_admin_binding_is_refused_at_load_and_nothing_is_written() {
    let host = Host::start().await;
    let message = permission_denied(host.try_load("hostile").await);
    for excess in [
        "owns v1 Secret",
        "owns rbac.authorization.k8s.io/v1 ClusterRoleBinding",
        "clusterScoped: true",
    ] {
        assert!(message.contains(excess), "{excess}: {message}");
    }
    assert!(message.contains("plugin hostile"), "{message}");
    assert!(host.registry.loaded().is_empty());
    let metrics = host.metrics.encode();
    assert!(
        metrics.lines().any(
            |l| l.starts_with("wasm_operator_plugin_version_refusals_total{")
                && l.contains("plugin=\"hostile\"")
                && l.contains("reason=\"PermissionDenied\"")
        ),
        "{metrics}"
    );

    // Nothing serves Attacks: the binding is never written, the Attack is
    // never touched.
    host.attack("default", "escalate", json!({"mode": "bind-cluster-admin"}))
        .await;
    let bindings = support::dynamic_api(
        &host.client(),
        &support::api_resource(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
        None,
    );
    assert!(
        support::get_json(&bindings, "hostile-escalate")
            .await
            .is_none()
    );
    let attacks = support::dynamic_api(&host.client(), &attack_kind(), Some("default"));
    let attack = support::get_json(&attacks, "escalate").await.unwrap();
    assert!(attack.pointer("/metadata/finalizers").is_none(), "{attack}");
    assert!(attack.get("status").is_none(), "{attack}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_secrets_is_refused_unless_secrets_are_granted() {
    let host = Host::start().await;
    // Everything but Secrets: refused, naming only the Secret.
    let mut grant = full_hostile_grant();
    if let Some(own) = grant.own.as_mut() {
        own.retain(|k| k.kind != "Secret");
    }
    let message = permission_denied(host.load_with("hostile", grant).await);
    assert!(message.contains("v1 Secret"), "{message}");
    assert!(message.contains("Secrets hold credentials"), "{message}");
    assert!(!message.contains("ClusterRoleBinding"), "{message}");
    assert!(host.registry.loaded().is_empty());

    // The same plugin with a grant naming every kind it asks for loads and
    // serves: the check is the grant, not a hardcoded ban.
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    host.attack("default", "fine", json!({"mode": "ok"})).await;
    let config_maps = Api::<ConfigMap>::namespaced(host.client(), "default");
    support::wait_for_value(
        "the ok Attack's ConfigMap child",
        CONVERGE,
        || {
            let api = config_maps.clone();
            async move { api.get_opt("fine-ok").await.ok().flatten().is_some() }
        },
        |found| *found,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_are_bounded_by_the_granted_namespaces() {
    let host = Host::start().await;
    create_namespace(&host, "team-a", &[]).await;
    create_config_map(&host, "kube-system", "cluster-config").await;
    create_secret(&host, "kube-system", "bootstrap-token").await;
    create_secret(&host, "team-a", "app-password").await;
    // Everything hostile asks for, in the default namespaces (every one but
    // kube-system, kube-public and kube-node-lease).
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();

    // A read naming kube-system is refused, with a clear condition.
    host.attack(
        "team-a",
        "peek",
        json!({"mode": "read-namespace", "target": "kube-system"}),
    )
    .await;
    let o = wait_attack(&host, "team-a", "peek", "CapabilityDenied on peek", |o| {
        condition(o, "Degraded").is_some_and(|c| c["reason"] == "CapabilityDenied")
    })
    .await;
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("kube-system") && message.contains("outside its grant"),
        "{message}"
    );
    assert!(o.pointer("/status/seen").is_none(), "{o}");

    // A list over every namespace answers only for the granted ones.
    host.attack("team-a", "loot", json!({"mode": "copy-secrets"}))
        .await;
    let o = wait_attack(&host, "team-a", "loot", "status.loot on loot", |o| {
        o.pointer("/status/loot").is_some()
    })
    .await;
    let loot = o.pointer("/status/loot").unwrap();
    assert!(loot.get("team-a.app-password").is_some(), "{loot}");
    assert!(loot.get("kube-system.bootstrap-token").is_none(), "{loot}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn primaries_outside_the_granted_namespaces_are_never_served() {
    let host = Host::start().await;
    create_namespace(&host, "team-a", &[]).await;
    create_namespace(&host, "team-b", &[("grant", "yes")]).await;
    create_namespace(&host, "team-c", &[]).await;
    let grant = Grant {
        namespaces: Some(vec!["team-a".into()]),
        namespace_selector: Some(wasm_operator::contract::NamespaceSelector {
            match_labels: BTreeMap::from([("grant".to_string(), "yes".to_string())]),
            ..Default::default()
        }),
        ..full_hostile_grant()
    };
    // Attacks outside the grant exist before the plugin loads (they are in
    // the initial list) and after.
    host.attack("team-c", "before", json!({"mode": "ok"})).await;
    host.attack("default", "before", json!({"mode": "ok"}))
        .await;
    host.load_with("hostile", grant).await.unwrap();
    host.attack("team-c", "after", json!({"mode": "ok"})).await;
    host.attack("team-a", "listed", json!({"mode": "ok"})).await;
    host.attack("team-b", "selected", json!({"mode": "ok"}))
        .await;

    for (ns, name) in [("team-a", "listed"), ("team-b", "selected")] {
        wait_attack(&host, ns, name, "a served Attack", |o| {
            condition(o, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await;
    }
    let api = |ns: &str| support::dynamic_api(&host.client(), &attack_kind(), Some(ns));
    for (ns, name) in [
        ("team-c", "before"),
        ("default", "before"),
        ("team-c", "after"),
    ] {
        let o = support::get_json(&api(ns), name).await.unwrap();
        assert!(o.pointer("/metadata/finalizers").is_none(), "{o}");
        assert!(o.get("status").is_none(), "{o}");
        let cm = Api::<ConfigMap>::namespaced(host.client(), ns)
            .get_opt(&format!("{name}-ok"))
            .await
            .unwrap();
        assert!(cm.is_none(), "{ns}/{name}-ok was written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_primary_needs_a_grant_and_stays_in_its_namespace() {
    let host = Host::start().await;
    let message = permission_denied(host.try_load("hostile_core").await);
    assert!(
        message.contains("reconciles v1 ConfigMap") && message.contains("built-in kind"),
        "{message}"
    );

    create_namespace(&host, "team-a", &[]).await;
    create_config_map(&host, "kube-system", "coredns").await;
    create_config_map(&host, "default", "user-config").await;
    let grant = Grant {
        own: Some(vec![gk("", "ConfigMap")]),
        namespaces: Some(vec!["team-a".into()]),
        ..Grant::default()
    };
    host.load_with("hostile_core", grant).await.unwrap();
    create_config_map(&host, "team-a", "mine").await;

    let config_maps = |ns: &str| Api::<ConfigMap>::namespaced(host.client(), ns);
    // Served in team-a: the host's finalizer arrives.
    support::wait_for_value(
        "the host's finalizer on team-a/mine",
        CONVERGE,
        || {
            let api = config_maps("team-a");
            async move {
                api.get("mine")
                    .await
                    .ok()
                    .and_then(|cm| cm.metadata.finalizers)
                    .unwrap_or_default()
            }
        },
        |finalizers| !finalizers.is_empty(),
    )
    .await;
    for (ns, name) in [("kube-system", "coredns"), ("default", "user-config")] {
        let cm = config_maps(ns).get(name).await.unwrap();
        assert!(
            cm.metadata.finalizers.unwrap_or_default().is_empty(),
            "{ns}/{name} got a finalizer"
        );
        let annotations = cm.metadata.annotations.unwrap_or_default();
        assert!(
            !annotations.keys().any(|k| k.contains("wasm-operator")),
            "{ns}/{name} got host annotations: {annotations:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_asking_more_than_its_grant_is_refused_and_the_old_keeps_serving() {
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    // The same plugin again (a new tag of an unpinned reference would be
    // the same call) under a grant that no longer covers its
    // ClusterRoleBindings: refused, the serving version keeps serving.
    let mut narrower = full_hostile_grant();
    narrower.cluster_scoped = false;
    let message = permission_denied(host.load_with("hostile", narrower).await);
    assert!(message.contains("keeps serving"), "{message}");
    assert!(message.contains("ClusterRoleBinding"), "{message}");
    let serving = host.registry.current("hostile").unwrap();
    assert_eq!(*serving.grant, full_hostile_grant());

    host.attack("default", "still", json!({"mode": "ok"})).await;
    wait_attack(&host, "default", "still", "the old version serving", |o| {
        condition(o, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_plugin_for_a_served_primary_kind_is_refused() {
    let host = Host::start().await;
    host.load_with("hostile", full_hostile_grant())
        .await
        .unwrap();
    let refused = host.try_load("hostile_liar").await;
    let error = match refused {
        Err(error @ RegistryError::PrimaryKindConflict { .. }) => error,
        other => panic!("expected PrimaryKindConflict, got {other:?}"),
    };
    assert_eq!(error.reason(), "PrimaryKindConflict");
    let message = error.to_string();
    assert!(
        message.contains("plugin hostile-liar")
            && message.contains("plugin hostile already serves")
            && message.contains("test.wasm-operator.dev/Attack"),
        "{message}"
    );
    let loaded: Vec<String> = host.registry.loaded().into_iter().map(|l| l.name).collect();
    assert_eq!(loaded, ["hostile"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_of_a_plugin_with_a_service_account_go_through_its_impersonating_client() {
    // The devcluster enforces no RBAC and ignores Impersonate-User: there this
    // proves the impersonating client carries every write over real HTTP. On
    // the real control plane RBAC enforces the grant: the writes are refused
    // (403) until `wasm-operator plugin rbac`'s objects are applied, and
    // converge after.
    let host = Host::start().await;
    let grant = Grant {
        service_account: Some(wasm_operator::contract::ServiceAccountRef {
            namespace: "default".into(),
            name: "hostile".into(),
        }),
        // RBAC cannot express "every namespace but the system ones".
        namespaces: Some(vec!["default".into()]),
        ..full_hostile_grant()
    };
    host.load_with("hostile", grant.clone()).await.unwrap();
    host.attack("default", "as-itself", json!({"mode": "ok"}))
        .await;
    if !host.cluster.is_dev() {
        support::wait_until(
            "the host's first write as the plugin to be refused (403, ApplyRejected)",
            CONVERGE,
            || async {
                let text = host.metrics.encode();
                text.lines()
                    .find(|l| {
                        l.starts_with("wasm_operator_refusals")
                            && l.contains("plugin=\"hostile\"")
                            && l.contains("reason=\"ApplyRejected\"")
                    })
                    .map(|_| ())
                    .ok_or(text)
            },
        )
        .await;
        let o = support::get_json(
            &support::dynamic_api(&host.client(), &attack_kind(), Some("default")),
            "as-itself",
        )
        .await
        .expect("the Attack exists");
        assert!(
            o.pointer("/metadata/finalizers").is_none(),
            "nothing may be written as the plugin before RBAC allows it: {o}"
        );
        apply_rbac(&host.client(), &grant).await;
        // A refusal is permanent until the object's spec changes: change it
        // (`target` means nothing to mode "ok").
        support::dynamic_api(&host.client(), &attack_kind(), Some("default"))
            .patch(
                "as-itself",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"target": "rbac-applied"}})),
            )
            .await
            .unwrap();
    }
    let o = wait_attack(&host, "default", "as-itself", "Ready on as-itself", |o| {
        condition(o, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert!(o.pointer("/metadata/finalizers").is_some(), "{o}");
    let child = Api::<ConfigMap>::namespaced(host.client(), "default")
        .get_opt("as-itself-ok")
        .await
        .unwrap();
    assert!(child.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_left_outside_a_narrowed_grant_is_released_not_stuck() {
    let host = Host::start().await;
    create_namespace(&host, "team-a", &[]).await;
    create_namespace(&host, "team-b", &[]).await;
    let grant = |namespaces: &[&str]| Grant {
        own: Some(vec![gk("", "ConfigMap")]),
        namespaces: Some(namespaces.iter().map(ToString::to_string).collect()),
        ..Grant::default()
    };
    host.load_with("hostile_core", grant(&["team-a", "team-b"]))
        .await
        .unwrap();
    create_config_map(&host, "team-b", "was-granted").await;
    let team_b = Api::<ConfigMap>::namespaced(host.client(), "team-b");
    support::wait_for_value(
        "the host's finalizer on team-b/was-granted",
        CONVERGE,
        || {
            let api = team_b.clone();
            async move {
                api.get("was-granted")
                    .await
                    .ok()
                    .and_then(|cm| cm.metadata.finalizers)
                    .unwrap_or_default()
            }
        },
        |finalizers| !finalizers.is_empty(),
    )
    .await;

    // The grant narrows to team-a; then the team-b object is deleted: the
    // host releases its finalizer instead of leaving it Terminating.
    host.load_with("hostile_core", grant(&["team-a"]))
        .await
        .unwrap();
    team_b
        .delete("was-granted", &Default::default())
        .await
        .unwrap();
    support::wait_for_value(
        "team-b/was-granted to be gone",
        CONVERGE,
        || {
            let api = team_b.clone();
            async move { api.get_opt("was-granted").await.ok().flatten().is_none() }
        },
        |gone| *gone,
    )
    .await;
}

/// Applies what `wasm-operator plugin rbac` prints for `grant` (server-side
/// apply, as `kubectl apply` would).
async fn apply_rbac(client: &kube::Client, grant: &Grant) {
    let objects =
        wasm_operator::cli::rbac::rbac_objects(grant).expect("the grant is expressible in RBAC");
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default().to_string();
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let plural = match kind.as_str() {
            "ServiceAccount" => "serviceaccounts",
            "Role" => "roles",
            "RoleBinding" => "rolebindings",
            "ClusterRole" => "clusterroles",
            "ClusterRoleBinding" => "clusterrolebindings",
            other => panic!("plugin rbac printed an unexpected kind {other}"),
        };
        let ar = support::api_resource(group, version, &kind, plural);
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let namespace = object["metadata"]["namespace"].as_str();
        support::dynamic_api(client, &ar, namespace)
            .patch(
                &name,
                &PatchParams::apply("rbac-test").force(),
                &Patch::Apply(&object),
            )
            .await
            .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }
}
