//! The Kubernetes resource path grammar.

/// A parsed resource path:
/// `/api/v1[/namespaces/{ns}]/{plural}[/{name}[/{subresource}]]` or the same under `/apis/{group}/{version}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    /// API group, empty for `/api/v1`.
    pub group: String,
    /// API version.
    pub version: String,
    /// The namespace segment, if any.
    pub namespace: Option<String>,
    /// The resource (plural) segment.
    pub plural: String,
    /// The object name, absent for collections.
    pub name: Option<String>,
    /// `status`, `scale` or `finalize`.
    pub subresource: Option<String>,
}

impl ResourcePath {
    /// Parses a request path; `None` when it is not a resource path.
    pub fn parse(path: &str) -> Option<ResourcePath> {
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (group, version, rest) = match segs.as_slice() {
            ["api", v, rest @ ..] => ("", *v, rest),
            ["apis", g, v, rest @ ..] => (*g, *v, rest),
            _ => return None,
        };
        let (namespace, rest) = match rest {
            // `namespaces/{name}/status|finalize` is a subresource of the namespace itself.
            ["namespaces", _, "status" | "finalize"] => (None, rest),
            ["namespaces", ns, more @ ..] if !more.is_empty() => (Some(ns.to_string()), more),
            _ => (None, rest),
        };
        let (plural, name, sub) = match rest {
            [p] => (*p, None, None),
            [p, n] => (*p, Some(n.to_string()), None),
            [p, n, s] => (*p, Some(n.to_string()), Some(s.to_string())),
            _ => return None,
        };
        Some(ResourcePath {
            group: group.to_string(),
            version: version.to_string(),
            namespace,
            plural: plural.to_string(),
            name,
            subresource: sub,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_grammar() {
        let p =
            ResourcePath::parse("/apis/apps/v1/namespaces/default/deployments/web/scale").unwrap();
        assert_eq!(
            (p.group.as_str(), p.namespace.as_deref(), p.plural.as_str()),
            ("apps", Some("default"), "deployments")
        );
        assert_eq!(
            (p.name.as_deref(), p.subresource.as_deref()),
            (Some("web"), Some("scale"))
        );
        let p = ResourcePath::parse("/api/v1/namespaces/x").unwrap();
        assert_eq!(
            (p.namespace, p.plural.as_str(), p.name.as_deref()),
            (None, "namespaces", Some("x"))
        );
        let p = ResourcePath::parse("/api/v1/namespaces/x/status").unwrap();
        assert_eq!(p.subresource.as_deref(), Some("status"));
        let p = ResourcePath::parse("/api/v1/pods").unwrap();
        assert_eq!((p.namespace, p.name), (None, None));
        assert!(ResourcePath::parse("/version").is_none());
    }
}
