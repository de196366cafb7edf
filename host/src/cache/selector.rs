//! Kubernetes label selectors in their string form (`app=web,tier in (a,b)`),
//! evaluated against cached objects so plugin `list` calls never hit the API.

use std::collections::BTreeMap;

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; all requirements must hold (logical AND).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

/// A selector string that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {problem}")]
pub struct SelectorError {
    selector: String,
    problem: String,
}

/// Splits at commas that are not inside a `( … )` value list.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, ch) in s.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&s[start..]);
    parts
}

fn parse_set(raw: &str) -> Option<Vec<String>> {
    let inner = raw.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

impl LabelSelector {
    /// Parses the string form used by `kubectl -l` and the list API.
    pub fn parse(selector: &str) -> Result<LabelSelector, SelectorError> {
        let err = |problem: &str| SelectorError {
            selector: selector.to_string(),
            problem: problem.to_string(),
        };
        let mut requirements = Vec::new();
        for part in split_top_level(selector) {
            let part = part.trim();
            if part.is_empty() {
                continue;
            }
            let req = if let Some(key) = part.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Requirement::NotEquals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once("==") {
                Requirement::Equals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once('=') {
                Requirement::Equals(k.trim().to_string(), v.trim().to_string())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Requirement::NotIn(
                    k.trim().to_string(),
                    parse_set(v).ok_or_else(|| err("expected `(a,b)` after notin"))?,
                )
            } else if let Some((k, v)) = part.split_once(" in ") {
                Requirement::In(
                    k.trim().to_string(),
                    parse_set(v).ok_or_else(|| err("expected `(a,b)` after in"))?,
                )
            } else if part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(part.to_string())
            } else {
                return Err(err(&format!("cannot parse requirement {part:?}")));
            };
            let key = match &req {
                Requirement::Equals(k, _)
                | Requirement::NotEquals(k, _)
                | Requirement::In(k, _)
                | Requirement::NotIn(k, _)
                | Requirement::Exists(k)
                | Requirement::NotExists(k) => k,
            };
            if key.is_empty() {
                return Err(err("empty label key"));
            }
            requirements.push(req);
        }
        Ok(LabelSelector { requirements })
    }

    /// True when `labels` satisfy every requirement.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn equality_and_sets() {
        let s = LabelSelector::parse("app=web,tier in (a, b),!legacy,env!=prod").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "b")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "c")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("legacy", "")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "a"), ("env", "prod")])));
    }

    #[test]
    fn exists_and_notin() {
        let s = LabelSelector::parse("app,tier notin (x)").unwrap();
        assert!(s.matches(&labels(&[("app", "1")])));
        assert!(!s.matches(&labels(&[("app", "1"), ("tier", "x")])));
        assert!(!s.matches(&labels(&[])));
    }

    #[test]
    fn rejects_garbage() {
        assert!(LabelSelector::parse("app in x").is_err());
        assert!(LabelSelector::parse("=x").is_err());
    }

    #[test]
    fn empty_selects_all() {
        assert!(LabelSelector::parse("").unwrap().matches(&labels(&[])));
    }
}
