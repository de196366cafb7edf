//! What the election says on `/readyz?verbose`: one host check, about the
//! leader's Lease (`leader-election`) or about the shard Leases
//! (`shards`). Pure formatting of what the electors and the coordinator
//! last observed; the manager only asks for the check.
//!
//! # Guarantees
//!
//! - A Lease at one of the host's names that the host did not create (a
//!   squatter, [`crate::contract::HostObject::created_by_host`]) fails the
//!   check, naming the Lease and saying what to do: the leader's, and with
//!   `--shards N` every squatted shard Lease (whose primaries nobody
//!   reconciles until it is gone).
//! - Otherwise the check passes: a standby replica is ready (it serves
//!   webhooks and takes over warm).

use std::sync::Arc;

use crate::telemetry::ReadinessCheck;

use super::coordinator::{ShardCoordinator, ShardStatus};
use super::elector::{ElectionStatus, LeaderElector};
use super::gate::{Leadership, ShardGates, WriteGate};

type StatusFn<T> = Arc<dyn Fn() -> T + Send + Sync>;

/// Reads what the election last observed, for `/readyz?verbose`. Cheap to
/// clone; clones read the same electors.
#[derive(Clone)]
pub struct ElectionReadiness {
    /// The leader's Lease, or the shard Leases' prefix (`namespace/name`).
    lease: String,
    view: View,
}

#[derive(Clone)]
enum View {
    Leader {
        gate: WriteGate,
        status: StatusFn<ElectionStatus>,
    },
    Sharded {
        shards: ShardGates,
        status: StatusFn<ShardStatus>,
        /// One per shard, in shard order.
        electors: Vec<StatusFn<ElectionStatus>>,
    },
}

impl std::fmt::Debug for ElectionReadiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElectionReadiness")
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl ElectionReadiness {
    /// The check of one leader: `elector` elects through its Lease and
    /// opens `gate`.
    pub fn leader(elector: &LeaderElector, gate: WriteGate) -> ElectionReadiness {
        ElectionReadiness {
            lease: elector.config().lease(),
            view: View::Leader {
                gate,
                status: Arc::new(elector.status_handle()),
            },
        }
    }

    /// The check of the shards: `lease` is the shard Leases' prefix
    /// (`namespace/name`), `electors` the shards' electors in shard order.
    pub fn sharded(
        lease: String,
        shards: ShardGates,
        coordinator: &ShardCoordinator,
        electors: &[LeaderElector],
    ) -> ElectionReadiness {
        ElectionReadiness {
            lease,
            view: View::Sharded {
                shards,
                status: Arc::new(coordinator.status_handle()),
                electors: electors
                    .iter()
                    .map(|e| -> StatusFn<ElectionStatus> { Arc::new(e.status_handle()) })
                    .collect(),
            },
        }
    }

    /// The check as of now.
    pub fn check(&self) -> ReadinessCheck {
        match &self.view {
            View::Leader { gate, status } => {
                leadership_check(&self.lease, gate.leadership(), &status())
            }
            View::Sharded {
                shards,
                status,
                electors,
            } => {
                let electors: Vec<ElectionStatus> = electors.iter().map(|s| s()).collect();
                shards_check(&self.lease, shards, &status(), &electors)
            }
        }
    }
}

/// The `/readyz?verbose` line about the shards, saying which shards this
/// replica holds (with their fencing tokens) and who holds each shard,
/// e.g. `holding shards [0, 2] of 4 (fencing tokens [3, 1]), fair share 2,
/// 3 replicas live; shard 0: a_1f, shard 1: b_2e, …`. Passing unless a
/// shard's elector (`electors`, by shard) found a squatter at its Lease:
/// then failing, each squatter named first.
fn shards_check(
    lease: &str,
    shards: &ShardGates,
    status: &ShardStatus,
    electors: &[ElectionStatus],
) -> ReadinessCheck {
    let leadership = shards.leadership();
    let held: Vec<usize> = (0..leadership.len())
        .filter(|i| leadership[*i].leading)
        .collect();
    let tokens: Vec<u64> = held
        .iter()
        .map(|i| leadership[*i].token.unwrap_or_default())
        .collect();
    let holders: Vec<String> = (0..shards.count())
        .map(|i| {
            let holder = status
                .holders
                .get(i)
                .cloned()
                .flatten()
                .unwrap_or_else(|| "nobody".to_string());
            format!("shard {i}: {holder}")
        })
        .collect();
    let detail = format!(
        "holding shards {held:?} of {} (Leases {lease}-shard-N, fencing tokens {tokens:?}), fair share {}, {} replicas live; {}",
        shards.count(),
        status.plan.share,
        status.live.len(),
        holders.join(", ")
    );
    let squatters: Vec<&str> = electors
        .iter()
        .filter_map(|e| e.squatter.as_deref())
        .collect();
    if !squatters.is_empty() {
        // Not ready: the squatted shards' primaries are reconciled by no
        // replica until the cluster operator deletes the planted Leases.
        return ReadinessCheck {
            name: "shards".to_string(),
            plugin: None,
            ready: false,
            detail: format!("{}; {detail}", squatters.join("; ")),
        };
    }
    ReadinessCheck {
        name: "shards".to_string(),
        plugin: None,
        ready: true,
        detail,
    }
}

/// The `/readyz?verbose` line about leadership: passing (a standby is
/// ready: it serves webhooks and takes over warm), saying who leads;
/// failing, naming it, when a squatter holds the leader's Lease name.
fn leadership_check(
    lease: &str,
    leadership: Leadership,
    status: &ElectionStatus,
) -> ReadinessCheck {
    if let Some(squatter) = &status.squatter {
        // Not ready: this replica will not lead until the cluster operator
        // deletes the planted Lease.
        return ReadinessCheck {
            name: "leader-election".to_string(),
            plugin: None,
            ready: false,
            detail: squatter.clone(),
        };
    }
    let holder = status.holder.as_deref().unwrap_or("nobody");
    let version = status.holder_version.as_deref().unwrap_or("unknown");
    let detail = match (leadership.leading, leadership.draining) {
        (true, false) => format!(
            "leading (Lease {lease}, fencing token {})",
            leadership.token.unwrap_or_default()
        ),
        (true, true) => format!("handing over (Lease {lease}): finishing reconciles in flight"),
        (false, _) => format!("standby (Lease {lease} held by {holder}, host {version})"),
    };
    ReadinessCheck {
        name: "leader-election".to_string(),
        plugin: None,
        ready: true,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_leader_lease_fails_readiness_naming_it() {
        let squatter = "Lease ops/wasm-operator is named like the host's leader-election Lease but the host did not create it";
        let status = ElectionStatus {
            squatter: Some(squatter.to_string()),
            ..Default::default()
        };
        let check = leadership_check("ops/wasm-operator", Leadership::default(), &status);
        assert!(!check.ready);
        assert_eq!(check.detail, squatter);
        let check = leadership_check(
            "ops/wasm-operator",
            Leadership::default(),
            &ElectionStatus::default(),
        );
        assert!(check.ready, "a standby replica is ready");
    }

    #[test]
    fn a_planted_shard_lease_fails_readiness_naming_it() {
        let squatter = "Lease ops/wasm-operator-shard-1 is named like a shard Lease of the host's leader election but the host did not create it";
        let shards = ShardGates::sharded(2);
        let electors = vec![
            ElectionStatus::default(),
            ElectionStatus {
                squatter: Some(squatter.to_string()),
                ..Default::default()
            },
        ];
        let check = shards_check(
            "ops/wasm-operator",
            &shards,
            &ShardStatus::default(),
            &electors,
        );
        assert!(!check.ready);
        assert_eq!(check.name, "shards");
        assert!(
            check
                .detail
                .starts_with(&format!("{squatter}; holding shards [] of 2")),
            "{}",
            check.detail
        );
        let healthy = vec![ElectionStatus::default(); 2];
        let check = shards_check(
            "ops/wasm-operator",
            &shards,
            &ShardStatus::default(),
            &healthy,
        );
        assert!(check.ready, "{}", check.detail);
        assert!(check.detail.contains("shard 1: nobody"), "{}", check.detail);
    }
}
