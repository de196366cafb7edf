//! Sets of field paths as structured-merge-diff models them, with the FieldsV1
//! encoding kube-apiserver stores in `metadata.managedFields`.
//!
//! A path element is kept in its FieldsV1 spelling (`f:name`,
//! `k:{"name":"web"}`, `v:"value"`, `i:0`), so the sorted order of a set is the
//! order the real server writes.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// One step of a field path, in FieldsV1 spelling.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pe(String);

impl Pe {
    /// A field of an object: `f:<name>`.
    pub(crate) fn field(name: &str) -> Pe {
        Pe(format!("f:{name}"))
    }

    /// An item of an associative list identified by `key = value`: `k:{"key":value}`.
    pub(crate) fn key(key: &str, value: &Value) -> Pe {
        let mut m = Map::new();
        m.insert(key.to_string(), value.clone());
        Pe(format!("k:{}", Value::Object(m)))
    }

    /// An item of a set of scalars: `v:<json>`.
    pub(crate) fn value(value: &Value) -> Pe {
        Pe(format!("v:{value}"))
    }

    /// Parses the FieldsV1 spelling; None for the `.` marker and unknown prefixes.
    fn parse(s: &str) -> Option<Pe> {
        let known = ["f:", "k:", "v:", "i:"].iter().any(|p| s.starts_with(p));
        known.then(|| Pe(s.to_string()))
    }

    /// The field name if this is a field step.
    pub(crate) fn as_field(&self) -> Option<&str> {
        self.0.strip_prefix("f:")
    }

    /// The key fields if this is an associative-list step.
    pub(crate) fn as_key(&self) -> Option<Map<String, Value>> {
        let json = self.0.strip_prefix("k:")?;
        serde_json::from_str(json).ok()
    }

    /// The value if this is a set-item step.
    pub(crate) fn as_value(&self) -> Option<Value> {
        let json = self.0.strip_prefix("v:")?;
        serde_json::from_str(json).ok()
    }

    /// The step as the API server prints it in conflict messages:
    /// `.name`, `[name="web"]`, `[="value"]`, `[0]`.
    fn display(&self) -> String {
        if let Some(name) = self.as_field() {
            return format!(".{name}");
        }
        if let Some(key) = self.as_key() {
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            return format!("[{}]", parts.join(","));
        }
        if let Some(v) = self.0.strip_prefix("v:") {
            return format!("[={v}]");
        }
        match self.0.strip_prefix("i:") {
            Some(i) => format!("[{i}]"),
            None => self.0.clone(),
        }
    }
}

/// A path from the object root.
pub(crate) type Path = Vec<Pe>;

/// A path in the API server's notation, e.g. `.spec.containers[name="web"].image`.
pub(crate) fn display_path(path: &[Pe]) -> String {
    path.iter().map(Pe::display).collect()
}

/// A set of paths, stored as a tree: a node is a member when the path ending
/// there is in the set; children hold longer paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSet {
    member: bool,
    children: BTreeMap<Pe, FieldSet>,
}

impl FieldSet {
    /// The empty set.
    pub(crate) fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Whether the path ending at this node is itself a member.
    pub(crate) fn is_member(&self) -> bool {
        self.member
    }

    /// The subtrees below this node, by path element.
    pub(crate) fn children(&self) -> &BTreeMap<Pe, FieldSet> {
        &self.children
    }

    /// Whether the set has no member.
    pub(crate) fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds `path`.
    pub(crate) fn insert(&mut self, path: &[Pe]) {
        let mut node = self;
        for pe in path {
            node = node.children.entry(pe.clone()).or_default();
        }
        node.member = true;
    }

    fn node(&self, path: &[Pe]) -> Option<&FieldSet> {
        let mut node = self;
        for pe in path {
            node = node.children.get(pe)?;
        }
        Some(node)
    }

    /// Whether `path` is a member.
    pub(crate) fn contains(&self, path: &[Pe]) -> bool {
        self.node(path).is_some_and(|n| n.member)
    }

    /// Whether `path` or any path below it is a member.
    pub(crate) fn contains_prefix(&self, path: &[Pe]) -> bool {
        self.node(path).is_some_and(|n| !n.is_empty())
    }

    /// Every member path, in sorted order.
    pub(crate) fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        let mut prefix = Vec::new();
        self.collect(&mut prefix, &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Members of either set.
    pub(crate) fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        for p in other.paths() {
            out.insert(&p);
        }
        out
    }

    /// Members of `self` that are not members of `other`.
    pub(crate) fn difference(&self, other: &FieldSet) -> FieldSet {
        self.filter(|p| !other.contains(p))
    }

    /// Members of both sets.
    pub(crate) fn intersection(&self, other: &FieldSet) -> FieldSet {
        self.filter(|p| other.contains(p))
    }

    /// Members for which `keep` holds.
    pub(crate) fn filter(&self, mut keep: impl FnMut(&[Pe]) -> bool) -> FieldSet {
        let mut out = FieldSet::new();
        for p in self.paths() {
            if keep(&p) {
                out.insert(&p);
            }
        }
        out
    }

    /// The FieldsV1 JSON of this set: `{"f:spec":{"f:replicas":{}}}`; a node
    /// that is a member and has children carries a `".":{}` marker.
    pub(crate) fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        let kids: Vec<(&Pe, &FieldSet)> = self
            .children
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .collect();
        if self.member && !kids.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (pe, child) in kids {
            m.insert(pe.0.clone(), child.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Parses FieldsV1 JSON; None when it is not an object tree of that shape.
    pub(crate) fn from_fields_v1(v: &Value) -> Option<FieldSet> {
        let mut set = FieldSet::new();
        set.read(v.as_object()?)?;
        // The root itself is never a member.
        set.member = false;
        Some(set)
    }

    fn read(&mut self, m: &Map<String, Value>) -> Option<()> {
        if m.is_empty() {
            self.member = true;
            return Some(());
        }
        for (k, v) in m {
            if k == "." {
                self.member = true;
                continue;
            }
            let pe = Pe::parse(k)?;
            let child = self.children.entry(pe).or_default();
            child.read(v.as_object()?)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(parts: &[Pe]) -> Path {
        parts.to_vec()
    }

    #[test]
    fn fields_v1_round_trip_with_dot_markers() {
        let mut s = FieldSet::new();
        s.insert(&p(&[Pe::field("spec"), Pe::field("replicas")]));
        let item = p(&[
            Pe::field("spec"),
            Pe::field("containers"),
            Pe::key("name", &json!("web")),
        ]);
        s.insert(&item);
        let mut image = item.clone();
        image.push(Pe::field("image"));
        s.insert(&image);
        s.insert(&p(&[
            Pe::field("metadata"),
            Pe::field("finalizers"),
            Pe::value(&json!("x")),
        ]));
        let v = s.to_fields_v1();
        assert_eq!(
            v,
            json!({
                "f:metadata": {"f:finalizers": {"v:\"x\"": {}}},
                "f:spec": {
                    "f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}}},
                    "f:replicas": {}
                }
            })
        );
        assert_eq!(FieldSet::from_fields_v1(&v), Some(s));
    }

    #[test]
    fn display_matches_the_api_server() {
        let path = p(&[
            Pe::field("spec"),
            Pe::field("containers"),
            Pe::key("name", &json!("web")),
            Pe::field("image"),
        ]);
        assert_eq!(display_path(&path), ".spec.containers[name=\"web\"].image");
        let port = p(&[Pe::field("ports"), Pe::key("containerPort", &json!(80))]);
        assert_eq!(display_path(&port), ".ports[containerPort=80]");
        let fin = p(&[
            Pe::field("metadata"),
            Pe::field("finalizers"),
            Pe::value(&json!("a/b")),
        ]);
        assert_eq!(display_path(&fin), ".metadata.finalizers[=\"a/b\"]");
    }

    #[test]
    fn set_algebra() {
        let a_path = p(&[Pe::field("a")]);
        let b_path = p(&[Pe::field("b"), Pe::field("c")]);
        let mut a = FieldSet::new();
        a.insert(&a_path);
        a.insert(&b_path);
        let mut b = FieldSet::new();
        b.insert(&b_path);
        assert_eq!(a.difference(&b).paths(), vec![a_path.clone()]);
        assert_eq!(a.intersection(&b).paths(), vec![b_path.clone()]);
        assert_eq!(b.union(&a), a);
        assert!(a.contains_prefix(&[Pe::field("b")]));
        assert!(!a.contains(&[Pe::field("b")]));
        assert!(FieldSet::new().is_empty());
        assert!(a.difference(&a).is_empty());
    }

    #[test]
    fn malformed_fields_v1_is_rejected() {
        assert_eq!(FieldSet::from_fields_v1(&json!({"spec": {}})), None);
        assert_eq!(FieldSet::from_fields_v1(&json!("f:spec")), None);
        assert_eq!(FieldSet::from_fields_v1(&json!({"f:spec": 1})), None);
    }
}
