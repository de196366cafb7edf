//! Admission: what a plugin's [`validate`](crate::Reconciler::validate)
//! answers (a [`Verdict`]) and how the typed object a
//! [`defaults`](crate::Reconciler::defaults) returns is written back over
//! the object the host passed.

use serde_json::{Map, Value};

/// The operation of an admission request (the WIT `admission.operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// The object is being created.
    Create,
    /// The object is being updated: `old` is the stored object.
    Update,
    /// The object is being deleted: the object passed is the one being
    /// deleted.
    Delete,
    /// A connection to a subresource (`pods/exec`, a proxy).
    Connect,
}

impl Operation {
    /// The Kubernetes spelling: `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// True for [`Operation::Create`] and [`Operation::Update`]: the
    /// operations that bring an object's content into the cluster.
    pub fn writes(self) -> bool {
        matches!(self, Operation::Create | Operation::Update)
    }
}

impl std::fmt::Display for Operation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One field at fault in a [`Verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field's path as written in the object, e.g. `spec.replicas`.
    pub path: String,
    /// What is wrong with it, e.g. `must be between 1 and 10, got 0`.
    pub message: String,
}

/// What [`validate`](crate::Reconciler::validate) says about a request:
/// allowed, or refused with a message for the person who sent it, the
/// fields at fault, and warnings either way.
///
/// ```
/// use wasm_operator_sdk::Verdict;
///
/// let refused = Verdict::refuse("spec.replicas must be between 1 and 10, got 0")
///     .field("spec.replicas", "must be between 1 and 10, got 0");
/// assert!(!refused.allowed);
/// assert_eq!(refused.fields[0].path, "spec.replicas");
///
/// let allowed = Verdict::allow().warn("spec.image has no tag: latest is assumed");
/// assert!(allowed.allowed && allowed.message.is_empty());
/// assert_eq!(allowed.warnings.len(), 1);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// The request may proceed.
    pub allowed: bool,
    /// Why it may not (`kubectl` prints it); empty when allowed.
    pub message: String,
    /// The fields at fault (they explain a refusal; an allowed request has
    /// none that matter).
    pub fields: Vec<FieldError>,
    /// Warnings for the client, whether or not the request is allowed
    /// (`kubectl` prints them as `Warning: ...`).
    pub warnings: Vec<String>,
}

impl Verdict {
    /// The request may proceed.
    pub fn allow() -> Verdict {
        Verdict {
            allowed: true,
            message: String::new(),
            fields: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// The request may not proceed, because of `message` (say which field
    /// and what it holds: `spec.replicas must be between 1 and 10, got 0`).
    pub fn refuse(message: impl Into<String>) -> Verdict {
        Verdict {
            allowed: false,
            message: message.into(),
            ..Verdict::allow()
        }
    }

    /// Names a field at fault: its `path` as written in the object
    /// (`spec.replicas`) and what is wrong with it.
    pub fn field(mut self, path: impl Into<String>, message: impl Into<String>) -> Verdict {
        self.fields.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
        self
    }

    /// Adds a warning for the client.
    pub fn warn(mut self, text: impl Into<String>) -> Verdict {
        self.warnings.push(text.into());
        self
    }

    /// Whether the request may proceed.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }
}

/// Writes `typed` (the typed object a `defaults` returned, serialized) over
/// `original` (the object the host passed), so that fields the author's
/// type does not know survive:
///
/// - objects merge key by key; keys only `original` has stay;
/// - a key `original` lacks (or holds `null`) gets the typed value without
///   its `null`s, unless nothing is left (`null`, `{}`, `[]`): an `Option`
///   left `None` or an empty default adds nothing;
/// - a `null` in `typed` never changes `original` (defaults fill in, they
///   do not clear);
/// - arrays of the same length merge element by element; otherwise the
///   typed array (without its `null`s) replaces the original one;
/// - any other typed value replaces the original's.
pub(crate) fn merge_typed(original: &mut Value, typed: Value) {
    match (original, typed) {
        (_, Value::Null) => {}
        (original, typed) if original.is_null() => {
            if let Some(typed) = substance(typed) {
                *original = typed;
            }
        }
        (Value::Object(original), Value::Object(typed)) => {
            for (key, value) in typed {
                match original.get_mut(&key) {
                    Some(existing) => merge_typed(existing, value),
                    None => {
                        if let Some(value) = substance(value) {
                            original.insert(key, value);
                        }
                    }
                }
            }
        }
        (Value::Array(original), Value::Array(typed)) if original.len() == typed.len() => {
            for (existing, value) in original.iter_mut().zip(typed) {
                merge_typed(existing, value);
            }
        }
        (original, typed) => *original = without_nulls(typed),
    }
}

/// `value` without its `null`s, or `None` when that leaves nothing.
fn substance(value: Value) -> Option<Value> {
    match without_nulls(value) {
        Value::Null => None,
        Value::Object(map) if map.is_empty() => None,
        Value::Array(items) if items.is_empty() => None,
        value => Some(value),
    }
}

/// `value` with the `null` members of its objects removed, at any depth.
fn without_nulls(value: Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, without_nulls(v)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(original: Value, typed: Value) -> Value {
        let mut original = original;
        merge_typed(&mut original, typed);
        original
    }

    #[test]
    fn unknown_fields_survive_and_typed_values_win() {
        assert_eq!(
            merged(
                json!({"kind": "A", "spec": {"a": 1, "unknown": {"x": 1}}, "extra": [1]}),
                json!({"spec": {"a": 2, "b": 3}})
            ),
            json!({"kind": "A", "spec": {"a": 2, "b": 3, "unknown": {"x": 1}}, "extra": [1]})
        );
    }

    #[test]
    fn nulls_and_empty_values_add_nothing() {
        let original = json!({"spec": {"a": 1, "gone": null}});
        assert_eq!(
            merged(
                original.clone(),
                json!({"spec": {"a": null, "gone": null, "o": {}, "l": [], "n": {"x": null}},
                       "status": {"phase": null}})
            ),
            original
        );
        assert_eq!(
            merged(
                json!({"spec": {"a": null}}),
                json!({"spec": {"a": {"b": 1, "c": null}}})
            ),
            json!({"spec": {"a": {"b": 1}}})
        );
    }

    #[test]
    fn arrays_merge_by_element_when_their_lengths_agree() {
        assert_eq!(
            merged(
                json!({"items": [{"name": "a", "extra": 1}, {"name": "b"}]}),
                json!({"items": [{"name": "a", "port": 80}, {"name": "b", "port": null}]})
            ),
            json!({"items": [{"name": "a", "extra": 1, "port": 80}, {"name": "b"}]})
        );
        assert_eq!(
            merged(
                json!({"items": [{"name": "a", "extra": 1}]}),
                json!({"items": [{"name": "a", "x": null}, {"name": "b"}]})
            ),
            json!({"items": [{"name": "a"}, {"name": "b"}]})
        );
    }

    #[test]
    fn verdict_builders() {
        let v = Verdict::refuse("no").field("spec.a", "bad").warn("w");
        assert!(!v.is_allowed());
        assert_eq!(v.message, "no");
        assert_eq!(
            v.fields,
            [FieldError {
                path: "spec.a".into(),
                message: "bad".into()
            }]
        );
        assert_eq!(v.warnings, ["w"]);
        assert!(Verdict::allow().is_allowed());
        assert_eq!(Operation::Update.to_string(), "UPDATE");
        assert!(Operation::Create.writes() && !Operation::Delete.writes());
    }
}
