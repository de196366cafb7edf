//! What every reconcile of one plugin shares ([`Context`]), and what it
//! reads from it: the observed children, the call context, what the caches
//! show at the desired keys. The reconcile shell ([`super::reconcile`]) and
//! the shadow computation ([`super::shadow`]) both build on it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use chrono::Utc;
use kube::api::{ApiResource, DynamicObject};
use kube::{Client, ResourceExt};

use super::backoff::Failures;
use super::error::ReconcileError;
use crate::apply::{self, EventSink, Writer};
use crate::cache::{CacheLease, CachedObject, NamespaceGate, object_text};
use crate::contract::{CallContext, HostObjects, Manifest, ReconcileLimits};
use crate::engine::CacheReader;
use crate::lease::{ShardGates, WriteGate};
use crate::plan::{
    self, ChildKey, CreationBudget, MANAGED_BY_VERSION_ANNOTATION, ObjectRates, OwnedChild,
};
use crate::registry::{ActiveVersion, ServingVersions};
use crate::telemetry::Metrics;

/// Everything a reconcile of one plugin needs; shared by its calls.
pub(super) struct Context {
    /// Writes as the plugin (impersonating its grant's ServiceAccount, if any).
    pub client: Client,
    /// The host's own identity: releases its finalizer from primaries
    /// outside the grant.
    pub host_client: Client,
    pub plugin: String,
    pub versions: Arc<ServingVersions>,
    pub primary: ApiResource,
    pub owned: Vec<CacheLease>,
    pub cache: Arc<dyn CacheReader>,
    /// The namespaces of the plugin's grant.
    pub gate: NamespaceGate,
    pub events: EventSink,
    pub metrics: Metrics,
    /// Whether this replica may write now, and its fencing token: one
    /// gate per shard (one in all without sharding).
    pub writes: ShardGates,
    pub failures: Failures,
    /// Per-object rate-limit state (reconciles, events), by object key.
    pub rates: Mutex<HashMap<String, ObjectRates>>,
    /// The plugin's creation budget over all its primaries (created with
    /// the first reconcile's limits).
    pub creations: Mutex<Option<CreationBudget>>,
    /// What the host last applied to each child: unchanged children are
    /// not applied again ([`plan::unchanged`]).
    pub applied: apply::AppliedChildren,
    /// The host's last write to each primary: a reconcile waits for the
    /// cache to show it ([`apply::PrimaryWrites`]).
    pub primary_writes: apply::PrimaryWrites,
}

/// Objects whose rate state is kept before idle entries are forgotten.
const RATES_KEPT: usize = 1024;

impl Context {
    /// The gate guarding writes to `obj`: its shard's.
    pub(super) fn writes_for(&self, obj: &DynamicObject) -> &WriteGate {
        self.writes.for_uid(obj.metadata.uid.as_deref())
    }

    /// Runs `f` on the rate state of the object `key` (created full).
    pub(super) fn with_rates<R>(
        &self,
        key: &str,
        limits: &ReconcileLimits,
        f: impl FnOnce(&mut ObjectRates) -> R,
    ) -> R {
        let now = Utc::now();
        // The map holds plain values; a poisoned lock still holds valid ones.
        let mut rates = crate::util::lock(&self.rates);
        if rates.len() > RATES_KEPT {
            rates.retain(|_, r| !r.is_idle(limits, now));
        }
        let entry = rates
            .entry(key.to_string())
            .or_insert_with(|| ObjectRates::new(limits, now));
        f(entry)
    }
}

impl Context {
    /// Takes up to `wanted` creations from the plugin's budget; how many
    /// were granted.
    pub(super) fn take_creations(&self, wanted: usize, limits: &ReconcileLimits) -> usize {
        let now = Utc::now();
        let mut budget = crate::util::lock(&self.creations);
        budget
            .get_or_insert_with(|| CreationBudget::new(limits, now))
            .take(wanted, limits, now)
    }

    /// When `plan` left new children out for the creation budget and the
    /// budget refills (its total is not spent): look again once a creation
    /// is due (the refill, at least the shortest requeue), so they are
    /// created without waiting for the resync.
    pub(super) fn creations_wait(
        &self,
        plan: &plan::Plan,
        limits: &ReconcileLimits,
    ) -> Option<plan::Requeue> {
        let clamped = plan
            .breaches
            .iter()
            .any(|b| b.limit == plan::Limit::Creations);
        let spent = crate::util::lock(&self.creations)
            .as_ref()
            .is_some_and(|budget| budget.spent(limits));
        (clamped && !spent).then(|| {
            let wait = limits.creation_refill.max(limits.min_requeue);
            plan::Requeue::AfterMs(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
        })
    }

    /// Gives back creations a plan did not use.
    pub(super) fn refund_creations(&self, unused: usize, limits: &ReconcileLimits) {
        if unused == 0 {
            return;
        }
        if let Some(budget) = crate::util::lock(&self.creations).as_mut() {
            budget.refund(unused, limits);
        }
    }
}

/// The writer of this controller's plans for `obj`: as the plugin, behind
/// the gate of `obj`'s shard.
pub(super) fn writer<'a>(ctx: &'a Context, obj: &DynamicObject) -> Writer<'a> {
    Writer {
        client: &ctx.client,
        primary: &ctx.primary,
        plugin: &ctx.plugin,
        events: &ctx.events,
        gate: ctx.writes_for(obj),
    }
}

/// What the host observed for one call: the owned children (for the plan)
/// and what the plugin gets to see, as JSON.
pub(super) struct Observation {
    pub owned: Vec<OwnedChild>,
    pub children: Vec<String>,
    pub object: String,
}

pub(super) fn observe(obj: &DynamicObject, ctx: &Context, active: &ActiveVersion) -> Observation {
    let uid = obj.uid().unwrap_or_default();
    let manifest = active.plugin.manifest();
    // The controller watches the owned kinds of both versions of a canary;
    // each version sees (and may prune) only children of kinds it owns.
    let owns = |lease: &CacheLease| {
        let ar = lease.api_resource();
        manifest
            .owns
            .iter()
            .any(|k| k.matches(&ar.api_version, &ar.kind))
    };
    let owned = if ctx.owned.iter().all(owns) {
        // Without a candidate of other kinds: no copy on the stable path.
        apply::owned_children(&ctx.owned, &manifest.name, &uid)
    } else {
        let leases: Vec<CacheLease> = ctx.owned.iter().filter(|l| owns(l)).cloned().collect();
        apply::owned_children(&leases, &manifest.name, &uid)
    };
    let children = owned.iter().map(|c| c.object.text(&c.resource)).collect();
    Observation {
        owned,
        children,
        object: object_text(obj, &ctx.primary),
    }
}

/// The writer of the host's own release of a deleting primary outside the
/// plugin's grant ([`crate::plan::host::outside_grant`]): as the host, since
/// the plugin's identity may no longer act there.
pub(super) fn host_writer<'a>(ctx: &'a Context, obj: &DynamicObject) -> Writer<'a> {
    Writer {
        client: &ctx.host_client,
        ..writer(ctx, obj)
    }
}

/// What the owned kinds' caches show at `keys` (the takeover check of
/// [`plan::reconcile`]): lookups by key, no list.
pub(super) fn existing(ctx: &Context, keys: &[ChildKey]) -> BTreeMap<ChildKey, Arc<CachedObject>> {
    keys.iter()
        .filter_map(|key| apply::cached_child(&ctx.owned, key).map(|obj| (key.clone(), obj)))
        .collect()
}

/// The children (as `Kind namespace/name`) in namespaces `gate` does not allow.
pub(super) fn children_outside<'a>(
    keys: impl Iterator<Item = &'a plan::ChildKey>,
    gate: &NamespaceGate,
) -> Vec<String> {
    keys.filter(|key| key.namespace.as_deref().is_some_and(|ns| !gate.allows(ns)))
        .map(ToString::to_string)
        .collect()
}

/// The children (as `Kind namespace/name (whose object)`) named like the
/// host's own objects.
pub(super) fn children_claimed<'a>(
    keys: impl Iterator<Item = &'a plan::ChildKey>,
    host: &HostObjects,
) -> Vec<String> {
    keys.filter_map(|key| {
        let group = key.api_version.rsplit_once('/').map_or("", |(g, _)| g);
        host.claimed(group, &key.kind, key.namespace.as_deref(), &key.name)
            .map(|whose| format!("{key} (would be {whose})"))
    })
    .collect()
}

/// Why the children `keys` of `manifest`'s answer may not be written: some
/// are outside the namespaces `gate` allows, or named like the host's own
/// objects; `None` when they may.
pub(super) fn children_refusal<'a>(
    keys: impl Iterator<Item = &'a plan::ChildKey> + Clone,
    gate: &NamespaceGate,
    manifest: &Manifest,
) -> Option<ReconcileError> {
    let outside = children_outside(keys.clone(), gate);
    if !outside.is_empty() {
        return Some(ReconcileError::ChildOutsideGrant {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            children: outside.join(", "),
            granted: gate.describe(),
        });
    }
    let claimed = children_claimed(keys, gate.host());
    (!claimed.is_empty()).then(|| ReconcileError::HostObjectChild {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        children: claimed.join(", "),
    })
}

/// The context of a plugin call on `obj` by `active`, its `attempt`th.
pub(super) fn call_context(
    obj: &DynamicObject,
    active: &ActiveVersion,
    attempt: u32,
) -> CallContext {
    CallContext {
        plugin_version: active.plugin.manifest().version.clone(),
        attempt,
        managed_by_version: obj
            .annotations()
            .get(MANAGED_BY_VERSION_ANNOTATION)
            .cloned(),
        config: active.config.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_outside_the_granted_namespaces_are_named() {
        let key = |ns: Option<&str>, name: &str| plan::ChildKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: ns.map(str::to_string),
            name: name.into(),
        };
        let keys = [
            key(Some("team-a"), "fine"),
            key(Some("kube-system"), "sneaky"),
            key(None, "cluster-wide"),
        ];
        let gate = NamespaceGate::new(Arc::default(), None);
        assert_eq!(
            children_outside(keys.iter(), &gate),
            ["ConfigMap kube-system/sneaky"]
        );
    }

    fn key(api_version: &str, kind: &str, ns: &str, name: &str) -> plan::ChildKey {
        plan::ChildKey {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    fn manifest() -> Manifest {
        let primary = crate::contract::ResourceKind {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "App".into(),
            plural: "apps".into(),
            scope: crate::contract::Scope::Namespaced,
        };
        Manifest {
            name: "squatter".into(),
            version: "1.0.0".into(),
            description: String::new(),
            primary,
            owns: Vec::new(),
            watches: Vec::new(),
            finalizer: false,
            implements: Default::default(),
            min_compatible_version: None,
        }
    }

    #[test]
    fn children_in_the_hosts_namespace_or_named_like_its_objects_are_refused() {
        let host = Arc::new(
            HostObjects::new(Some("wasm-operator-system"))
                .with_leader_election("wasm-operator-system", "wasm-operator", true)
                .with_webhook_secret("wasm-operator-system", "wasm-operator-webhook-cert", true)
                .with_canary_diffs("wasm-operator-system"),
        );
        let default_grant = NamespaceGate::new(Arc::default(), None).reserving(host.clone());
        let lease = key(
            "coordination.k8s.io/v1",
            "Lease",
            "wasm-operator-system",
            "wasm-operator",
        );
        let refusal = children_refusal([lease.clone()].iter(), &default_grant, &manifest());
        assert!(
            matches!(&refusal, Some(ReconcileError::ChildOutsideGrant { children, .. }) if children.contains("wasm-operator-system/wasm-operator")),
            "{refusal:?}"
        );
        // Granted by name, the namespace is reachable; the host's names are not.
        let grant: crate::contract::Grant =
            serde_yaml::from_str("namespaces: [wasm-operator-system, team-a]").unwrap();
        let named = NamespaceGate::new(Arc::new(grant), None).reserving(host);
        let secret = key(
            "v1",
            "Secret",
            "wasm-operator-system",
            "wasm-operator-webhook-cert",
        );
        let diffs = key("v1", "ConfigMap", "wasm-operator-system", "kv-canary-diffs");
        let fine = key("v1", "ConfigMap", "wasm-operator-system", "kv-config");
        let keys = [lease, secret, diffs, fine.clone()];
        let refusal = children_refusal(keys.iter(), &named, &manifest());
        let Some(ReconcileError::HostObjectChild { children, .. }) = &refusal else {
            panic!("named like the host's objects: {refusal:?}");
        };
        assert!(children.contains("Lease wasm-operator-system/wasm-operator (would be the host's leader-election Lease)"), "{children}");
        assert!(
            children.contains("webhook certificate Secret"),
            "{children}"
        );
        assert!(children.contains("canary diffs ConfigMap"), "{children}");
        assert!(!children.contains("kv-config"), "{children}");
        assert_eq!(
            refusal.as_ref().map(ReconcileError::reason),
            Some("CapabilityDenied")
        );
        assert!(children_refusal([fine].iter(), &named, &manifest()).is_none());
    }
}
