//! Leader election over a `coordination.k8s.io/v1` Lease, with fencing and
//! a version-aware handoff between host versions.
//!
//! - [`decide`] (pure) says what a replica does at each try, given the
//!   Lease as observed: client-go's rules plus the handoff;
//! - [`LeaderElector`] runs the tries and writes the Lease with optimistic
//!   concurrency;
//! - [`WriteGate`] is what every write of the host consults right before it
//!   is sent: open while this replica leads and its last renewal is younger
//!   than the renew deadline, and carrying the term's fencing token (the
//!   Lease's `leaseTransitions` when it was acquired).
//!
//! With `--shards N > 1` there is one Lease (elector, gate) per shard
//! instead of the leader's: [`shard_of`] (pure) puts each primary in a
//! shard, [`plan_shards`] (pure) says which shards a replica should hold,
//! the [`ShardCoordinator`] keeps the replica's membership Lease and
//! applies the plan, and [`ShardGates`] gives every object its shard's
//! gate.
//!
//! The manager subscribes to the gate's [`Leadership`] to start and stop
//! the controllers, and asks [`ElectionReadiness`] for the `/readyz` check
//! about the election. `docs/leader-election.md` states the guarantees and
//! their limits.
//!
//! This module only needs telemetry (its metrics); everything that writes
//! (apply, the WasmPlugin controller, the manager) comes later and imports
//! it.

mod assign;
mod coordinator;
mod decision;
mod elector;
mod gate;
mod issued;
mod readiness;
mod token;

use std::time::Duration;

pub use assign::{ShardPlan, plan_shards, shard_lease_name, shard_of};
pub use coordinator::{ShardCoordinator, ShardStatus, member_lease_name};
pub use decision::{
    Candidate, HANDOFF_ANNOTATION, HOST_VERSION_ANNOTATION, HandoffRequest, LeaseRecord, Step,
    decide,
};
pub use elector::{ElectionStatus, LeaderElectionConfig, LeaderElector, REPORTER};
pub use gate::{Fenced, InFlight, Leadership, ShardGates, WriteGate};
pub use issued::issued_term;
pub use readiness::ElectionReadiness;
pub use token::{FencingToken, ForgedTerm, LaterTerm, TermOrder, lease_identity};

/// The Lease's name when `--leader-election-id` is not given.
pub const DEFAULT_LEASE_NAME: &str = "wasm-operator";

/// Why leader election cannot start.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The durations are not ordered as client-go requires.
    #[error(
        "leader election needs --lease-duration ({}) > --renew-deadline ({}) > --retry-period ({}) > 0; the leader stops writing at the renew deadline, which must leave time before others may take over",
        show(*lease_duration), show(*renew_deadline), show(*retry_period)
    )]
    Settings {
        /// `--lease-duration`.
        lease_duration: Duration,
        /// `--renew-deadline`.
        renew_deadline: Duration,
        /// `--retry-period`.
        retry_period: Duration,
    },
    /// `--shards` above 1 without `--leader-elect`.
    #[error(
        "--shards {0} needs --leader-elect: every shard is guarded by its own Lease, which replicas elect"
    )]
    ShardsWithoutElection(u16),
    /// `--host-version` is not a semantic version.
    #[error("--host-version {0:?} is not a semantic version (e.g. 0.4.0)")]
    Version(String),
}

fn show(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// The host's own version: the crate's, unless `overridden` (tests of the
/// handoff run one binary as two versions).
///
/// # Errors
///
/// [`LeaseError::Version`] when `overridden` is not a semantic version.
pub fn host_version(overridden: Option<&str>) -> Result<semver::Version, LeaseError> {
    let text = overridden.unwrap_or(env!("CARGO_PKG_VERSION"));
    semver::Version::parse(text).map_err(|_| LeaseError::Version(text.to_string()))
}

/// A holder identity unique to this process: the pod's name (`POD_NAME`,
/// else `HOSTNAME`, else the kernel's host name) and a random suffix, so a
/// restarted pod of the same name is a new holder (a new term, a new
/// fencing token).
pub fn holder_identity() -> String {
    let base = ["POD_NAME", "HOSTNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "wasm-operator".to_string());
    format!("{base}_{:08x}", rand::random::<u32>())
}

/// The namespace the host's pod runs in (`POD_NAMESPACE`, else the
/// service account's namespace file in a pod), `None` outside a pod.
pub fn pod_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
        })
}

/// The namespace of the Lease when `--leader-election-namespace` is not
/// given: the pod's ([`pod_namespace`]), else `fallback` (the kubeconfig
/// context's).
pub fn default_namespace(fallback: &str) -> String {
    pod_namespace().unwrap_or_else(|| fallback.to_string())
}

/// Parses a duration as the flags take it: `15s`, `500ms`, `2m`, or plain
/// seconds (`15`, `0.5`).
///
/// # Errors
///
/// A message naming the accepted forms.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration; write e.g. 15s, 500ms or 2m"))?;
    let factor = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        _ => return Err(format!("{text:?} has an unknown unit; use ms, s or m")),
    };
    Duration::try_from_secs_f64(value * factor)
        .map_err(|_| format!("{text:?} is not a duration; write e.g. 15s, 500ms or 2m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations_as_the_flags_take_them() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn identities_are_unique_per_process_start() {
        assert_ne!(holder_identity(), holder_identity());
    }

    #[test]
    fn the_host_version_is_the_crates_unless_overridden() {
        assert_eq!(
            host_version(None).unwrap().to_string(),
            env!("CARGO_PKG_VERSION")
        );
        assert_eq!(host_version(Some("9.9.9")).unwrap().to_string(), "9.9.9");
        assert!(host_version(Some("new")).is_err());
    }
}
