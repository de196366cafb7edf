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
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "reason",
            "reportingController",
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

/// A parsed field selector over `metadata.name`, `metadata.namespace` and the
/// per-resource fields kube-apiserver supports (e.g. `involvedObject.name` for events).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`; unsupported fields are a 400.
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
            if k != "metadata.name"
                && k != "metadata.namespace"
                && !extra_fields(group, plural).contains(&k)
            {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k}"
                )));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let actual = match super::table::jsonpath(obj, &format!(".{k}")) {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(serde_json::Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (actual == *v) == *eq
        })
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
}
