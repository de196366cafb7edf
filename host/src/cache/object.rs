//! Objects as the shared caches keep them and as plugin calls take them.

use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};

use super::CachedObject;

/// The annotation `kubectl apply` keeps its last applied copy of the whole
/// object in: never read by the host, and by no plugin through the cache.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Trims an object as it enters a shared cache (every reflector applies it to
/// what it watches, like kube-runtime's `WatchStreamExt::modify`), so that
/// what a plugin is given is serialized straight from the cache, and a
/// cached object costs what the host and plugins read of it:
///
/// - `metadata.managedFields` is left out: bookkeeping of the API server,
///   often larger than the object itself, which would only slow every call
///   that copies it;
/// - the annotation [`LAST_APPLIED_ANNOTATION`] is left out: a second copy
///   of the object as `kubectl apply` last wrote it (for kubectl's own
///   three-way merge), often the largest annotation. The annotations map
///   itself stays (empty if that was its only key), so that the host's
///   metadata patches, which add keys to the map they saw, add the version
///   marks one by one rather than writing a whole map over kubectl's copy;
/// - `apiVersion` and `kind` are filled in from `ar` where a list response
///   left them out per item (plugins always see them).
///
/// Plugins therefore never see those two fields in what the host hands them
/// from the caches (the object of a call, its children, cache reads). An
/// object read fresh from the API server for an upgrade keeps the
/// annotation ([`object_text`]): the upgraded object is written back whole.
pub fn prepare_for_cache(object: &mut CachedObject, ar: &ApiResource) {
    object.metadata.managed_fields = None;
    if let Some(annotations) = object.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED_ANNOTATION);
    }
    if object.types.is_none() {
        object.types = Some(TypeMeta {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
        });
    }
}

/// `object` as [`prepare_for_cache`] would leave it, for serializing: only
/// the metadata is copied (without `managedFields`, the largest part of an
/// API response), the body is borrowed. Serializes as the prepared
/// `DynamicObject` does, key for key.
#[derive(serde::Serialize)]
struct Prepared<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    metadata: ObjectMeta,
    #[serde(flatten)]
    data: &'a serde_json::Value,
}

impl<'a> Prepared<'a> {
    fn of(object: &'a DynamicObject, ar: &'a ApiResource) -> Prepared<'a> {
        let (api_version, kind) = match &object.types {
            Some(types) => (types.api_version.as_str(), types.kind.as_str()),
            None => (ar.api_version.as_str(), ar.kind.as_str()),
        };
        let m = &object.metadata;
        // Field by field, so that a field added to ObjectMeta is a compile
        // error here rather than silently dropped.
        let metadata = ObjectMeta {
            annotations: m.annotations.clone(),
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp.clone(),
            finalizers: m.finalizers.clone(),
            generate_name: m.generate_name.clone(),
            generation: m.generation,
            labels: m.labels.clone(),
            managed_fields: None,
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            owner_references: m.owner_references.clone(),
            resource_version: m.resource_version.clone(),
            self_link: m.self_link.clone(),
            uid: m.uid.clone(),
        };
        Prepared {
            api_version,
            kind,
            metadata,
            data: &object.data,
        }
    }
}

/// True when `object` is not yet as [`prepare_for_cache`] leaves it (e.g. it
/// came from an API response rather than from a cache).
fn needs_preparing(object: &DynamicObject) -> bool {
    object.metadata.managed_fields.is_some() || object.types.is_none()
}

/// An object (of the kind `ar`) as the compact JSON text a plugin call takes:
/// one serialization of the object as the caches keep it (see
/// [`prepare_for_cache`]). An object that did not come from a cache (an
/// upgrade reads it fresh) is serialized without `managedFields` and with
/// its type filled in, but keeps every annotation: its upgrade is written
/// back whole, and must not drop `kubectl apply`'s copy.
pub fn object_text(object: &DynamicObject, ar: &ApiResource) -> String {
    let serialized = if needs_preparing(object) {
        serde_json::to_string(&Prepared::of(object, ar))
    } else {
        serde_json::to_string(object)
    };
    // Cannot fail for an object read from the API server: its fields are a
    // JSON map with string keys. A plugin given `null` reports it.
    serialized.unwrap_or_else(|_| "null".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn config_maps() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }
    }

    fn parsed(text: &str) -> Value {
        serde_json::from_str(text).expect("object_text writes JSON")
    }

    /// A list item as the API server sends it: no `apiVersion`/`kind`, with
    /// managedFields.
    fn list_item() -> DynamicObject {
        serde_json::from_value(json!({
            "metadata": {"name": "a", "namespace": "default",
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "data": {"k": "v"},
        }))
        .expect("a ConfigMap")
    }

    /// `object` as it enters a cache.
    fn cached(object: &DynamicObject) -> CachedObject {
        let mut cached = CachedObject::from_dynamic(object);
        prepare_for_cache(&mut cached, &config_maps());
        cached
    }

    #[test]
    fn entering_the_cache_drops_managed_fields_and_fills_the_type() {
        let object = cached(&list_item());
        let value = parsed(&object.text(&config_maps()));
        assert_eq!(value["apiVersion"], "v1");
        assert_eq!(value["kind"], "ConfigMap");
        assert_eq!(value["data"]["k"], "v");
        assert!(value["metadata"].get("managedFields").is_none(), "{value}");
        assert_eq!(value["metadata"]["name"], "a");
        assert!(object.types.is_some());
    }

    #[test]
    fn entering_the_cache_drops_kubectls_copy_and_keeps_the_map() {
        let fresh: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "default",
                "annotations": {LAST_APPLIED_ANNOTATION: "{\"big\": true}"}},
        }))
        .expect("a ConfigMap");
        let object = cached(&fresh);
        // Empty, not gone: a metadata patch then adds keys to the map.
        assert_eq!(object.metadata.annotations, Some(Default::default()));
        let mut other = fresh.clone();
        other
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("keep".into(), "me".into());
        assert_eq!(
            cached(&other)
                .metadata
                .annotations
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["keep"]
        );
        // Read fresh (an upgrade writes it back whole), the copy stays.
        let mut fresh = fresh;
        fresh.metadata.managed_fields = Some(Vec::new());
        assert!(object_text(&fresh, &config_maps()).contains(LAST_APPLIED_ANNOTATION));
    }

    #[test]
    fn object_text_is_the_cached_form_whatever_the_source() {
        let raw = list_item();
        let from_cache = cached(&raw).text(&config_maps());
        assert_eq!(object_text(&raw, &config_maps()), from_cache);
        assert_eq!(parsed(&from_cache)["kind"], "ConfigMap");
        // A type the object carries is kept.
        let mut other = raw.clone();
        other.types = Some(TypeMeta {
            api_version: "example.com/v1".into(),
            kind: "Other".into(),
        });
        assert_eq!(
            parsed(&cached(&other).text(&config_maps()))["kind"],
            "Other"
        );
        assert_eq!(
            parsed(&object_text(&other, &config_maps()))["kind"],
            "Other"
        );
    }

    #[test]
    fn preparing_on_the_fly_writes_what_a_prepared_copy_writes() {
        let ar = config_maps();
        for object in [
            list_item(),
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "b", "namespace": "default", "uid": "u", "resourceVersion": "3",
                    "labels": {"a": "b"}, "annotations": {"c": "d"}, "finalizers": ["f"],
                    "ownerReferences": [{"apiVersion": "v1", "kind": "X", "name": "o", "uid": "o"}],
                    "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
                "data": {"k": "v"},
            }))
            .unwrap(),
        ] {
            assert_eq!(object_text(&object, &ar), cached(&object).text(&ar));
        }
    }
}
