//! Resource types the server serves: built-ins (from k8s-openapi's resource
//! metadata) and versions of CustomResourceDefinitions; the discovery documents.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// Where the replica counts of a `/scale` subresource live in the object.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleSpec {
    /// E.g. `.spec.replicas`.
    pub spec_replicas_path: String,
    /// E.g. `.status.replicas`.
    pub status_replicas_path: String,
    /// E.g. `.status.selector`; optional.
    pub label_selector_path: Option<String>,
}

/// The CRD-specific part of a served resource.
#[derive(Debug, Clone)]
pub struct CrdVersion {
    /// The CRD's `metadata.name`.
    pub crd_name: String,
    /// The storage version name, e.g. `v1`.
    pub storage_version: String,
    /// `schema.openAPIV3Schema` of this version.
    pub schema: Option<Value>,
    /// `additionalPrinterColumns` of this version.
    pub printer_columns: Vec<Value>,
    /// `spec.conversion` of the CRD (strategy None or Webhook).
    pub conversion: Value,
}

/// One served resource at one group/version.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// The group whose storage holds the objects: `group` itself, except for
    /// events.k8s.io Events, which kube-apiserver stores as core v1 Events (one
    /// store served through both APIs, converted on read and write).
    pub storage_group: String,
    /// The version this entry serves, e.g. `v1`.
    pub version: String,
    /// E.g. `Deployment`.
    pub kind: String,
    /// E.g. `DeploymentList`.
    pub list_kind: String,
    /// The URL segment, e.g. `deployments`.
    pub plural: String,
    /// E.g. `deployment`.
    pub singular: String,
    /// Namespaced (true) or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl, e.g. `deploy`.
    pub short_names: Vec<String>,
    /// Categories for kubectl, e.g. `all`.
    pub categories: Vec<String>,
    /// Has a `/status` subresource (writes to the main resource keep the stored status).
    pub status: bool,
    /// Has a `/scale` subresource.
    pub scale: Option<ScaleSpec>,
    /// Set for custom resources.
    pub crd: Option<CrdVersion>,
}

impl ResourceType {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The storage key, independent of the version: `storage group/plural`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.storage_group, self.plural)
    }

    /// Whether objects are stored as another group's (events.k8s.io Events as core ones).
    pub fn stored_elsewhere(&self) -> bool {
        self.storage_group != self.group
    }

    /// `deployments.apps`, or `pods` for the core group (as in error messages).
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The version objects are stored at.
    pub fn storage_version(&self) -> &str {
        self.crd
            .as_ref()
            .map(|c| c.storage_version.as_str())
            .unwrap_or(&self.version)
    }
}

/// The scope of a k8s-openapi resource as a runtime value.
trait ScopeFlag {
    const NAMESPACED: bool;
}
impl ScopeFlag for k8s_openapi::NamespaceResourceScope {
    const NAMESPACED: bool = true;
}
impl ScopeFlag for k8s_openapi::ClusterResourceScope {
    const NAMESPACED: bool = false;
}

fn builtin<K>(short: &[&str], categories: &[&str], status: bool, scale: bool) -> ResourceType
where
    K: k8s_openapi::Resource,
    K::Scope: ScopeFlag,
{
    ResourceType {
        group: K::GROUP.to_string(),
        storage_group: K::GROUP.to_string(),
        version: K::VERSION.to_string(),
        kind: K::KIND.to_string(),
        list_kind: format!("{}List", K::KIND),
        plural: K::URL_PATH_SEGMENT.to_string(),
        singular: K::KIND.to_ascii_lowercase(),
        namespaced: <K::Scope as ScopeFlag>::NAMESPACED,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: categories.iter().map(|s| s.to_string()).collect(),
        status,
        scale: scale.then(|| ScaleSpec {
            spec_replicas_path: ".spec.replicas".into(),
            status_replicas_path: ".status.replicas".into(),
            label_selector_path: Some(".spec.selector".into()),
        }),
        crd: None,
    }
}

/// The built-in resource types.
pub fn builtins() -> Vec<ResourceType> {
    use k8s_openapi::api::{
        admissionregistration::v1 as adm, apps::v1 as apps, batch::v1 as batch,
        coordination::v1 as coord, core::v1 as core, events::v1 as events, policy::v1 as policy,
        rbac::v1 as rbac,
    };
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    const ALL: &[&str] = &["all"];
    vec![
        builtin::<core::Namespace>(&["ns"], &[], true, false),
        builtin::<core::ConfigMap>(&["cm"], &[], false, false),
        builtin::<core::Secret>(&[], &[], false, false),
        builtin::<core::Service>(&["svc"], ALL, true, false),
        builtin::<core::ServiceAccount>(&["sa"], &[], false, false),
        builtin::<core::Pod>(&["po"], ALL, true, false),
        builtin::<core::Node>(&["no"], &[], true, false),
        builtin::<core::PersistentVolumeClaim>(&["pvc"], &[], true, false),
        builtin::<core::Event>(&["ev"], &[], false, false),
        ResourceType {
            storage_group: String::new(),
            ..builtin::<events::Event>(&["ev"], &[], false, false)
        },
        builtin::<apps::Deployment>(&["deploy"], ALL, true, true),
        builtin::<apps::StatefulSet>(&["sts"], ALL, true, true),
        builtin::<apps::DaemonSet>(&["ds"], ALL, true, false),
        builtin::<apps::ReplicaSet>(&["rs"], ALL, true, true),
        builtin::<batch::Job>(&[], ALL, true, false),
        builtin::<batch::CronJob>(&["cj"], ALL, true, false),
        builtin::<coord::Lease>(&[], &[], false, false),
        builtin::<policy::PodDisruptionBudget>(&["pdb"], &[], true, false),
        builtin::<rbac::Role>(&[], &[], false, false),
        builtin::<rbac::RoleBinding>(&[], &[], false, false),
        builtin::<rbac::ClusterRole>(&[], &[], false, false),
        builtin::<rbac::ClusterRoleBinding>(&[], &[], false, false),
        builtin::<adm::ValidatingWebhookConfiguration>(&[], &["api-extensions"], false, false),
        builtin::<adm::MutatingWebhookConfiguration>(&[], &["api-extensions"], false, false),
        builtin::<apiext::CustomResourceDefinition>(
            &["crd", "crds"],
            &["api-extensions"],
            true,
            false,
        ),
    ]
}

/// Resource types derived from one CRD object (one per served version).
pub fn from_crd(crd: &Value) -> Vec<ResourceType> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let str_of = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let kind = str_of(&names["kind"]);
    let plural = str_of(&names["plural"]);
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    let storage = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .or(versions.first())
        .map(|v| str_of(&v["name"]))
        .unwrap_or_default();
    let conversion = if spec["conversion"].is_object() {
        spec["conversion"].clone()
    } else {
        json!({"strategy": "None"})
    };
    versions
        .iter()
        .filter(|v| v["served"].as_bool() != Some(false))
        .map(|v| {
            let sub = &v["subresources"];
            ResourceType {
                group: str_of(&spec["group"]),
                storage_group: str_of(&spec["group"]),
                version: str_of(&v["name"]),
                kind: kind.clone(),
                list_kind: names["listKind"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| format!("{kind}List")),
                plural: plural.clone(),
                singular: names["singular"]
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| kind.to_ascii_lowercase()),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                short_names: strs(&names["shortNames"]),
                categories: strs(&names["categories"]),
                status: sub["status"].is_object(),
                scale: sub["scale"].as_object().map(|s| ScaleSpec {
                    spec_replicas_path: s.get("specReplicasPath").map(str_of).unwrap_or_default(),
                    status_replicas_path: s
                        .get("statusReplicasPath")
                        .map(str_of)
                        .unwrap_or_default(),
                    label_selector_path: s
                        .get("labelSelectorPath")
                        .and_then(|x| x.as_str())
                        .map(String::from),
                }),
                crd: Some(CrdVersion {
                    crd_name: crd["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    storage_version: storage.clone(),
                    schema: v["schema"]["openAPIV3Schema"]
                        .as_object()
                        .map(|o| Value::Object(o.clone())),
                    printer_columns: v["additionalPrinterColumns"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default(),
                    conversion: conversion.clone(),
                }),
            }
        })
        .collect()
}

/// All served resource types: built-ins plus those of every established CRD.
#[derive(Debug, Clone)]
pub struct Registry {
    builtins: Vec<ResourceType>,
    crds: BTreeMap<String, Vec<ResourceType>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            builtins: builtins(),
            crds: BTreeMap::new(),
        }
    }
}

impl Registry {
    /// Serves (or re-serves) the versions of `crd`.
    pub fn set_crd(&mut self, crd: &Value) {
        let name = crd["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.crds.insert(name, from_crd(crd));
    }

    /// Stops serving the CRD named `name`; returns its storage key if it was served.
    pub fn remove_crd(&mut self, name: &str) -> Option<String> {
        self.crds
            .remove(name)
            .and_then(|v| v.first().map(ResourceType::key))
    }

    /// The storage key of the resource CRD `name` serves, if served.
    pub fn crd_key(&self, name: &str) -> Option<String> {
        self.crds
            .get(name)
            .and_then(|v| v.first().map(ResourceType::key))
    }

    /// Every served resource type.
    pub fn all(&self) -> impl Iterator<Item = &ResourceType> {
        self.builtins.iter().chain(self.crds.values().flatten())
    }

    /// The resource at `group`/`version` named `plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceType> {
        self.all()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Any version of the resource with storage key `key` (for GC and namespace deletion).
    pub fn by_key(&self, key: &str) -> Option<&ResourceType> {
        self.all().find(|r| r.key() == key)
    }

    /// Group names with their versions, core group excluded, groups in first-seen
    /// order, each group's versions highest priority first (the first is the
    /// preferred version), as kube-apiserver orders them.
    fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in self.all().filter(|r| !r.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == r.group) {
                Some((_, vs)) => {
                    if !vs.contains(&r.version) {
                        vs.push(r.version.clone());
                    }
                }
                None => out.push((r.group.clone(), vec![r.version.clone()])),
            }
        }
        for (_, versions) in &mut out {
            versions.sort_by(|a, b| version_priority(b, a));
        }
        out
    }

    /// `/api`: APIVersions.
    pub fn api_versions(&self) -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
    }

    fn group_doc(group: &str, versions: &[String]) -> Value {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        json!({"name": group, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
    }

    /// `/apis`: APIGroupList.
    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .map(|(g, vs)| Self::group_doc(g, vs))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `/apis/<group>`: APIGroup, or None when the group is not served.
    pub fn api_group(&self, group: &str) -> Option<Value> {
        self.groups()
            .iter()
            .find(|(g, _)| g == group)
            .map(|(g, vs)| {
                let mut doc = Self::group_doc(g, vs);
                doc["kind"] = json!("APIGroup");
                doc["apiVersion"] = json!("v1");
                doc
            })
    }

    /// `/api/v1` or `/apis/<group>/<version>`: APIResourceList, or None when not served.
    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        let mut resources = Vec::new();
        for r in self
            .all()
            .filter(|r| r.group == group && r.version == version)
        {
            let mut verbs = vec![
                "create", "delete", "get", "list", "patch", "update", "watch",
            ];
            if r.plural != "namespaces" {
                verbs.insert(1, "deletecollection");
            }
            let mut main = json!({
                "name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                "verbs": verbs, "storageVersionHash": "",
            });
            if !r.short_names.is_empty() {
                main["shortNames"] = json!(r.short_names);
            }
            if !r.categories.is_empty() {
                main["categories"] = json!(r.categories);
            }
            resources.push(main);
            if r.status {
                resources.push(json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "kind": r.kind, "verbs": ["get", "patch", "update"]}));
            }
            if r.scale.is_some() {
                resources.push(json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}));
            }
        }
        if resources.is_empty() {
            return None;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
        )
    }
}

/// A parsed Kubernetes version name: `v2`, `v1beta1`, `v3alpha2`.
fn kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let major: u64 = rest[..digits].parse().ok()?;
    let (stability, minor) = match &rest[digits..] {
        "" => return Some((2, major, 0)),
        tail => match (tail.strip_prefix("beta"), tail.strip_prefix("alpha")) {
            (Some(n), _) => (1, n),
            (None, Some(n)) => (0, n),
            (None, None) => return None,
        },
    };
    if minor.is_empty() || !minor.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((stability, major, minor.parse().ok()?))
}

/// Kubernetes' version priority (apimachinery `version.CompareKubeAwareVersionStrings`):
/// `Greater` when `a` is preferred over `b`. GA before beta before alpha, higher
/// numbers first (`v2 > v1 > v1beta2 > v1beta1 > v1alpha1`); names that are not
/// Kubernetes versions come after all that are, alphabetically (`foo1` before `foo10`).
pub fn version_priority(a: &str, b: &str) -> std::cmp::Ordering {
    match (kube_version(a), kube_version(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Greater,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (None, None) => b.cmp(a),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_ordered_by_kubernetes_version_priority() {
        let mut versions = vec![
            "foo10",
            "v1alpha1",
            "v1",
            "v1beta1",
            "v11alpha2",
            "v2",
            "foo1",
            "v1beta2",
            "v10beta3",
            "v12alpha1",
        ];
        versions.sort_by(|a, b| version_priority(b, a));
        assert_eq!(
            versions,
            [
                "v2",
                "v1",
                "v10beta3",
                "v1beta2",
                "v1beta1",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }

    #[test]
    fn the_preferred_version_of_a_crd_group_is_the_highest_priority_not_the_first_listed() {
        let crd = json!({"metadata": {"name": "things.example.com"}, "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Thing", "plural": "things"},
            "versions": [{"name": "v1", "served": true, "storage": true},
                         {"name": "v2", "served": true, "storage": false},
                         {"name": "v2beta1", "served": true, "storage": false}]}});
        let mut registry = Registry::default();
        registry.set_crd(&crd);
        let group = registry.api_group("example.com").unwrap();
        assert_eq!(group["preferredVersion"]["version"], "v2", "{group}");
        let order: Vec<&Value> = group["versions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["version"])
            .collect();
        assert_eq!(order, [&json!("v2"), &json!("v1"), &json!("v2beta1")]);
        let list = registry.api_group_list();
        let listed = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "example.com")
            .unwrap();
        assert_eq!(listed, &{
            let mut g = group.clone();
            g.as_object_mut().unwrap().remove("kind");
            g.as_object_mut().unwrap().remove("apiVersion");
            g
        });
    }
}
