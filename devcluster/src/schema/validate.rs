//! Validation of a (pruned, defaulted) object against a structural schema,
//! with kube-apiserver's reasons, paths and message wording.

use serde_json::Value;

use super::FieldCause;
use super::keyword::{additional_schema, flag, type_of};
use super::path;

/// Validates the whole object; returns every cause found (empty when valid).
pub fn validate_root(schema: &Value, object: &Value) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    node(schema, object, "", &mut causes);
    causes
}

/// Validates `value` at `at` against `schema`, appending to `out`.
fn node(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    if value.is_null() {
        let typed = type_of(schema).is_some() || flag(schema, "x-kubernetes-int-or-string");
        if typed && !flag(schema, "nullable") {
            let expected = expected_type(schema);
            out.push(type_invalid(at, &expected, "null"));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(is_integer(value) || value.is_string()) {
            out.push(type_invalid(at, "integer,string", json_type(value)));
            return;
        }
    } else if let Some(expected) = type_of(schema)
        && !type_matches(expected, value)
    {
        out.push(type_invalid(at, expected, json_type(value)));
        return;
    }
    check_format(schema, value, at, out);
    check_enum(schema, value, at, out);
    check_numeric(schema, value, at, out);
    check_string(schema, value, at, out);
    check_counts(schema, value, at, out);
    check_junctors(schema, value, at, out);
    match value {
        Value::Object(map) => {
            if flag(schema, "x-kubernetes-embedded-resource") {
                // An embedded resource must say what it is, as a top-level object must.
                for field in ["apiVersion", "kind"] {
                    if map
                        .get(field)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        let message = "Required value: must not be empty".to_string();
                        out.push(cause(
                            "FieldValueRequired",
                            &path::child(at, field),
                            message,
                        ));
                    }
                }
            }
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        out.push(cause(
                            "FieldValueRequired",
                            &path::child(at, name),
                            "Required value".into(),
                        ));
                    }
                }
            }
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, member) in map {
                    if let Some(member_schema) = properties.get(key) {
                        node(member_schema, member, &path::child(at, key), out);
                    }
                }
            } else if let Some(member_schema) = additional_schema(schema) {
                for (key, member) in map {
                    node(member_schema, member, &path::key(at, key), out);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
                for (i, item) in items.iter().enumerate() {
                    node(item_schema, item, &path::index(at, i), out);
                }
            }
            check_list_type(schema, items, at, out);
        }
        _ => {}
    }
}

/// `x-kubernetes-list-type: set` items and `map` keys must be unique; the
/// second occurrence is reported as kube does (`Duplicate value: ...`).
fn check_list_type(schema: &Value, items: &[Value], at: &str, out: &mut Vec<FieldCause>) {
    let map_keys: Option<Vec<&str>> =
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => None,
            Some("map") => Some(
                schema
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                    .map(|k| k.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default(),
            ),
            _ => return,
        };
    let mut seen: Vec<Value> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        // A set item is its own identity; a map item is identified by its key fields.
        let (id, shown) = match &map_keys {
            None => (item.clone(), show(item)),
            Some(keys) => {
                let Some(fields) = item.as_object() else {
                    continue;
                };
                let key: serde_json::Map<String, Value> = keys
                    .iter()
                    .filter_map(|k| fields.get(*k).map(|v| ((*k).to_string(), v.clone())))
                    .collect();
                if key.is_empty() {
                    continue;
                }
                let shown = go_map(&key);
                (Value::Object(key), shown)
            }
        };
        if seen.iter().any(|s| same(s, &id)) {
            out.push(cause(
                "FieldValueDuplicate",
                &path::index(at, i),
                format!("Duplicate value: {shown}"),
            ));
        } else {
            seen.push(id);
        }
    }
}

/// A map key of a list-type map printed as Go's `%#v` prints it.
fn go_map(key: &serde_json::Map<String, Value>) -> String {
    let mut entries: Vec<(&String, &Value)> = key.iter().collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    let body: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}:{}", quote(k), show(v)))
        .collect();
    format!("map[string]interface {{}}{{{}}}", body.join(", "))
}

/// The type named in a type error for `schema`.
fn expected_type(schema: &Value) -> String {
    if flag(schema, "x-kubernetes-int-or-string") {
        "integer,string".into()
    } else {
        type_of(schema).unwrap_or("object").to_string()
    }
}

fn type_matches(expected: &str, value: &Value) -> bool {
    match expected {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "integer" => is_integer(value),
        "number" => value.is_number(),
        "boolean" => value.is_boolean(),
        // check_structural rejects unknown types; be permissive on stored schemas.
        _ => true,
    }
}

/// Integers include whole floats such as `1.0`, as in kube-openapi.
fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

/// The OpenAPI type name of a JSON value, as kube-openapi reports it.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn cause(reason: &str, field: &str, message: String) -> FieldCause {
    FieldCause {
        reason: reason.into(),
        field: field.into(),
        message,
    }
}

fn type_invalid(at: &str, expected: &str, actual: &str) -> FieldCause {
    let message = format!(
        "Invalid value: {actual:?}: {} in body must be of type {expected}: {actual:?}",
        path::display(at)
    );
    cause("FieldValueTypeInvalid", at, message)
}

/// `Invalid value: <value>: <path> in body <detail>`.
fn invalid(at: &str, value: &Value, detail: &str) -> FieldCause {
    let message = format!(
        "Invalid value: {}: {} in body {detail}",
        show(value),
        path::display(at)
    );
    cause("FieldValueInvalid", at, message)
}

/// Renders a value the way apimachinery's field errors print it: strings
/// quoted, numbers as Go's `%v` (so `10`, not `10.0`), compound values by type name.
pub(crate) fn show(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => show_number(n),
        Value::String(s) => quote(s),
        Value::Array(_) => "\"array\"".into(),
        Value::Object(_) => "\"object\"".into(),
    }
}

fn show_number(n: &serde_json::Number) -> String {
    if n.is_f64() {
        let f = n.as_f64().unwrap_or_default();
        if f.fract() == 0.0 && f.abs() < 1e21 {
            format!("{f:.0}")
        } else {
            f.to_string()
        }
    } else {
        n.to_string()
    }
}

/// Go's `%q` for the strings that occur in practice (JSON escaping is the same for them).
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn check_format(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    let Some(format) = schema.get("format").and_then(Value::as_str) else {
        return;
    };
    let ok = match (format, value) {
        ("int32", Value::Number(n)) => n.as_i64().is_none_or(|i| i32::try_from(i).is_ok()),
        ("int64", Value::Number(n)) => n.is_i64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        ("date-time", Value::String(s)) => chrono::DateTime::parse_from_rfc3339(s).is_ok(),
        ("date", Value::String(s)) => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok(),
        // Unknown formats and formats of other types are accepted (lenient, like kube).
        _ => true,
    };
    if !ok {
        let shown = match value {
            Value::String(s) => s.clone(),
            other => show(other),
        };
        let message = format!(
            "Invalid value: {}: {} in body must be of type {format}: {}",
            show(value),
            path::display(at),
            quote(&shown)
        );
        out.push(cause("FieldValueTypeInvalid", at, message));
    }
}

/// JSON equality, except that numbers compare by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn check_enum(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if allowed.iter().any(|a| same(a, value)) {
        return;
    }
    let supported: Vec<String> = allowed
        .iter()
        .map(|a| match a {
            Value::String(s) => quote(s),
            other => quote(&show(other)),
        })
        .collect();
    let message = format!(
        "Unsupported value: {}: supported values: {}",
        show(value),
        supported.join(", ")
    );
    out.push(cause("FieldValueNotSupported", at, message));
}

fn check_numeric(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    let Some(x) = value.as_f64() else { return };
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMaximum");
        if (exclusive && x >= max) || x > max {
            let rel = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            out.push(invalid(
                at,
                value,
                &format!("should be {rel} {}", show(&schema["maximum"])),
            ));
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let exclusive = flag(schema, "exclusiveMinimum");
        if (exclusive && x <= min) || x < min {
            let rel = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            out.push(invalid(
                at,
                value,
                &format!("should be {rel} {}", show(&schema["minimum"])),
            ));
        }
    }
    if let Some(factor) = schema.get("multipleOf").and_then(Value::as_f64)
        && factor > 0.0
        && (x / factor).fract().abs() > f64::EPSILON
    {
        out.push(invalid(
            at,
            value,
            &format!("should be a multiple of {}", show(&schema["multipleOf"])),
        ));
    }
}

fn check_string(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    let Value::String(s) = value else { return };
    // kube-openapi counts characters (runes), not bytes.
    let len = s.chars().count() as u64;
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        let unit = if max == 1 { "byte" } else { "bytes" };
        out.push(cause(
            "FieldValueTooLong",
            at,
            format!("Too long: may not be more than {max} {unit}"),
        ));
    }
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        out.push(invalid(
            at,
            value,
            &format!("should be at least {min} chars long"),
        ));
    }
    if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
        // An uncompilable pattern is a schema problem, not the object's: skip it
        // (check_structural reports it when the CRD is written).
        if let Ok(re) = regex::Regex::new(pattern)
            && !re.is_match(s)
        {
            out.push(invalid(at, value, &format!("should match '{pattern}'")));
        }
    }
}

fn check_counts(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    let (count, max_key, min_key, noun) = match value {
        Value::Array(items) => (items.len() as u64, "maxItems", "minItems", "items"),
        Value::Object(map) => (
            map.len() as u64,
            "maxProperties",
            "minProperties",
            "properties",
        ),
        _ => return,
    };
    if let Some(max) = schema.get(max_key).and_then(Value::as_u64)
        && count > max
    {
        out.push(cause(
            "FieldValueTooMany",
            at,
            format!("Too many: {count}: must have at most {max} items"),
        ));
    }
    if let Some(min) = schema.get(min_key).and_then(Value::as_u64)
        && count < min
    {
        out.push(invalid(
            at,
            value,
            &format!("should have at least {min} {noun}"),
        ));
    }
}

/// Causes `value` would get against `schema` alone.
fn causes_for(schema: &Value, value: &Value, at: &str) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    node(schema, value, at, &mut causes);
    causes
}

fn check_junctors(schema: &Value, value: &Value, at: &str, out: &mut Vec<FieldCause>) {
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for sub in all {
            out.extend(causes_for(sub, value, at));
        }
    }
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        let results: Vec<Vec<FieldCause>> = any.iter().map(|s| causes_for(s, value, at)).collect();
        if !any.is_empty() && results.iter().all(|r| !r.is_empty()) {
            out.push(invalid(
                at,
                value,
                "must validate at least one schema (anyOf)",
            ));
            // Like kube-openapi, also show why the closest alternative failed.
            if let Some(best) = results.into_iter().min_by_key(Vec::len) {
                out.extend(best);
            }
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let results: Vec<Vec<FieldCause>> = one.iter().map(|s| causes_for(s, value, at)).collect();
        let passing = results.iter().filter(|r| r.is_empty()).count();
        if !one.is_empty() && passing != 1 {
            out.push(invalid(
                at,
                value,
                "must validate one and only one schema (oneOf)",
            ));
            if passing == 0
                && let Some(best) = results.into_iter().min_by_key(Vec::len)
            {
                out.extend(best);
            }
        }
    }
    if let Some(not) = schema.get("not").filter(|s| s.is_object())
        && causes_for(not, value, at).is_empty()
    {
        out.push(invalid(at, value, "must not validate the schema (not)"));
    }
}
