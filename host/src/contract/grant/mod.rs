//! Grants: what the cluster operator lets a plugin do, and the pure check of
//! a manifest against it. The plugin asks (its [`Manifest`]); the grant
//! decides. A manifest asking for more than its grant is refused with every
//! [`Excess`] named, at load and for every new version.
//!
//! # Shape (`WasmPlugin.spec.permissions`, `run --grant FILE`)
//!
//! - `own: [{group, kind}]`: kinds the plugin may write (return as
//!   children). The primary counts as written: the host writes its status,
//!   finalizer and annotations.
//! - `read: [{group, kind}]`: kinds it may only read (`watches`). Kinds
//!   granted in `own` are readable too.
//! - `namespaces: [..]`: where primaries are served, children written and
//!   cache reads answered; `"*"` means every namespace, system ones included
//!   (the host's own namespaces only when listed by name:
//!   [`crate::contract::HostObjects`]).
//! - `namespaceSelector`: a label selector on Namespace objects
//!   (`matchLabels`, `matchExpressions`). With `namespaces` too, a namespace
//!   is granted when it is listed **or** selected.
//! - `clusterScoped`: whether cluster-scoped kinds are allowed at all (each
//!   still needs an entry naming it).
//! - `serviceAccount: {namespace, name}`: the plugin's writes impersonate
//!   that ServiceAccount, so the API server's RBAC enforces the grant too.
//! - `workloads: {podSecurity, serviceAccounts}`: what the Pods of the
//!   plugin's pod-creating children may run as (see [`WorkloadGrant`] and
//!   [`check_workload`]); absent, Pod Security `restricted` and no
//!   ServiceAccount but the grant's own.
//!
//! Kinds match by group and kind, whatever the version. `kind: "*"`
//! matches every kind of the group **except** sensitive ones.
//!
//! # Defaults
//!
//! An absent list means the restricted default; a present list is exact
//! (an empty list grants nothing). The restricted default: own and read any
//! namespaced kind that is not sensitive; the primary must not be a built-in
//! kind; every namespace except [`SYSTEM_NAMESPACES`]; no cluster-scoped
//! kinds. So a plugin on its own CRD owning Deployments and Services needs
//! no grant, and anything that could take over a cluster needs one.
//!
//! # Sensitive kinds
//!
//! Denied unless an entry names them exactly (see [`sensitivity`]): v1
//! Secret, v1 ServiceAccount (and `authentication.k8s.io` TokenRequest, its
//! token subresource), v1 Namespace, v1 Node, every kind of
//! `rbac.authorization.k8s.io`, `admissionregistration.k8s.io` and
//! `certificates.k8s.io`, `apiextensions.k8s.io` CustomResourceDefinition,
//! `apiregistration.k8s.io` APIService, and every cluster-scoped kind. A
//! built-in kind (core group, a group without a dot such as `apps` or
//! `batch`, or a `*.k8s.io` group) as the primary needs an `own` entry
//! naming it: the host puts its finalizer and annotations on every object of
//! the primary kind it serves.
//!
//! # Never, or only named
//!
//! Events (core v1 and `events.k8s.io`) are the host's recorder's: no grant
//! lets a plugin own them or reconcile them ([`host_only`]). A plugin's own
//! primary kind as a child (`owns` listing the primary) needs an `own`
//! entry naming the primary's group and kind exactly
//! ([`owns_primary_granted`]); its creations are then bounded by the
//! WasmPlugin's creation limits.

mod rbac;
mod reserved;
mod workload;

pub use rbac::{RbacRefusal, rbac_objects};
pub use reserved::{host_only, owns_primary_granted};
pub use workload::{
    NotAPodSpec, PodSecurityLevel, WorkloadGrant, WorkloadPolicy, WorkloadRule, WorkloadViolation,
    check_workload, pod_spec_path,
};

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Manifest, ResourceKind, Scope};

/// Namespaces the restricted default leaves out: the cluster's own.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// A kind named by group and kind, version-agnostic.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub struct GroupKind {
    /// API group; empty (the default) for the core group.
    #[serde(default)]
    pub group: String,
    /// CamelCase kind, or `*` for every non-sensitive kind of the group.
    #[schemars(length(min = 1))]
    pub kind: String,
}

impl GroupKind {
    /// `kind` of `group`.
    pub fn new(group: &str, kind: &str) -> GroupKind {
        GroupKind {
            group: group.to_string(),
            kind: kind.to_string(),
        }
    }

    /// The group and kind of `kind`.
    pub fn of(kind: &ResourceKind) -> GroupKind {
        GroupKind::new(&kind.group, &kind.kind)
    }

    /// True when this entry grants `kind`: the same group, and the same
    /// kind or `*` (never for a kind that needs to be named exactly).
    fn grants(&self, kind: &ResourceKind, exact_needed: bool) -> bool {
        self.group == kind.group && (self.kind == kind.kind || (self.kind == "*" && !exact_needed))
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{{group: {:?}, kind: {}}}", self.group, self.kind)
    }
}

/// A ServiceAccount the plugin's writes impersonate.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct ServiceAccountRef {
    /// Namespace of the ServiceAccount.
    #[schemars(length(min = 1))]
    pub namespace: String,
    /// Name of the ServiceAccount.
    #[schemars(length(min = 1))]
    pub name: String,
}

impl ServiceAccountRef {
    /// The user name the API server gives the ServiceAccount
    /// (`system:serviceaccount:<namespace>:<name>`), what impersonation names.
    pub fn user_name(&self) -> String {
        format!("system:serviceaccount:{}:{}", self.namespace, self.name)
    }
}

/// The operator of a [`SelectorRequirement`], as in Kubernetes label selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SelectorOperator {
    /// The label's value is one of `values`.
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub struct SelectorRequirement {
    /// The label key.
    pub key: String,
    /// How the label's value is compared.
    pub operator: SelectorOperator,
    /// The values for `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// A label selector on Namespace objects (`metav1.LabelSelector`): every
/// `matchLabels` pair and every expression must hold. An empty selector
/// selects every namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceSelector {
    /// Labels the namespace must carry with these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Further requirements, all of which must hold.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

impl NamespaceSelector {
    /// True when a namespace with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| {
                let value = labels.get(&e.key);
                match e.operator {
                    SelectorOperator::In => value.is_some_and(|v| e.values.contains(v)),
                    SelectorOperator::NotIn => value.is_none_or(|v| !e.values.contains(v)),
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// What the cluster operator grants a plugin (`WasmPlugin.spec.permissions`,
/// `run --grant FILE`). See the [module documentation](self) for the
/// defaults and the sensitive kinds. `Grant::default()` is the restricted
/// default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// Kinds the plugin may write (its children; the primary counts as
    /// written). Absent: any namespaced kind that is not sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own: Option<Vec<GroupKind>>,
    /// Kinds the plugin may read without writing them (kinds in `own` are
    /// readable too). Absent: any namespaced kind that is not sensitive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<Vec<GroupKind>>,
    /// Namespaces where primaries are served, children written and reads
    /// answered; `*` is every namespace. Absent (and no selector): every
    /// namespace but kube-system, kube-public and kube-node-lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
    /// Namespaces whose labels match are granted too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<NamespaceSelector>,
    /// Cluster-scoped kinds are allowed at all (each still needs an entry
    /// naming it). Default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_scoped: bool,
    /// The plugin's writes impersonate this ServiceAccount, so the API
    /// server's RBAC enforces the grant too (`wasm-operator plugin rbac`
    /// prints the RBAC it needs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ServiceAccountRef>,
    /// What the Pods of pod-creating children (Pod, Deployment, Job, ...)
    /// may run as. Absent: Pod Security `restricted`, no ServiceAccount but
    /// `serviceAccount`'s, Secrets only when the Secret kind is granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workloads: Option<WorkloadGrant>,
}

/// How a manifest uses a kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Access {
    /// The kind it reconciles (the host writes its status, finalizer and
    /// annotations).
    Primary,
    /// A kind it returns as children (`owns`).
    Own,
    /// A kind it only reads (`watches`).
    Read,
}

impl Access {
    /// The grant list that would grant it.
    fn field(self) -> &'static str {
        match self {
            Access::Primary | Access::Own => "own",
            Access::Read => "read",
        }
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Access::Primary => "reconciles",
            Access::Own => "owns",
            Access::Read => "reads",
        })
    }
}

/// Why a kind the manifest asks for is not granted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ExcessKind {
    /// A cluster-scoped kind, and the grant has `clusterScoped: false`.
    ClusterScoped,
    /// A sensitive kind (the reason why it is) not named exactly.
    Sensitive(&'static str),
    /// A built-in kind as the primary, not named exactly in `own`.
    BuiltInPrimary,
    /// A kind only the host writes (the reason why): never granted.
    HostOnly(&'static str),
    /// The plugin's own primary kind as a child, without an `own` entry
    /// naming it exactly.
    OwnsPrimary,
    /// The grant's list does not include the kind.
    NotListed,
    /// The grant's list does not include the kind, but names one like it
    /// the way Kubernetes never spells a kind (a plural such as `Services`,
    /// or other letter case): the cluster operator most likely meant it.
    Misspelled {
        /// The grant entry's kind, as written (`Services`).
        written: String,
    },
}

/// One thing a manifest asks for beyond its grant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Excess {
    /// How the manifest uses the kind.
    pub access: Access,
    /// The kind, as the manifest names it.
    pub kind: ResourceKind,
    /// Why it is not granted.
    pub problem: ExcessKind,
}

impl fmt::Display for Excess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let k = &self.kind;
        let named = GroupKind::of(k);
        write!(f, "{} {} {}", self.access, k.api_version(), k.kind)?;
        match &self.problem {
            ExcessKind::ClusterScoped => write!(
                f,
                " (cluster-scoped; needs clusterScoped: true and {named} in {})",
                self.access.field()
            ),
            ExcessKind::Sensitive(why) => write!(
                f,
                " (sensitive: {why}; needs {named} named exactly in {})",
                self.access.field()
            ),
            ExcessKind::BuiltInPrimary => write!(
                f,
                " (a built-in kind as the primary: the host would put its finalizer and annotations on every such object; needs {named} named exactly in own)"
            ),
            ExcessKind::HostOnly(why) => write!(f, " (never granted: {why})"),
            ExcessKind::OwnsPrimary => write!(
                f,
                " (its own primary kind as a child: every child is a primary it reconciles again, so one object can grow without bound; needs {named} named exactly in own, and its creations are bounded by spec.limits.creationsPerMinute and creationsTotal)"
            ),
            ExcessKind::NotListed => {
                write!(f, " (not in the grant's {} list)", self.access.field())
            }
            ExcessKind::Misspelled { written } => write!(
                f,
                " (not in the grant's {} list, which names `{written}`: did you mean `{}`? A grant names kinds as an object's `kind` field does: singular and CamelCase)",
                self.access.field(),
                k.kind
            ),
        }
    }
}

/// Why `kind` needs a grant entry naming it exactly, or `None` when it is
/// an ordinary kind. Cluster-scoped kinds are all sensitive.
pub fn sensitivity(kind: &ResourceKind) -> Option<&'static str> {
    let why = match (kind.group.as_str(), kind.kind.as_str()) {
        ("", "Secret") => "Secrets hold credentials",
        ("", "ServiceAccount") | ("authentication.k8s.io", "TokenRequest") => {
            "ServiceAccounts and their tokens are identities in the cluster"
        }
        ("", "Namespace") => "Namespaces bound every other permission",
        ("", "Node") => "Nodes run every workload",
        ("rbac.authorization.k8s.io", _) => "RBAC kinds grant permissions",
        ("admissionregistration.k8s.io", _) => {
            "admission configuration sees and changes every write"
        }
        ("apiextensions.k8s.io", _) => "CRDs define APIs and their conversion webhooks",
        ("apiregistration.k8s.io", _) => "APIServices route API groups to other servers",
        ("certificates.k8s.io", _) => "certificate signing mints cluster credentials",
        _ if kind.scope == Scope::Cluster => "cluster-scoped kinds reach beyond any namespace",
        _ => return None,
    };
    Some(why)
}

/// True for the groups of kinds Kubernetes itself serves: the core group,
/// groups without a dot (`apps`, `batch`, `policy`, `autoscaling`) and
/// `*.k8s.io`.
pub fn is_built_in_group(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
}

/// True when `list` grants `kind` (`None` is the restricted default).
fn granted_by(list: Option<&[GroupKind]>, kind: &ResourceKind, exact_needed: bool) -> bool {
    match list {
        None => !exact_needed,
        Some(list) => list.iter().any(|e| e.grants(kind, exact_needed)),
    }
}

impl Grant {
    /// Everything `manifest` asks for beyond this grant, in manifest order
    /// (primary, owned, watched); empty when the grant covers it. Kinds are
    /// checked by group and kind; a kind both owned and watched is checked
    /// as owned.
    pub fn check(&self, manifest: &Manifest) -> Vec<Excess> {
        let mut out: Vec<Excess> = Vec::new();
        let mut checked: Vec<GroupKind> = Vec::new();
        let uses = std::iter::once((Access::Primary, &manifest.primary))
            .chain(manifest.owns.iter().map(|k| (Access::Own, k)))
            .chain(manifest.watches.iter().map(|k| (Access::Read, k)));
        let primary = GroupKind::of(&manifest.primary);
        for (access, kind) in uses {
            let gk = GroupKind::of(kind);
            if access != Access::Read {
                let problem = if let Some(why) = host_only(kind) {
                    Some(ExcessKind::HostOnly(why))
                } else if access == Access::Own
                    && gk == primary
                    && !owns_primary_granted(self.own.as_deref(), &manifest.primary)
                {
                    Some(ExcessKind::OwnsPrimary)
                } else {
                    None
                };
                if let Some(problem) = problem {
                    checked.push(gk);
                    out.push(Excess {
                        access,
                        kind: kind.clone(),
                        problem,
                    });
                    continue;
                }
            }
            // A kind owned (or the primary) is not checked again as read.
            if access != Access::Primary && checked.contains(&gk) {
                continue;
            }
            checked.push(gk);
            if let Some(problem) = self.excess(access, kind) {
                out.push(Excess {
                    access,
                    kind: kind.clone(),
                    problem,
                });
            }
        }
        out
    }

    /// Why `access` to `kind` is not granted, or `None` when it is.
    fn excess(&self, access: Access, kind: &ResourceKind) -> Option<ExcessKind> {
        let primary = access == Access::Primary;
        let built_in_primary = primary && is_built_in_group(&kind.group);
        let sensitive = sensitivity(kind);
        let exact_needed = sensitive.is_some() || built_in_primary;
        let granted = match access {
            Access::Primary | Access::Own => granted_by(self.own.as_deref(), kind, exact_needed),
            Access::Read => {
                granted_by(self.read.as_deref(), kind, exact_needed)
                    || self
                        .own
                        .as_deref()
                        .is_some_and(|own| granted_by(Some(own), kind, exact_needed))
            }
        };
        if kind.scope == Scope::Cluster && !self.cluster_scoped {
            return Some(ExcessKind::ClusterScoped);
        }
        if granted {
            return None;
        }
        if let Some(written) = self.misspelling_of(access, kind) {
            return Some(ExcessKind::Misspelled { written });
        }
        Some(match sensitive {
            Some(why) => ExcessKind::Sensitive(why),
            None if built_in_primary => ExcessKind::BuiltInPrimary,
            None => ExcessKind::NotListed,
        })
    }

    /// A kind of the list `access` consults, in `kind`'s group, that is
    /// `kind` misspelled the way people do (its plural, or other letter
    /// case), as written in the grant.
    fn misspelling_of(&self, access: Access, kind: &ResourceKind) -> Option<String> {
        let lists = match access {
            Access::Primary | Access::Own => [self.own.as_deref(), None],
            Access::Read => [self.read.as_deref(), self.own.as_deref()],
        };
        let wanted = kind.kind.to_ascii_lowercase();
        let plural = kind.plural.to_ascii_lowercase();
        lists
            .into_iter()
            .flatten()
            .flatten()
            .filter(|entry| entry.group == kind.group && entry.kind != kind.kind)
            .find(|entry| {
                let written = entry.kind.to_ascii_lowercase();
                written == wanted
                    || written == plural
                    || written == format!("{wanted}s")
                    || written == format!("{wanted}es")
            })
            .map(|entry| entry.kind.clone())
    }

    /// The workload rules of this grant, resolved for [`check_workload`]:
    /// its level and ServiceAccounts, its own account, and whether it names
    /// Secrets (for reading: a template's Secret is read by its pods).
    pub fn workload_policy(&self) -> WorkloadPolicy<'_> {
        let secret = ResourceKind {
            group: String::new(),
            version: "v1".into(),
            kind: "Secret".into(),
            plural: "secrets".into(),
            scope: Scope::Namespaced,
        };
        let workloads = self.workloads.as_ref();
        WorkloadPolicy {
            level: workloads.map(|w| w.pod_security).unwrap_or_default(),
            service_accounts: workloads.map_or(&[], |w| w.service_accounts.as_slice()),
            grant_account: self.service_account.as_ref(),
            secrets_granted: self.excess(Access::Read, &secret).is_none(),
        }
    }

    /// True when objects in `namespace` are granted. `labels` are the
    /// Namespace object's labels when known; a selector never selects a
    /// namespace whose labels are unknown (fail closed).
    pub fn namespace_allowed(
        &self,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if self.namespaces.is_none() && self.namespace_selector.is_none() {
            return !SYSTEM_NAMESPACES.contains(&namespace);
        }
        let listed = self
            .namespaces
            .as_deref()
            .is_some_and(|l| l.iter().any(|n| n == "*" || n == namespace));
        let selected = match (&self.namespace_selector, labels) {
            (Some(selector), Some(labels)) => selector.matches(labels),
            _ => false,
        };
        listed || selected
    }

    /// True when the `namespaces` list names `namespace` exactly (not
    /// through `"*"`): what grants one of the host's own namespaces
    /// ([`crate::contract::HostObjects::grants_namespace`]).
    pub fn names_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .as_deref()
            .is_some_and(|l| l.iter().any(|n| n == namespace))
    }

    /// True when deciding a namespace needs its Namespace object's labels.
    pub fn needs_namespace_labels(&self) -> bool {
        self.namespace_selector.is_some()
    }

    /// True when every namespace is granted whatever its labels.
    pub fn all_namespaces(&self) -> bool {
        self.namespaces
            .as_deref()
            .is_some_and(|l| l.iter().any(|n| n == "*"))
    }

    /// The namespaces this grant names (`None` when it is not a fixed list:
    /// `*`, a selector, or the default of every non-system namespace).
    pub fn fixed_namespaces(&self) -> Option<&[String]> {
        if self.namespace_selector.is_some() || self.all_namespaces() {
            return None;
        }
        self.namespaces.as_deref()
    }

    /// One line for people: the grant's namespaces.
    pub fn describe_namespaces(&self) -> String {
        let mut parts = Vec::new();
        match &self.namespaces {
            None if self.namespace_selector.is_none() => {
                parts.push(format!(
                    "every namespace but {}",
                    SYSTEM_NAMESPACES.join(", ")
                ));
            }
            None => {}
            Some(list) if list.iter().any(|n| n == "*") => parts.push("every namespace".into()),
            Some(list) => parts.push(format!("namespaces [{}]", list.join(", "))),
        }
        if self.namespace_selector.is_some() {
            parts.push("namespaces matching namespaceSelector".into());
        }
        parts.join(" or ")
    }
}

#[cfg(test)]
mod tests {
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
                        && message
                            .contains("Event (never granted: Events are the host's recorder's"),
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
}
