//! Checking and merging what a plugin's `upgrade` returned (see the module
//! docs of [`super`] for what may change).

use serde_json::{Map, Value};

use crate::plan::marks::keep_host_marks;

/// The object to write back after an upgrade.
#[derive(Debug, Clone, PartialEq)]
pub struct UpgradedObject {
    /// The stored object with the upgraded spec, labels and annotations
    /// (status as stored: it goes through the status subresource).
    pub object: Value,
    /// The upgraded status, when the plugin changed it.
    pub status: Option<Value>,
    /// The host marks the plugin changed and the merge put back (field
    /// paths, for the log).
    pub restored: Vec<String>,
}

/// Merges the allowed parts of `upgraded` into `stored`, or says which
/// forbidden part the plugin changed.
pub fn merge_upgraded(stored: &Value, upgraded: &Value) -> Result<UpgradedObject, String> {
    let Some(new) = upgraded.as_object() else {
        return Err("upgrade returned something that is not a JSON object".into());
    };
    for pointer in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
        "/metadata/uid",
    ] {
        let (before, after) = (stored.pointer(pointer), upgraded.pointer(pointer));
        // The uid may be dropped by a plugin that rebuilt the object; any
        // other identity field must come back unchanged.
        if pointer == "/metadata/uid" && after.is_none() {
            continue;
        }
        if before != after {
            return Err(format!(
                "upgrade changed {} from {} to {}; an upgrade may change only spec, metadata.labels, metadata.annotations and status",
                &pointer[1..].replace('/', "."),
                show(before),
                show(after)
            ));
        }
    }
    for (key, value) in new {
        if matches!(
            key.as_str(),
            "apiVersion" | "kind" | "metadata" | "spec" | "status"
        ) {
            continue;
        }
        if stored.get(key) != Some(value) {
            return Err(format!(
                "upgrade changed the top-level field {key}; an upgrade may change only spec, metadata.labels, metadata.annotations and status"
            ));
        }
    }
    let mut object = stored.clone();
    let Some(root) = object.as_object_mut() else {
        return Err("the stored object is not a JSON object".into());
    };
    if let Some(spec) = new.get("spec") {
        root.insert("spec".into(), spec.clone());
    }
    let metadata = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = metadata.as_object_mut() {
        for field in ["labels", "annotations"] {
            if let Some(value) = upgraded.pointer(&format!("/metadata/{field}")) {
                meta.insert(field.into(), value.clone());
            }
        }
    }
    // The host's own marks are never the plugin's to set or drop.
    let restored = keep_host_marks(stored, &mut object);
    let status = new
        .get("status")
        .filter(|s| stored.get("status") != Some(*s))
        .cloned();
    Ok(UpgradedObject {
        object,
        status,
        restored,
    })
}

fn show(v: Option<&Value>) -> String {
    v.map_or_else(|| "nothing".to_string(), Value::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn stored() -> Value {
        json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                         "finalizers": ["f"],
                         "annotations": {"wasm-operator.dev/managed-by-version": "1.0.0", "x": "1"}},
            "spec": {"replicas": 1},
            "status": {"phase": "Running"},
        })
    }

    #[test]
    fn takes_spec_labels_annotations_and_status() {
        let mut up = stored();
        up["spec"]["port"] = json!(80);
        up["metadata"]["labels"] = json!({"l": "v"});
        up["metadata"]["annotations"] =
            json!({"y": "2", "wasm-operator.dev/managed-by-version": "9.9.9"});
        up["metadata"]["finalizers"] = json!([]);
        up["status"]["phase"] = json!("Upgraded");
        let out = merge_upgraded(&stored(), &up).unwrap();
        assert_eq!(out.object["spec"]["port"], 80);
        assert_eq!(out.object["metadata"]["labels"]["l"], "v");
        assert_eq!(out.object["metadata"]["annotations"]["y"], "2");
        assert!(out.object["metadata"]["annotations"].get("x").is_none());
        // Host annotations and other metadata come from the stored object.
        assert_eq!(
            out.object["metadata"]["annotations"]["wasm-operator.dev/managed-by-version"],
            "1.0.0"
        );
        assert_eq!(out.object["metadata"]["finalizers"], json!(["f"]));
        assert_eq!(
            out.restored,
            [r#"metadata.annotations["wasm-operator.dev/managed-by-version"]"#]
        );
        assert_eq!(out.object["metadata"]["resourceVersion"], "7");
        assert_eq!(out.object["status"]["phase"], "Running");
        assert_eq!(out.status, Some(json!({"phase": "Upgraded"})));
    }

    #[test]
    fn unchanged_status_is_not_written() {
        let out = merge_upgraded(&stored(), &stored()).unwrap();
        assert_eq!(out.status, None);
        assert_eq!(out.object, stored());
    }

    #[test]
    fn refuses_identity_changes() {
        for (pointer, value) in [
            ("/kind", json!("Other")),
            ("/apiVersion", json!("example.com/v2")),
            ("/metadata/name", json!("b")),
            ("/metadata/namespace", json!("other")),
            ("/metadata/uid", json!("u2")),
        ] {
            let mut up = stored();
            *up.pointer_mut(pointer).unwrap() = value;
            let err = merge_upgraded(&stored(), &up).unwrap_err();
            assert!(err.contains("may change only spec"), "{pointer}: {err}");
        }
    }

    #[test]
    fn the_host_labels_and_annotations_come_from_the_stored_object() {
        let mut stored = stored();
        stored["metadata"]["labels"] = json!({"wasm-operator.dev/plugin": "webapp", "app.kubernetes.io/managed-by": "wasm-operator", "app": "a"});
        let mut up = stored.clone();
        up["metadata"]["labels"] = json!({"app.kubernetes.io/managed-by": "someone", "app": "b"});
        up["metadata"]["annotations"] = json!({
            "wasm-operator.dev/fencing-token": "18446744073709551615",
            "wasm-operator.dev/min-compatible-version": "99.0.0",
        });
        let out = merge_upgraded(&stored, &up).unwrap();
        assert_eq!(
            out.object["metadata"]["labels"],
            json!({"wasm-operator.dev/plugin": "webapp", "app.kubernetes.io/managed-by": "wasm-operator", "app": "b"})
        );
        assert_eq!(
            out.object["metadata"]["annotations"],
            json!({"wasm-operator.dev/managed-by-version": "1.0.0"})
        );
        assert_eq!(out.restored.len(), 5, "{:?}", out.restored);
    }

    #[test]
    fn refuses_other_top_level_fields() {
        let mut up = stored();
        up["data"] = json!({"k": "v"});
        assert!(
            merge_upgraded(&stored(), &up)
                .unwrap_err()
                .contains("top-level field data")
        );
        assert!(merge_upgraded(&stored(), &json!("text")).is_err());
    }
}
