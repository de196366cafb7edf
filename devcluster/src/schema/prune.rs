//! Dropping fields a structural schema does not declare.

use serde_json::Value;

use super::keyword::{additional_schema, flag};

/// Fields of a Kubernetes object that are never pruned at the root or inside
/// an `x-kubernetes-embedded-resource`: their schema is the API machinery's, not the CRD's.
const OBJECT_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Prunes `value` in place against `schema`. `is_resource` is true for the
/// root and for embedded resources, whose apiVersion/kind/metadata are kept.
pub fn prune(schema: &Value, value: &mut Value, is_resource: bool) {
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = is_resource || flag(schema, "x-kubernetes-embedded-resource");
            let properties = schema.get("properties").and_then(Value::as_object);
            if let Some(member_schema) = additional_schema(schema) {
                for member in map.values_mut() {
                    prune(member_schema, member, false);
                }
                return;
            }
            map.retain(|key, _| {
                preserve
                    || (embedded && OBJECT_FIELDS.contains(&key.as_str()))
                    || properties.is_some_and(|p| p.contains_key(key))
            });
            let Some(properties) = properties else { return };
            for (key, member) in map.iter_mut() {
                // metadata of a resource is shaped by ObjectMeta, not by the CRD schema.
                if embedded && key == "metadata" {
                    continue;
                }
                if let Some(member_schema) = properties.get(key) {
                    prune(member_schema, member, false);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for item in items {
                    prune(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}
