//! The read-only view of the shared caches that plugins get through the
//! `cache` import (the engine's [`CacheReader`]).

use serde_json::Value;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef as StoreRef;

use super::{LabelSelector, SharedCache};
use crate::contract::ObjectRef;
use crate::engine::CacheReader;

/// Answers plugin reads from the shared reflector stores, never from the API
/// server. The engine checks the manifest's capabilities before asking; a kind
/// without a running reflector reads as empty (get) or as an error naming the
/// kind (list), so a plugin can tell "absent" from "not cached".
#[derive(Debug, Clone)]
pub struct CacheView {
    cache: SharedCache,
}

impl CacheView {
    /// A view over every reflector of `cache`.
    pub fn new(cache: SharedCache) -> CacheView {
        CacheView { cache }
    }
}

/// An object as the JSON a plugin sees: `apiVersion` and `kind` are always
/// present (list responses may omit them per item); `managedFields` is left
/// out: it is bookkeeping of the API server, often larger than the object,
/// and copying it into every call would only slow the hot path.
pub fn object_json(obj: &DynamicObject, ar: &ApiResource) -> Value {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        for (key, fallback) in [("apiVersion", &ar.api_version), ("kind", &ar.kind)] {
            if !map.get(key).is_some_and(Value::is_string) {
                map.insert(key.into(), Value::String(fallback.clone()));
            }
        }
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    value
}

impl CacheReader for CacheView {
    fn get(&self, r: &ObjectRef) -> Option<Value> {
        let reflection = self
            .cache
            .find(&r.api_version, &r.kind, r.namespace.as_deref())?;
        let ar = reflection.api_resource().clone();
        let mut key = StoreRef::new_with(&r.name, ar.clone());
        if let Some(ns) = &r.namespace {
            key = key.within(ns);
        }
        reflection
            .store()
            .get(&key)
            .map(|obj| object_json(&obj, &ar))
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<Value>, String> {
        let selector =
            LabelSelector::parse(label_selector.unwrap_or_default()).map_err(|e| e.to_string())?;
        let reflection = self.cache.find(api_version, kind, namespace).ok_or_else(|| {
            format!("the host has no cache of {api_version} {kind}; declare the kind in the plugin manifest's `watches` or `owns`")
        })?;
        let ar = reflection.api_resource().clone();
        let mut items: Vec<Value> = reflection
            .store()
            .state()
            .iter()
            .filter(|obj| namespace.is_none_or(|ns| obj.metadata.namespace.as_deref() == Some(ns)))
            .filter(|obj| {
                selector.matches(obj.metadata.labels.as_ref().unwrap_or(&Default::default()))
            })
            .map(|obj| object_json(obj, &ar))
            .collect();
        // Stable order, so the same cache state gives a plugin the same input.
        items.sort_by_key(|v| {
            (
                v.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                v.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            )
        });
        Ok(items)
    }
}
