//! The rules the HOST's own ClusterRole needs to serve a set of plugins
//! (`wasm-operator plugin rbac --host` prints them as the chart's
//! `extraGrants` value). The chart's base ClusterRole holds what the host
//! needs whatever it serves (WasmPlugins, Leases, Events, the CRDs it reads);
//! these are only what each plugin adds, read from its manifest and grant:
//!
//! - the primary kind: `get`/`list`/`watch` (its cache), `patch` (the
//!   finalizer, the host's annotations), `update` (storage migration and
//!   `migration.upgrade` write whole objects); `<plural>/status`:
//!   `patch`/`update`;
//! - `<plural>/finalizers`: `update` when the plugin owns kinds: children
//!   carry `blockOwnerDeletion: true` owner references, which clusters with
//!   the OwnerReferencesPermissionEnforcement admission plugin only accept
//!   from whoever may update the owner's finalizers;
//! - owned kinds: `get`/`list`/`watch`/`create`/`update`/`patch`/`delete`
//!   (server-side apply, prune), and only `get`/`list`/`watch` when the grant
//!   names a `serviceAccount`: those writes then impersonate it, and the host
//!   needs `impersonate` on that ServiceAccount instead;
//! - watched kinds: `get`/`list`/`watch`;
//! - the primary's CRD when the plugin implements `migration.convert`: the
//!   host points `spec.conversion` at its webhook and migrates storage
//!   (`get`/`patch` of the CRD, `patch` of its status), by name;
//! - the plugin's own CRDs when the grant sets `crds`: `get`/`patch` by
//!   name (the primary's and those of declared kinds of its group) and
//!   `create` (which Kubernetes cannot narrow by name);
//! - Namespaces `get`/`list`/`watch` when the grant selects namespaces by
//!   label;
//! - when the plugin implements `backup`: Backups and Restores
//!   (`wasm-operator.dev`; the runner creates, labels and deletes them and
//!   writes their status), Pods `list` (a backup Job's termination message
//!   says where the data went) and `create` of the primary (a Restore into
//!   a new object creates it). Backup Jobs are owned kinds like any other.
//!
//! Rules are merged and sorted (by API group, then resource) so the output
//! is stable and diffs well.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::PolicyRule;

use super::Grant;
use crate::contract::{Manifest, ResourceKind};

/// Verbs in the order Kubernetes' own roles list them.
const VERB_ORDER: [&str; 9] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
    "impersonate",
];
const READ: [&str; 3] = ["get", "list", "watch"];
const WRITE: [&str; 7] = [
    "get", "list", "watch", "create", "update", "patch", "delete",
];

/// One plugin the host serves: its manifest and, when it runs from a
/// WasmPlugin, that WasmPlugin's grant (`spec.permissions`).
#[derive(Debug, Clone, Copy)]
pub struct ServedPlugin<'a> {
    /// What the plugin declares.
    pub manifest: &'a Manifest,
    /// The grant it is served under; `None` is the restricted default
    /// (no impersonation, no namespace selector).
    pub grant: Option<&'a Grant>,
}

/// (API group, resource, resource names) -> verbs.
type Needs = BTreeMap<(String, String, Vec<String>), BTreeSet<&'static str>>;

fn need(needs: &mut Needs, group: &str, resource: &str, names: &[String], verbs: &[&'static str]) {
    needs
        .entry((group.to_string(), resource.to_string(), names.to_vec()))
        .or_default()
        .extend(verbs.iter().copied());
}

fn need_kind(needs: &mut Needs, kind: &ResourceKind, verbs: &[&'static str]) {
    need(needs, &kind.group, &kind.plural, &[], verbs);
}

/// Adds what serving `plugin` needs to `needs`.
fn add_plugin(needs: &mut Needs, plugin: ServedPlugin<'_>) {
    let manifest = plugin.manifest;
    let primary = &manifest.primary;
    let impersonated = plugin.grant.and_then(|g| g.service_account.as_ref());
    need_kind(needs, primary, &["get", "list", "watch", "update", "patch"]);
    let status = format!("{}/status", primary.plural);
    need(needs, &primary.group, &status, &[], &["update", "patch"]);
    if !manifest.owns.is_empty() {
        let finalizers = format!("{}/finalizers", primary.plural);
        need(needs, &primary.group, &finalizers, &[], &["update"]);
    }
    for owned in &manifest.owns {
        let verbs: &[&'static str] = if impersonated.is_some() {
            &READ
        } else {
            &WRITE
        };
        need_kind(needs, owned, verbs);
    }
    for watched in &manifest.watches {
        need_kind(needs, watched, &READ);
    }
    if manifest.implements.convert {
        let crd = [format!("{}.{}", primary.plural, primary.group)];
        let group = "apiextensions.k8s.io";
        need(
            needs,
            group,
            "customresourcedefinitions",
            &crd,
            &["get", "patch"],
        );
        need(
            needs,
            group,
            "customresourcedefinitions/status",
            &crd,
            &["patch"],
        );
    }
    if plugin.grant.is_some_and(|g| g.crds) {
        // `permissions.crds`: the host creates and updates the plugin's own
        // CRDs by server-side apply (reading them first). Kubernetes cannot
        // narrow `create` by name, so that verb is unnamed.
        let group = "apiextensions.k8s.io";
        let names: Vec<String> = std::iter::once(primary)
            .chain(manifest.owns.iter())
            .chain(manifest.watches.iter())
            .filter(|k| k.group == primary.group)
            .map(|k| format!("{}.{}", k.plural, k.group))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        need(
            needs,
            group,
            "customresourcedefinitions",
            &names,
            &["get", "patch"],
        );
        need(needs, group, "customresourcedefinitions", &[], &["create"]);
    }
    if manifest.implements.backup {
        need_kind(needs, primary, &["create"]);
        need(needs, "", "pods", &[], &["list"]);
        for resource in ["backups", "restores"] {
            need(needs, "wasm-operator.dev", resource, &[], &WRITE);
            let status = format!("{resource}/status");
            need(needs, "wasm-operator.dev", &status, &[], &["patch"]);
        }
    }
    if let Some(account) = impersonated {
        let names = [account.name.clone()];
        need(needs, "", "serviceaccounts", &names, &["impersonate"]);
    }
    if plugin.grant.is_some_and(Grant::needs_namespace_labels) {
        need(needs, "", "namespaces", &[], &READ);
    }
}

fn ordered(verbs: &BTreeSet<&'static str>) -> Vec<String> {
    let mut out: Vec<&str> = verbs.iter().copied().collect();
    out.sort_by_key(|v| VERB_ORDER.iter().position(|o| o == v).unwrap_or(usize::MAX));
    out.into_iter().map(str::to_string).collect()
}

/// The host ClusterRole rules serving `plugins` adds to the chart's base
/// role (see the [module documentation](self) for each rule's reason).
///
/// One rule per API group, verb set and resource names, its resources
/// sorted; rules sorted by group, then first resource. Resource names
/// (impersonated ServiceAccounts, CRDs) are merged per resource.
pub fn host_rules<'a>(plugins: impl IntoIterator<Item = ServedPlugin<'a>>) -> Vec<PolicyRule> {
    let mut needs = Needs::new();
    for plugin in plugins {
        add_plugin(&mut needs, plugin);
    }
    // Named and unnamed needs of one resource stay separate rules (a name
    // narrows); names of one resource with the same verbs merge.
    let mut named: BTreeMap<(String, String, Vec<String>), BTreeSet<String>> = BTreeMap::new();
    let mut unnamed: BTreeMap<(String, Vec<String>), BTreeSet<String>> = BTreeMap::new();
    for ((group, resource, names), verbs) in needs {
        let verbs = ordered(&verbs);
        if names.is_empty() {
            unnamed.entry((group, verbs)).or_default().insert(resource);
        } else {
            named
                .entry((group, resource, verbs))
                .or_default()
                .extend(names);
        }
    }
    let mut rules: Vec<PolicyRule> = unnamed
        .into_iter()
        .map(|((group, verbs), resources)| PolicyRule {
            api_groups: Some(vec![group]),
            resources: Some(resources.into_iter().collect()),
            verbs,
            ..PolicyRule::default()
        })
        .chain(
            named
                .into_iter()
                .map(|((group, resource, verbs), names)| PolicyRule {
                    api_groups: Some(vec![group]),
                    resources: Some(vec![resource]),
                    resource_names: Some(names.into_iter().collect()),
                    verbs,
                    ..PolicyRule::default()
                }),
        )
        .collect();
    rules.sort_by_key(sort_key);
    rules
}

fn sort_key(rule: &PolicyRule) -> (String, String, bool, Vec<String>) {
    let first = |v: &Option<Vec<String>>| {
        v.as_ref()
            .and_then(|v| v.first())
            .cloned()
            .unwrap_or_default()
    };
    (
        first(&rule.api_groups),
        first(&rule.resources),
        rule.resource_names.is_some(),
        rule.verbs.clone(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{GroupKind, OptionalInterfaces, Scope, ServiceAccountRef};

    fn kind(group: &str, version: &str, kind: &str, plural: &str) -> ResourceKind {
        ResourceKind {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            scope: Scope::Namespaced,
        }
    }

    fn webapp() -> Manifest {
        Manifest {
            name: "webapp".into(),
            version: "1.0.0".into(),
            description: String::new(),
            primary: kind("example.com", "v1", "WebApp", "webapps"),
            owns: vec![
                kind("apps", "v1", "Deployment", "deployments"),
                kind("", "v1", "Service", "services"),
            ],
            watches: vec![kind("", "v1", "ConfigMap", "configmaps")],
            finalizer: true,
            implements: OptionalInterfaces::default(),
            min_compatible_version: None,
        }
    }

    fn distributedkv() -> Manifest {
        Manifest {
            name: "distributedkv".into(),
            version: "1.0.0".into(),
            description: String::new(),
            primary: kind(
                "kv.example.com",
                "v1beta1",
                "DistributedKV",
                "distributedkvs",
            ),
            owns: vec![
                kind("apps", "v1", "StatefulSet", "statefulsets"),
                kind("", "v1", "Service", "services"),
                kind(
                    "policy",
                    "v1",
                    "PodDisruptionBudget",
                    "poddisruptionbudgets",
                ),
            ],
            watches: vec![],
            finalizer: false,
            implements: OptionalInterfaces {
                migration: true,
                convert: true,
                upgrade: false,
                backup: false,
            },
            min_compatible_version: None,
        }
    }

    /// Each rule as `group|resources|verbs|names`.
    fn lines(rules: &[PolicyRule]) -> Vec<String> {
        rules
            .iter()
            .map(|r| {
                format!(
                    "{}|{}|{}|{}",
                    r.api_groups.as_ref().unwrap().join(","),
                    r.resources.as_ref().unwrap().join(","),
                    r.verbs.join(","),
                    r.resource_names.as_deref().unwrap_or_default().join(",")
                )
            })
            .collect()
    }

    fn served<'a>(manifest: &'a Manifest, grant: Option<&'a Grant>) -> ServedPlugin<'a> {
        ServedPlugin { manifest, grant }
    }

    #[test]
    fn a_webapp_like_plugin_needs_its_primary_children_and_watched_kinds() {
        let manifest = webapp();
        assert_eq!(
            lines(&host_rules([served(&manifest, None)])),
            [
                "|configmaps|get,list,watch|",
                "|services|get,list,watch,create,update,patch,delete|",
                "apps|deployments|get,list,watch,create,update,patch,delete|",
                "example.com|webapps|get,list,watch,update,patch|",
                "example.com|webapps/finalizers|update|",
                "example.com|webapps/status|update,patch|",
            ]
        );
    }

    #[test]
    fn a_crds_grant_adds_creating_and_patching_the_plugins_own_crd() {
        let manifest = webapp();
        let grant = Grant {
            crds: true,
            ..Grant::default()
        };
        let rules = lines(&host_rules([served(&manifest, Some(&grant))]));
        assert!(
            rules.contains(
                &"apiextensions.k8s.io|customresourcedefinitions|get,patch|webapps.example.com"
                    .to_string()
            ),
            "{rules:#?}"
        );
        assert!(
            rules.contains(&"apiextensions.k8s.io|customresourcedefinitions|create|".to_string()),
            "{rules:#?}"
        );
        // Without the grant, nothing about CRDs.
        let plain = lines(&host_rules([served(&manifest, Some(&Grant::default()))]));
        assert!(
            !plain
                .iter()
                .any(|r| r.contains("customresourcedefinitions")),
            "{plain:#?}"
        );
    }

    #[test]
    fn plugins_merge_by_group_and_verbs_and_conversion_names_its_crd() {
        let (web, kv) = (webapp(), distributedkv());
        let rules = host_rules([served(&kv, None), served(&web, None)]);
        assert_eq!(
            lines(&rules),
            [
                "|configmaps|get,list,watch|",
                "|services|get,list,watch,create,update,patch,delete|",
                "apiextensions.k8s.io|customresourcedefinitions|get,patch|distributedkvs.kv.example.com",
                "apiextensions.k8s.io|customresourcedefinitions/status|patch|distributedkvs.kv.example.com",
                "apps|deployments,statefulsets|get,list,watch,create,update,patch,delete|",
                "example.com|webapps|get,list,watch,update,patch|",
                "example.com|webapps/finalizers|update|",
                "example.com|webapps/status|update,patch|",
                "kv.example.com|distributedkvs|get,list,watch,update,patch|",
                "kv.example.com|distributedkvs/finalizers|update|",
                "kv.example.com|distributedkvs/status|update,patch|",
                "policy|poddisruptionbudgets|get,list,watch,create,update,patch,delete|",
            ]
        );
        // The order of the plugins does not change the output.
        assert_eq!(rules, host_rules([served(&web, None), served(&kv, None)]));
    }

    #[test]
    fn an_impersonated_grant_narrows_children_to_reads_and_a_selector_adds_namespaces() {
        let manifest = webapp();
        let grant = Grant {
            own: Some(vec![
                GroupKind::new("example.com", "WebApp"),
                GroupKind::new("apps", "Deployment"),
                GroupKind::new("", "Service"),
            ]),
            read: Some(vec![GroupKind::new("", "ConfigMap")]),
            namespace_selector: Some(Default::default()),
            service_account: Some(ServiceAccountRef {
                namespace: "ops".into(),
                name: "webapp".into(),
            }),
            ..Grant::default()
        };
        assert_eq!(
            lines(&host_rules([served(&manifest, Some(&grant))])),
            [
                "|configmaps,namespaces,services|get,list,watch|",
                "|serviceaccounts|impersonate|webapp",
                "apps|deployments|get,list,watch|",
                "example.com|webapps|get,list,watch,update,patch|",
                "example.com|webapps/finalizers|update|",
                "example.com|webapps/status|update,patch|",
            ]
        );
    }

    #[test]
    fn a_plugin_with_backups_adds_backups_restores_pods_and_creating_its_primary() {
        let mut manifest = distributedkv();
        manifest.implements.backup = true;
        manifest.owns.push(kind("batch", "v1", "Job", "jobs"));
        let rules = lines(&host_rules([served(&manifest, None)]));
        for expected in [
            "batch|jobs|get,list,watch,create,update,patch,delete|",
            "|pods|list|",
            "wasm-operator.dev|backups,restores|get,list,watch,create,update,patch,delete|",
            "wasm-operator.dev|backups/status,restores/status|patch|",
        ] {
            assert!(
                rules.iter().any(|r| r == expected),
                "{expected} in {rules:#?}"
            );
        }
        assert!(
            rules
                .iter()
                .any(|r| r.starts_with("kv.example.com|distributedkvs|") && r.contains("create")),
            "{rules:#?}"
        );
    }

    #[test]
    fn a_rule_serializes_in_the_form_extra_grants_takes() {
        let manifest = distributedkv();
        let rules = host_rules([served(&manifest, None)]);
        let value = serde_json::to_value(&rules[1]).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"],
                "resourceNames": ["distributedkvs.kv.example.com"],
                "verbs": ["get", "patch"],
            })
        );
    }
}
