//! The shard coordinator: one task per replica (with `--shards N > 1`)
//! that announces this replica as live and decides, every retry period,
//! which shard Leases it should hold ([`super::plan_shards`]); each shard's
//! elector takes or gives up its Lease accordingly.
//!
//! # Who is live
//!
//! Every replica renews its own membership Lease,
//! `<leader-election-id>-member-<hash of its identity>`, every retry period
//! (holder: its identity). A replica is live while its membership Lease
//! keeps changing: as for the shard Leases, "unchanged for a lease
//! duration" is measured on the reader's own monotonic clock. A replica
//! that exits cleanly deletes its membership Lease; one that dies leaves it
//! to expire, and the others delete it once it has not changed for two
//! lease durations.
//!
//! Membership only decides shares (who should take what). Safety does
//! not depend on it: a shard Lease is only taken when released or expired,
//! by the ordinary rules of [`super::decide`].

use crate::contract::HostObject;
use crate::util::lock;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::assign::{ShardPlan, plan_shards, shard_lease_name};
use super::elector::LeaderElectionConfig;

/// What the coordinator last observed and decided, for `/readyz?verbose`
/// and logs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShardStatus {
    /// The holder of each shard's Lease, by shard (`None`: absent or
    /// released).
    pub holders: Vec<Option<String>>,
    /// The live replicas' identities.
    pub live: BTreeSet<String>,
    /// What this replica should hold.
    pub plan: ShardPlan,
}

/// A running coordinator; [`ShardCoordinator::stop`] ends it and deletes
/// this replica's membership Lease.
pub struct ShardCoordinator {
    cancel: CancellationToken,
    task: Option<JoinHandle<()>>,
    status: Arc<Mutex<ShardStatus>>,
    api: Api<Lease>,
    member: String,
    timeout: Duration,
}

impl std::fmt::Debug for ShardCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardCoordinator")
            .field("member", &self.member)
            .finish_non_exhaustive()
    }
}

/// The membership Lease of the replica `identity` among those electing
/// with `name`.
pub fn member_lease_name(name: &str, identity: &str) -> String {
    format!(
        "{name}-member-{:016x}",
        super::assign::fnv1a(identity.as_bytes())
    )
}

fn now_micro() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

impl ShardCoordinator {
    /// Starts announcing this replica and planning its shards: `wants[i]`
    /// is set while this replica should hold shard `i`. `config` is the
    /// election's (its name is the prefix of every shard and membership
    /// Lease).
    pub fn start(
        client: Client,
        config: &LeaderElectionConfig,
        wants: Vec<Arc<AtomicBool>>,
    ) -> ShardCoordinator {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let member = member_lease_name(&config.name, &config.identity);
        let status = Arc::new(Mutex::new(ShardStatus::default()));
        let cancel = CancellationToken::new();
        let round = Round {
            api: api.clone(),
            config: config.clone(),
            member: member.clone(),
            wants,
            seen: BTreeMap::new(),
            status: status.clone(),
        };
        let task = tokio::spawn(round.run(cancel.clone()));
        ShardCoordinator {
            cancel,
            task: Some(task),
            status,
            api,
            member,
            timeout: config.renew_deadline,
        }
    }

    /// A function reading what it last observed (for the readiness checks).
    pub fn status_handle(&self) -> impl Fn() -> ShardStatus + Send + Sync + 'static {
        let status = self.status.clone();
        move || lock(&status).clone()
    }

    /// Stops planning and deletes this replica's membership Lease, so the
    /// others count one replica less at once (bounded by the renew
    /// deadline; otherwise it expires).
    pub async fn stop(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let params = DeleteParams::default();
        let delete = self.api.delete(&self.member, &params);
        match tokio::time::timeout(self.timeout, delete).await {
            Ok(Ok(_)) => tracing::info!(lease = %self.member, "membership Lease deleted"),
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.member, %error, "cannot delete the membership Lease; it expires by itself");
            }
            Err(_) => {
                tracing::warn!(lease = %self.member, "deleting the membership Lease timed out; it expires by itself");
            }
        }
    }
}

impl Drop for ShardCoordinator {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A membership Lease as last seen, and when it last changed (our clock).
struct Seen {
    resource_version: Option<String>,
    holder: Option<String>,
    changed_at: Instant,
}

struct Round {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    member: String,
    wants: Vec<Arc<AtomicBool>>,
    seen: BTreeMap<String, Seen>,
    status: Arc<Mutex<ShardStatus>>,
}

impl Round {
    async fn run(mut self, cancel: CancellationToken) {
        let mut last: Option<BTreeSet<usize>> = None;
        // The first round only announces this replica: replicas started
        // together see each other before any takes a shard, instead of
        // each taking every shard and giving most back.
        let announced = tokio::select! {
            () = cancel.cancelled() => return,
            result = tokio::time::timeout(self.config.renew_deadline, self.renew()) => result,
        };
        if !matches!(announced, Ok(Ok(()))) {
            tracing::warn!(identity = %self.config.identity, "cannot create the membership Lease yet; retrying");
        }
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(self.config.retry_period) => {}
        }
        loop {
            let attempt = tokio::select! {
                () = cancel.cancelled() => return,
                result = tokio::time::timeout(self.config.renew_deadline, self.once()) => result,
            };
            match attempt {
                Ok(Ok(plan)) => {
                    if last.as_ref() != Some(&plan.wanted) {
                        tracing::info!(
                            target: "audit", identity = %self.config.identity,
                            share = plan.share, wanted = ?plan.wanted,
                            "shard plan: this replica should hold shards {:?} (fair share {})",
                            plan.wanted, plan.share
                        );
                        last = Some(plan.wanted.clone());
                    }
                    for (shard, want) in self.wants.iter().enumerate() {
                        want.store(plan.wanted.contains(&shard), Ordering::SeqCst);
                    }
                }
                Ok(Err(error)) => tracing::warn!(
                    identity = %self.config.identity, %error,
                    "cannot renew the membership Lease or read the shard Leases in {}; keeping the current shard plan (check the API server and the RBAC for coordination.k8s.io leases)",
                    self.config.namespace
                ),
                Err(_) => tracing::warn!(
                    identity = %self.config.identity,
                    "renewing the membership Lease timed out; keeping the current shard plan"
                ),
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    /// One round: renew the membership, read every Lease, plan.
    async fn once(&mut self) -> Result<ShardPlan, kube::Error> {
        self.renew().await?;
        let leases = self.api.list(&ListParams::default()).await?.items;
        let prefix = format!("{}-member-", self.config.name);
        let mut names = BTreeSet::new();
        for lease in &leases {
            let name = lease.name_any();
            // A member Lease the host did not create (planted to count a
            // phantom replica) is no member: never counted, never deleted.
            if !name.starts_with(&prefix)
                || !HostObject::MemberLease.created_by_host(lease.metadata.labels.as_ref())
            {
                continue;
            }
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
            let resource_version = lease.resource_version();
            let changed = self
                .seen
                .get(&name)
                .is_none_or(|s| s.resource_version != resource_version || s.holder != holder);
            if changed {
                self.seen.insert(
                    name.clone(),
                    Seen {
                        resource_version,
                        holder,
                        changed_at: Instant::now(),
                    },
                );
            }
            names.insert(name);
        }
        self.seen.retain(|name, _| names.contains(name));
        let mut live = BTreeSet::new();
        let mut stale = Vec::new();
        for (name, seen) in &self.seen {
            let age = seen.changed_at.elapsed();
            if *name == self.member || age < self.config.lease_duration {
                live.extend(seen.holder.clone());
            } else if age >= self.config.lease_duration * 2 {
                stale.push((name.clone(), seen.resource_version.clone()));
            }
        }
        live.insert(self.config.identity.clone());
        for (name, resource_version) in stale {
            // Only the version we saw expire: a replica that renewed it
            // meanwhile keeps it.
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version,
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            if self.api.delete(&name, &params).await.is_ok() {
                tracing::info!(lease = %name, "deleted the membership Lease of a replica that stopped renewing it");
            }
        }
        let holders: Vec<Option<String>> = (0..self.wants.len())
            .map(|shard| {
                let name = shard_lease_name(&self.config.name, shard);
                leases
                    .iter()
                    .find(|l| l.name_any() == name)
                    .and_then(|l| l.spec.as_ref()?.holder_identity.clone())
                    .filter(|h| !h.is_empty())
            })
            .collect();
        let plan = plan_shards(&self.config.identity, &holders, &live);
        *lock(&self.status) = ShardStatus {
            holders,
            live,
            plan: plan.clone(),
        };
        Ok(plan)
    }

    /// Creates or renews this replica's membership Lease.
    async fn renew(&self) -> Result<(), kube::Error> {
        let spec = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX),
            ),
            renew_time: Some(now_micro()),
            ..LeaseSpec::default()
        };
        match self.api.get_opt(&self.member).await? {
            Some(lease)
                if !HostObject::MemberLease.created_by_host(lease.metadata.labels.as_ref()) =>
            {
                // Not the host's: never written (its name hashes this
                // process's random identity, so it was planted after the
                // host started). Other replicas do not count it either.
                let message = HostObject::MemberLease.squatter_message(
                    "Lease",
                    &self.config.namespace,
                    &self.member,
                );
                tracing::error!(lease = %self.member, "{message}");
            }
            Some(mut lease) => {
                lease.spec = Some(spec);
                self.api
                    .replace(&self.member, &PostParams::default(), &lease)
                    .await?;
            }
            None => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.member.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        labels: Some(HostObject::MemberLease.labels()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn membership_leases_are_named_after_a_stable_hash_of_the_identity() {
        let name = member_lease_name("wasm-operator", "pod-a_0011aabb");
        assert_eq!(name, member_lease_name("wasm-operator", "pod-a_0011aabb"));
        assert!(name.starts_with("wasm-operator-member-"), "{name}");
        assert_eq!(name.len(), "wasm-operator-member-".len() + 16);
        assert_ne!(name, member_lease_name("wasm-operator", "pod-b_0011aabb"));
    }
}
