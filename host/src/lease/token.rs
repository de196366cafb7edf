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

/// A term of this replica's Lease on an object, later than this replica's
/// own, judged against the terms the Lease has issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LaterTerm {
    /// The Lease issued it: a later leader wrote the object, so this
    /// replica must not (`StaleTerm`). Also the verdict when the Lease
    /// cannot be read or was recreated: the safe side is not to write.
    Issued(u64),
    /// Above every term the Lease has issued: nobody issued it.
    Forged(ForgedTerm),
}

/// A fencing token on an object that its Lease never issued: a hand edit
/// or a writer other than the host forged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgedTerm {
    /// The Lease the mark names (this replica's, [`lease_identity`]).
    pub lease: Arc<str>,
    /// The term the object carries.
    pub term: u64,
    /// The Lease's `leaseTransitions` as read now: the latest term it issued.
    pub issued: u64,
}

impl FencingToken {
    /// Judges `term`, a later term of this replica's Lease found on an
    /// object ([`TermOrder::Newer`]), against `issued`: the Lease's
    /// `leaseTransitions` read just now (`None` when it cannot be read or
    /// is another Lease by now). Pure.
    ///
    /// A term above `issued` was never issued by any leader: forged. Any
    /// other later term is a real later leader's.
    pub fn judge_later_term(&self, term: u64, issued: Option<u64>) -> LaterTerm {
        match issued {
            Some(issued) if term > issued => LaterTerm::Forged(ForgedTerm {
                lease: self.lease.clone(),
                term,
                issued,
            }),
            _ => LaterTerm::Issued(term),
        }
    }

    /// `(namespace, name, uid)` of the Lease this token names.
    pub fn lease_parts(&self) -> Option<(&str, &str, &str)> {
        let mut parts = self.lease.splitn(3, '/');
        Some((parts.next()?, parts.next()?, parts.next()?))
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

    #[test]
    fn a_later_term_above_what_the_lease_issued_is_forged() {
        let ours = token("default/wasm-operator/u1", 3);
        // The Lease issued 5: term 4 and 5 are real later leaders'.
        assert_eq!(ours.judge_later_term(5, Some(5)), LaterTerm::Issued(5));
        assert_eq!(ours.judge_later_term(4, Some(5)), LaterTerm::Issued(4));
        // Term 6 and 2^64-1 were never issued.
        for forged in [6, u64::MAX] {
            assert_eq!(
                ours.judge_later_term(forged, Some(5)),
                LaterTerm::Forged(ForgedTerm {
                    lease: Arc::from("default/wasm-operator/u1"),
                    term: forged,
                    issued: 5,
                })
            );
        }
        // The Lease unreadable (or recreated): never called forged.
        assert_eq!(
            ours.judge_later_term(u64::MAX, None),
            LaterTerm::Issued(u64::MAX)
        );
        assert_eq!(ours.lease_parts(), Some(("default", "wasm-operator", "u1")));
        assert_eq!(token("nonsense", 0).lease_parts(), None);
    }
}
