//! Annotation writes on the primary (the version marks).

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use super::ApplyError;
use crate::plan::{AnnotationChanges, field_manager};

/// Merge-patches `changes` into the primary's annotations (`None` removes
/// one), as the plugin's field manager.
pub(super) async fn annotate(
    api: &Api<DynamicObject>,
    name: &str,
    target: &str,
    plugin: &str,
    changes: &AnnotationChanges,
) -> Result<(), ApplyError> {
    let patch = json!({ "metadata": { "annotations": changes } });
    api.patch(
        name,
        &PatchParams::apply(&field_manager(plugin)),
        &Patch::Merge(&patch),
    )
    .await
    .map_err(|e| ApplyError::api("annotating", target, e))?;
    Ok(())
}
