//! Writes of the primary's own metadata: the host's finalizer and the version
//! marks, grouped as [`crate::plan::MetadataWrites`] says.

use std::collections::BTreeMap;

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::writer::{Answer, Writer};
use super::{ApplyError, finalizer};
use crate::plan::{AnnotationChanges, FINALIZER, FinalizerChange, MetadataWrite, field_manager};

/// Merge-patches `changes` into the annotations of the primary `name` in
/// `namespace` (`None` removes one), as the plugin's field manager. Returns
/// the write's answer.
pub(super) async fn annotate(
    writer: &Writer<'_>,
    namespace: Option<&str>,
    name: &str,
    target: &str,
    changes: &AnnotationChanges,
) -> Result<Answer, ApplyError> {
    let patch = json!({ "metadata": { "annotations": changes } });
    patch_primary(writer, namespace, name, &Patch::Merge(&patch))
        .await
        .map_err(|e| ApplyError::api("annotating", target, e))
}

/// `patch` of the primary `name` in `namespace`, as the plugin's field
/// manager: the one request both metadata writes send.
async fn patch_primary(
    writer: &Writer<'_>,
    namespace: Option<&str>,
    name: &str,
    patch: &Patch<impl serde::Serialize + std::fmt::Debug>,
) -> Result<Answer, kube::Error> {
    let params = PatchParams::apply(&field_manager(writer.plugin));
    writer
        .patch(writer.primary, namespace, None, name, &params, patch)
        .await
}

/// Sends `write` (the plan's `first` metadata write) as one JSON patch on
/// `obj` as observed. Returns the write's answer, `None` when there was
/// nothing to send.
///
/// # Errors
///
/// The API server's refusal, including a failed `test` (the finalizer list,
/// a mark or the whole object changed since `obj` was read): the reconcile
/// is retried on the newer object.
pub(super) async fn write_first(
    writer: &Writer<'_>,
    obj: &DynamicObject,
    target: &str,
    write: &MetadataWrite,
) -> Result<Option<Answer>, ApplyError> {
    let Some(patch) = first_patch(obj, write) else {
        return Ok(None);
    };
    let action = if write.annotations.is_empty() {
        "adding the finalizer to"
    } else {
        "adding the finalizer and the version marks to"
    };
    let namespace = obj.namespace();
    patch_primary(
        writer,
        namespace.as_deref(),
        &obj.name_any(),
        &Patch::<()>::Json(patch),
    )
    .await
    .map(Some)
    .map_err(|e| ApplyError::api(action, target, e))
}

/// The JSON patch of `write` on `obj` as observed: the host's finalizer
/// appended to the tested list ([`finalizer::add_operations`]) and the
/// version marks set; `None` when it would change nothing.
///
/// Nothing someone else wrote meanwhile is overwritten, with the caveat the
/// finalizer list has too (see [`finalizer`]): the finalizer list is tested,
/// marks are set key by key and removed only after a `test` of their
/// observed value; only an object observed without any annotation gets its
/// map created whole, untested (an absent path cannot be tested portably),
/// so a first annotation someone adds in the same instant would be lost.
/// The object is not tested as a whole (`resourceVersion`): a concurrent
/// spec change must not fail the host's metadata write.
pub(super) fn first_patch(obj: &DynamicObject, write: &MetadataWrite) -> Option<json_patch::Patch> {
    let mut operations = Vec::new();
    if write.finalizer == FinalizerChange::Add
        && let Some(add) = finalizer::add_operations(obj.finalizers(), FINALIZER)
    {
        operations.extend(add);
    }
    operations.extend(annotation_operations(
        obj.metadata.annotations.as_ref(),
        &write.annotations,
    ));
    (!operations.is_empty()).then_some(json_patch::Patch(operations))
}

/// JSON patch operations applying `changes` to the `observed` annotations
/// (`None`: the object has no annotation map).
fn annotation_operations(
    observed: Option<&BTreeMap<String, String>>,
    changes: &AnnotationChanges,
) -> Vec<PatchOperation> {
    let Some(observed) = observed else {
        // No map to add keys to: the whole map is added, and nothing is to
        // be removed from it.
        let set: Map<String, Value> = changes
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k.clone(), Value::from(v.as_str()))))
            .collect();
        if set.is_empty() {
            return Vec::new();
        }
        return vec![PatchOperation::Add(AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: Value::Object(set),
        })];
    };
    let path = |key: &str| PointerBuf::from_tokens(["metadata", "annotations", key]);
    let mut operations = Vec::with_capacity(changes.len());
    for (key, value) in changes {
        match (value, observed.get(key)) {
            // `add` sets a member whether or not it exists.
            (Some(value), _) => operations.push(PatchOperation::Add(AddOperation {
                path: path(key),
                value: Value::from(value.as_str()),
            })),
            (None, Some(old)) => {
                operations.push(PatchOperation::Test(TestOperation {
                    path: path(key),
                    value: Value::from(old.as_str()),
                }));
                operations.push(PatchOperation::Remove(RemoveOperation { path: path(key) }));
            }
            (None, None) => {}
        }
    }
    operations
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An object with `finalizers` and `annotations` (no map at all when
    /// empty, as the API server leaves it).
    fn object(finalizers: &[&str], annotations: &[(&str, &str)]) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                "finalizers": finalizers},
        }))
        .unwrap();
        if !annotations.is_empty() {
            obj.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
        }
        obj
    }

    fn marks() -> AnnotationChanges {
        [
            ("x/managed".to_string(), Some("1.0.0".to_string())),
            ("x/min".to_string(), None),
        ]
        .into_iter()
        .collect()
    }

    fn apply(obj: &DynamicObject, patch: &json_patch::Patch) -> Result<Value, String> {
        let mut doc = serde_json::to_value(obj).unwrap();
        json_patch::patch(&mut doc, patch).map_err(|e| e.to_string())?;
        Ok(doc)
    }

    #[test]
    fn a_fresh_object_gets_the_finalizer_and_the_marks_in_one_patch() {
        let obj = object(&[], &[]);
        let write = MetadataWrite {
            finalizer: FinalizerChange::Add,
            annotations: marks(),
        };
        let patch = first_patch(&obj, &write).unwrap();
        let doc = apply(&obj, &patch).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!([FINALIZER]));
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({"x/managed": "1.0.0"})
        );
        // A concurrent spec change does not fail it.
        let mut newer = obj.clone();
        newer.metadata.resource_version = Some("8".into());
        newer.data = json!({"spec": {"replicas": 3}});
        assert!(apply(&newer, &patch).is_ok());
        // An empty map is added to, key by key.
        let mut empty = obj.clone();
        empty.metadata.annotations = Some(BTreeMap::new());
        let patch = first_patch(&empty, &write).unwrap();
        assert_eq!(patch.0.len(), 2, "{patch:?}");
        let doc = apply(&empty, &patch).unwrap();
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({"x/managed": "1.0.0"})
        );
    }

    #[test]
    fn existing_annotations_and_finalizers_are_kept_and_tested() {
        let obj = object(&["other"], &[("keep", "me"), ("x/min", "0.9.0")]);
        let write = MetadataWrite {
            finalizer: FinalizerChange::Add,
            annotations: marks(),
        };
        let patch = first_patch(&obj, &write).unwrap();
        let doc = apply(&obj, &patch).unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["other", FINALIZER]));
        assert_eq!(
            doc["metadata"]["annotations"],
            json!({"keep": "me", "x/managed": "1.0.0"})
        );
        // Someone else's finalizer added meanwhile: the test fails the patch.
        let raced = object(&["other", "third"], &[("keep", "me"), ("x/min", "0.9.0")]);
        assert!(apply(&raced, &patch).is_err());
        // A mark changed meanwhile is not removed blindly.
        let changed = object(&["other"], &[("keep", "me"), ("x/min", "2.0.0")]);
        assert!(apply(&changed, &patch).is_err());
    }

    #[test]
    fn nothing_to_change_sends_nothing() {
        let obj = object(&[FINALIZER], &[]);
        let write = MetadataWrite {
            finalizer: FinalizerChange::Add,
            annotations: [("x/min".to_string(), None)].into_iter().collect(),
        };
        assert!(first_patch(&obj, &write).is_none());
    }
}
