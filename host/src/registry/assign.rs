//! Which version serves an object during a split: a pure function of the
//! object's UID (and labels, for a selector split), so the assignment is
//! sticky. Raising the weight only moves objects from the stable version to
//! the candidate, and a host restart (or another host version) reproduces
//! the same assignment.
//!
//! # Guarantees
//!
//! [`bucket`] is FNV-1a (64 bit, the published offset basis and prime) over
//! the UID's UTF-8 bytes, modulo [`BUCKETS`]. It has no random key and must
//! never change between host versions: changing it would move objects
//! between versions in the middle of a canary. The unit tests pin known
//! values.

use std::collections::BTreeMap;

use super::rollout::Rollout;

/// Number of hash buckets: a weight of `w` percent is the buckets below
/// `w × 100`, so weights are exact to a hundredth of a percent of the buckets.
pub const BUCKETS: u32 = 10_000;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The stable hash bucket (0 to [`BUCKETS`]` - 1`) of an object's UID.
pub fn bucket(uid: &str) -> u32 {
    let mut hash = FNV_OFFSET_BASIS;
    for byte in uid.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    // The remainder is below BUCKETS, which fits in a u32.
    u32::try_from(hash % u64::from(BUCKETS)).unwrap_or(0)
}

/// True when a split at `weight_percent` puts the object with `uid` on the
/// candidate: its bucket is below `weight_percent × 100`. A weight of 0
/// picks nothing, 100 (or more) everything.
pub fn in_split(uid: &str, weight_percent: u8) -> bool {
    bucket(uid) < u32::from(weight_percent) * (BUCKETS / 100)
}

/// True when `rollout` lets the candidate serve the object with `uid` and
/// `labels`. Shadow and dry-run candidates never serve; an object without a
/// UID (not stored yet) stays on the stable version.
pub fn serves_candidate(
    rollout: &Rollout,
    uid: Option<&str>,
    labels: &BTreeMap<String, String>,
) -> bool {
    match rollout {
        Rollout::DryRun | Rollout::Shadow => false,
        Rollout::Split { weight_percent } => uid.is_some_and(|u| in_split(u, *weight_percent)),
        Rollout::Selector(selector) => selector.matches(labels),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::LabelSelector;

    #[test]
    fn buckets_never_change_between_host_versions() {
        // FNV-1a 64 of "" is the offset basis; of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(bucket(""), (FNV_OFFSET_BASIS % 10_000) as u32);
        assert_eq!(bucket("a"), (0xaf63_dc4c_8601_ec8c_u64 % 10_000) as u32);
        // Pinned: a change here moves objects between versions mid-canary.
        assert_eq!(bucket("6f1c7a52-0d4e-4b8e-9a7e-0c3b1d2e4f50"), {
            let mut h = FNV_OFFSET_BASIS;
            for b in "6f1c7a52-0d4e-4b8e-9a7e-0c3b1d2e4f50".bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(FNV_PRIME);
            }
            (h % 10_000) as u32
        });
    }

    #[test]
    fn raising_the_weight_only_moves_objects_to_the_candidate() {
        let uids: Vec<String> = (0..2000).map(|i| format!("uid-{i}")).collect();
        let mut previous: Vec<bool> = vec![false; uids.len()];
        for weight in [0u8, 5, 20, 50, 99, 100] {
            let now: Vec<bool> = uids.iter().map(|u| in_split(u, weight)).collect();
            for (before, after) in previous.iter().zip(&now) {
                assert!(!before || *after, "weight {weight} moved an object back");
            }
            let share = now.iter().filter(|x| **x).count() as f64 / uids.len() as f64;
            assert!(
                (share - f64::from(weight) / 100.0).abs() < 0.05,
                "{weight}: {share}"
            );
            previous = now;
        }
        assert!(uids.iter().all(|u| in_split(u, 100) && in_split(u, 255)));
    }

    #[test]
    fn shadow_never_serves_a_selector_picks_by_label() {
        let labels = BTreeMap::from([("canary".to_string(), "yes".to_string())]);
        assert!(!serves_candidate(&Rollout::Shadow, Some("u"), &labels));
        assert!(!serves_candidate(&Rollout::DryRun, Some("u"), &labels));
        assert!(!serves_candidate(
            &Rollout::Split {
                weight_percent: 100
            },
            None,
            &labels
        ));
        let selector = LabelSelector::parse("canary=yes").expect("valid selector");
        assert!(serves_candidate(
            &Rollout::Selector(selector.clone()),
            None,
            &labels
        ));
        assert!(!serves_candidate(
            &Rollout::Selector(selector),
            Some("u"),
            &BTreeMap::new()
        ));
    }
}
