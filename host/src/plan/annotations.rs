//! The version marks a successful reconcile leaves on its primary.
//!
//! Written last, after the status, except on a reconcile that also adds the
//! host's finalizer (an object's first): then they go in the finalizer's
//! patch, before the children ([`super::MetadataWrites`]).

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::names::{
    FENCING_LEASE_ANNOTATION, FENCING_TOKEN_ANNOTATION, LAST_RECONCILED_VERSION_ANNOTATION,
    MANAGED_BY_VERSION_ANNOTATION, MIGRATION_STATE_ANNOTATION, MIN_COMPATIBLE_VERSION_ANNOTATION,
    MigrationState,
};
use super::{EventAction, PlannedEvent, condition};
use crate::contract::{Condition, Manifest, Reason};
use crate::lease::{FencingToken, ForgedTerm, TermOrder};

/// Annotation changes on the primary: a value sets the annotation, `None`
/// removes it. Empty when nothing changes.
pub type AnnotationChanges = BTreeMap<String, Option<String>>;

/// The version marks of `manifest` (managed-by, last-reconciled,
/// migration-state `completed`, min-compatible), or no change when the
/// object already carries exactly these.
///
/// When anything differs, all four are written together, so the marks always
/// describe one version; a `None` min-compatible removes a mark left by a
/// version that declared one (the managing version's manifest is the one
/// that counts).
pub fn version_marks(obj: &DynamicObject, manifest: &Manifest) -> AnnotationChanges {
    let annotations = obj.annotations();
    let current = |key: &str| annotations.get(key).map(String::as_str);
    let version = manifest.version.as_str();
    let min_compatible = manifest.min_compatible_version.as_deref();
    let completed = MigrationState::Completed.as_str();
    if current(MANAGED_BY_VERSION_ANNOTATION) == Some(version)
        && current(LAST_RECONCILED_VERSION_ANNOTATION) == Some(version)
        && current(MIGRATION_STATE_ANNOTATION) == Some(completed)
        && current(MIN_COMPATIBLE_VERSION_ANNOTATION) == min_compatible
    {
        return AnnotationChanges::new();
    }
    [
        (MANAGED_BY_VERSION_ANNOTATION, Some(version)),
        (LAST_RECONCILED_VERSION_ANNOTATION, Some(version)),
        (MIGRATION_STATE_ANNOTATION, Some(completed)),
        (MIN_COMPATIBLE_VERSION_ANNOTATION, min_compatible),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.map(str::to_string)))
    .collect()
}

/// The fencing mark for a write in the term `token`: the term and the Lease
/// it comes from, set when the object carries another mark (or none, or
/// only part of one), no change otherwise, so a reconcile in an unchanged
/// term adds no write. Without leader election (`None`) the host records
/// nothing and leaves any mark alone.
pub fn fencing_mark(obj: &DynamicObject, token: Option<&FencingToken>) -> AnnotationChanges {
    let Some(token) = token else {
        return AnnotationChanges::new();
    };
    let term = token.term.to_string();
    let annotations = obj.annotations();
    if annotations.get(FENCING_TOKEN_ANNOTATION) == Some(&term)
        && annotations
            .get(FENCING_LEASE_ANNOTATION)
            .map(String::as_str)
            == Some(&*token.lease)
    {
        return AnnotationChanges::new();
    }
    AnnotationChanges::from([
        (FENCING_TOKEN_ANNOTATION.to_string(), Some(term)),
        (
            FENCING_LEASE_ANNOTATION.to_string(),
            Some(token.lease.to_string()),
        ),
    ])
}

/// The term on `obj` when it is a later term of this replica's Lease than
/// `token`: a later leader wrote the object, so this replica must not.
/// `None` when writing is allowed: no leader election, no mark, an older
/// or equal term, a mark that is not a number (never written by the host),
/// or a term of another Lease ([`TermOrder::OtherLease`]: another
/// namespace or name, another shard, a recreated Lease, or a mark without
/// a Lease from a host before marks named it), which this leader overwrites.
pub fn newer_fencing_token(obj: &DynamicObject, token: Option<&FencingToken>) -> Option<u64> {
    let token = token?;
    let annotations = obj.annotations();
    let theirs: u64 = annotations.get(FENCING_TOKEN_ANNOTATION)?.parse().ok()?;
    let lease = annotations
        .get(FENCING_LEASE_ANNOTATION)
        .map(String::as_str);
    match token.newer_term_in(lease, theirs) {
        TermOrder::Newer(term) => Some(term),
        TermOrder::NotNewer | TermOrder::OtherLease => None,
    }
}

/// The report of a forged fencing token (one its Lease never issued) that
/// this reconcile overwrites with the leader's term `ours`:
/// `Degraded=True`/`ForgedFencingToken` and a Warning event with the same
/// message, naming the forged term, the Lease and the latest term it issued.
pub fn forged_report(
    forged: &ForgedTerm,
    ours: Option<&FencingToken>,
) -> (Condition, PlannedEvent) {
    let ours = ours.map_or_else(|| "none".to_string(), |t| t.term.to_string());
    let message = format!(
        "the object carried fencing token {} of Lease {}, which has issued terms up to {} only: nobody issued it, so a hand edit or a writer other than the host forged it; the leader of term {ours} overwrote it with its own. Find the writer of the {FENCING_TOKEN_ANNOTATION} annotation (kubectl get --show-managed-fields)",
        forged.term, forged.lease, forged.issued
    );
    let reason = Reason::ForgedFencingToken.as_str();
    (
        condition("Degraded", "True", reason, &message),
        PlannedEvent::new(true, reason, message, EventAction::Reconcile),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{manifest, primary, with_annotations};
    use super::*;

    #[test]
    fn marks_a_new_object() {
        let changes = version_marks(&primary(), &manifest());
        assert_eq!(
            changes[MANAGED_BY_VERSION_ANNOTATION].as_deref(),
            Some("1.2.0")
        );
        assert_eq!(
            changes[LAST_RECONCILED_VERSION_ANNOTATION].as_deref(),
            Some("1.2.0")
        );
        assert_eq!(
            changes[MIGRATION_STATE_ANNOTATION].as_deref(),
            Some("completed")
        );
        // Written as null: a mark left by an older manifest goes away.
        assert_eq!(changes[MIN_COMPATIBLE_VERSION_ANNOTATION], None);
    }

    const LEASE: &str = "default/wasm-operator/u1";

    fn term(term: u64) -> FencingToken {
        FencingToken {
            lease: std::sync::Arc::from(LEASE),
            term,
        }
    }

    #[test]
    fn the_fencing_mark_is_written_once_per_term_and_newer_terms_win() {
        let obj = primary();
        assert!(fencing_mark(&obj, None).is_empty());
        assert_eq!(
            fencing_mark(&obj, Some(&term(3)))[FENCING_TOKEN_ANNOTATION].as_deref(),
            Some("3")
        );
        assert_eq!(
            fencing_mark(&obj, Some(&term(3)))[FENCING_LEASE_ANNOTATION].as_deref(),
            Some(LEASE)
        );
        let marked = with_annotations(
            primary(),
            &[
                (FENCING_TOKEN_ANNOTATION, "3"),
                (FENCING_LEASE_ANNOTATION, LEASE),
            ],
        );
        assert!(fencing_mark(&marked, Some(&term(3))).is_empty());
        assert_eq!(
            fencing_mark(&marked, Some(&term(4)))[FENCING_TOKEN_ANNOTATION].as_deref(),
            Some("4")
        );
        assert_eq!(newer_fencing_token(&marked, Some(&term(2))), Some(3));
        assert_eq!(newer_fencing_token(&marked, Some(&term(3))), None);
        assert_eq!(newer_fencing_token(&marked, Some(&term(4))), None);
        assert_eq!(newer_fencing_token(&marked, None), None);
        let garbage = with_annotations(primary(), &[(FENCING_TOKEN_ANNOTATION, "x")]);
        assert_eq!(newer_fencing_token(&garbage, Some(&term(0))), None);
    }

    #[test]
    fn a_mark_of_another_lease_is_no_newer_term_and_is_overwritten() {
        let ours = FencingToken {
            lease: std::sync::Arc::from("wasm-operator-system/wasm-operator/u2"),
            term: 0,
        };
        let other = with_annotations(
            primary(),
            &[
                (FENCING_TOKEN_ANNOTATION, "2"),
                (FENCING_LEASE_ANNOTATION, LEASE),
            ],
        );
        assert_eq!(newer_fencing_token(&other, Some(&ours)), None);
        let mark = fencing_mark(&other, Some(&ours));
        assert_eq!(mark[FENCING_TOKEN_ANNOTATION].as_deref(), Some("0"));
        assert_eq!(
            mark[FENCING_LEASE_ANNOTATION].as_deref(),
            Some("wasm-operator-system/wasm-operator/u2")
        );
        // A plain number without a Lease (a host before marks named their
        // Lease): not comparable, overwritten with the full mark.
        let legacy = with_annotations(primary(), &[(FENCING_TOKEN_ANNOTATION, "2")]);
        assert_eq!(newer_fencing_token(&legacy, Some(&ours)), None);
        assert_eq!(newer_fencing_token(&legacy, Some(&term(0))), None);
        let mark = fencing_mark(&legacy, Some(&term(2)));
        assert_eq!(mark[FENCING_LEASE_ANNOTATION].as_deref(), Some(LEASE));
    }

    #[test]
    fn marked_object_needs_nothing() {
        let obj = with_annotations(
            primary(),
            &[
                (MANAGED_BY_VERSION_ANNOTATION, "1.2.0"),
                (LAST_RECONCILED_VERSION_ANNOTATION, "1.2.0"),
                (MIGRATION_STATE_ANNOTATION, "completed"),
            ],
        );
        assert!(version_marks(&obj, &manifest()).is_empty());
        let declares_min = Manifest {
            min_compatible_version: Some("1.0.0".into()),
            ..manifest()
        };
        assert_eq!(
            version_marks(&obj, &declares_min)[MIN_COMPATIBLE_VERSION_ANNOTATION].as_deref(),
            Some("1.0.0")
        );
    }

    #[test]
    fn a_forged_token_is_reported_naming_term_lease_and_what_was_issued() {
        let forged = ForgedTerm {
            lease: std::sync::Arc::from(LEASE),
            term: u64::MAX,
            issued: 2,
        };
        let (condition, event) = forged_report(&forged, Some(&term(2)));
        assert_eq!(
            (condition.kind.as_str(), condition.status.as_str()),
            ("Degraded", "True")
        );
        assert_eq!(condition.reason, "ForgedFencingToken");
        assert_eq!(
            condition.message,
            "the object carried fencing token 18446744073709551615 of Lease default/wasm-operator/u1, which has issued terms up to 2 only: nobody issued it, so a hand edit or a writer other than the host forged it; the leader of term 2 overwrote it with its own. Find the writer of the wasm-operator.dev/fencing-token annotation (kubectl get --show-managed-fields)"
        );
        assert!(event.warning);
        assert_eq!(event.reason, "ForgedFencingToken");
        assert_eq!(event.message, condition.message);
        // The mark this reconcile writes replaces the forged one.
        let marked = with_annotations(
            primary(),
            &[
                (FENCING_TOKEN_ANNOTATION, "18446744073709551615"),
                (FENCING_LEASE_ANNOTATION, LEASE),
            ],
        );
        assert_eq!(
            fencing_mark(&marked, Some(&term(2)))[FENCING_TOKEN_ANNOTATION].as_deref(),
            Some("2")
        );
    }
}
