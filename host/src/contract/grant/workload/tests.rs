use serde_json::json;

use super::*;

/// A Pod in `team` that meets `restricted` under the default grant.
fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team"},
        "spec": {
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "app", "image": "nginx",
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                },
            }],
        },
    })
}

/// Sets `value` at the JSON pointer `at`, creating objects on the way.
fn set_at(doc: &mut Value, at: &str, value: Value) {
    let mut here = doc;
    let parts: Vec<&str> = at.trim_start_matches('/').split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let last = i == parts.len() - 1;
        here = match here {
            Value::Array(list) => &mut list[part.parse::<usize>().unwrap()],
            Value::Object(map) => map.entry(part.to_string()).or_insert(json!({})),
            other => panic!("{at}: {other} is no container"),
        };
        if last {
            *here = value;
            return;
        }
    }
}

fn policy(level: PodSecurityLevel) -> WorkloadPolicy<'static> {
    WorkloadPolicy {
        level,
        service_accounts: &[],
        grant_account: None,
        secrets_granted: false,
    }
}

fn found(policy: &WorkloadPolicy<'_>, doc: &Value) -> Vec<(String, WorkloadRule)> {
    check_workload(policy, doc)
        .unwrap()
        .into_iter()
        .map(|v| (v.path, v.rule))
        .collect()
}

use PodSecurityLevel::{Baseline, Restricted};
const PRIVILEGED: PodSecurityLevel = PodSecurityLevel::Privileged;
use WorkloadRule::*;

#[test]
fn the_compliant_pod_passes_every_level() {
    for level in [Restricted, Baseline, PRIVILEGED] {
        assert_eq!(found(&policy(level), &pod()), vec![], "{level}");
    }
}

/// Every Pod Security rule: the field set, the path reported, the rule,
/// and the lowest level that refuses it (the next one up allows it).
#[test]
fn each_pod_security_rule_is_refused_at_its_level_with_its_path() {
    let c = "spec.containers[0]";
    let cases: Vec<(&str, Value, String, WorkloadRule)> = vec![
        (
            "/spec/hostNetwork",
            json!(true),
            "spec.hostNetwork".into(),
            HostNamespaces,
        ),
        (
            "/spec/hostPID",
            json!(true),
            "spec.hostPID".into(),
            HostNamespaces,
        ),
        (
            "/spec/hostIPC",
            json!("yes"),
            "spec.hostIPC".into(),
            HostNamespaces,
        ),
        (
            "/spec/containers/0/securityContext/privileged",
            json!(true),
            format!("{c}.securityContext.privileged"),
            Privileged,
        ),
        (
            "/spec/securityContext/windowsOptions/hostProcess",
            json!(true),
            "spec.securityContext.windowsOptions.hostProcess".into(),
            HostProcess,
        ),
        (
            "/spec/containers/0/securityContext/capabilities/add",
            json!(["NET_BIND_SERVICE", "SYS_ADMIN"]),
            format!("{c}.securityContext.capabilities.add[1]"),
            Capabilities,
        ),
        (
            "/spec/volumes",
            json!([{"name": "root", "hostPath": {"path": "/"}}]),
            "spec.volumes[0].hostPath".into(),
            HostPath,
        ),
        (
            "/spec/containers/0/ports",
            json!([{"containerPort": 80, "hostPort": 80}]),
            format!("{c}.ports[0].hostPort"),
            HostPorts,
        ),
        (
            "/spec/securityContext/sysctls",
            json!([{"name": "kernel.msgmax", "value": "1"}]),
            "spec.securityContext.sysctls[0].name".into(),
            Sysctls,
        ),
        (
            "/spec/containers/0/securityContext/procMount",
            json!("Unmasked"),
            format!("{c}.securityContext.procMount"),
            ProcMount,
        ),
        (
            "/spec/securityContext/seLinuxOptions/type",
            json!("spc_t"),
            "spec.securityContext.seLinuxOptions.type".into(),
            SeLinux,
        ),
        (
            "/spec/containers/0/securityContext/seLinuxOptions/user",
            json!("root"),
            format!("{c}.securityContext.seLinuxOptions.user"),
            SeLinux,
        ),
        (
            "/spec/containers/0/securityContext/appArmorProfile/type",
            json!("Unconfined"),
            format!("{c}.securityContext.appArmorProfile.type"),
            AppArmor,
        ),
        (
            "/metadata/annotations",
            json!({"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}),
            "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]".into(),
            AppArmor,
        ),
        (
            "/spec/containers/0/securityContext/seccompProfile/type",
            json!("Unconfined"),
            format!("{c}.securityContext.seccompProfile.type"),
            SeccompUnconfined,
        ),
        (
            "/spec/volumes",
            json!([{"name": "nfs", "nfs": {"server": "x", "path": "/"}}]),
            "spec.volumes[0].nfs".into(),
            VolumeTypes,
        ),
        (
            "/spec/containers/0/securityContext/allowPrivilegeEscalation",
            json!(true),
            format!("{c}.securityContext.allowPrivilegeEscalation"),
            PrivilegeEscalation,
        ),
        (
            "/spec/securityContext/runAsNonRoot",
            json!(false),
            format!("{c}.securityContext.runAsNonRoot"),
            RunAsNonRoot,
        ),
        (
            "/spec/securityContext/runAsUser",
            json!(0),
            "spec.securityContext.runAsUser".into(),
            RunAsUser,
        ),
        (
            "/spec/containers/0/securityContext/runAsUser",
            json!(0),
            format!("{c}.securityContext.runAsUser"),
            RunAsUser,
        ),
        (
            "/spec/securityContext/seccompProfile",
            json!(null),
            format!("{c}.securityContext.seccompProfile.type"),
            SeccompRequired,
        ),
        (
            "/spec/containers/0/securityContext/capabilities/drop",
            json!([]),
            format!("{c}.securityContext.capabilities.drop"),
            RestrictedCapabilities,
        ),
        (
            "/spec/containers/0/securityContext/capabilities/add",
            json!(["CHOWN"]),
            format!("{c}.securityContext.capabilities.add[0]"),
            RestrictedCapabilities,
        ),
    ];
    for (at, value, path, rule) in cases {
        let mut doc = pod();
        set_at(&mut doc, at, value.clone());
        let refusing = rule.level().unwrap();
        assert_eq!(
            found(&policy(refusing), &doc),
            vec![(path.clone(), rule)],
            "{at} = {value} at {refusing}"
        );
        if refusing == Baseline {
            assert_eq!(
                found(&policy(Restricted), &doc),
                vec![(path.clone(), rule)],
                "{at}: restricted includes baseline"
            );
            assert_eq!(
                found(&policy(PRIVILEGED), &doc),
                vec![],
                "{at} under privileged"
            );
        } else {
            assert_eq!(
                found(&policy(Baseline), &doc),
                vec![],
                "{at} under baseline"
            );
        }
    }
}

#[test]
fn allowed_values_of_the_pod_security_fields_pass_restricted() {
    for (at, value) in [
        (
            "/spec/containers/0/securityContext/capabilities/add",
            json!(["NET_BIND_SERVICE"]),
        ),
        (
            "/spec/securityContext/sysctls",
            json!([{"name": "net.ipv4.ip_local_port_range", "value": "1 2"}]),
        ),
        (
            "/spec/securityContext/seLinuxOptions",
            json!({"type": "container_init_t", "level": "s0:c1"}),
        ),
        (
            "/spec/containers/0/securityContext/seccompProfile",
            json!({"type": "Localhost", "localhostProfile": "p.json"}),
        ),
        (
            "/spec/containers/0/securityContext/appArmorProfile/type",
            json!("RuntimeDefault"),
        ),
        (
            "/metadata/annotations",
            json!({"container.apparmor.security.beta.kubernetes.io/app": "localhost/p"}),
        ),
        (
            "/spec/containers/0/ports",
            json!([{"containerPort": 80, "hostPort": 0}]),
        ),
        (
            "/spec/containers/0/securityContext/procMount",
            json!("Default"),
        ),
        (
            "/spec/volumes",
            json!([{"name": "c", "configMap": {"name": "c"}}, {"name": "e", "emptyDir": {}}, {"name": "v", "persistentVolumeClaim": {"claimName": "v"}}]),
        ),
        ("/spec/hostNetwork", json!(false)),
    ] {
        let mut doc = pod();
        set_at(&mut doc, at, value.clone());
        assert_eq!(found(&policy(Restricted), &doc), vec![], "{at} = {value}");
    }
    // Non-root and seccomp set per container instead of on the pod.
    let mut doc = pod();
    set_at(&mut doc, "/spec/securityContext", json!({}));
    set_at(
        &mut doc,
        "/spec/containers/0/securityContext/runAsNonRoot",
        json!(true),
    );
    set_at(
        &mut doc,
        "/spec/containers/0/securityContext/seccompProfile",
        json!({"type": "RuntimeDefault"}),
    );
    assert_eq!(found(&policy(Restricted), &doc), vec![]);
}

#[test]
fn init_and_ephemeral_containers_are_checked_too() {
    let mut doc = pod();
    let bad = json!({"name": "x", "image": "x", "securityContext": {"privileged": true}});
    set_at(&mut doc, "/spec/initContainers", json!([bad.clone()]));
    set_at(&mut doc, "/spec/ephemeralContainers", json!([bad]));
    let got = found(&policy(Baseline), &doc);
    assert_eq!(
        got,
        vec![
            (
                "spec.initContainers[0].securityContext.privileged".into(),
                Privileged
            ),
            (
                "spec.ephemeralContainers[0].securityContext.privileged".into(),
                Privileged
            ),
        ]
    );
}

#[test]
fn service_accounts_are_the_grants_whatever_the_level() {
    let mut doc = pod();
    set_at(&mut doc, "/spec/serviceAccountName", json!("wasm-operator"));
    for level in [Restricted, PRIVILEGED] {
        assert_eq!(
            found(&policy(level), &doc),
            vec![("spec.serviceAccountName".into(), ServiceAccount)]
        );
    }
    // The deprecated alias is checked the same way.
    let mut alias = pod();
    set_at(&mut alias, "/spec/serviceAccount", json!("wasm-operator"));
    assert_eq!(
        found(&policy(PRIVILEGED), &alias),
        vec![("spec.serviceAccount".into(), ServiceAccount)]
    );
    // Named in workloads.serviceAccounts: allowed, token or not.
    let named = ["wasm-operator".to_string()];
    let listed = WorkloadPolicy {
        service_accounts: &named,
        ..policy(Restricted)
    };
    set_at(&mut doc, "/spec/automountServiceAccountToken", json!(true));
    assert_eq!(found(&listed, &doc), vec![]);
    // The grant's own account, in its namespace only.
    let own = ServiceAccountRef {
        namespace: "team".into(),
        name: "wasm-operator".into(),
    };
    let granted = WorkloadPolicy {
        grant_account: Some(&own),
        ..policy(Restricted)
    };
    assert_eq!(found(&granted, &doc), vec![]);
    let elsewhere = ServiceAccountRef {
        namespace: "other".into(),
        name: "wasm-operator".into(),
    };
    let granted = WorkloadPolicy {
        grant_account: Some(&elsewhere),
        ..policy(Restricted)
    };
    assert_eq!(
        found(&granted, &doc),
        vec![("spec.serviceAccountName".into(), ServiceAccount)]
    );
}

#[test]
fn the_default_account_needs_its_token_off() {
    for (automount, expected) in [
        (json!(false), vec![]),
        (
            json!(true),
            vec![(
                "spec.automountServiceAccountToken".to_string(),
                ServiceAccount,
            )],
        ),
        (
            json!(null),
            vec![(
                "spec.automountServiceAccountToken".to_string(),
                ServiceAccount,
            )],
        ),
    ] {
        for name in [json!(null), json!("default"), json!("")] {
            let mut doc = pod();
            set_at(
                &mut doc,
                "/spec/automountServiceAccountToken",
                automount.clone(),
            );
            set_at(&mut doc, "/spec/serviceAccountName", name.clone());
            assert_eq!(
                found(&policy(PRIVILEGED), &doc),
                expected,
                "{automount} {name}"
            );
        }
    }
}

#[test]
fn a_projected_token_counts_as_running_as_the_account() {
    let mut doc = pod();
    set_at(
        &mut doc,
        "/spec/volumes",
        json!([{"name": "t", "projected": {"sources": [
            {"configMap": {"name": "c"}},
            {"serviceAccountToken": {"path": "token", "audience": "api"}},
        ]}}]),
    );
    assert_eq!(
        found(&policy(Restricted), &doc),
        vec![(
            "spec.volumes[0].projected.sources[1].serviceAccountToken".into(),
            ServiceAccount
        )],
        "automount off does not make a minted token fine"
    );
    let named = ["default".to_string()];
    let listed = WorkloadPolicy {
        service_accounts: &named,
        ..policy(Restricted)
    };
    assert_eq!(found(&listed, &doc), vec![]);
}

#[test]
fn every_secret_reference_needs_the_secret_kind() {
    let c = "spec.containers[0]";
    let cases: Vec<(&str, Value, String)> = vec![
        (
            "/spec/volumes",
            json!([{"name": "s", "secret": {"secretName": "cert"}}]),
            "spec.volumes[0].secret".into(),
        ),
        (
            "/spec/volumes",
            json!([{"name": "p", "projected": {"sources": [{"secret": {"name": "cert"}}]}}]),
            "spec.volumes[0].projected.sources[0].secret".into(),
        ),
        (
            "/spec/volumes",
            json!([{"name": "d", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "cert"}}}]),
            "spec.volumes[0].csi.nodePublishSecretRef".into(),
        ),
        (
            "/spec/volumes",
            json!([{"name": "f", "azureFile": {"secretName": "cert", "shareName": "s"}}]),
            "spec.volumes[0].azureFile.secretName".into(),
        ),
        (
            "/spec/volumes",
            json!([{"name": "r", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "cert"}}}]),
            "spec.volumes[0].rbd.secretRef".into(),
        ),
        (
            "/spec/containers/0/env",
            json!([{"name": "A", "value": "a"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "cert", "key": "k"}}}]),
            format!("{c}.env[1].valueFrom.secretKeyRef"),
        ),
        (
            "/spec/containers/0/envFrom",
            json!([{"secretRef": {"name": "cert"}}]),
            format!("{c}.envFrom[0].secretRef"),
        ),
        (
            "/spec/imagePullSecrets",
            json!([{"name": "cert"}]),
            "spec.imagePullSecrets[0]".into(),
        ),
    ];
    for (at, value, path) in cases {
        let mut doc = pod();
        set_at(&mut doc, at, value.clone());
        // Restricted volume types may add their own finding; the Secret one is always there.
        let got = found(&policy(PRIVILEGED), &doc);
        assert_eq!(got, vec![(path.clone(), Secret)], "{at} = {value}");
        let granted = WorkloadPolicy {
            secrets_granted: true,
            ..policy(PRIVILEGED)
        };
        assert_eq!(found(&granted, &doc), vec![], "{at} with Secrets granted");
    }
    let mut doc = pod();
    set_at(
        &mut doc,
        "/spec/containers/0/envFrom",
        json!([{"secretRef": {"name": "webhook-cert"}}]),
    );
    let text = check_workload(&policy(Restricted), &doc).unwrap()[0].to_string();
    assert!(text.contains("Secret \"webhook-cert\""), "{text}");
    assert!(text.contains("kind: Secret"), "{text}");
}

#[test]
fn every_pod_creating_kind_is_found_where_its_template_is() {
    let spec = pod()["spec"].clone();
    let mut bad = spec.clone();
    set_at(&mut bad, "/hostPID", json!(true));
    let template = |s: &Value| json!({"metadata": {}, "spec": s});
    for (api_version, kind, wrap, prefix) in [
        (
            "apps/v1",
            "Deployment",
            json!({"spec": {"template": template(&bad)}}),
            "spec.template.spec",
        ),
        (
            "apps/v1",
            "ReplicaSet",
            json!({"spec": {"template": template(&bad)}}),
            "spec.template.spec",
        ),
        (
            "apps/v1",
            "StatefulSet",
            json!({"spec": {"template": template(&bad)}}),
            "spec.template.spec",
        ),
        (
            "apps/v1",
            "DaemonSet",
            json!({"spec": {"template": template(&bad)}}),
            "spec.template.spec",
        ),
        (
            "batch/v1",
            "Job",
            json!({"spec": {"template": template(&bad)}}),
            "spec.template.spec",
        ),
        (
            "v1",
            "ReplicationController",
            json!({"spec": {"template": template(&bad)}}),
            "spec.template.spec",
        ),
        (
            "batch/v1",
            "CronJob",
            json!({"spec": {"jobTemplate": {"spec": {"template": template(&bad)}}}}),
            "spec.jobTemplate.spec.template.spec",
        ),
        (
            "v1",
            "PodTemplate",
            json!({"template": template(&bad)}),
            "template.spec",
        ),
        ("v1", "Pod", json!({"spec": bad}), "spec"),
    ] {
        let mut doc = wrap;
        doc["apiVersion"] = json!(api_version);
        doc["kind"] = json!(kind);
        doc["metadata"] = json!({"name": "w", "namespace": "team"});
        assert_eq!(
            found(&policy(Restricted), &doc),
            vec![(format!("{prefix}.hostPID"), HostNamespaces)],
            "{kind}"
        );
    }
    // Kinds that create no Pods are not looked at.
    let service = json!({"apiVersion": "v1", "kind": "Service", "spec": {"hostNetwork": true}});
    assert_eq!(found(&policy(Restricted), &service), vec![]);
    let foreign = json!({"apiVersion": "example.com/v1", "kind": "Deployment", "spec": {}});
    assert_eq!(found(&policy(Restricted), &foreign), vec![]);
}

#[test]
fn a_template_that_is_no_pod_spec_is_invalid() {
    for (doc, path) in [
        (
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}}),
            "spec.template",
        ),
        (json!({"apiVersion": "v1", "kind": "Pod"}), "spec"),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "spec": "run as root"}),
            "spec",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": {"a": 1}}}),
            "spec.containers",
        ),
        (
            json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": ["x"]}}),
            "spec.containers[0]",
        ),
    ] {
        let error = check_workload(&policy(PRIVILEGED), &doc).unwrap_err();
        assert_eq!(error.path, path, "{doc}");
    }
}

#[test]
fn a_violation_names_path_value_rule_and_what_the_grant_needs() {
    let mut doc = pod();
    set_at(
        &mut doc,
        "/spec/containers/0/securityContext/privileged",
        json!(true),
    );
    let text = check_workload(&policy(Baseline), &doc).unwrap()[0].to_string();
    assert_eq!(
        text,
        "`spec.containers[0].securityContext.privileged` is true: privileged containers are forbidden by baseline; the grant would need workloads.podSecurity: privileged"
    );
    assert_eq!(
        RunAsNonRoot.grant_needs(),
        "workloads.podSecurity: baseline"
    );
}

#[test]
fn the_workloads_field_parses_and_defaults_to_restricted() {
    let grant: WorkloadGrant =
        serde_yaml::from_str("podSecurity: baseline\nserviceAccounts: [builder]\n").unwrap();
    assert_eq!(grant.pod_security, Baseline);
    assert_eq!(grant.service_accounts, ["builder"]);
    let empty: WorkloadGrant = serde_yaml::from_str("{}").unwrap();
    assert_eq!(empty, WorkloadGrant::default());
    assert_eq!(empty.pod_security, Restricted);
    assert!(serde_yaml::from_str::<WorkloadGrant>("podSecurity: root").is_err());
    assert!(
        serde_yaml::from_str::<WorkloadGrant>("privileged: true").is_err(),
        "typos are errors"
    );
}
