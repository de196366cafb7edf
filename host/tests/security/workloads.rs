//! Workloads are code, and code runs with the namespace's credentials: the
//! `hostile-workloads` plugin answers a Pod and a Deployment whose pod
//! templates run as the host's ServiceAccount, mount a Secret or the node's
//! `/`, run privileged in the node's namespaces or mint a ServiceAccount
//! token. Under the default grant each is refused whole
//! (`CapabilityDenied`, naming the field path), `Ready` is not True, and
//! neither the Pod nor the Deployment exists. A grant naming Secrets with
//! `podSecurity: baseline` writes the Secret-mounting one, and still
//! refuses the node's `/`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use serde_json::{Value, json};
use wasm_operator::contract::{Grant, GroupKind, PodSecurityLevel, WorkloadGrant};

use crate::support::{api_resource, condition, dynamic_api, get_json, wait_until};
use crate::{CONVERGE, Host, attack_kind};

const NS: &str = "default";
const PLUGIN: &str = "hostile_workloads";
/// The ServiceAccount the Helm chart gives the host (a grant may widen what
/// it reads, e.g. Secrets), created in the attacked namespace so that
/// the API server would admit a Pod running as it.
const HOST_ACCOUNT: &str = "wasm-operator";
/// The Secret holding the host's webhook certificate and key.
const WEBHOOK_SECRET: &str = "wasm-operator-webhook-cert";

fn pods(host: &Host) -> Api<DynamicObject> {
    dynamic_api(
        &host.client(),
        &api_resource("", "v1", "Pod", "pods"),
        Some(NS),
    )
}

fn deployments(host: &Host) -> Api<DynamicObject> {
    dynamic_api(
        &host.client(),
        &api_resource("apps", "v1", "Deployment", "deployments"),
        Some(NS),
    )
}

async fn create_service_account(host: &Host, name: &str) {
    let account = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        ..ServiceAccount::default()
    };
    Api::<ServiceAccount>::namespaced(host.client(), NS)
        .create(&PostParams::default(), &account)
        .await
        .unwrap_or_else(|e| panic!("creating ServiceAccount {NS}/{name}: {e}"));
}

async fn create_secret(host: &Host, name: &str) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        string_data: Some(BTreeMap::from([(
            "tls.key".to_string(),
            "-----BEGIN PRIVATE KEY-----".to_string(),
        )])),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(host.client(), NS)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("creating Secret {NS}/{name}: {e}"));
}

/// Creates the Attack `name` in `mode` and waits for its refusal:
/// `Degraded=True` and `Ready=False` with `CapabilityDenied`; then neither
/// its Pod nor its Deployment exists. Returns the condition's message.
async fn refused(host: &Host, name: &str, mode: &str) -> String {
    host.attack(NS, name, json!({"mode": mode})).await;
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    let attack = wait_until(
        &format!("Attack {name} ({mode}) to be refused with CapabilityDenied"),
        CONVERGE,
        || async {
            let a = get_json(&attacks, name).await.ok_or("Attack gone")?;
            let degraded = condition(&a, "Degraded").cloned().unwrap_or(Value::Null);
            if degraded["status"] == "True" && degraded["reason"] == "CapabilityDenied" {
                Ok(a)
            } else {
                Err(a.to_string())
            }
        },
    )
    .await;
    let ready = condition(&attack, "Ready").expect("a Ready condition");
    assert_eq!(ready["status"], "False", "{attack}");
    assert_eq!(ready["reason"], "CapabilityDenied", "{attack}");
    assert_nothing_written(host, name).await;
    condition(&attack, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn assert_nothing_written(host: &Host, name: &str) {
    let pod = format!("{name}-pod");
    let deployment = format!("{name}-deploy");
    assert!(
        get_json(&pods(host), &pod).await.is_none(),
        "Pod {pod} was written"
    );
    assert!(
        get_json(&deployments(host), &deployment).await.is_none(),
        "Deployment {deployment} was written"
    );
}

fn assert_names(message: &str, parts: &[&str]) {
    assert!(message.contains("plugin hostile-workloads"), "{message}");
    assert!(message.contains("nothing was written"), "{message}");
    for part in parts {
        assert!(message.contains(part), "{part}: {message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_running_as_the_hosts_service_account_is_refused() {
    let host = Host::start().await;
    create_service_account(&host, HOST_ACCOUNT).await;
    host.load(PLUGIN).await;
    let message = refused(&host, "run-as", "workload-run-as").await;
    assert_names(
        &message,
        &[
            "Pod default/run-as-pod: `spec.serviceAccountName` is \"wasm-operator\"",
            "Deployment default/run-as-deploy: `spec.template.spec.serviceAccountName` is \"wasm-operator\"",
            "workloads.serviceAccounts",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_mounting_a_secret_is_refused_without_a_secret_grant() {
    let host = Host::start().await;
    create_secret(&host, WEBHOOK_SECRET).await;
    host.load(PLUGIN).await;
    let message = refused(&host, "loot", "workload-secret").await;
    assert_names(
        &message,
        &[
            "Pod default/loot-pod: `spec.volumes[0].secret` is Secret \"wasm-operator-webhook-cert\"",
            "`spec.containers[0].envFrom[0].secretRef` is Secret \"wasm-operator-webhook-cert\"",
            "Deployment default/loot-deploy: `spec.template.spec.volumes[0].secret`",
            "the Secret kind ({group: \"\", kind: Secret}) named in own or read",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_privileged_and_host_namespaces_are_refused() {
    let host = Host::start().await;
    host.load(PLUGIN).await;
    let message = refused(&host, "node", "workload-host-path").await;
    assert_names(
        &message,
        &[
            "Pod default/node-pod: `spec.volumes[0].hostPath` is \"/\": hostPath volumes are forbidden by baseline",
            "Deployment default/node-deploy: `spec.template.spec.volumes[0].hostPath`",
            "workloads.podSecurity: privileged",
        ],
    );
    let message = refused(&host, "root", "workload-privileged").await;
    assert_names(
        &message,
        &[
            "Pod default/root-pod: `spec.hostNetwork` is true",
            "Pod default/root-pod: `spec.hostPID` is true",
            "Pod default/root-pod: `spec.containers[0].securityContext.privileged` is true",
            "Deployment default/root-deploy: `spec.template.spec.containers[0].securityContext.privileged` is true",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projected_service_account_token_is_refused() {
    let host = Host::start().await;
    host.load(PLUGIN).await;
    let message = refused(&host, "mint", "workload-token").await;
    assert_names(
        &message,
        &[
            "Pod default/mint-pod: `spec.volumes[0].projected.sources[0].serviceAccountToken` is a token of ServiceAccount \"default\"",
            "Deployment default/mint-deploy: `spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken`",
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_naming_secrets_at_baseline_writes_the_secret_mounting_workload() {
    let host = Host::start().await;
    create_secret(&host, "app-credentials").await;
    let grant = Grant {
        read: Some(vec![GroupKind::new("", "Secret")]),
        workloads: Some(WorkloadGrant {
            pod_security: PodSecurityLevel::Baseline,
            service_accounts: vec![],
        }),
        ..Grant::default()
    };
    host.load_with(PLUGIN, grant).await.unwrap();
    host.attack(
        NS,
        "granted",
        json!({"mode": "workload-secret", "target": "app-credentials"}),
    )
    .await;
    let attacks = dynamic_api(&host.client(), &attack_kind(), Some(NS));
    wait_until("the granted Attack to be Ready=True", CONVERGE, || async {
        let a = get_json(&attacks, "granted").await.ok_or("Attack gone")?;
        let ready = condition(&a, "Ready").cloned().unwrap_or(Value::Null);
        if ready["status"] == "True" {
            Ok(())
        } else {
            Err(a.to_string())
        }
    })
    .await;
    let pod = get_json(&pods(&host), "granted-pod")
        .await
        .expect("the granted Pod is written");
    assert_eq!(
        pod.pointer("/spec/volumes/0/secret/secretName"),
        Some(&json!("app-credentials")),
        "{pod}"
    );
    assert!(
        get_json(&deployments(&host), "granted-deploy")
            .await
            .is_some(),
        "the granted Deployment is written"
    );
    // The same grant still refuses what baseline forbids.
    let message = refused(&host, "still-node", "workload-host-path").await;
    assert_names(&message, &["`spec.volumes[0].hostPath` is \"/\""]);
}
