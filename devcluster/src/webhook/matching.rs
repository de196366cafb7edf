//! Which admission webhooks apply to a request: `rules`, `namespaceSelector`
//! and `objectSelector`, as in admissionregistration.k8s.io/v1.
//!
//! `matchPolicy: Equivalent` is treated as `Exact` (the devcluster serves each
//! resource under one group/version), and `matchConditions` (CEL) are not
//! evaluated, so a webhook using them is called for every request its rules match.

use std::collections::BTreeMap;

use serde_json::Value;

use super::AdmissionAttributes;

/// Whether any of the webhook's `rules` covers the request.
pub fn rules_match(webhook: &Value, attrs: &AdmissionAttributes) -> bool {
    let Some(rules) = webhook.get("rules").and_then(Value::as_array) else {
        return false;
    };
    rules.iter().any(|rule| rule_matches(rule, attrs))
}

fn rule_matches(rule: &Value, attrs: &AdmissionAttributes) -> bool {
    let listed = |field: &str, wanted: &str| {
        rule.get(field)
            .and_then(Value::as_array)
            .is_some_and(|items| {
                items
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|i| i == "*" || i == wanted)
            })
    };
    let resources = rule.get("resources").and_then(Value::as_array);
    let resource_ok = resources.is_some_and(|items| {
        items
            .iter()
            .filter_map(Value::as_str)
            .any(|pattern| resource_matches(pattern, &attrs.resource, &attrs.sub_resource))
    });
    let scope_ok = match rule.get("scope").and_then(Value::as_str).unwrap_or("*") {
        "Cluster" => attrs.namespace.is_none(),
        "Namespaced" => attrs.namespace.is_some(),
        _ => true,
    };
    listed("operations", &attrs.operation)
        && listed("apiGroups", &attrs.group)
        && listed("apiVersions", &attrs.version)
        && resource_ok
        && scope_ok
}

/// `*` matches every resource but no subresource, `*/*` everything,
/// `pods/*` every subresource of pods, `*/status` the status of every resource.
fn resource_matches(pattern: &str, resource: &str, sub_resource: &str) -> bool {
    let (res_pattern, sub_pattern) = pattern.split_once('/').unwrap_or((pattern, ""));
    let res_ok = res_pattern == "*" || res_pattern == resource;
    if sub_resource.is_empty() {
        res_ok && sub_pattern.is_empty()
    } else {
        res_ok && !sub_pattern.is_empty() && (sub_pattern == "*" || sub_pattern == sub_resource)
    }
}

/// Whether the webhook's `namespaceSelector` admits the request. Cluster-scoped
/// objects always match, except Namespaces themselves, whose own labels are used.
pub fn namespace_matches(webhook: &Value, attrs: &AdmissionAttributes) -> Result<bool, String> {
    let Some(selector) = webhook.get("namespaceSelector") else {
        return Ok(true);
    };
    if attrs.namespace.is_some() {
        return selector_matches(selector, &attrs.namespace_labels);
    }
    if attrs.resource == "namespaces" && attrs.group.is_empty() {
        let object = attrs.object.as_ref().or(attrs.old_object.as_ref());
        return selector_matches(selector, &labels_of(object));
    }
    Ok(true)
}

/// Whether the webhook's `objectSelector` matches the new or the old object.
pub fn object_matches(webhook: &Value, attrs: &AdmissionAttributes) -> Result<bool, String> {
    let Some(selector) = webhook.get("objectSelector") else {
        return Ok(true);
    };
    let new = selector_matches(selector, &labels_of(attrs.object.as_ref()))?;
    let old = attrs.old_object.is_some()
        && selector_matches(selector, &labels_of(attrs.old_object.as_ref()))?;
    Ok(new || old)
}

fn labels_of(object: Option<&Value>) -> BTreeMap<String, String> {
    object
        .and_then(|o| o.pointer("/metadata/labels"))
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Evaluates a metav1.LabelSelector; `{}` matches everything.
pub fn selector_matches(
    selector: &Value,
    labels: &BTreeMap<String, String>,
) -> Result<bool, String> {
    if selector.is_null() {
        return Ok(true);
    }
    if let Some(match_labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in match_labels {
            if labels.get(key).map(String::as_str) != value.as_str() {
                return Ok(false);
            }
        }
    }
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for expression in expressions {
        let key = expression
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let operator = expression
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let values: Vec<&str> = expression
            .get("values")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let actual = labels.get(key).map(String::as_str);
        let ok = match operator {
            "In" => actual.is_some_and(|a| values.contains(&a)),
            "NotIn" => actual.is_none_or(|a| !values.contains(&a)),
            "Exists" => actual.is_some(),
            "DoesNotExist" => actual.is_none(),
            other => {
                return Err(format!(
                    "label selector operator {other:?} for key {key:?} is not one of In, NotIn, Exists, DoesNotExist"
                ));
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}
