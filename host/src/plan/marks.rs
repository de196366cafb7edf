//! The host's marks on a primary — its `wasm-operator.dev/*` annotations and
//! labels and `app.kubernetes.io/managed-by` — kept as they were through
//! every answer a plugin returns an object in (`convert`, `upgrade`).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::names::{HOST_ANNOTATION_PREFIX, MANAGED_BY_LABEL};

/// Puts the host's marks of `original` back on `converted` (what a plugin's
/// `convert` or `upgrade` returned for it): every
/// `wasm-operator.dev/*` annotation, and the `wasm-operator.dev/*` and
/// `app.kubernetes.io/managed-by` labels, exactly as they were on the way in
/// (a mark the plugin added is removed, one it dropped comes back). Returns
/// the field path of each mark the plugin changed, empty when it kept them
/// all.
///
/// # Guarantees
///
/// The host's marks (fencing token and Lease, version marks, migration
/// state) read through any served version, or written back by an upgrade,
/// are the stored ones: a plugin cannot forge a fencing token or a
/// `min-compatible-version`, nor strip a guard. Everything else the plugin returned is left as it is, so the
/// conversion still answers (a failed conversion would fail every read of
/// the object).
pub fn keep_host_marks(original: &Value, converted: &mut Value) -> Vec<String> {
    let mut changed = Vec::new();
    for (field, is_mark) in [
        ("labels", is_host_label as fn(&str) -> bool),
        ("annotations", is_host_annotation),
    ] {
        let empty = Map::new();
        let before = original
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let after = converted
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let forged: BTreeSet<String> = before
            .keys()
            .chain(after.keys())
            .filter(|key| is_mark(key) && before.get(*key) != after.get(*key))
            .cloned()
            .collect();
        if forged.is_empty() {
            continue;
        }
        let had_field = original.pointer(&format!("/metadata/{field}")).is_some();
        let Some(metadata) = converted.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue;
        };
        let entry = metadata
            .entry(field)
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        if let Some(map) = entry.as_object_mut() {
            for key in &forged {
                match before.get(key) {
                    Some(value) => map.insert(key.clone(), value.clone()),
                    None => map.remove(key),
                };
            }
            if map.is_empty() && !had_field {
                metadata.remove(field);
            }
        }
        changed.extend(
            forged
                .into_iter()
                .map(|key| format!("metadata.{field}[{key:?}]")),
        );
    }
    changed
}

fn is_host_label(key: &str) -> bool {
    key.starts_with(HOST_ANNOTATION_PREFIX) || key == MANAGED_BY_LABEL
}

fn is_host_annotation(key: &str) -> bool {
    key.starts_with(HOST_ANNOTATION_PREFIX)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object() -> Value {
        json!({
            "apiVersion": "kv.example.com/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicaCount": 1},
        })
    }

    #[test]
    fn the_host_marks_come_back_as_they_went_in_whatever_convert_returns() {
        let mut original = object();
        original["metadata"]["annotations"] = json!({
            "wasm-operator.dev/fencing-token": "3",
            "wasm-operator.dev/managed-by-version": "1.0.0",
            "kv.example.com/note": "x",
        });
        original["metadata"]["labels"] = json!({"wasm-operator.dev/plugin": "kv", "app": "a"});
        let mut converted = original.clone();
        converted["apiVersion"] = json!("kv.example.com/v1alpha1");
        converted["metadata"]["annotations"] = json!({
            "wasm-operator.dev/fencing-token": "18446744073709551615",
            "wasm-operator.dev/min-compatible-version": "99.0.0",
            "kv.example.com/note": "changed by convert",
        });
        converted["metadata"]["labels"] =
            json!({"app.kubernetes.io/managed-by": "someone", "app": "b"});
        let changed = keep_host_marks(&original, &mut converted);
        assert_eq!(
            changed,
            [
                r#"metadata.labels["app.kubernetes.io/managed-by"]"#,
                r#"metadata.labels["wasm-operator.dev/plugin"]"#,
                r#"metadata.annotations["wasm-operator.dev/fencing-token"]"#,
                r#"metadata.annotations["wasm-operator.dev/managed-by-version"]"#,
                r#"metadata.annotations["wasm-operator.dev/min-compatible-version"]"#,
            ]
        );
        // The marks are the original's; the plugin's own keys stay its answer.
        assert_eq!(
            converted["metadata"]["annotations"],
            json!({
                "wasm-operator.dev/fencing-token": "3",
                "wasm-operator.dev/managed-by-version": "1.0.0",
                "kv.example.com/note": "changed by convert",
            })
        );
        assert_eq!(
            converted["metadata"]["labels"],
            json!({"wasm-operator.dev/plugin": "kv", "app": "b"})
        );
    }

    #[test]
    fn marks_added_to_an_object_without_any_are_removed_and_nothing_else_is_touched() {
        let mut converted = object();
        converted["metadata"]["annotations"] = json!({"wasm-operator.dev/fencing-token": "1"});
        let changed = keep_host_marks(&object(), &mut converted);
        assert_eq!(
            changed,
            [r#"metadata.annotations["wasm-operator.dev/fencing-token"]"#]
        );
        // No annotations went in, none come out: a round trip stays identical.
        assert_eq!(converted, object());
        let mut faithful = object();
        faithful["spec"] = json!({"size": 1});
        assert!(keep_host_marks(&object(), &mut faithful).is_empty());
        assert_eq!(faithful["spec"], json!({"size": 1}));
    }
}
