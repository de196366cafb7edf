//! Reading and writing `metadata.managedFields`: one entry per (manager,
//! operation, subresource), each with its FieldsV1 set.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::fieldset::FieldSet;

/// The operation of a managedFields entry.
pub(crate) const APPLY: &str = "Apply";
/// The operation of a managedFields entry written by create, update or patch.
pub(crate) const UPDATE: &str = "Update";

/// One `metadata.managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) manager: String,
    pub(crate) operation: String,
    pub(crate) api_version: String,
    pub(crate) time: Option<String>,
    pub(crate) subresource: Option<String>,
    pub(crate) fields: FieldSet,
}

impl Entry {
    /// Whether this entry belongs to the given (manager, operation, subresource).
    pub(crate) fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    fn from_json(v: &Value) -> Option<Entry> {
        let m = v.as_object()?;
        let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let fields = match m.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f)?,
            None => FieldSet::new(),
        };
        Some(Entry {
            manager: text("manager").unwrap_or_default(),
            operation: text("operation")?,
            api_version: text("apiVersion").unwrap_or_default(),
            time: text("time"),
            subresource: text("subresource").filter(|s| !s.is_empty()),
            fields,
        })
    }

    /// The entry in the API server's field order (that of `ManagedFieldsEntry`).
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager.clone()));
        m.insert("operation".into(), Value::String(self.operation.clone()));
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), Value::String(s.clone()));
        }
        Value::Object(m)
    }

    /// kube-apiserver's order: Apply before Update, then by time, manager,
    /// apiVersion and subresource.
    fn order(&self, other: &Entry) -> Ordering {
        self.operation
            .cmp(&other.operation)
            .then_with(|| self.time.cmp(&other.time))
            .then_with(|| self.manager.cmp(&other.manager))
            .then_with(|| self.api_version.cmp(&other.api_version))
            .then_with(|| self.subresource.cmp(&other.subresource))
    }
}

/// Whether `obj` has a `metadata.managedFields` field at all (even empty).
pub(crate) fn has_managed_fields(obj: &Value) -> bool {
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|v| !v.is_null())
}

/// The entries of `obj`; entries that cannot be parsed are dropped, as the
/// API server resets managedFields it cannot decode.
pub(crate) fn read(obj: &Value) -> Vec<Entry> {
    obj.get("metadata")
        .and_then(|m| m.get("managedFields"))
        .and_then(Value::as_array)
        .map(|entries| entries.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

/// Writes `entries` (minus empty ones, sorted) into `obj`; no entries removes the field.
pub(crate) fn write(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(Entry::order);
    let Value::Object(root) = obj else { return };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(entries.iter().map(Entry::to_json).collect()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_sorted_and_without_empty_entries() {
        let obj = json!({"metadata": {"managedFields": [
            {"manager": "b", "operation": "Update", "apiVersion": "v1", "time": "2024-01-01T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:x": {}}}},
            {"manager": "a", "operation": "Apply", "apiVersion": "v1", "time": "2024-01-02T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:y": {}}}, "subresource": "status"},
            {"manager": "broken", "operation": "Update", "fieldsV1": {"nonsense": 1}},
            "not an entry"
        ]}});
        let entries = read(&obj);
        assert_eq!(entries.len(), 2);
        assert!(entries[1].is("a", APPLY, Some("status")));
        let mut out = json!({"metadata": {}});
        let mut with_empty = entries.clone();
        with_empty.push(Entry {
            manager: "c".into(),
            operation: UPDATE.into(),
            api_version: "v1".into(),
            time: None,
            subresource: None,
            fields: FieldSet::new(),
        });
        write(&mut out, with_empty);
        let written = out["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(written.len(), 2);
        assert_eq!(written[0]["manager"], "a");
        assert_eq!(written[0]["subresource"], "status");
        assert_eq!(written[1]["fieldsV1"], json!({"f:data": {"f:x": {}}}));
        write(&mut out, Vec::new());
        assert_eq!(out, json!({"metadata": {}}));
    }
}
