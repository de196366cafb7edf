//! The host's own namespaces and objects, and the pure checks that keep
//! plugins out of them: a grant's `"*"`, its `namespaceSelector` or the
//! restricted default never grants a host namespace (only a `namespaces`
//! list naming it does), and no plugin child may be named like an object
//! the host keeps (its Leases, its webhook certificate Secret, its canary
//! diffs ConfigMaps), whatever the grant.
//!
//! Computed once when the host starts ([`HostObjects`]) and handed by the
//! manager to every part that decides what a plugin may touch.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::{Grant, WatchScope};

/// The label the host puts on every object it keeps for itself (its
/// Leases, its webhook certificate Secret, its canary diffs ConfigMaps):
/// an object without it is not the host's, and the host neither uses nor
/// takes it over.
pub const HOST_OBJECT_LABEL: &str = "wasm-operator.dev/host-object";

/// Where the host's leader-election Leases live and how they are named.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct LeaseNames {
    namespace: String,
    /// `--leader-election-id`: the leader Lease, and the prefix of the
    /// shard (`<id>-shard-<n>`) and member (`<id>-member-<hash>`) Leases.
    name: String,
}

/// The host's namespaces and the objects it keeps in them. The default
/// reserves nothing (an embedded manager, a test host): the command line
/// fills it from the pod's namespace and the flags.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HostObjects {
    namespaces: BTreeSet<String>,
    leases: Option<LeaseNames>,
    webhook_secret: Option<(String, String)>,
    canary_diffs_namespace: Option<String>,
    /// The namespaces the host serves (`run -n`): outside them, nothing is
    /// granted whatever a grant says.
    scope: WatchScope,
}

/// An object a plugin child would be: which of the host's objects it is
/// named like. Displayed for people ("the leader-election Lease").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum HostObject {
    /// `--leader-election-id`'s Lease.
    LeaderLease,
    /// A shard's Lease (`<id>-shard-<n>`).
    ShardLease,
    /// A replica's membership Lease (`<id>-member-<hash>`).
    MemberLease,
    /// The Secret keeping the conversion webhook's certificate and key.
    WebhookSecret,
    /// A WasmPlugin's canary diffs ConfigMap (`<wasmplugin>-canary-diffs`).
    CanaryDiffs,
}

impl fmt::Display for HostObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostObject::LeaderLease => "the host's leader-election Lease",
            HostObject::ShardLease => "a shard Lease of the host's leader election",
            HostObject::MemberLease => "a replica's membership Lease of the host's leader election",
            HostObject::WebhookSecret => "the host's conversion webhook certificate Secret",
            HostObject::CanaryDiffs => {
                "a WasmPlugin's canary diffs ConfigMap (read by `canary diff`)"
            }
        })
    }
}

impl HostObject {
    /// The value of [`HOST_OBJECT_LABEL`] on this object when the host
    /// created it.
    pub const fn label_value(&self) -> &'static str {
        match self {
            HostObject::LeaderLease => "leader-lease",
            HostObject::ShardLease => "shard-lease",
            HostObject::MemberLease => "member-lease",
            HostObject::WebhookSecret => "webhook-cert",
            HostObject::CanaryDiffs => "canary-diffs",
        }
    }

    /// The labels the host creates this object with.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([(
            HOST_OBJECT_LABEL.to_string(),
            self.label_value().to_string(),
        )])
    }

    /// True when an existing object with `labels` is this host object as
    /// the host created it: it carries [`HOST_OBJECT_LABEL`] with this
    /// object's value and is no plugin's child. Anything else at the
    /// host's name is a squatter, never used or taken over.
    pub fn created_by_host(&self, labels: Option<&BTreeMap<String, String>>) -> bool {
        labels.is_some_and(|labels| {
            labels.get(HOST_OBJECT_LABEL).map(String::as_str) == Some(self.label_value())
                && !labels.contains_key(PLUGIN_CHILD_LABEL)
        })
    }

    /// What a squatter at `kind namespace/name` means and what the cluster
    /// operator does about it, for logs, `/readyz` and status.
    pub fn squatter_message(&self, kind: &str, namespace: &str, name: &str) -> String {
        format!(
            "{kind} {namespace}/{name} is named like {self} but the host did not create it (it lacks the label {HOST_OBJECT_LABEL}={}); the host neither uses nor takes over an object it did not create. Check who planted it, then delete it (kubectl -n {namespace} delete {} {name}) and the host creates its own",
            self.label_value(),
            kind.to_ascii_lowercase()
        )
    }
}

/// The label the host puts on every plugin child, naming the plugin
/// (`crate::plan::PLUGIN_LABEL`): an object carrying it is a child, never
/// a host object.
pub const PLUGIN_CHILD_LABEL: &str = "wasm-operator.dev/plugin";

impl HostObjects {
    /// Nothing reserved yet; `pod_namespace` (the namespace the host runs
    /// in, when it runs in a pod) is reserved.
    pub fn new(pod_namespace: Option<&str>) -> HostObjects {
        let mut host = HostObjects::default();
        if let Some(ns) = pod_namespace.filter(|ns| !ns.is_empty()) {
            host.namespaces.insert(ns.to_string());
        }
        host
    }

    /// The host elects its writer through Lease `name` (and its shard and
    /// member Leases) in `namespace`; `reserve_namespace`: the namespace is
    /// the host's (named by a flag or the pod's; not a fallback to the
    /// kubeconfig context's outside a pod).
    #[must_use]
    pub fn with_leader_election(
        mut self,
        namespace: &str,
        name: &str,
        reserve_namespace: bool,
    ) -> HostObjects {
        if reserve_namespace {
            self.namespaces.insert(namespace.to_string());
        }
        self.leases = Some(LeaseNames {
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
        self
    }

    /// The host keeps its webhook certificate in Secret `namespace/name`;
    /// `reserve_namespace`: the namespace is the host's (named by a flag or
    /// the pod's; false for a fallback to `default` outside a pod and for
    /// `dev`, whose throwaway cluster keeps everything in `default`).
    #[must_use]
    pub fn with_webhook_secret(
        mut self,
        namespace: &str,
        name: &str,
        reserve_namespace: bool,
    ) -> HostObjects {
        if reserve_namespace {
            self.namespaces.insert(namespace.to_string());
        }
        self.webhook_secret = Some((namespace.to_string(), name.to_string()));
        self
    }

    /// The host writes the canary diffs ConfigMaps into `namespace` (not
    /// reserved by this: it is the pod's namespace when there is one).
    #[must_use]
    pub fn with_canary_diffs(mut self, namespace: &str) -> HostObjects {
        self.canary_diffs_namespace = Some(namespace.to_string());
        self
    }

    /// The host serves only the namespaces `scope` contains (`run -n`):
    /// every grant is narrowed to them.
    #[must_use]
    pub fn with_scope(mut self, scope: WatchScope) -> HostObjects {
        self.scope = scope;
        self
    }

    /// The namespaces the host serves (`run -n`, `-A`).
    pub fn scope(&self) -> &WatchScope {
        &self.scope
    }

    /// The reserved namespaces, sorted.
    pub fn namespaces(&self) -> impl Iterator<Item = &str> {
        self.namespaces.iter().map(String::as_str)
    }

    /// True when `namespace` is one of the host's.
    pub fn is_host_namespace(&self, namespace: &str) -> bool {
        self.namespaces.contains(namespace)
    }

    /// True when `grant` grants `namespace` (whose labels are `labels`, if
    /// known): as [`Grant::namespace_allowed`], except that a host
    /// namespace is granted only by a `namespaces` list naming it exactly,
    /// and a namespace outside the host's [`WatchScope`] never is (the
    /// grant is the ceiling, `run -n` narrows it).
    pub fn grants_namespace(
        &self,
        grant: &Grant,
        namespace: &str,
        labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        if !self.scope.contains(namespace) {
            return false;
        }
        if self.is_host_namespace(namespace) {
            return grant.names_namespace(namespace);
        }
        grant.namespace_allowed(namespace, labels)
    }

    /// Which of the host's objects a child `kind` of `group` named `name`
    /// in `namespace` would be, or `None` when it is no host object. Pure;
    /// the names are those the host uses, in the namespaces it uses them.
    pub fn claimed(
        &self,
        group: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<HostObject> {
        let namespace = namespace?;
        match (group, kind) {
            ("coordination.k8s.io", "Lease") => {
                let leases = self.leases.as_ref().filter(|l| l.namespace == namespace)?;
                lease_claim(&leases.name, name)
            }
            ("", "Secret") => self
                .webhook_secret
                .as_ref()
                .filter(|(ns, n)| ns == namespace && n == name)
                .map(|_| HostObject::WebhookSecret),
            ("", "ConfigMap") => (self.canary_diffs_namespace.as_deref() == Some(namespace)
                && name.ends_with(CANARY_DIFFS_SUFFIX))
            .then_some(HostObject::CanaryDiffs),
            _ => None,
        }
    }

    /// One line for people: the reserved namespaces.
    pub fn describe_namespaces(&self) -> String {
        if self.namespaces.is_empty() {
            return "none".to_string();
        }
        self.namespaces().collect::<Vec<_>>().join(", ")
    }
}

/// The suffix of a canary diffs ConfigMap's name (`<wasmplugin>-canary-diffs`).
pub const CANARY_DIFFS_SUFFIX: &str = "-canary-diffs";

/// Which leader-election Lease `name` is among those of `id`.
fn lease_claim(id: &str, name: &str) -> Option<HostObject> {
    if name == id {
        return Some(HostObject::LeaderLease);
    }
    let rest = name.strip_prefix(id)?;
    if rest
        .strip_prefix("-shard-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return Some(HostObject::ShardLease);
    }
    rest.strip_prefix("-member-")
        .is_some_and(|h| !h.is_empty())
        .then_some(HostObject::MemberLease)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> HostObjects {
        HostObjects::new(Some("wasm-operator-system"))
            .with_leader_election("wasm-operator-system", "wasm-operator", true)
            .with_webhook_secret("certs", "wasm-operator-webhook-cert", true)
            .with_canary_diffs("wasm-operator-system")
    }

    fn grant(yaml: &str) -> Grant {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn the_scope_narrows_every_grant_and_widens_none() {
        let host = HostObjects::default().with_scope(WatchScope::from_flags(&["team-a".into()]));
        let star = grant("namespaces: ['*']");
        assert!(host.grants_namespace(&star, "team-a", None));
        assert!(!host.grants_namespace(&star, "team-b", None));
        assert!(!host.grants_namespace(&Grant::default(), "default", None));
        // The grant stays the ceiling: in scope but not granted is refused.
        let other = grant("namespaces: [team-b]");
        assert!(!host.grants_namespace(&other, "team-a", None));
        assert!(HostObjects::default().grants_namespace(&star, "team-b", None));
    }

    #[test]
    fn the_pod_the_lease_and_the_webhook_secret_namespaces_are_reserved() {
        let host = host();
        assert_eq!(
            host.namespaces().collect::<Vec<_>>(),
            ["certs", "wasm-operator-system"]
        );
        assert!(!host.is_host_namespace("default"));
        assert!(HostObjects::default().namespaces().next().is_none());
        assert!(HostObjects::new(Some("")).namespaces().next().is_none());
        let dev = HostObjects::default()
            .with_webhook_secret("default", "cert", false)
            .with_leader_election("default", "wasm-operator", false);
        assert!(!dev.is_host_namespace("default"));
        assert_eq!(
            dev.claimed(
                "coordination.k8s.io",
                "Lease",
                Some("default"),
                "wasm-operator"
            ),
            Some(HostObject::LeaderLease),
            "names are protected where no namespace is reserved"
        );
    }

    #[test]
    fn the_default_grant_star_and_selectors_never_grant_a_host_namespace() {
        let host = host();
        let default = Grant::default();
        assert!(host.grants_namespace(&default, "team-a", None));
        assert!(!host.grants_namespace(&default, "wasm-operator-system", None));
        assert!(!host.grants_namespace(&default, "certs", None));
        let star = grant("namespaces: ['*']");
        assert!(host.grants_namespace(&star, "kube-system", None));
        assert!(!host.grants_namespace(&star, "wasm-operator-system", None));
        let selector = grant("namespaceSelector: {}");
        let labels = BTreeMap::new();
        assert!(host.grants_namespace(&selector, "team-a", Some(&labels)));
        assert!(!host.grants_namespace(&selector, "wasm-operator-system", Some(&labels)));
    }

    #[test]
    fn a_list_naming_a_host_namespace_exactly_grants_it() {
        let host = host();
        let named = grant("namespaces: [wasm-operator-system]");
        assert!(host.grants_namespace(&named, "wasm-operator-system", None));
        assert!(!host.grants_namespace(&named, "certs", None));
        let both = grant("namespaces: ['*', certs]");
        assert!(host.grants_namespace(&both, "certs", None));
        assert!(!host.grants_namespace(&both, "wasm-operator-system", None));
    }

    #[test]
    fn children_named_like_the_hosts_objects_are_claimed() {
        let host = host();
        let lease = |name: &str| {
            host.claimed(
                "coordination.k8s.io",
                "Lease",
                Some("wasm-operator-system"),
                name,
            )
        };
        assert_eq!(lease("wasm-operator"), Some(HostObject::LeaderLease));
        assert_eq!(lease("wasm-operator-shard-3"), Some(HostObject::ShardLease));
        assert_eq!(
            lease("wasm-operator-member-00ff00ff00ff00ff"),
            Some(HostObject::MemberLease)
        );
        assert_eq!(lease("wasm-operator-shard-x"), None);
        assert_eq!(lease("my-app"), None);
        assert_eq!(
            host.claimed(
                "coordination.k8s.io",
                "Lease",
                Some("team-a"),
                "wasm-operator"
            ),
            None
        );
        assert_eq!(
            host.claimed("", "Secret", Some("certs"), "wasm-operator-webhook-cert"),
            Some(HostObject::WebhookSecret)
        );
        assert_eq!(
            host.claimed("", "Secret", Some("team-a"), "wasm-operator-webhook-cert"),
            None
        );
        assert_eq!(
            host.claimed(
                "",
                "ConfigMap",
                Some("wasm-operator-system"),
                "kv-canary-diffs"
            ),
            Some(HostObject::CanaryDiffs)
        );
        assert_eq!(
            host.claimed("", "ConfigMap", Some("wasm-operator-system"), "kv-config"),
            None
        );
        assert_eq!(host.claimed("", "ConfigMap", None, "kv-canary-diffs"), None);
        assert!(
            HostObject::LeaderLease
                .to_string()
                .contains("leader-election Lease")
        );
    }
}
