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
    out.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn set_values(s: &str) -> Result<Vec<String>, ApiError> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| ApiError::bad_request(format!("unable to parse requirement: expected (values) in {s:?}")))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
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
            } else if part.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c)) {
                Req::Exists(part)
            } else {
                return Err(ApiError::bad_request(format!("unable to parse requirement: {part:?}")));
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

/// A parsed field selector over `metadata.name` and `metadata.namespace`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`; other fields are a 400.
    pub fn parse(s: &str, kind: &str) -> Result<FieldSelector, ApiError> {
        let mut out = Vec::new();
        for part in split_top(s) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(ApiError::bad_request(format!("invalid selector: '{part}'; can't understand '{part}'")));
            };
            let k = k.trim();
            if k != "metadata.name" && k != "metadata.namespace" {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {k} (the devcluster supports metadata.name and metadata.namespace for {kind})"
                )));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the object matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let field = k.strip_prefix("metadata.").unwrap_or(k);
            let actual = obj["metadata"][field].as_str().unwrap_or_default();
            (actual == v) == *eq
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
        assert!(FieldSelector::parse("metadata.name=x", "pods").unwrap().matches(&o));
        assert!(!FieldSelector::parse("metadata.namespace!=default", "pods").unwrap().matches(&o));
        assert_eq!(FieldSelector::parse("spec.nodeName=a", "pods").unwrap_err().code, 400);
    }
}
