//! Object names as kube-apiserver validates them on create: a DNS-1123
//! subdomain for most kinds, a DNS-1123 label for Namespaces, Services and
//! StatefulSets, a path segment for RBAC objects; `generateName` as a prefix of
//! such a name. Messages are upstream's, word for word
//! (k8s.io/apimachinery pkg/api/validate/content, pkg/api/validation/generic.go).

use serde_json::Value;

use crate::registry::ResourceType;

/// The rule a kind's names follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameRule {
    /// `example.com`: lowercase alphanumerics, `-` and `.`, at most 253 characters.
    Dns1123Subdomain,
    /// `my-name`: lowercase alphanumerics and `-`, at most 63 characters.
    Dns1123Label,
    /// Anything but `.`, `..`, `/` and `%` (Roles, ClusterRoles and their bindings).
    PathSegment,
}

/// The rule kube-apiserver applies to the names of `rt`.
pub fn rule_for(rt: &ResourceType) -> NameRule {
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") | ("", "services") | ("apps", "statefulsets") => NameRule::Dns1123Label,
        ("rbac.authorization.k8s.io", _) => NameRule::PathSegment,
        _ => NameRule::Dns1123Subdomain,
    }
}

const LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// apimachinery's `RegexError`, including its double space before ` or `.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn is_label(s: &str) -> bool {
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&first), Some(&last)) => {
            alnum(first) && alnum(last) && bytes.iter().all(|&c| alnum(c) || c == b'-')
        }
        _ => false,
    }
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(is_label)
}

/// Why `name` breaks `rule` (empty when it does not); `prefix` for a
/// `generateName`, whose trailing `-` is allowed (upstream's `maskTrailingDash`).
pub fn problems(rule: NameRule, name: &str, prefix: bool) -> Vec<String> {
    if rule == NameRule::PathSegment {
        return path_segment_problems(name, prefix);
    }
    let masked;
    let name = if prefix && name.len() > 1 && name.ends_with('-') {
        // Upstream drops the last two characters and appends `a`.
        masked = format!("{}a", &name[..name.len() - 2]);
        masked.as_str()
    } else {
        name
    };
    let mut out = Vec::new();
    if rule == NameRule::Dns1123Label {
        if name.len() > 63 {
            out.push("must be no more than 63 characters".to_string());
        }
        if !is_label(name) {
            out.push(if is_subdomain(name) {
                "must not contain dots".to_string()
            } else {
                regex_error(LABEL_MSG, LABEL_FMT, &["my-name", "123-abc"])
            });
        }
    } else {
        if name.len() > 253 {
            out.push("must be no more than 253 characters".to_string());
        }
        if !is_subdomain(name) {
            out.push(regex_error(SUBDOMAIN_MSG, SUBDOMAIN_FMT, &["example.com"]));
        }
    }
    out
}

fn path_segment_problems(name: &str, prefix: bool) -> Vec<String> {
    if !prefix && (name == "." || name == "..") {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// The causes (reason, field, message) of a 422 for the name and generateName
/// of `obj` about to be created (its name already generated), in
/// kube-apiserver's order: generateName, name, then the Namespace's
/// `kubernetes.io/metadata.name` label that repeats its name.
pub fn create_causes(rt: &ResourceType, obj: &Value) -> Vec<(String, String, String)> {
    let rule = rule_for(rt);
    let meta = &obj["metadata"];
    let invalid = |field: &str, value: &str, msg: String| {
        (
            "FieldValueInvalid".to_string(),
            field.to_string(),
            format!("Invalid value: {}: {msg}", Value::from(value)),
        )
    };
    let mut causes = Vec::new();
    if let Some(prefix) = meta["generateName"].as_str().filter(|p| !p.is_empty()) {
        for msg in problems(rule, prefix, true) {
            causes.push(invalid("metadata.generateName", prefix, msg));
        }
    }
    let name = meta["name"].as_str().unwrap_or_default();
    for msg in problems(rule, name, false) {
        causes.push(invalid("metadata.name", name, msg));
    }
    if (rt.group.as_str(), rt.plural.as_str()) == ("", "namespaces") && name.len() > 63 {
        causes.push(invalid(
            "metadata.labels",
            name,
            "must be no more than 63 bytes".to_string(),
        ));
    }
    causes
}

#[cfg(test)]
mod tests;
