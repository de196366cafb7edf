//! The read-only view of the shared caches that plugins get through the
//! `cache` import (the engine's [`CacheReader`]).

use std::sync::Arc;

use serde_json::Value;

use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::ObjectRef as StoreRef;

use super::reflection::Reflection;
use super::{CachedObject, LabelSelector, NamespaceGate, SharedCache, object_text};
use crate::contract::{ObjectRef, ResourceKind};
use crate::engine::CacheReader;

/// Answers one plugin's reads from the shared reflector stores, never from
/// the API server. The engine checks the manifest's capabilities before
/// asking; the view then reads the reflector of the resource the manifest
/// declared (group, version, kind *and* plural, as discovery confirmed), so
/// a read can never reach another resource's cache.
///
/// A read that cannot be answered is an error naming the kind, never an
/// empty answer: no reflector for the kind, its initial list not loaded yet,
/// or the kind no longer served (its list or watch answers 404).
///
/// A view confined to a plugin's grant ([`CacheView::confined_to`]) answers
/// only for objects in granted namespaces: a list over all namespaces leaves
/// the others out, a read in one of them is refused by the engine.
#[derive(Debug, Clone)]
pub struct CacheView {
    cache: SharedCache,
    kinds: Arc<Vec<ResourceKind>>,
    gate: Option<NamespaceGate>,
}

impl CacheView {
    /// A view over `cache` for a plugin that declared `kinds` (its primary,
    /// owned and watched kinds).
    pub fn new(cache: SharedCache, kinds: impl IntoIterator<Item = ResourceKind>) -> CacheView {
        CacheView {
            cache,
            kinds: Arc::new(kinds.into_iter().collect()),
            gate: None,
        }
    }

    /// The same view, answering only for namespaces `gate` allows.
    #[must_use]
    pub fn confined_to(mut self, gate: NamespaceGate) -> CacheView {
        self.gate = Some(gate);
        self
    }

    fn granted(&self, obj: &CachedObject) -> bool {
        self.gate.as_ref().is_none_or(|g| g.allows_object(obj))
    }

    /// The synced reflector answering `api_version`/`kind` reads in
    /// `namespace`, or why there is none.
    fn reflection(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
    ) -> Result<Arc<Reflection>, String> {
        let declared = self
            .kinds
            .iter()
            .find(|k| k.matches(api_version, kind))
            .ok_or_else(|| {
                format!(
                    "the host has no cache of {api_version} {kind} for this plugin; declare the kind in the plugin manifest's `watches` or `owns`"
                )
            })?;
        let reflection = self.cache.find(declared, namespace).ok_or_else(|| {
            format!(
                "the host has no cache of {api_version} {kind} ({}) running; the read is refused rather than answered empty, retry the reconcile",
                declared.plural
            )
        })?;
        readable(&reflection, api_version, kind)?;
        Ok(reflection)
    }
}

/// Whether `reflection` can answer reads now: synced, and its kind still
/// served.
fn readable(reflection: &Reflection, api_version: &str, kind: &str) -> Result<(), String> {
    let plural = &reflection.api_resource().plural;
    read_verdict(
        reflection.synced(),
        reflection.unserved().as_deref(),
        api_version,
        kind,
        plural,
    )
}

/// The decision of [`readable`], as a pure function of the reflector's
/// state: an unserved kind first (its store is stale), then not synced.
fn read_verdict(
    synced: bool,
    unserved: Option<&str>,
    api_version: &str,
    kind: &str,
    plural: &str,
) -> Result<(), String> {
    if let Some(why) = unserved {
        return Err(format!(
            "the cluster no longer serves {api_version} {kind} ({plural}): {why}; the host cannot answer reads of it until it is served again"
        ));
    }
    if !synced {
        return Err(format!(
            "the host's cache of {api_version} {kind} ({plural}) has not finished its initial list yet; the read is refused rather than answered empty, retry the reconcile"
        ));
    }
    Ok(())
}

/// An object as a JSON value, as a plugin sees it (see [`object_text`]):
/// for host code that edits what a plugin was given, e.g. the migration
/// walk's merge of an upgraded object. Plugin calls and cache reads use
/// [`object_text`], which serializes once.
pub fn object_json(obj: &DynamicObject, ar: &ApiResource) -> Value {
    serde_json::from_str(&object_text(obj, ar)).unwrap_or(Value::Null)
}

impl CacheReader for CacheView {
    fn get(&self, r: &ObjectRef) -> Result<Option<String>, String> {
        let reflection = self.reflection(&r.api_version, &r.kind, r.namespace.as_deref())?;
        let ar = reflection.api_resource().clone();
        let mut key = StoreRef::new_with(&r.name, ar.clone());
        if let Some(ns) = &r.namespace {
            key = key.within(ns);
        }
        Ok(reflection
            .store()
            .get(&key)
            .filter(|obj| self.granted(obj))
            .map(|obj| obj.text(&ar)))
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
        let reflection = self.reflection(api_version, kind, namespace)?;
        let ar = reflection.api_resource().clone();
        // A namespaced list is served from the namespace index (the labels
        // are then matched over that subset only); a list over all
        // namespaces is the whole store by definition.
        let candidates = match namespace {
            Some(ns) => reflection.index().in_namespace(ns),
            None => reflection.store().state(),
        };
        let mut items: Vec<_> = candidates
            .into_iter()
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
        Ok(items.iter().map(|obj| obj.text(&ar)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::read_verdict;

    #[test]
    fn a_read_before_sync_or_of_a_gone_kind_is_an_error_naming_the_kind() {
        assert!(read_verdict(true, None, "v1", "ConfigMap", "configmaps").is_ok());
        let early = read_verdict(false, None, "v1", "ConfigMap", "configmaps").unwrap_err();
        assert!(early.contains("v1 ConfigMap (configmaps)"), "{early}");
        assert!(early.contains("initial list"), "{early}");
        let gone = read_verdict(
            true,
            Some("404 not found"),
            "example.com/v1",
            "Ghost",
            "ghosts",
        )
        .unwrap_err();
        assert!(
            gone.contains("no longer serves example.com/v1 Ghost"),
            "{gone}"
        );
        // Gone wins over synced-or-not: the store is stale either way.
        let both = read_verdict(false, Some("404"), "v1", "Secret", "secrets").unwrap_err();
        assert!(both.contains("no longer serves"), "{both}");
    }
}
