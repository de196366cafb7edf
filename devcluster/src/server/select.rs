//! Label selectors (equality and set-based) and field selectors.

use serde_json::Value;

use crate::status::ApiError;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector: every requirement must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(s: &str) -> Result<Vec<String>, ApiError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| {
            ApiError::bad_request(format!(
                "unable to parse requirement: expected (values) in {s:?}"
            ))
        })?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `a=b,c!=d,e in (f,g),h notin (i),j,!k`.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::NotEq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Req::NotIn(k.trim().to_string(), set_values(v)?)
            } else if let Some((k, v)) = part.split_once(" in ") {
                Req::In(k.trim().to_string(), set_values(v)?)
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Req::Exists(part)
            } else {
                return Err(ApiError::bad_request(format!(
                    "unable to parse requirement: {part:?}"
                )));
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the object's labels satisfy the selector.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// Fields kube-apiserver lets clients select on, per resource (besides
/// `metadata.name` and `metadata.namespace`, which every resource supports).
fn extra_fields(group: &str, plural: &str) -> &'static [&'static str] {
    match (group, plural) {
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("batch", "jobs") => &["status.successful"],
        ("apps", "replicasets") => &["status.replicas"],
        _ => &[],
    }
}

/// events.k8s.io/v1 Events are stored as core v1 Events: their field labels
/// map to the core ones as kube-apiserver maps them
/// (pkg/apis/events/v1/conversion.go `AddFieldLabelConversionsForEvent`).
const EVENTS_K8S_IO_FIELDS: [(&str, &str); 10] = [
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
];

/// The stored object's field a selector label names, or None when the resource
/// does not support selecting on it.
fn stored_field(group: &str, plural: &str, label: &str) -> Option<Field> {
    if label == "metadata.name" || label == "metadata.namespace" {
        return Some(Field::Path(label.to_string()));
    }
    if (group, plural) == ("events.k8s.io", "events") {
        return EVENTS_K8S_IO_FIELDS
            .iter()
            .find(|(served, _)| *served == label)
            .map(|(_, stored)| Field::Path(stored.to_string()));
    }
    if !extra_fields(group, plural).contains(&label) {
        return None;
    }
    Some(match (plural, label) {
        ("events", "source") => Field::EventSource,
        _ => Field::Path(label.to_string()),
    })
}

/// What a field selector requirement compares.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    /// The string at this path of the stored object.
    Path(String),
    /// A core Event's `source`: `source.component`, or `reportingComponent`
    /// when that is empty (kube-apiserver's `ToSelectableFields`).
    EventSource,
}

impl Field {
    fn value(&self, obj: &Value) -> String {
        let at = |path: &str| match super::table::jsonpath(obj, &format!(".{path}")) {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Null) | None => String::new(),
            Some(other) => other.to_string(),
        };
        match self {
            Field::Path(path) => at(path),
            Field::EventSource => {
                let component = at("source.component");
                if component.is_empty() {
                    at("reportingComponent")
                } else {
                    component
                }
            }
        }
    }
}

/// A parsed field selector over `metadata.name`, `metadata.namespace` and the
/// per-resource fields kube-apiserver supports (e.g. `involvedObject.name` for
/// events), each resolved to the field of the stored object it compares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(Field, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y` for the resource `group`/`plural`.
    ///
    /// # Errors
    ///
    /// A 400 `field label not supported: …` (kube-apiserver's message) for a
    /// field the resource cannot be selected on, and a 400 for a requirement
    /// without `=`, `==` or `!=`.
    pub fn parse(s: &str, group: &str, plural: &str) -> Result<FieldSelector, ApiError> {
        let mut out = Vec::new();
        for part in split_top(s) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                )));
            };
            let k = k.trim();
            let field = stored_field(group, plural, k)
                .ok_or_else(|| ApiError::bad_request(format!("field label not supported: {k}")))?;
            out.push((field, eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the (stored) object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(field, eq, v)| (field.value(obj) == *v) == *eq)
    }
}

/// Label and field selector together.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selector {
    /// Whether the object matches both.
    pub fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let o = json!({"metadata": {"labels": {"app": "web", "tier": "a"}}});
        for (s, want) in [
            ("app=web", true),
            ("app==web,tier!=b", true),
            ("tier in (a, b)", true),
            ("tier notin (a)", false),
            ("app", true),
            ("!app", false),
            ("!missing,app in (web)", true),
        ] {
            assert_eq!(LabelSelector::parse(s).unwrap().matches(&o), want, "{s}");
        }
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata": {"name": "x", "namespace": "default"}});
        assert!(
            FieldSelector::parse("metadata.name=x", "", "pods")
                .unwrap()
                .matches(&o)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace!=default", "", "pods")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("spec.containers=a", "", "pods")
                .unwrap_err()
                .code,
            400
        );
        let ev = json!({"metadata": {"name": "e"}, "involvedObject": {"name": "web", "kind": "Deployment"}});
        let sel = FieldSelector::parse(
            "involvedObject.name=web,involvedObject.kind=Deployment",
            "",
            "events",
        )
        .unwrap();
        assert!(sel.matches(&ev));
        assert!(
            !FieldSelector::parse("involvedObject.name=other", "", "events")
                .unwrap()
                .matches(&ev)
        );
    }

    #[test]
    fn events_k8s_io_field_labels_select_the_stored_core_fields() {
        // Stored as core v1, as kube-apiserver stores events.k8s.io Events.
        let ev = json!({"metadata": {"name": "e"}, "involvedObject": {"name": "web", "kind": "WasmPlugin"},
            "reportingComponent": "wasm-operator", "type": "Normal", "reason": "Loaded"});
        let sel = FieldSelector::parse(
            "regarding.kind=WasmPlugin,regarding.name=web,reportingController=wasm-operator,type=Normal,reason=Loaded",
            "events.k8s.io",
            "events",
        )
        .unwrap();
        assert!(sel.matches(&ev));
        for unsupported in ["involvedObject.kind=WasmPlugin", "source=x", "note=x"] {
            let err = FieldSelector::parse(unsupported, "events.k8s.io", "events").unwrap_err();
            assert_eq!(err.code, 400, "{unsupported}");
        }
    }

    #[test]
    fn the_source_of_a_core_event_falls_back_to_its_reporting_component() {
        let sel = FieldSelector::parse("source=wasm-operator", "", "events").unwrap();
        assert!(sel.matches(&json!({"reportingComponent": "wasm-operator", "source": {}})));
        assert!(sel.matches(&json!({"source": {"component": "wasm-operator"}})));
        assert!(!sel.matches(
            &json!({"source": {"component": "kubelet"}, "reportingComponent": "wasm-operator"})
        ));
    }
}
