//! The checks the API server would make on a child's metadata, made before
//! any write so a bad answer is refused whole (`PluginInvalidOutput` naming
//! the child and the rule) instead of half-applied and retried forever.
//!
//! The rules are those of apimachinery's `validation` package: names are
//! valid path segments and DNS-1123 subdomains (DNS-1035 labels for
//! Services, DNS-1123 labels for Namespaces, path segments only for RBAC
//! kinds), namespaces DNS-1123 labels, label
//! keys qualified names with values of at most 63 characters, and all
//! annotations of one object at most 256 KiB.

use serde_json::Value;

/// Longest DNS-1123 subdomain.
const SUBDOMAIN_MAX: usize = 253;
/// Longest DNS-1123 / DNS-1035 label, and longest label value.
const LABEL_MAX: usize = 63;
/// Largest total of annotation keys and values of one object.
pub const ANNOTATIONS_MAX_BYTES: usize = 256 << 10;

fn alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= LABEL_MAX
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-')
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (Service names).
pub fn is_dns1035_label(s: &str) -> bool {
    is_dns1123_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// Dot-separated DNS-1123 labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= SUBDOMAIN_MAX && s.split('.').all(is_dns1123_label)
}

/// What a name must be to appear in an API path.
fn path_segment_problem(name: &str) -> Option<&'static str> {
    if name == "." || name == ".." {
        return Some("may not be '.' or '..'");
    }
    if name.contains('/') || name.contains('%') {
        return Some("may not contain '/' or '%'");
    }
    None
}

/// The RBAC API group: its names need only be valid path segments
/// (`system:basic-user` is a ClusterRoleBinding's name).
const RBAC_GROUP: &str = "rbac.authorization.k8s.io/";

/// Why `name` cannot name an object of `kind` in `api_version`, or `None`.
pub fn name_problem(api_version: &str, kind: &str, name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("metadata.name is empty".into());
    }
    if let Some(p) = path_segment_problem(name) {
        return Some(format!("metadata.name {name:?} {p}"));
    }
    if api_version.starts_with(RBAC_GROUP) {
        return None;
    }
    let (ok, rule) = match kind {
        "Service" => (
            is_dns1035_label(name),
            "a DNS-1035 label (lower-case letters, digits and '-', starting with a letter, at most 63 characters)",
        ),
        "Namespace" => (
            is_dns1123_label(name),
            "a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)",
        ),
        _ => (
            is_dns1123_subdomain(name),
            "a DNS-1123 subdomain (lower-case letters, digits, '-' and '.', at most 253 characters)",
        ),
    };
    (!ok).then(|| format!("metadata.name {name:?} is not {rule}"))
}

/// Why `namespace` cannot be a namespace's name, or `None`.
pub fn namespace_problem(namespace: &str) -> Option<String> {
    (!is_dns1123_label(namespace)).then(|| {
        format!("metadata.namespace {namespace:?} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)")
    })
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, at most 63 characters; empty
/// when `allow_empty` (label values).
fn is_qualified_segment(s: &str, allow_empty: bool) -> bool {
    let b = s.as_bytes();
    if b.is_empty() {
        return allow_empty;
    }
    let edge = |c: u8| c.is_ascii_alphanumeric();
    b.len() <= LABEL_MAX
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A label or annotation key: `[prefix/]name`, the prefix a DNS-1123
/// subdomain.
pub fn is_qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => is_dns1123_subdomain(prefix) && is_qualified_segment(name, false),
        None => is_qualified_segment(key, false),
    }
}

/// Why the labels and annotations of `metadata` would be refused, or `None`.
pub fn metadata_problem(metadata: &serde_json::Map<String, Value>) -> Option<String> {
    if let Some(labels) = metadata.get("labels").filter(|v| !v.is_null()) {
        let Some(labels) = labels.as_object() else {
            return Some("metadata.labels is not an object".into());
        };
        for (key, value) in labels {
            if !is_qualified_name(key) {
                return Some(format!(
                    "label key {key:?} is not a qualified name ([prefix/]name, name at most 63 alphanumerics, '-', '_', '.')"
                ));
            }
            let Some(value) = value.as_str() else {
                return Some(format!("label {key:?} has a value that is not a string"));
            };
            if !is_qualified_segment(value, true) {
                return Some(format!(
                    "label {key:?} has value {value:?}: at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric"
                ));
            }
        }
    }
    if let Some(annotations) = metadata.get("annotations").filter(|v| !v.is_null()) {
        let Some(annotations) = annotations.as_object() else {
            return Some("metadata.annotations is not an object".into());
        };
        let mut total = 0usize;
        for (key, value) in annotations {
            if !is_qualified_name(key) {
                return Some(format!("annotation key {key:?} is not a qualified name"));
            }
            let Some(value) = value.as_str() else {
                return Some(format!(
                    "annotation {key:?} has a value that is not a string"
                ));
            };
            total = total.saturating_add(key.len() + value.len());
        }
        if total > ANNOTATIONS_MAX_BYTES {
            return Some(format!(
                "annotations total {total} bytes, more than the API server's {ANNOTATIONS_MAX_BYTES}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_follow_the_api_server() {
        assert!(name_problem("v1", "ConfigMap", "web-config.v1").is_none());
        for bad in ["Not_A_DNS_Name", "-a", "a-", "", "a..b", &"a".repeat(254)] {
            assert!(name_problem("v1", "ConfigMap", bad).is_some(), "{bad:?}");
        }
        assert!(
            name_problem("v1", "ConfigMap", "..")
                .unwrap()
                .contains("'..'")
        );
        assert!(
            name_problem("example.com/v1", "Thing", "a/b")
                .unwrap()
                .contains("'/'")
        );
        // Services are DNS-1035 labels: no dots, no leading digit.
        assert!(name_problem("v1", "Service", "web.x").is_some());
        assert!(name_problem("v1", "Service", "1web").is_some());
        assert!(name_problem("v1", "Service", "web-1").is_none());
        assert!(name_problem("v1", "Namespace", "a.b").is_some());
        // RBAC names are path segments only.
        let rbac = "rbac.authorization.k8s.io/v1";
        assert!(name_problem(rbac, "ClusterRoleBinding", "system:basic-user").is_none());
        assert!(name_problem(rbac, "ClusterRole", "a/b").is_some());
        assert!(name_problem("v1", "ConfigMap", "system:basic-user").is_some());
        assert!(namespace_problem("prod").is_none());
        assert!(namespace_problem("Prod").is_some());
        assert!(namespace_problem(&"a".repeat(64)).is_some());
    }

    #[test]
    fn labels_and_annotations_follow_the_api_server() {
        let ok = json!({"labels": {"app": "web", "example.com/tier": "", "a_b.c": "x-Y_z.1"},
            "annotations": {"example.com/note": "anything at all / ok"}});
        assert_eq!(metadata_problem(ok.as_object().unwrap()), None);
        for bad in [
            json!({"labels": {"bad key!": "x"}}),
            json!({"labels": {"Bad_Prefix/x": "x"}}),
            json!({"labels": {"app": "-x"}}),
            json!({"labels": {"app": "a".repeat(64)}}),
            json!({"labels": {"app": 5}}),
            json!({"labels": ["a"]}),
            json!({"annotations": {"/x": "y"}}),
            json!({"annotations": {"big": "x".repeat(ANNOTATIONS_MAX_BYTES)}}),
        ] {
            assert!(
                metadata_problem(bad.as_object().unwrap()).is_some(),
                "{bad}"
            );
        }
    }
}
