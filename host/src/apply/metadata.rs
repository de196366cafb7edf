//! Metadata writes on the primary: the finalizer and the version annotations.

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{
    ApplyError, FINALIZER, LAST_RECONCILED_VERSION_ANNOTATION, MANAGED_BY_VERSION_ANNOTATION,
    MIGRATION_STATE_ANNOTATION, MIN_COMPATIBLE_VERSION_ANNOTATION, display_name, field_manager,
};

fn primary_api(client: &Client, ar: &ApiResource, obj: &DynamicObject) -> Api<DynamicObject> {
    match obj.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

fn target(ar: &ApiResource, obj: &DynamicObject) -> String {
    format!(
        "{} {}",
        ar.kind,
        display_name(obj.namespace().as_deref(), &obj.name_any())
    )
}

/// True when the host's finalizer is on the object.
pub fn has_finalizer(obj: &DynamicObject) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

/// Adds the host's finalizer unless present. A JSON patch that tests the
/// finalizers seen in the cache first, so a concurrent change by someone else
/// fails the write (retried) instead of being overwritten.
pub async fn ensure_finalizer(
    client: &Client,
    ar: &ApiResource,
    obj: &DynamicObject,
    plugin: &str,
) -> Result<(), ApplyError> {
    if has_finalizer(obj) {
        return Ok(());
    }
    let patch: json_patch::Patch = serde_json::from_value(if obj.finalizers().is_empty() {
        json!([{ "op": "add", "path": "/metadata/finalizers", "value": [FINALIZER] }])
    } else {
        json!([
            { "op": "test", "path": "/metadata/finalizers", "value": obj.finalizers() },
            { "op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER },
        ])
    })
    .map_err(|e| ApplyError::InvalidChild {
        plugin: plugin.to_string(),
        version: String::new(),
        child: target(ar, obj),
        problem: format!("cannot build the finalizer patch: {e}"),
    })?;
    primary_api(client, ar, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
        .map_err(|e| ApplyError::api("adding the finalizer to", target(ar, obj), e))?;
    Ok(())
}

/// Removes the host's finalizer (after the plugin finalized). Tests the list
/// entry first so it never removes somebody else's finalizer.
pub async fn remove_finalizer(
    client: &Client,
    ar: &ApiResource,
    obj: &DynamicObject,
) -> Result<(), ApplyError> {
    let Some(index) = obj.finalizers().iter().position(|f| f == FINALIZER) else {
        return Ok(());
    };
    let path = format!("/metadata/finalizers/{index}");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        { "op": "test", "path": path, "value": FINALIZER },
        { "op": "remove", "path": path },
    ]))
    .map_err(|e| ApplyError::InvalidChild {
        plugin: String::new(),
        version: String::new(),
        child: target(ar, obj),
        problem: format!("cannot build the finalizer patch: {e}"),
    })?;
    match primary_api(client, ar, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // Gone already: the finalizer was the last thing holding it.
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(ApplyError::api(
            "removing the finalizer from",
            target(ar, obj),
            e,
        )),
    }
}

/// The version annotations a successful reconcile leaves on a primary.
#[derive(Debug, Clone, Copy)]
pub struct VersionMarks<'a> {
    /// The plugin's name (its field manager).
    pub plugin: &'a str,
    /// The version that reconciled.
    pub version: &'a str,
    /// That version's `min_compatible_version`, if it declares one.
    pub min_compatible: Option<&'a str>,
}

/// Records which plugin version manages the object (managed-by,
/// last-reconciled, migration-state `completed`, min-compatible), unless the
/// annotations already say so.
pub async fn write_version_annotations(
    client: &Client,
    ar: &ApiResource,
    obj: &DynamicObject,
    marks: VersionMarks<'_>,
) -> Result<(), ApplyError> {
    let annotations = obj.annotations();
    let current = |key: &str| annotations.get(key).map(String::as_str);
    let version = marks.version;
    if current(MANAGED_BY_VERSION_ANNOTATION) == Some(version)
        && current(LAST_RECONCILED_VERSION_ANNOTATION) == Some(version)
        && current(MIGRATION_STATE_ANNOTATION) == Some("completed")
        && current(MIN_COMPATIBLE_VERSION_ANNOTATION) == marks.min_compatible
    {
        return Ok(());
    }
    // `null` removes a min-compatible mark left by a version that declared
    // one: the managing version's manifest is the one that counts.
    let patch: Value = json!({ "metadata": { "annotations": {
        MANAGED_BY_VERSION_ANNOTATION: version,
        LAST_RECONCILED_VERSION_ANNOTATION: version,
        MIGRATION_STATE_ANNOTATION: "completed",
        MIN_COMPATIBLE_VERSION_ANNOTATION: marks.min_compatible,
    }}});
    primary_api(client, ar, obj)
        .patch(
            &obj.name_any(),
            &PatchParams::apply(&field_manager(marks.plugin)),
            &Patch::Merge(&patch),
        )
        .await
        .map_err(|e| ApplyError::api("annotating", target(ar, obj), e))?;
    Ok(())
}
