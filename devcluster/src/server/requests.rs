//! A request counter by Kubernetes verb and resource, for benchmarks.
//!
//! `GET /_devcluster/requests` answers the counts since the server started, e.g.
//! `{"total": 12, "byVerb": {"apply": 4, ...}, "byVerbResource": {"apply deployments": 2, ...},
//! "failed": {"update webapps/status 409": 1}}`. Counters only grow: a client
//! measuring one phase takes a snapshot before and after and subtracts, so two
//! readers never reset each other's numbers.

use std::collections::BTreeMap;
use std::sync::Mutex;

use http::Method;
use serde_json::{Value, json};

use super::{Query, ResourcePath};

/// Counts of served requests (cheap to update: one short lock per request).
#[derive(Debug, Default)]
pub struct RequestCounter {
    inner: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: u64,
    by_verb: BTreeMap<&'static str, u64>,
    by_verb_resource: BTreeMap<String, u64>,
    failed: BTreeMap<String, u64>,
}

/// The Kubernetes verb of a request, as the API server's audit log names it;
/// patches are split by patch type because a server-side apply and a merge
/// patch cost the server differently.
pub fn verb(
    method: &Method,
    path: &ResourcePath,
    query: &Query,
    content_type: &str,
) -> &'static str {
    match *method {
        Method::GET if query.flag("watch") => "watch",
        Method::GET if path.name.is_some() => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => {
            let ct = content_type.split(';').next().unwrap_or_default().trim();
            match ct {
                "application/apply-patch+yaml" => "apply",
                "application/merge-patch+json" => "patch-merge",
                "application/strategic-merge-patch+json" => "patch-strategic",
                "application/json-patch+json" => "patch-json",
                _ => "patch",
            }
        }
        Method::DELETE if path.name.is_some() => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

/// Verbs that change state: what a benchmark counts as a write.
pub fn is_write(verb: &str) -> bool {
    !matches!(verb, "get" | "list" | "watch" | "other")
}

impl RequestCounter {
    /// Records one served resource request and its response status.
    pub fn record(&self, verb: &'static str, path: &ResourcePath, status: u16) {
        let resource = match &path.subresource {
            Some(sub) => format!("{}/{sub}", path.plural),
            None => path.plural.clone(),
        };
        let key = format!("{verb} {resource}");
        let mut c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        c.total += 1;
        *c.by_verb.entry(verb).or_default() += 1;
        if status >= 400 {
            *c.failed.entry(format!("{key} {status}")).or_default() += 1;
        }
        *c.by_verb_resource.entry(key).or_default() += 1;
    }

    /// The counts as JSON (see the module documentation).
    pub fn snapshot(&self) -> Value {
        let c = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let writes: u64 = c
            .by_verb
            .iter()
            .filter(|(v, _)| is_write(v))
            .map(|(_, n)| *n)
            .sum();
        json!({
            "total": c.total,
            "writes": writes,
            "byVerb": c.by_verb,
            "byVerbResource": c.by_verb_resource,
            "failed": c.failed,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> ResourcePath {
        ResourcePath::parse(s).unwrap()
    }

    #[test]
    fn names_verbs_like_the_audit_log() {
        let q = Query::parse(None);
        let w = Query::parse(Some("watch=true"));
        let coll = p("/apis/apps/v1/namespaces/d/deployments");
        let one = p("/apis/apps/v1/namespaces/d/deployments/web");
        assert_eq!(verb(&Method::GET, &coll, &w, ""), "watch");
        assert_eq!(verb(&Method::GET, &coll, &q, ""), "list");
        assert_eq!(verb(&Method::GET, &one, &q, ""), "get");
        assert_eq!(verb(&Method::POST, &coll, &q, ""), "create");
        assert_eq!(verb(&Method::PUT, &one, &q, ""), "update");
        let apply = "application/apply-patch+yaml; charset=utf-8";
        assert_eq!(verb(&Method::PATCH, &one, &q, apply), "apply");
        assert_eq!(
            verb(&Method::PATCH, &one, &q, "application/merge-patch+json"),
            "patch-merge"
        );
        assert_eq!(verb(&Method::DELETE, &one, &q, ""), "delete");
        assert!(is_write("apply") && !is_write("watch"));
    }

    #[test]
    fn counts_by_verb_resource_and_failure() {
        let c = RequestCounter::default();
        let status = p("/apis/example.com/v1/namespaces/d/webapps/a/status");
        c.record("update", &status, 200);
        c.record("update", &status, 409);
        c.record("get", &p("/api/v1/namespaces/d/services/a"), 200);
        let s = c.snapshot();
        assert_eq!(s["total"], 3);
        assert_eq!(s["writes"], 2);
        assert_eq!(s["byVerbResource"]["update webapps/status"], 2);
        assert_eq!(s["failed"]["update webapps/status 409"], 1);
    }
}
