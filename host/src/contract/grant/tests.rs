use super::*;
use crate::contract::OptionalInterfaces;

fn kind(group: &str, version: &str, kind: &str, plural: &str, scope: Scope) -> ResourceKind {
    ResourceKind {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        scope,
    }
}

fn webapp() -> ResourceKind {
    kind("example.com", "v1", "WebApp", "webapps", Scope::Namespaced)
}
fn attack() -> ResourceKind {
    kind(
        "test.wasm-operator.dev",
        "v1",
        "Attack",
        "attacks",
        Scope::Namespaced,
    )
}
fn deployment() -> ResourceKind {
    kind("apps", "v1", "Deployment", "deployments", Scope::Namespaced)
}
fn service() -> ResourceKind {
    kind("", "v1", "Service", "services", Scope::Namespaced)
}
fn configmap() -> ResourceKind {
    kind("", "v1", "ConfigMap", "configmaps", Scope::Namespaced)
}
fn secret() -> ResourceKind {
    kind("", "v1", "Secret", "secrets", Scope::Namespaced)
}
fn crb() -> ResourceKind {
    kind(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        Scope::Cluster,
    )
}
fn role() -> ResourceKind {
    kind(
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        Scope::Namespaced,
    )
}

fn manifest(
    primary: ResourceKind,
    owns: Vec<ResourceKind>,
    watches: Vec<ResourceKind>,
) -> Manifest {
    Manifest {
        name: "p".into(),
        version: "1.0.0".into(),
        description: String::new(),
        primary,
        owns,
        watches,
        finalizer: false,
        implements: OptionalInterfaces::default(),
        min_compatible_version: None,
    }
}

fn gk(group: &str, kind: &str) -> GroupKind {
    GroupKind::new(group, kind)
}

fn problems(grant: &Grant, m: &Manifest) -> Vec<(Access, String, ExcessKind)> {
    grant
        .check(m)
        .into_iter()
        .map(|e| (e.access, e.kind.kind, e.problem))
        .collect()
}

#[test]
fn the_default_grant_serves_an_ordinary_plugin() {
    let m = manifest(webapp(), vec![deployment(), service()], vec![configmap()]);
    assert!(Grant::default().check(&m).is_empty());
}

#[test]
fn the_default_grant_refuses_every_sensitive_kind_and_names_each() {
    let m = manifest(attack(), vec![configmap(), secret(), crb()], vec![secret()]);
    let got = problems(&Grant::default(), &m);
    assert_eq!(
        got,
        vec![
            (
                Access::Own,
                "Secret".into(),
                ExcessKind::Sensitive("Secrets hold credentials")
            ),
            (
                Access::Own,
                "ClusterRoleBinding".into(),
                ExcessKind::ClusterScoped
            ),
        ]
    );
    let message = Grant::default().check(&m)[1].to_string();
    assert!(
        message.contains("owns rbac.authorization.k8s.io/v1 ClusterRoleBinding"),
        "{message}"
    );
    assert!(message.contains("clusterScoped: true"), "{message}");
}

#[test]
fn a_watched_secret_is_refused_by_default() {
    let m = manifest(webapp(), vec![], vec![secret()]);
    let got = problems(&Grant::default(), &m);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0, Access::Read);
    assert!(
        Grant::default().check(&m)[0]
            .to_string()
            .contains("reads v1 Secret")
    );
}

#[test]
fn a_grant_naming_sensitive_kinds_admits_them() {
    let m = manifest(attack(), vec![configmap(), secret(), crb()], vec![secret()]);
    let grant = Grant {
        own: Some(vec![
            gk("test.wasm-operator.dev", "Attack"),
            gk("", "ConfigMap"),
            gk("", "Secret"),
            gk("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ]),
        cluster_scoped: true,
        ..Grant::default()
    };
    assert_eq!(grant.check(&m), vec![]);
}

#[test]
fn a_named_cluster_scoped_kind_still_needs_cluster_scoped() {
    let m = manifest(attack(), vec![crb()], vec![]);
    let grant = Grant {
        own: Some(vec![
            gk("test.wasm-operator.dev", "*"),
            gk("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ]),
        ..Grant::default()
    };
    assert_eq!(
        problems(&grant, &m),
        vec![(
            Access::Own,
            "ClusterRoleBinding".into(),
            ExcessKind::ClusterScoped
        )]
    );
}

#[test]
fn a_wildcard_never_grants_a_sensitive_kind() {
    let m = manifest(attack(), vec![configmap(), secret()], vec![]);
    let grant = Grant {
        own: Some(vec![gk("test.wasm-operator.dev", "*"), gk("", "*")]),
        ..Grant::default()
    };
    assert_eq!(
        problems(&grant, &m),
        vec![(
            Access::Own,
            "Secret".into(),
            ExcessKind::Sensitive("Secrets hold credentials")
        )]
    );
    // Every RBAC kind is sensitive, cluster-scoped or not.
    let m = manifest(attack(), vec![role()], vec![]);
    let grant = Grant {
        own: Some(vec![
            gk("test.wasm-operator.dev", "*"),
            gk("rbac.authorization.k8s.io", "*"),
        ]),
        ..Grant::default()
    };
    assert!(matches!(
        problems(&grant, &m)[0].2,
        ExcessKind::Sensitive(_)
    ));
}

#[test]
fn a_plural_or_lower_case_kind_in_the_grant_gets_a_hint() {
    let m = manifest(webapp(), vec![service()], vec![configmap()]);
    let grant = Grant {
        own: Some(vec![gk("example.com", "WebApp"), gk("", "Services")]),
        read: Some(vec![gk("", "configmap")]),
        ..Grant::default()
    };
    let excesses = grant.check(&m);
    assert_eq!(
        problems(&grant, &m),
        vec![
            (
                Access::Own,
                "Service".into(),
                ExcessKind::Misspelled {
                    written: "Services".into()
                }
            ),
            (
                Access::Read,
                "ConfigMap".into(),
                ExcessKind::Misspelled {
                    written: "configmap".into()
                }
            ),
        ]
    );
    let text = excesses[0].to_string();
    assert!(
        text.contains("names `Services`: did you mean `Service`?"),
        "{text}"
    );
    // Another group's kind of the same name is no misspelling.
    let grant = Grant {
        own: Some(vec![
            gk("example.com", "WebApp"),
            gk("example.com", "Services"),
        ]),
        read: Some(vec![gk("", "ConfigMap")]),
        ..Grant::default()
    };
    assert_eq!(
        problems(&grant, &m),
        vec![(Access::Own, "Service".into(), ExcessKind::NotListed)]
    );
}

#[test]
fn a_present_list_is_exact() {
    let m = manifest(webapp(), vec![deployment(), service()], vec![]);
    let grant = Grant {
        own: Some(vec![gk("example.com", "WebApp"), gk("apps", "Deployment")]),
        ..Grant::default()
    };
    assert_eq!(
        problems(&grant, &m),
        vec![(Access::Own, "Service".into(), ExcessKind::NotListed)]
    );
    // The primary counts as written: a present own list must name it.
    let grant = Grant {
        own: Some(vec![gk("apps", "Deployment"), gk("", "Service")]),
        ..Grant::default()
    };
    assert_eq!(
        problems(&grant, &m),
        vec![(Access::Primary, "WebApp".into(), ExcessKind::NotListed)]
    );
    // An empty list grants nothing.
    let m = manifest(webapp(), vec![], vec![configmap()]);
    let grant = Grant {
        read: Some(vec![]),
        ..Grant::default()
    };
    assert_eq!(
        problems(&grant, &m),
        vec![(Access::Read, "ConfigMap".into(), ExcessKind::NotListed)]
    );
}

#[test]
fn kinds_granted_in_own_are_readable_and_versions_do_not_matter() {
    let mut cm_v2 = configmap();
    cm_v2.version = "v2".into();
    let m = manifest(webapp(), vec![], vec![cm_v2]);
    let grant = Grant {
        own: Some(vec![gk("example.com", "WebApp"), gk("", "ConfigMap")]),
        read: Some(vec![]),
        ..Grant::default()
    };
    assert!(grant.check(&m).is_empty());
}

#[test]
fn a_built_in_primary_needs_an_own_entry_naming_it() {
    for (group, k) in [
        ("", "ConfigMap"),
        ("apps", "Deployment"),
        ("networking.k8s.io", "Ingress"),
    ] {
        let primary = kind(group, "v1", k, "x", Scope::Namespaced);
        let m = manifest(primary, vec![], vec![]);
        assert_eq!(
            problems(&Grant::default(), &m),
            vec![(Access::Primary, k.to_string(), ExcessKind::BuiltInPrimary)],
            "{group}/{k}"
        );
        let wildcard = Grant {
            own: Some(vec![gk(group, "*")]),
            ..Grant::default()
        };
        assert_eq!(wildcard.check(&m).len(), 1, "a wildcard is not enough");
        let named = Grant {
            own: Some(vec![gk(group, k)]),
            ..Grant::default()
        };
        assert!(named.check(&m).is_empty());
    }
    // The same built-in kind as a child is ordinary.
    let m = manifest(webapp(), vec![configmap()], vec![]);
    assert!(Grant::default().check(&m).is_empty());
}

#[test]
fn events_are_never_owned_or_reconciled_whatever_the_grant() {
    let events = kind("events.k8s.io", "v1", "Event", "events", Scope::Namespaced);
    let core_events = kind("", "v1", "Event", "events", Scope::Namespaced);
    let everything = Grant {
        own: Some(vec![
            gk("example.com", "WebApp"),
            gk("events.k8s.io", "Event"),
            gk("", "Event"),
        ]),
        namespaces: Some(vec!["*".into()]),
        cluster_scoped: true,
        ..Grant::default()
    };
    for grant in [Grant::default(), everything] {
        let m = manifest(webapp(), vec![events.clone(), core_events.clone()], vec![]);
        let found = grant.check(&m);
        assert_eq!(found.len(), 2, "{found:?}");
        for excess in &found {
            assert!(matches!(excess.problem, ExcessKind::HostOnly(_)));
            let message = excess.to_string();
            assert!(
                message.starts_with("owns ")
                    && message.contains("Event (never granted: Events are the host's recorder's"),
                "{message}"
            );
        }
        let primary = manifest(events.clone(), vec![], vec![]);
        assert!(matches!(
            grant.check(&primary)[0].problem,
            ExcessKind::HostOnly(_)
        ));
    }
    // Reading events stays an ordinary read.
    let m = manifest(webapp(), vec![], vec![events]);
    assert!(Grant::default().check(&m).is_empty());
}

#[test]
fn owning_the_primary_kind_needs_the_primary_named_in_own() {
    let m = manifest(webapp(), vec![webapp(), deployment()], vec![]);
    assert_eq!(
        problems(&Grant::default(), &m),
        vec![(Access::Own, "WebApp".to_string(), ExcessKind::OwnsPrimary)]
    );
    let message = Grant::default().check(&m)[0].to_string();
    assert!(
        message.contains("owns example.com/v1 WebApp (its own primary kind as a child")
            && message.contains(r#"{group: "example.com", kind: WebApp} named exactly in own"#)
            && message.contains("creationsPerMinute"),
        "{message}"
    );
    let wildcard = Grant {
        own: Some(vec![gk("example.com", "*"), gk("apps", "Deployment")]),
        ..Grant::default()
    };
    assert_eq!(wildcard.check(&m).len(), 1, "a wildcard is not enough");
    let named = Grant {
        own: Some(vec![gk("example.com", "WebApp"), gk("apps", "Deployment")]),
        ..Grant::default()
    };
    assert!(named.check(&m).is_empty());
}

#[test]
fn sensitive_kinds_are_the_documented_ones() {
    let ns = Scope::Namespaced;
    for (group, k, scope) in [
        ("", "Secret", ns),
        ("", "ServiceAccount", ns),
        ("authentication.k8s.io", "TokenRequest", ns),
        ("", "Namespace", Scope::Cluster),
        ("", "Node", Scope::Cluster),
        ("rbac.authorization.k8s.io", "RoleBinding", ns),
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            Scope::Cluster,
        ),
        (
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            Scope::Cluster,
        ),
        ("apiregistration.k8s.io", "APIService", Scope::Cluster),
        (
            "certificates.k8s.io",
            "CertificateSigningRequest",
            Scope::Cluster,
        ),
        ("example.com", "ClusterThing", Scope::Cluster),
    ] {
        assert!(
            sensitivity(&kind(group, "v1", k, "x", scope)).is_some(),
            "{group}/{k}"
        );
    }
    for (group, k) in [
        ("", "ConfigMap"),
        ("apps", "Deployment"),
        ("example.com", "WebApp"),
    ] {
        assert!(
            sensitivity(&kind(group, "v1", k, "x", ns)).is_none(),
            "{group}/{k}"
        );
    }
    assert!(is_built_in_group(""));
    assert!(is_built_in_group("batch"));
    assert!(is_built_in_group("storage.k8s.io"));
    assert!(!is_built_in_group("example.com"));
}

#[test]
fn namespaces_default_leaves_out_system_ones() {
    let grant = Grant::default();
    assert!(grant.namespace_allowed("default", None));
    assert!(grant.namespace_allowed("team-a", None));
    for ns in SYSTEM_NAMESPACES {
        assert!(!grant.namespace_allowed(ns, None), "{ns}");
    }
}

#[test]
fn a_namespace_list_is_exact_and_star_is_everything() {
    let grant = Grant {
        namespaces: Some(vec!["team-a".into()]),
        ..Grant::default()
    };
    assert!(grant.namespace_allowed("team-a", None));
    assert!(!grant.namespace_allowed("default", None));
    assert_eq!(grant.fixed_namespaces(), Some(&["team-a".to_string()][..]));
    let star = Grant {
        namespaces: Some(vec!["*".into()]),
        ..Grant::default()
    };
    assert!(star.namespace_allowed("kube-system", None));
    assert!(star.all_namespaces());
    assert_eq!(star.fixed_namespaces(), None);
}

#[test]
fn a_selector_selects_by_namespace_labels_and_fails_closed() {
    let grant = Grant {
        namespaces: Some(vec!["listed".into()]),
        namespace_selector: Some(NamespaceSelector {
            match_labels: BTreeMap::from([("team".into(), "a".into())]),
            match_expressions: vec![SelectorRequirement {
                key: "frozen".into(),
                operator: SelectorOperator::DoesNotExist,
                values: vec![],
            }],
        }),
        ..Grant::default()
    };
    let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert!(grant.namespace_allowed("x", Some(&labels(&[("team", "a")]))));
    assert!(!grant.namespace_allowed("x", Some(&labels(&[("team", "b")]))));
    assert!(!grant.namespace_allowed("x", Some(&labels(&[("team", "a"), ("frozen", "")]))));
    assert!(
        !grant.namespace_allowed("x", None),
        "unknown labels select nothing"
    );
    assert!(
        grant.namespace_allowed("listed", None),
        "listed or selected"
    );
    assert!(grant.needs_namespace_labels());
}

#[test]
fn selector_operators_behave_like_kubernetes() {
    let req = |operator, values: &[&str]| NamespaceSelector {
        match_labels: BTreeMap::new(),
        match_expressions: vec![SelectorRequirement {
            key: "env".into(),
            operator,
            values: values.iter().map(ToString::to_string).collect(),
        }],
    };
    let prod = BTreeMap::from([("env".to_string(), "prod".to_string())]);
    let none = BTreeMap::new();
    assert!(req(SelectorOperator::In, &["prod", "qa"]).matches(&prod));
    assert!(!req(SelectorOperator::In, &["qa"]).matches(&prod));
    assert!(!req(SelectorOperator::In, &["prod"]).matches(&none));
    assert!(req(SelectorOperator::NotIn, &["qa"]).matches(&prod));
    assert!(req(SelectorOperator::NotIn, &["qa"]).matches(&none));
    assert!(req(SelectorOperator::Exists, &[]).matches(&prod));
    assert!(!req(SelectorOperator::Exists, &[]).matches(&none));
    assert!(NamespaceSelector::default().matches(&none));
}

#[test]
fn parses_the_documented_yaml() {
    let grant: Grant = serde_yaml::from_str(
        "own: [{group: test.wasm-operator.dev, kind: Attack}, {kind: ConfigMap}]\n\
         read: []\n\
         namespaces: [team-a]\n\
         namespaceSelector: {matchLabels: {team: a}, matchExpressions: [{key: env, operator: In, values: [prod]}]}\n\
         clusterScoped: true\n\
         serviceAccount: {namespace: ops, name: hostile}\n",
    )
    .unwrap();
    assert_eq!(grant.own.as_ref().unwrap()[1], gk("", "ConfigMap"));
    assert!(grant.cluster_scoped);
    assert_eq!(
        grant.service_account.unwrap().user_name(),
        "system:serviceaccount:ops:hostile"
    );
    assert!(
        serde_yaml::from_str::<Grant>("owns: []").is_err(),
        "typos are errors"
    );
}

#[test]
fn the_workload_policy_resolves_the_grant() {
    // An existing grant without `workloads` still parses: restricted.
    let grant: Grant = serde_yaml::from_str("own: [{kind: ConfigMap}]\n").unwrap();
    assert_eq!(grant.workloads, None);
    let policy = grant.workload_policy();
    assert_eq!(policy.level, PodSecurityLevel::Restricted);
    assert!(policy.service_accounts.is_empty());
    assert!(!policy.secrets_granted);
    assert!(!Grant::default().workload_policy().secrets_granted);
    // Secrets named in own or read are granted to templates.
    for field in ["own", "read"] {
        let grant: Grant = serde_yaml::from_str(&format!(
            "{field}: [{{kind: Secret}}]\nworkloads: {{podSecurity: privileged, serviceAccounts: [ci]}}\nserviceAccount: {{namespace: ops, name: p}}\n"
        ))
        .unwrap();
        let policy = grant.workload_policy();
        assert!(policy.secrets_granted, "{field}");
        assert_eq!(policy.level, PodSecurityLevel::Privileged);
        assert_eq!(policy.service_accounts, ["ci".to_string()]);
        assert_eq!(policy.grant_account.unwrap().name, "p");
    }
    // A wildcard never grants Secrets.
    let grant: Grant = serde_yaml::from_str("read: [{group: \"\", kind: \"*\"}]\n").unwrap();
    assert!(!grant.workload_policy().secrets_granted);
}
