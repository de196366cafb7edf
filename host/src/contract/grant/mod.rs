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
//! - `crds`: the host installs and updates the plugin's own CRD (the one
//!   its component carries) when a version activates (see [`plan_crd`]).
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

mod crds;
mod host_rbac;
mod rbac;
mod reserved;
mod workload;

pub use crds::{CrdAction, CrdRefusal, plan_crd};
pub use host_rbac::{ServedPlugin, host_rules};
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
    /// The host may create and update the plugin's own CRD (the one its
    /// component carries, `LoadedPlugin::crd`) by server-side apply when a
    /// version activates: only the CRD of its primary kind or of another
    /// kind of the primary's group the plugin declares, never a deletion,
    /// never a scope change, never dropping a version that still has stored
    /// objects. Default false: the CRD is left as the cluster has it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crds: bool,
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
mod tests;
