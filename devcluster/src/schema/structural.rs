//! Rejecting schemas that are not structural, so a bad CRD is refused with
//! 422 when it is written instead of misbehaving when objects are stored.
//!
//! This covers the rules kube-apiserver users trip over in practice (missing
//! `type`, `items` missing on arrays, forbidden keywords inside `allOf`/`anyOf`/
//! `oneOf`/`not`, `additionalProperties` next to `properties`, bad patterns),
//! not every rule of the structural-schema specification.

use serde_json::{Map, Value};

use super::keyword::{flag, type_of};

const TYPES: [&str; 6] = ["object", "array", "string", "integer", "number", "boolean"];
const JUNCTORS: [&str; 3] = ["allOf", "anyOf", "oneOf"];
/// Keywords that only the structural part may carry, not value validations inside junctors.
const NOT_IN_JUNCTORS: [&str; 8] = [
    "type",
    "nullable",
    "default",
    "additionalProperties",
    "description",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
];

/// Checks that `schema` (a version's `openAPIV3Schema`) is structural.
///
/// On failure the message lists every problem in kube's style, each as
/// `openAPIV3Schema.<path>: <reason>`, joined by `, `.
pub fn check_structural(schema: &Value) -> Result<(), String> {
    let mut problems = Vec::new();
    let at = "openAPIV3Schema";
    match schema.as_object() {
        None => problems.push(format!("{at}: Required value: must be an object")),
        Some(map) => {
            if type_of(schema) != Some("object") {
                problems.push(format!(
                    "{at}.type: Required value: must be object at the root"
                ));
            }
            check_node(map, at, &mut problems);
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join(", "))
    }
}

/// Checks a node of the structural part of the schema (root, properties, items, additionalProperties).
fn check_node(map: &Map<String, Value>, at: &str, problems: &mut Vec<String>) {
    let schema = Value::Object(map.clone());
    let int_or_string = flag(&schema, "x-kubernetes-int-or-string");
    let preserve = flag(&schema, "x-kubernetes-preserve-unknown-fields");
    let ty = type_of(&schema);
    match (ty, map.get("type")) {
        (Some(t), _) if !TYPES.contains(&t) => problems.push(format!(
            "{at}.type: Unsupported value: {t:?}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""
        )),
        (None, Some(v)) if (!v.is_string() || v.as_str() == Some(""))
            && !(int_or_string || preserve) => {
                problems.push(format!("{at}.type: Required value: must not be empty for specified fields"));
            }
        (None, None) if !(int_or_string || preserve) => {
            problems.push(format!("{at}.type: Required value: must not be empty for specified fields"));
        }
        _ => {}
    }
    if int_or_string && ty.is_some() {
        problems.push(format!(
            "{at}.type: Forbidden: must be empty if x-kubernetes-int-or-string is true"
        ));
    }
    if flag(&schema, "x-kubernetes-embedded-resource") && ty != Some("object") {
        problems.push(format!("{at}.type: Invalid value: {:?}: must be object if x-kubernetes-embedded-resource is true", ty.unwrap_or("")));
    }
    for forbidden in [
        "$ref",
        "additionalItems",
        "patternProperties",
        "dependencies",
        "definitions",
    ] {
        if map.contains_key(forbidden) {
            problems.push(format!(
                "{at}.{forbidden}: Forbidden: {forbidden} is not supported"
            ));
        }
    }
    if map.get("uniqueItems") == Some(&Value::Bool(true)) {
        problems.push(format!("{at}.uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"));
    }
    check_pattern(map, at, problems);
    if let Some(properties) = map.get("properties") {
        if ty.is_some() && ty != Some("object") {
            problems.push(format!(
                "{at}.properties: Forbidden: must be empty for type {:?}",
                ty.unwrap_or("")
            ));
        }
        match properties.as_object() {
            Some(props) => {
                for (name, prop) in props {
                    let here = format!("{at}.properties[{name}]");
                    match prop.as_object() {
                        Some(prop) => check_node(prop, &here, problems),
                        None => {
                            problems.push(format!("{here}: Invalid value: must be a schema object"))
                        }
                    }
                }
            }
            None => problems.push(format!("{at}.properties: Invalid value: must be an object")),
        }
    }
    match map.get("additionalProperties") {
        None | Some(Value::Bool(true)) => {}
        Some(Value::Bool(false)) => {
            problems.push(format!("{at}.additionalProperties: Forbidden: must not be false; omit it to prune unknown fields"))
        }
        Some(Value::Object(sub)) => {
            if map.contains_key("properties") {
                problems.push(format!("{at}.additionalProperties: Forbidden: additionalProperties and properties are mutually exclusive"));
            }
            check_node(sub, &format!("{at}.additionalProperties"), problems);
        }
        Some(_) => problems.push(format!("{at}.additionalProperties: Invalid value: must be a schema object")),
    }
    match map.get("items") {
        Some(Value::Object(sub)) => check_node(sub, &format!("{at}.items"), problems),
        Some(_) => problems.push(format!(
            "{at}.items: Invalid value: must be a single schema object"
        )),
        None if ty == Some("array") => {
            problems.push(format!("{at}.items: Required value: must be specified"))
        }
        None => {}
    }
    check_junctors(map, at, int_or_string, problems);
}

/// Checks `allOf`/`anyOf`/`oneOf`/`not` below a node: value validations only.
/// Below an `x-kubernetes-int-or-string` node, kube also accepts the shape
/// kubebuilder generates, `anyOf: [{type: integer}, {type: string}]`.
fn check_junctors(
    map: &Map<String, Value>,
    at: &str,
    int_or_string: bool,
    problems: &mut Vec<String>,
) {
    for junctor in JUNCTORS {
        let Some(list) = map.get(junctor) else {
            continue;
        };
        match list.as_array() {
            Some(items) => {
                for (i, sub) in items.iter().enumerate() {
                    check_value_validation(
                        sub,
                        &format!("{at}.{junctor}[{i}]"),
                        int_or_string,
                        problems,
                    );
                }
            }
            None => problems.push(format!(
                "{at}.{junctor}: Invalid value: must be a list of schemas"
            )),
        }
    }
    if let Some(sub) = map.get("not") {
        check_value_validation(sub, &format!("{at}.not"), int_or_string, problems);
    }
}

/// Checks a schema inside a junctor, which may only restrict values.
fn check_value_validation(
    schema: &Value,
    at: &str,
    int_or_string: bool,
    problems: &mut Vec<String>,
) {
    let Some(map) = schema.as_object() else {
        problems.push(format!("{at}: Invalid value: must be a schema object"));
        return;
    };
    for keyword in NOT_IN_JUNCTORS {
        let int_or_string_type = keyword == "type"
            && int_or_string
            && matches!(type_of(schema), Some("integer" | "string"));
        if map.contains_key(keyword) && !int_or_string_type {
            problems.push(format!(
                "{at}.{keyword}: Forbidden: must not be specified inside allOf, anyOf, oneOf or not"
            ));
        }
    }
    check_pattern(map, at, problems);
    if let Some(props) = map.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            check_value_validation(prop, &format!("{at}.properties[{name}]"), false, problems);
        }
    }
    if let Some(items) = map.get("items") {
        check_value_validation(items, &format!("{at}.items"), false, problems);
    }
    check_junctors(map, at, int_or_string, problems);
}

fn check_pattern(map: &Map<String, Value>, at: &str, problems: &mut Vec<String>) {
    if let Some(pattern) = map.get("pattern") {
        match pattern.as_str().map(regex::Regex::new) {
            Some(Ok(_)) => {}
            Some(Err(e)) => problems.push(format!(
                "{at}.pattern: Invalid value: {pattern}: must be a valid regular expression: {e}"
            )),
            None => problems.push(format!(
                "{at}.pattern: Invalid value: {pattern}: must be a string"
            )),
        }
    }
}
