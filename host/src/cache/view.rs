//! The read-only view of the shared caches that plugins get through the
//! `cache` import (the engine's [`CacheReader`]).

use serde_json::Value;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef as StoreRef;

use super::{LabelSelector, NamespaceGate, SharedCache, object_text};
use crate::contract::ObjectRef;
use crate::engine::CacheReader;

/// Answers plugin reads from the shared reflector stores, never from the API
/// server. The engine checks the manifest's capabilities before asking; a kind
/// without a running reflector reads as empty (get) or as an error naming the
/// kind (list), so a plugin can tell "absent" from "not cached".
///
/// A view confined to a plugin's grant ([`CacheView::confined_to`]) answers
/// only for objects in granted namespaces: a list over all namespaces leaves
/// the others out, a read in one of them is refused by the engine.
#[derive(Debug, Clone)]
pub struct CacheView {
    cache: SharedCache,
    gate: Option<NamespaceGate>,
}

impl CacheView {
    /// A view over every reflector of `cache`.
    pub fn new(cache: SharedCache) -> CacheView {
        CacheView { cache, gate: None }
    }

    /// The same view, answering only for namespaces `gate` allows.
    #[must_use]
    pub fn confined_to(mut self, gate: NamespaceGate) -> CacheView {
        self.gate = Some(gate);
        self
    }

    fn granted(&self, obj: &kube::api::DynamicObject) -> bool {
        self.gate.as_ref().is_none_or(|g| g.allows_object(obj))
    }
}

/// An object as a JSON value, as a plugin sees it (see [`object_text`]):
/// for host code that edits what a plugin was given, e.g. the migration
/// walk's merge of an upgraded object. Plugin calls and cache reads use
/// [`object_text`], which serializes once.
pub fn object_json(obj: &DynamicObject, ar: &ApiResource) -> Value {
    serde_json::from_str(&object_text(obj, ar)).unwrap_or(Value::Null)
}

impl CacheReader for CacheView {
    fn get(&self, r: &ObjectRef) -> Option<String> {
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
            .filter(|obj| self.granted(obj))
            .map(|obj| object_text(&obj, &ar))
    }

    fn may_read_namespace(&self, namespace: &str) -> bool {
        self.gate.as_ref().is_none_or(|g| g.allows(namespace))
    }

    fn granted_namespaces(&self) -> Option<String> {
        self.gate.as_ref().map(NamespaceGate::describe)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let selector =
            LabelSelector::parse(label_selector.unwrap_or_default()).map_err(|e| e.to_string())?;
        let reflection = self.cache.find(api_version, kind, namespace).ok_or_else(|| {
            format!("the host has no cache of {api_version} {kind}; declare the kind in the plugin manifest's `watches` or `owns`")
        })?;
        let ar = reflection.api_resource().clone();
        let mut items: Vec<_> = reflection
            .store()
            .state()
            .into_iter()
            .filter(|obj| namespace.is_none_or(|ns| obj.metadata.namespace.as_deref() == Some(ns)))
            .filter(|obj| self.granted(obj))
            .filter(|obj| {
                selector.matches(obj.metadata.labels.as_ref().unwrap_or(&Default::default()))
            })
            .collect();
        // Stable order, so the same cache state gives a plugin the same input.
        items.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(items.iter().map(|obj| object_text(obj, &ar)).collect())
    }
}
