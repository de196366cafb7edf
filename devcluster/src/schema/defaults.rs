//! Applying `default`s of a structural schema.

use serde_json::Value;

use super::keyword::{additional_schema, flag};

/// Fills absent properties that declare a `default`, recursively (also inside
/// array items and map members, and inside values that were just defaulted).
///
/// As kube-apiserver (since 1.20), a `null` in a field that is not `nullable`
/// is replaced by the field's default, or dropped when it has none; with
/// `nullable: true` the null is kept and not defaulted. A null array item
/// without a default is kept, and validation rejects it.
pub fn apply(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, prop_schema) in properties {
                    let default = prop_schema.get("default");
                    match (map.get(key), default) {
                        (None, Some(default)) => {
                            map.insert(key.clone(), default.clone());
                        }
                        (Some(Value::Null), _) if !flag(prop_schema, "nullable") => match default {
                            Some(default) => {
                                map.insert(key.clone(), default.clone());
                            }
                            None => {
                                map.remove(key);
                            }
                        },
                        _ => {}
                    }
                }
                for (key, member) in map.iter_mut() {
                    if let Some(prop_schema) = properties.get(key) {
                        apply(prop_schema, member);
                    }
                }
            } else if let Some(member_schema) = additional_schema(schema) {
                let default = member_schema.get("default");
                if !flag(member_schema, "nullable") {
                    match default {
                        Some(default) => map
                            .values_mut()
                            .filter(|m| m.is_null())
                            .for_each(|m| *m = default.clone()),
                        None => map.retain(|_, m| !m.is_null()),
                    }
                }
                for member in map.values_mut() {
                    apply(member_schema, member);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    if item.is_null()
                        && !flag(item_schema, "nullable")
                        && let Some(default) = item_schema.get("default")
                    {
                        *item = default.clone();
                    }
                    apply(item_schema, item);
                }
            }
        }
        _ => {}
    }
}
