//! The fencing token of a term, scoped to the Lease it comes from.
//!
//! A term's number (`leaseTransitions`) only orders the terms of one Lease:
//! token 2 of Lease `default/wasm-operator` says nothing about term 0 of
//! `wasm-operator-system/wasm-operator`, nor about a Lease deleted and
//! recreated under the same name (a new uid), nor about another shard's
//! Lease. A [`FencingToken`] therefore carries the Lease's identity
//! (`<namespace>/<name>/<uid>`), and only a token of the same Lease can be a
//! newer term ([`FencingToken::newer_term_in`]).

use std::sync::Arc;

/// The fencing token of this replica's current term.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FencingToken {
    /// The Lease's identity, `<namespace>/<name>/<uid>` ([`lease_identity`]).
    pub lease: Arc<str>,
    /// The Lease's `leaseTransitions` when this term began.
    pub term: u64,
}

/// The identity of a Lease as fencing tokens name it:
/// `<namespace>/<name>/<uid>` (the uid tells a recreated Lease apart).
pub fn lease_identity(namespace: &str, name: &str, uid: &str) -> String {
    format!("{namespace}/{name}/{uid}")
}

/// Where a term recorded on an object stands against this replica's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermOrder {
    /// A later term of the same Lease: this replica must not write.
    Newer(u64),
    /// The same term, or an earlier one of the same Lease: write (and mark).
    NotNewer,
    /// A term of another Lease, or of none the host can name (a mark from a
    /// host that did not record the Lease): not comparable, so not a newer
    /// term; this leader overwrites it at its next write.
    OtherLease,
}

impl FencingToken {
    /// Compares a recorded mark (`term`, and the Lease it names, if any)
    /// with this token. Pure.
    pub fn newer_term_in(&self, lease: Option<&str>, term: u64) -> TermOrder {
        match lease {
            Some(lease) if lease == &*self.lease => {
                if term > self.term {
                    TermOrder::Newer(term)
                } else {
                    TermOrder::NotNewer
                }
            }
            _ => TermOrder::OtherLease,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(lease: &str, term: u64) -> FencingToken {
        FencingToken {
            lease: Arc::from(lease),
            term,
        }
    }

    #[test]
    fn only_a_later_term_of_the_same_lease_is_newer() {
        let ours = token("default/wasm-operator/u1", 3);
        assert_eq!(
            ours.newer_term_in(Some("default/wasm-operator/u1"), 4),
            TermOrder::Newer(4)
        );
        assert_eq!(
            ours.newer_term_in(Some("default/wasm-operator/u1"), 3),
            TermOrder::NotNewer
        );
        assert_eq!(
            ours.newer_term_in(Some("default/wasm-operator/u1"), 0),
            TermOrder::NotNewer
        );
    }

    #[test]
    fn another_lease_is_never_a_newer_term() {
        let ours = token(
            &lease_identity("wasm-operator-system", "wasm-operator", "u2"),
            0,
        );
        // Another namespace, another name (a shard), a recreated Lease.
        for other in [
            "default/wasm-operator/u1",
            "wasm-operator-system/wasm-operator-shard-1/u3",
            "wasm-operator-system/wasm-operator/u9",
        ] {
            assert_eq!(ours.newer_term_in(Some(other), 7), TermOrder::OtherLease);
        }
        // A mark without a Lease (written before tokens named theirs).
        assert_eq!(ours.newer_term_in(None, 7), TermOrder::OtherLease);
    }
}
