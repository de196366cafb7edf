//! Helpers for the CRDs the host generates from its types (WasmPlugin,
//! Backup, Restore): schemars' output turned into what the API server
//! expects of a structural schema.

use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;

/// Schema of a free JSON object that the API server stores as it is.
pub fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Makes schemars' output say what the CRD means (applied to the spec and
/// the status; kube's derive then makes it structural):
///
/// - an `Option` field is an optional property, not a nullable one, as in
///   the hand-written CRD this one replaced: the API server drops a `null`
///   on write instead of storing it (to serde, both mean `None`); schemars
///   would add `null` to the type, which becomes `nullable: true`;
/// - formats Kubernetes does not define (`uint`, `uint64`, ... of unsigned
///   integers) are dropped; the bounds are in `minimum`/`maximum`.
pub fn kubernetes_schema(schema: &mut Schema) {
    schemars::transform::transform_subschemas(&mut kubernetes_schema, schema);
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(Value::Array(types)) = object.get_mut("type") {
        types.retain(|t| t != "null");
        if let [single] = types.as_slice() {
            let single = single.clone();
            object.insert("type".into(), single);
        }
    }
    // `Option<T>` of a schema without a type (e.g. the `oneOf` of an enum):
    // `anyOf: [T, {type: null}]`, which becomes T.
    if let Some(Value::Array(any_of)) = object.get("anyOf")
        && let [inner, null] = any_of.as_slice()
        && null.get("type").and_then(Value::as_str) == Some("null")
        && let Value::Object(inner) = inner.clone()
    {
        object.remove("anyOf");
        for (key, value) in inner {
            object.entry(key).or_insert(value);
        }
    }
    if object
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|format| format.starts_with("uint"))
    {
        object.remove("format");
    }
}
