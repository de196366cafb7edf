//! Sharding, as pure functions: which shard a primary belongs to
//! ([`shard_of`]) and which shard Leases a replica should hold, given the
//! shard Leases and the live replicas it observed ([`plan_shards`]).
//!
//! # The split
//!
//! [`shard_of`] is FNV-1a (64 bit, the published offset basis and prime)
//! over the UID's UTF-8 bytes, modulo the shard count: the same hash family
//! as the canary split (`registry::assign::bucket`), with no random key. It
//! must never change between host versions: replicas of two versions
//! during a rolling update must agree on every object's shard. The unit
//! tests pin known values.
//!
//! # The spread
//!
//! With `L` live replicas and `N` shards every replica's fair share is
//! `N / L`, and `N % L` of them hold one more. Who holds one more is decided
//! by what they hold already (most first, then by identity), so a spread
//! that is already fair never moves. A replica above its share releases
//! its highest-numbered extras; one below it takes free shards (released,
//! or held by a replica that is not live), lowest-numbered first. Every
//! replica computes the same shares from the same observations, so after a
//! join the ones above their share release exactly what the newcomer may
//! take.

use std::collections::{BTreeMap, BTreeSet};

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The shard (0 to `shards - 1`) of the primary with `uid`; shard 0 when
/// there is one shard, or no UID (an object not stored yet).
pub fn shard_of(uid: Option<&str>, shards: usize) -> usize {
    let Some(uid) = uid else {
        return 0;
    };
    if shards <= 1 {
        return 0;
    }
    let hash = fnv1a(uid.as_bytes());
    // The remainder is below `shards`, which is a usize.
    usize::try_from(hash % shards as u64).unwrap_or(0)
}

/// FNV-1a, 64 bit: stable across processes, versions and platforms.
pub(super) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash = FNV_OFFSET_BASIS;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// What a replica should hold: the shards to keep or take.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardPlan {
    /// Every shard this replica should hold (keep if held, take if free).
    pub wanted: BTreeSet<usize>,
    /// This replica's fair share now.
    pub share: usize,
}

/// The shards `me` should hold, given each shard Lease's holder (`holders[i]`
/// for shard `i`; `None`: absent or released) and the identities of the live
/// replicas (`me` counts as live whether or not it is listed).
pub fn plan_shards(me: &str, holders: &[Option<String>], live: &BTreeSet<String>) -> ShardPlan {
    let shards = holders.len();
    let mut replicas: BTreeSet<&str> = live.iter().map(String::as_str).collect();
    replicas.insert(me);
    let mut held: BTreeMap<&str, usize> = replicas.iter().map(|r| (*r, 0)).collect();
    for holder in holders.iter().flatten() {
        if let Some(count) = held.get_mut(holder.as_str()) {
            *count += 1;
        }
    }
    let base = shards / replicas.len();
    let extra = shards % replicas.len();
    // Most held first, then identity: the first `extra` get one more.
    let mut ranked: Vec<(&str, usize)> = held.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let rank = ranked.iter().position(|(r, _)| *r == me).unwrap_or(0);
    let share = base + usize::from(rank < extra);
    let mine: Vec<usize> = (0..shards)
        .filter(|i| holders[*i].as_deref() == Some(me))
        .collect();
    let mut wanted: BTreeSet<usize> = mine.iter().copied().take(share).collect();
    let free = (0..shards).filter(|i| match holders[*i].as_deref() {
        None => true,
        Some(holder) => holder != me && !replicas.contains(holder),
    });
    for shard in free {
        if wanted.len() >= share {
            break;
        }
        wanted.insert(shard);
    }
    ShardPlan { wanted, share }
}

/// The Lease guarding `shard` of the replicas electing with `name`.
pub fn shard_lease_name(name: &str, shard: usize) -> String {
    format!("{name}-shard-{shard}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_string()).collect()
    }

    fn holders(names: &[Option<&str>]) -> Vec<Option<String>> {
        names.iter().map(|n| n.map(str::to_string)).collect()
    }

    fn wanted(plan: &ShardPlan) -> Vec<usize> {
        plan.wanted.iter().copied().collect()
    }

    #[test]
    fn the_split_is_fnv_1a_and_pinned() {
        // FNV-1a 64 of "" is the offset basis; of "a" 0xaf63dc4c8601ec8c.
        assert_eq!(
            shard_of(Some(""), 1 << 20),
            (FNV_OFFSET_BASIS % (1 << 20)) as usize
        );
        assert_eq!(
            shard_of(Some("a"), 1_000_003),
            (0xaf63_dc4c_8601_ec8c_u64 % 1_000_003) as usize
        );
        assert_eq!(
            shard_of(Some("0b1e6a4c-3f1d-4a57-9a57-2d1f0e5b7c11"), 4),
            shard_of(Some("0b1e6a4c-3f1d-4a57-9a57-2d1f0e5b7c11"), 4)
        );
        assert_eq!(shard_of(Some("anything"), 1), 0);
        assert_eq!(shard_of(None, 4), 0);
    }

    #[test]
    fn uids_spread_over_every_shard() {
        let mut counts = [0usize; 4];
        for i in 0..4000 {
            counts[shard_of(Some(&format!("uid-{i:04}-{}", i * 7919)), 4)] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }

    #[test]
    fn a_lone_replica_takes_every_shard() {
        let plan = plan_shards("a", &holders(&[None, None, None, None]), &live(&[]));
        assert_eq!(wanted(&plan), [0, 1, 2, 3]);
        assert_eq!(plan.share, 4);
    }

    #[test]
    fn three_replicas_spread_four_shards_two_one_one_without_moving_a_fair_spread() {
        let all = live(&["a", "b", "c"]);
        let fair = holders(&[Some("a"), Some("b"), Some("a"), Some("c")]);
        assert_eq!(wanted(&plan_shards("a", &fair, &all)), [0, 2]);
        assert_eq!(wanted(&plan_shards("b", &fair, &all)), [1]);
        assert_eq!(wanted(&plan_shards("c", &fair, &all)), [3]);
    }

    #[test]
    fn a_joining_replica_gets_what_the_others_release() {
        // a and b split four shards; c joins.
        let all = live(&["a", "b", "c"]);
        let before = holders(&[Some("a"), Some("b"), Some("a"), Some("b")]);
        // a ranks first (tie, identity) and keeps two; b keeps one and
        // releases its highest; c takes nothing held by a live replica.
        assert_eq!(wanted(&plan_shards("a", &before, &all)), [0, 2]);
        assert_eq!(wanted(&plan_shards("b", &before, &all)), [1]);
        assert!(plan_shards("c", &before, &all).wanted.is_empty());
        let released = holders(&[Some("a"), Some("b"), Some("a"), None]);
        assert_eq!(wanted(&plan_shards("c", &released, &all)), [3]);
        assert_eq!(wanted(&plan_shards("b", &released, &all)), [1]);
    }

    #[test]
    fn the_shards_of_a_replica_that_is_not_live_are_taken_by_the_others() {
        let spread = holders(&[Some("a"), Some("b"), Some("a"), Some("c")]);
        // c died: its membership expired. a and b have two each now.
        let survivors = live(&["a", "b"]);
        assert_eq!(wanted(&plan_shards("a", &spread, &survivors)), [0, 2]);
        assert_eq!(wanted(&plan_shards("b", &spread, &survivors)), [1, 3]);
    }

    #[test]
    fn a_replica_above_its_share_keeps_its_lowest_shards() {
        let all = live(&["a", "b"]);
        let greedy = holders(&[Some("a"), Some("a"), Some("a"), Some("a")]);
        assert_eq!(wanted(&plan_shards("a", &greedy, &all)), [0, 1]);
        assert!(plan_shards("b", &greedy, &all).wanted.is_empty());
        let released = holders(&[Some("a"), Some("a"), None, None]);
        assert_eq!(wanted(&plan_shards("b", &released, &all)), [2, 3]);
    }

    #[test]
    fn more_replicas_than_shards_leave_some_without_any() {
        let all = live(&["a", "b", "c"]);
        let two = holders(&[Some("c"), None]);
        assert_eq!(wanted(&plan_shards("c", &two, &all)), [0]);
        assert_eq!(wanted(&plan_shards("a", &two, &all)), [1]);
        assert!(plan_shards("b", &two, &all).wanted.is_empty());
    }

    #[test]
    fn names_the_shard_leases() {
        assert_eq!(
            shard_lease_name("wasm-operator", 3),
            "wasm-operator-shard-3"
        );
    }
}
