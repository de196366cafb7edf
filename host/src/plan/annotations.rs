//! The version marks a successful reconcile leaves on its primary.
//!
//! Written last, after the status, except on a reconcile that also adds the
//! host's finalizer (an object's first): then they go in the finalizer's
//! patch, before the children ([`super::MetadataWrites`]).

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::DynamicObject;

use super::names::{
    LAST_RECONCILED_VERSION_ANNOTATION, MANAGED_BY_VERSION_ANNOTATION, MIGRATION_STATE_ANNOTATION,
    MIN_COMPATIBLE_VERSION_ANNOTATION, MigrationState,
};
use crate::contract::Manifest;

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
}
