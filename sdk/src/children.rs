//! The owned children that exist now, as the host passed them.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Failure;

/// The children a primary owns right now, parsed once from the host's JSON.
/// Typed lookups match on `apiVersion` and `kind` of `T`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Children {
    objects: Vec<Value>,
}

impl Children {
    /// Children from already-parsed objects.
    pub fn new(objects: Vec<Value>) -> Self {
        Children { objects }
    }

    /// Parses the host's JSON strings. A child that is not JSON is a transient
    /// failure: it is the host's (or cache's) fault, not the object's.
    pub fn from_json<S: AsRef<str>>(children: &[S]) -> Result<Self, Failure> {
        let objects = children
            .iter()
            .enumerate()
            .map(|(i, raw)| {
                serde_json::from_str(raw.as_ref()).map_err(|e| {
                    Failure::transient(format!("the host passed child #{i} that is not JSON: {e}"))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Children { objects })
    }

    /// All children as JSON, in the order the host passed them.
    pub fn raw(&self) -> &[Value] {
        &self.objects
    }

    /// Number of children.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// True when the primary owns nothing yet.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// The child with `apiVersion`, `kind` and `metadata.name`, as JSON.
    pub fn get_json(&self, api_version: &str, kind: &str, name: &str) -> Option<&Value> {
        self.objects.iter().find(|o| {
            is_kind(o, api_version, kind)
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
        })
    }

    /// The child of type `T` called `name`, if it exists.
    pub fn get<T>(&self, name: &str) -> Result<Option<T>, Failure>
    where
        T: k8s_openapi::Resource + DeserializeOwned,
    {
        self.get_json(T::API_VERSION, T::KIND, name)
            .map(|o| parse::<T>(o, name))
            .transpose()
    }

    /// Every child of type `T`.
    pub fn all<T>(&self) -> Result<Vec<T>, Failure>
    where
        T: k8s_openapi::Resource + DeserializeOwned,
    {
        self.objects
            .iter()
            .filter(|o| is_kind(o, T::API_VERSION, T::KIND))
            .map(|o| {
                let name = o
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                parse::<T>(o, name)
            })
            .collect()
    }
}

fn is_kind(object: &Value, api_version: &str, kind: &str) -> bool {
    object.get("apiVersion").and_then(Value::as_str) == Some(api_version)
        && object.get("kind").and_then(Value::as_str) == Some(kind)
}

fn parse<T: k8s_openapi::Resource + DeserializeOwned>(
    object: &Value,
    name: &str,
) -> Result<T, Failure> {
    T::deserialize(object).map_err(|e| {
        Failure::transient(format!(
            "child {} {name:?} does not parse as {}: {e}",
            T::KIND,
            T::API_VERSION
        ))
    })
}
