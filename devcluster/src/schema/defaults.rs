//! Applying `default`s of a structural schema.

use serde_json::Value;

use super::keyword::{additional_schema, flag};

/// Fills absent properties that declare a `default`, recursively (also inside
/// array items and map members, and inside values that were just defaulted).
/// A `null` in a property that is not `nullable` but has a default is
/// replaced by the default, as kube-apiserver does.
pub fn apply(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, prop_schema) in properties {
                    let Some(default) = prop_schema.get("default") else {
                        continue;
                    };
                    let nullable = flag(prop_schema, "nullable");
                    match map.get(key) {
                        None => {
                            map.insert(key.clone(), default.clone());
                        }
                        Some(Value::Null) if !nullable => {
                            map.insert(key.clone(), default.clone());
                        }
                        Some(_) => {}
                    }
                }
                for (key, member) in map.iter_mut() {
                    if let Some(prop_schema) = properties.get(key) {
                        apply(prop_schema, member);
                    }
                }
            } else if let Some(member_schema) = additional_schema(schema) {
                let default = member_schema.get("default");
                for member in map.values_mut() {
                    if member.is_null() && !flag(member_schema, "nullable")
                        && let Some(default) = default {
                            *member = default.clone();
                        }
                    apply(member_schema, member);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    if item.is_null() && !flag(item_schema, "nullable")
                        && let Some(default) = item_schema.get("default") {
                            *item = default.clone();
                        }
                    apply(item_schema, item);
                }
            }
        }
        _ => {}
    }
}
