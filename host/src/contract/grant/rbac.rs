//! The RBAC a grant needs when the plugin's writes impersonate its
//! ServiceAccount (`permissions.serviceAccount`), so the API server enforces
//! the grant a second time (`wasm-operator plugin rbac` prints it).
//!
//! What RBAC cannot say is refused rather than approximated: the restricted
//! default's "any kind that is not sensitive" (list the kinds in `own` and
//! `read`), and namespaces that are not a fixed list (the default "all but
//! the system ones", a selector). `kind: "*"` becomes `resources: ["*"]` of
//! its group, which RBAC cannot narrow to the non-sensitive kinds: the host
//! still refuses those. Plurals follow Kubernetes' rules for built-in kinds
//! (kube's pluralisation); custom kinds are assumed namespaced, built-in
//! cluster-scoped kinds (ClusterRoleBinding, Namespace, ...) go into a
//! ClusterRole.

use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde_json::{Value, json};

use super::{Grant, GroupKind, ServiceAccountRef};

/// Why a grant cannot be written as RBAC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RbacRefusal {
    /// The grant names no identity to bind.
    #[error(
        "the grant names no serviceAccount: RBAC binds the plugin's own identity; add `serviceAccount: {{namespace: NS, name: NAME}}` to the grant (its writes then impersonate it)"
    )]
    NoServiceAccount,
    /// The grant's kinds are the restricted default, which RBAC cannot say.
    #[error(
        "the grant has no `own` list: the restricted default (any kind that is not sensitive) cannot be written as RBAC without also allowing the sensitive kinds; list the kinds the plugin writes in `own` (and reads in `read`)"
    )]
    DefaultKinds,
    /// The grant's namespaces are not a fixed list.
    #[error(
        "the grant's namespaces are {0}, which RBAC cannot name; list them in `namespaces` (or `[\"*\"]` for every namespace)"
    )]
    Namespaces(String),
}

/// Verbs on kinds the plugin owns: the host applies, patches and prunes them.
const WRITE_VERBS: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];
/// Verbs on kinds the plugin only reads.
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];

/// Built-in kinds that are cluster-scoped (RBAC needs a ClusterRole and a
/// ClusterRoleBinding for them).
const CLUSTER_SCOPED: [(&str, &str); 16] = [
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("storage.k8s.io", "StorageClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("networking.k8s.io", "IngressClass"),
    ("node.k8s.io", "RuntimeClass"),
];

fn cluster_scoped(entry: &GroupKind) -> bool {
    CLUSTER_SCOPED
        .iter()
        .any(|(g, k)| *g == entry.group && *k == entry.kind)
}

/// The URL plural of `entry` (`*` stays `*`).
fn plural(entry: &GroupKind) -> String {
    if entry.kind == "*" {
        return "*".into();
    }
    ApiResource::from_gvk(&GroupVersionKind::gvk(&entry.group, "v1", &entry.kind)).plural
}

/// The rules for `entries` with `verbs`, plus `status` for written kinds.
fn rules<'a>(
    entries: impl Iterator<Item = &'a GroupKind>,
    verbs: &[&str],
    write: bool,
) -> Vec<Value> {
    let mut out = Vec::new();
    for entry in entries {
        let plural = plural(entry);
        out.push(json!({"apiGroups": [entry.group], "resources": [plural], "verbs": verbs}));
        if write {
            out.push(json!({
                "apiGroups": [entry.group],
                "resources": [format!("{plural}/status")],
                "verbs": ["get", "update", "patch"],
            }));
        }
    }
    out
}

fn subject(account: &ServiceAccountRef) -> Value {
    json!([{"kind": "ServiceAccount", "name": account.name, "namespace": account.namespace}])
}

fn role_ref(kind: &str, name: &str) -> Value {
    json!({"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name})
}

/// The objects `grant` needs, in apply order: the ServiceAccount, the Role
/// letting the host impersonate it (bind it to the host's own identity),
/// then a Role and RoleBinding per granted namespace (or one ClusterRole and
/// ClusterRoleBinding for `"*"`), and a ClusterRole and ClusterRoleBinding
/// for cluster-scoped kinds when `clusterScoped` is granted.
///
/// # Errors
///
/// [`RbacRefusal::NoServiceAccount`], [`RbacRefusal::DefaultKinds`],
/// [`RbacRefusal::Namespaces`]: what RBAC cannot express is refused.
pub fn rbac_objects(grant: &Grant) -> Result<Vec<Value>, RbacRefusal> {
    let account = grant
        .service_account
        .as_ref()
        .ok_or(RbacRefusal::NoServiceAccount)?;
    let own = grant.own.as_deref().ok_or(RbacRefusal::DefaultKinds)?;
    let read: Vec<&GroupKind> = grant
        .read
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|r| !own.contains(r))
        .collect();
    let namespaces: Option<&[String]> = if grant.all_namespaces() {
        None
    } else {
        Some(
            grant
                .fixed_namespaces()
                .ok_or_else(|| RbacRefusal::Namespaces(grant.describe_namespaces()))?,
        )
    };
    let name = format!("wasm-operator-plugin-{}", account.name);

    let mut namespaced = rules(
        own.iter().filter(|e| !cluster_scoped(e)),
        &WRITE_VERBS,
        true,
    );
    namespaced.extend(rules(
        read.iter().copied().filter(|e| !cluster_scoped(e)),
        &READ_VERBS,
        false,
    ));
    // The host records events on the primaries as the plugin.
    for group in ["events.k8s.io", ""] {
        namespaced.push(json!({"apiGroups": [group], "resources": ["events"], "verbs": ["create", "update", "patch"]}));
    }
    let mut cluster = Vec::new();
    if grant.cluster_scoped {
        cluster = rules(own.iter().filter(|e| cluster_scoped(e)), &WRITE_VERBS, true);
        cluster.extend(rules(
            read.iter().copied().filter(|e| cluster_scoped(e)),
            &READ_VERBS,
            false,
        ));
    }

    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": account.name, "namespace": account.namespace}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": format!("wasm-operator-impersonate-{}", account.name), "namespace": account.namespace,
                            "annotations": {"wasm-operator.dev/note": "bind this Role to the host's own ServiceAccount: it lets the host write as the plugin"}},
               "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": [account.name]}]}),
    ];
    match namespaces {
        None => {
            objects.push(
                json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                                "metadata": {"name": name}, "rules": namespaced}),
            );
            objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                                "metadata": {"name": name}, "roleRef": role_ref("ClusterRole", &name),
                                "subjects": subject(account)}));
        }
        Some(list) => {
            for ns in list {
                objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                                    "metadata": {"name": name, "namespace": ns}, "rules": namespaced}));
                objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                                    "metadata": {"name": name, "namespace": ns}, "roleRef": role_ref("Role", &name),
                                    "subjects": subject(account)}));
            }
        }
    }
    if !cluster.is_empty() {
        let cluster_name = format!("{name}-cluster");
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                            "metadata": {"name": cluster_name}, "rules": cluster}),
        );
        objects.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                            "metadata": {"name": cluster_name}, "roleRef": role_ref("ClusterRole", &cluster_name),
                            "subjects": subject(account)}));
    }
    Ok(objects)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gk(group: &str, kind: &str) -> GroupKind {
        GroupKind::new(group, kind)
    }

    fn grant() -> Grant {
        Grant {
            own: Some(vec![
                gk("example.com", "WebApp"),
                gk("apps", "Deployment"),
                gk("", "Service"),
                gk("rbac.authorization.k8s.io", "ClusterRoleBinding"),
            ]),
            read: Some(vec![gk("", "ConfigMap"), gk("", "Service")]),
            namespaces: Some(vec!["team-a".into(), "team-b".into()]),
            cluster_scoped: true,
            service_account: Some(ServiceAccountRef {
                namespace: "ops".into(),
                name: "webapp".into(),
            }),
            ..Grant::default()
        }
    }

    fn kinds(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| {
                format!(
                    "{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["namespace"].as_str().unwrap_or("-")
                )
            })
            .collect()
    }

    fn resources(rules: &Value) -> Vec<String> {
        rules
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                format!(
                    "{}:{}:{}",
                    r["apiGroups"][0].as_str().unwrap(),
                    r["resources"][0].as_str().unwrap(),
                    r["verbs"].as_array().unwrap().len()
                )
            })
            .collect()
    }

    #[test]
    fn a_role_per_namespace_and_a_cluster_role_for_cluster_scoped_kinds() {
        let objects = rbac_objects(&grant()).unwrap();
        assert_eq!(
            kinds(&objects),
            [
                "ServiceAccount/ops",
                "Role/ops",
                "Role/team-a",
                "RoleBinding/team-a",
                "Role/team-b",
                "RoleBinding/team-b",
                "ClusterRole/-",
                "ClusterRoleBinding/-",
            ]
        );
        assert_eq!(
            resources(&objects[2]["rules"]),
            [
                "example.com:webapps:7",
                "example.com:webapps/status:3",
                "apps:deployments:7",
                "apps:deployments/status:3",
                ":services:7",
                ":services/status:3",
                ":configmaps:3",
                "events.k8s.io:events:3",
                ":events:3",
            ]
        );
        assert_eq!(
            resources(&objects[6]["rules"]),
            [
                "rbac.authorization.k8s.io:clusterrolebindings:7",
                "rbac.authorization.k8s.io:clusterrolebindings/status:3",
            ]
        );
        let binding = &objects[3];
        assert_eq!(binding["roleRef"]["name"], "wasm-operator-plugin-webapp");
        assert_eq!(
            binding["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "webapp", "namespace": "ops"})
        );
        assert_eq!(objects[1]["rules"][0]["verbs"], json!(["impersonate"]));
        assert_eq!(objects[1]["rules"][0]["resourceNames"], json!(["webapp"]));
    }

    #[test]
    fn every_namespace_is_a_cluster_role_and_no_cluster_scoped_kinds_without_the_flag() {
        let mut g = grant();
        g.namespaces = Some(vec!["*".into()]);
        g.cluster_scoped = false;
        let objects = rbac_objects(&g).unwrap();
        assert_eq!(
            kinds(&objects),
            [
                "ServiceAccount/ops",
                "Role/ops",
                "ClusterRole/-",
                "ClusterRoleBinding/-"
            ]
        );
        assert!(
            !resources(&objects[2]["rules"])
                .iter()
                .any(|r| r.contains("clusterrolebindings"))
        );
    }

    #[test]
    fn what_rbac_cannot_say_is_refused() {
        let mut g = grant();
        g.service_account = None;
        assert!(matches!(
            rbac_objects(&g),
            Err(RbacRefusal::NoServiceAccount)
        ));
        let mut g = grant();
        g.own = None;
        assert!(matches!(rbac_objects(&g), Err(RbacRefusal::DefaultKinds)));
        let mut g = grant();
        g.namespaces = None;
        let error = rbac_objects(&g).unwrap_err().to_string();
        assert!(
            error.contains("kube-system") && error.contains("`namespaces`"),
            "{error}"
        );
        let mut g = grant();
        g.namespace_selector = Some(Default::default());
        assert!(matches!(rbac_objects(&g), Err(RbacRefusal::Namespaces(_))));
    }
}
