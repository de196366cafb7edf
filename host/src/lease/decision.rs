//! The decision at every try of the elector, as a pure function: given the
//! Lease as observed, how long ago it last changed (on this replica's own
//! monotonic clock, as client-go measures it: the holder's clock is never
//! compared with ours) and who this replica is, what to do.
//!
//! The rules are client-go's leaderelection (acquire when the Lease is
//! absent, released or expired; renew while holding it; count a
//! transition whenever the holder changes) plus the version-aware handoff
//! of this host (see `docs/leader-election.md`):
//!
//! - a replica of a newer host version that sees an older holder asks it to
//!   hand over (an annotation on the Lease), once;
//! - a holder that sees such a request from a newer version hands over:
//!   no new work, calls in flight finish, then it releases the Lease;
//! - a released Lease whose request names a newer version is reserved for
//!   that requester for one lease duration, so another old replica cannot
//!   snatch it first;
//! - a live holder is never displaced: an older replica waits like anyone
//!   else until the Lease is released or expires.

use std::time::Duration;

use semver::Version;

/// The annotation recording the holder's host version on the Lease.
pub const HOST_VERSION_ANNOTATION: &str = "wasm-operator.dev/host-version";

/// The annotation a newer host writes on the Lease to ask the older holder
/// to hand over: `<identity>@<version>`.
pub const HANDOFF_ANNOTATION: &str = "wasm-operator.dev/handoff-requested-by";

/// A request to hand over, as the annotation carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoffRequest {
    /// The requesting replica's holder identity.
    pub identity: String,
    /// Its host version.
    pub version: Version,
}

impl HandoffRequest {
    /// Parses `<identity>@<version>`; `None` when it is not that.
    pub fn parse(text: &str) -> Option<HandoffRequest> {
        let (identity, version) = text.rsplit_once('@')?;
        if identity.is_empty() {
            return None;
        }
        Some(HandoffRequest {
            identity: identity.to_string(),
            version: Version::parse(version).ok()?,
        })
    }
}

impl std::fmt::Display for HandoffRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.identity, self.version)
    }
}

/// What the elector read from the Lease (the parts the decision needs).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `spec.holderIdentity`; `None` (or empty on the wire) when released.
    pub holder: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub lease_duration: Duration,
    /// `spec.leaseTransitions`: the fencing token of the current term.
    pub transitions: u64,
    /// The holder's host version (the annotation); `None` when absent or
    /// not a version.
    pub holder_version: Option<Version>,
    /// A pending request to hand over.
    pub handoff: Option<HandoffRequest>,
}

/// Who this replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Its holder identity (unique per process).
    pub identity: String,
    /// Its host version.
    pub version: Version,
    /// The lease duration it is configured with: how long a released
    /// Lease stays reserved for a newer requester.
    pub lease_duration: Duration,
}

/// What to do at this try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// No Lease exists: create it, holding it (token 0).
    Create,
    /// This replica holds it: renew.
    Renew,
    /// It is released or expired: take it; the transitions count becomes
    /// `token`, the new term's fencing token.
    Acquire {
        /// The fencing token of the new term.
        token: u64,
    },
    /// An older host holds it: ask it to hand over (the annotation).
    RequestHandoff,
    /// This replica holds it and a newer host asked for it: stop taking
    /// work, finish what is in flight, release.
    HandOver {
        /// Who asked.
        to: HandoffRequest,
    },
    /// Someone else holds it (or it is reserved for a newer requester):
    /// wait.
    Wait {
        /// The holder, or the requester it is reserved for.
        holder: String,
    },
}

/// The decision for `me`, given `lease` (`None`: it does not exist) and how
/// long ago this replica last saw it change (`unchanged_for`).
pub fn decide(me: &Candidate, lease: Option<&LeaseRecord>, unchanged_for: Duration) -> Step {
    let Some(lease) = lease else {
        return Step::Create;
    };
    let holder = lease.holder.as_deref().filter(|h| !h.is_empty());
    let newer_request = lease
        .handoff
        .as_ref()
        .filter(|request| request.identity != me.identity && request.version > me.version);
    if holder == Some(me.identity.as_str()) {
        return match newer_request {
            Some(request) => Step::HandOver {
                to: request.clone(),
            },
            None => Step::Renew,
        };
    }
    let expired = unchanged_for >= lease.lease_duration;
    if let Some(holder) = holder
        && !expired
    {
        let holder_is_older = lease
            .holder_version
            .as_ref()
            .is_some_and(|v| *v < me.version);
        // One request at a time, and never one that would replace the
        // request of a host at least as new as this one.
        let may_ask = lease
            .handoff
            .as_ref()
            .is_none_or(|request| request.version < me.version);
        return if holder_is_older && may_ask {
            Step::RequestHandoff
        } else {
            Step::Wait {
                holder: holder.to_string(),
            }
        };
    }
    // Released (or expired): reserved for a newer requester for one lease
    // duration after this replica saw it change, then open to anyone.
    if let Some(request) = newer_request
        && holder.is_none()
        && unchanged_for < me.lease_duration
    {
        return Step::Wait {
            holder: request.identity.clone(),
        };
    }
    Step::Acquire {
        token: lease.transitions.saturating_add(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    fn me(version: &str) -> Candidate {
        Candidate {
            identity: "pod-b-1234".into(),
            version: Version::parse(version).unwrap(),
            lease_duration: LEASE,
        }
    }

    fn held_by(holder: &str, version: &str) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            lease_duration: LEASE,
            transitions: 4,
            holder_version: Version::parse(version).ok(),
            handoff: None,
        }
    }

    fn request(identity: &str, version: &str) -> Option<HandoffRequest> {
        Some(HandoffRequest {
            identity: identity.into(),
            version: Version::parse(version).unwrap(),
        })
    }

    const FRESH: Duration = Duration::from_secs(1);

    #[test]
    fn acquires_an_absent_released_or_expired_lease_counting_a_transition() {
        let me = me("1.0.0");
        assert_eq!(decide(&me, None, FRESH), Step::Create);
        let released = LeaseRecord {
            holder: Some(String::new()),
            ..held_by("", "1.0.0")
        };
        assert_eq!(
            decide(&me, Some(&released), FRESH),
            Step::Acquire { token: 5 }
        );
        let other = held_by("pod-a-1", "1.0.0");
        assert_eq!(
            decide(&me, Some(&other), FRESH),
            Step::Wait {
                holder: "pod-a-1".into()
            }
        );
        assert_eq!(decide(&me, Some(&other), LEASE), Step::Acquire { token: 5 });
    }

    #[test]
    fn the_holder_renews_whatever_the_time() {
        let mine = held_by("pod-b-1234", "1.0.0");
        assert_eq!(decide(&me("1.0.0"), Some(&mine), FRESH), Step::Renew);
        assert_eq!(decide(&me("1.0.0"), Some(&mine), LEASE * 2), Step::Renew);
    }

    #[test]
    fn a_newer_host_asks_an_older_holder_once_and_the_holder_hands_over() {
        let newer = me("1.1.0");
        let mut lease = held_by("pod-a-1", "1.0.0");
        assert_eq!(decide(&newer, Some(&lease), FRESH), Step::RequestHandoff);
        lease.handoff = request("pod-b-1234", "1.1.0");
        assert_eq!(
            decide(&newer, Some(&lease), FRESH),
            Step::Wait {
                holder: "pod-a-1".into()
            }
        );
        // The holder's view.
        let holder = Candidate {
            identity: "pod-a-1".into(),
            ..me("1.0.0")
        };
        assert_eq!(
            decide(&holder, Some(&lease), FRESH),
            Step::HandOver {
                to: request("pod-b-1234", "1.1.0").unwrap()
            }
        );
        // A request from a host that is not newer is ignored.
        lease.handoff = request("pod-c-9", "1.0.0");
        assert_eq!(decide(&holder, Some(&lease), FRESH), Step::Renew);
    }

    #[test]
    fn an_older_or_equal_host_never_asks_and_never_displaces_a_live_holder() {
        let lease = held_by("pod-a-1", "2.0.0");
        for version in ["1.0.0", "2.0.0"] {
            assert_eq!(
                decide(&me(version), Some(&lease), FRESH),
                Step::Wait {
                    holder: "pod-a-1".into()
                }
            );
        }
        // After expiry the ordinary rules apply: the explicit rollback.
        assert_eq!(
            decide(&me("1.0.0"), Some(&lease), LEASE),
            Step::Acquire { token: 5 }
        );
    }

    #[test]
    fn a_lease_released_for_a_newer_host_is_reserved_for_it_for_one_lease_duration() {
        let mut released = held_by("", "1.0.0");
        released.holder = None;
        released.handoff = request("pod-new-7", "1.1.0");
        let old = me("1.0.0");
        assert_eq!(
            decide(&old, Some(&released), FRESH),
            Step::Wait {
                holder: "pod-new-7".into()
            }
        );
        assert_eq!(
            decide(&old, Some(&released), LEASE),
            Step::Acquire { token: 5 }
        );
        let requester = Candidate {
            identity: "pod-new-7".into(),
            ..me("1.1.0")
        };
        assert_eq!(
            decide(&requester, Some(&released), FRESH),
            Step::Acquire { token: 5 }
        );
        // A third host newer still may take it too.
        assert_eq!(
            decide(&me("1.2.0"), Some(&released), FRESH),
            Step::Acquire { token: 5 }
        );
    }

    #[test]
    fn a_newer_request_replaces_an_older_one() {
        let mut lease = held_by("pod-a-1", "1.0.0");
        lease.handoff = request("pod-c-9", "1.1.0");
        assert_eq!(
            decide(&me("1.2.0"), Some(&lease), FRESH),
            Step::RequestHandoff
        );
    }

    #[test]
    fn parses_and_prints_requests() {
        let parsed = HandoffRequest::parse("pod-a-1@1.2.3-rc.1").unwrap();
        assert_eq!(parsed.identity, "pod-a-1");
        assert_eq!(parsed.version, Version::parse("1.2.3-rc.1").unwrap());
        assert_eq!(parsed.to_string(), "pod-a-1@1.2.3-rc.1");
        assert_eq!(HandoffRequest::parse("nope"), None);
        assert_eq!(HandoffRequest::parse("@1.0.0"), None);
        assert_eq!(HandoffRequest::parse("pod@x"), None);
    }
}
