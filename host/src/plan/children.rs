//! Children: the capability check, completing the plugin's documents for
//! server-side apply, and which owned children are no longer desired.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use kube::api::{ApiResource, DynamicObject};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};

use super::names::{
    HOST_ANNOTATION_PREFIX, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PLUGIN_LABEL, display_name,
};
use super::validate::{metadata_problem, name_problem, namespace_problem};
use super::{OwnedChild, PlanError};
use crate::cache::{CachedObject, api_resource};
use crate::contract::{Manifest, Scope};

/// Identity of a child: what server-side apply and pruning address, and what
/// two plans are compared by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ChildKey {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// The kind, e.g. `Service`.
    pub kind: String,
    /// `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ChildKey {
    /// The key of an object of kind `resource` seen in a cache.
    pub fn of(resource: &ApiResource, obj: &impl Resource) -> ChildKey {
        ChildKey {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            namespace: obj.namespace(),
            name: obj.name_any(),
        }
    }
}

/// `Kind namespace/name`, as messages and events name a child.
impl fmt::Display for ChildKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            self.kind,
            display_name(self.namespace.as_deref(), &self.name)
        )
    }
}

/// One child to apply: its kind and the complete apply document.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildApply {
    /// The kind, with the plural the API path needs.
    pub resource: ApiResource,
    /// The plugin's document with namespace, the host labels and the
    /// controller ownerReference filled in, server-owned fields removed.
    pub document: Value,
    /// The caches showed the child (as this primary's): the apply is
    /// forced to take back fields another manager changed. A child not
    /// shown is created without force (see `apply`).
    pub exists: bool,
}

/// One owned child to delete: no longer in the desired set.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildPrune {
    /// The kind, with the plural the API path needs.
    pub resource: ApiResource,
}

fn str_field<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Checks every desired child against the manifest and completes it: the
/// namespace defaults to the primary's, the metadata the host controls is
/// replaced (see [`sanitize_metadata`]): the two host labels and a
/// controller ownerReference to the primary are set.
///
/// # Errors
///
/// [`PlanError::CapabilityDenied`] when any child is of a kind the plugin does
/// not own: the whole set is refused (no partial writes).
/// [`PlanError::InvalidChild`] for a namespaced child outside its owner's
/// namespace, or metadata the API server would refuse
/// ([`super::validate`]).
pub fn complete(
    manifest: &Manifest,
    primary: &DynamicObject,
    desired: &[Value],
) -> Result<BTreeMap<ChildKey, ChildApply>, PlanError> {
    let denied: Vec<String> = desired
        .iter()
        .filter(|c| {
            manifest
                .owned(str_field(c, "/apiVersion"), str_field(c, "/kind"))
                .is_none()
        })
        .map(|c| format!("{} {}", str_field(c, "/apiVersion"), str_field(c, "/kind")))
        .collect();
    if !denied.is_empty() {
        return Err(PlanError::CapabilityDenied {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            kinds: denied.join(", "),
        });
    }
    let owner_namespace = primary.namespace();
    let owner_ref = json!({
        "apiVersion": manifest.primary.api_version(),
        "kind": manifest.primary.kind,
        "name": primary.name_any(),
        "uid": primary.uid().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let invalid = |child: String, problem: String| PlanError::InvalidChild {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        child,
        problem,
    };
    let mut children = BTreeMap::new();
    for child in desired {
        let Some(kind) = manifest.owned(str_field(child, "/apiVersion"), str_field(child, "/kind"))
        else {
            continue; // unreachable: checked above
        };
        let name = str_field(child, "/metadata/name").to_string();
        let mut document = child.clone();
        let namespace = if kind.scope == Scope::Namespaced {
            let ns = child
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| owner_namespace.clone());
            // ownerReferences cannot cross namespaces: the garbage collector
            // would treat such a child as orphaned and delete it.
            if owner_namespace.is_some() && ns != owner_namespace {
                return Err(invalid(
                    format!("{} {}", kind.kind, name),
                    format!(
                        "it is in namespace {:?} but its owner is in {:?}; children must live in their owner's namespace",
                        ns.unwrap_or_default(),
                        owner_namespace.clone().unwrap_or_default()
                    ),
                ));
            }
            ns
        } else {
            None
        };
        let shown = format!(
            "{} {}",
            kind.kind,
            display_name(namespace.as_deref(), &name)
        );
        if let Some(problem) = name_problem(&kind.api_version(), &kind.kind, &name)
            .or_else(|| namespace.as_deref().and_then(namespace_problem))
        {
            return Err(invalid(shown, problem));
        }
        let Some(meta) = document.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue; // unreachable: validated by the engine (metadata.name exists)
        };
        if let Some(ns) = &namespace {
            meta.insert("namespace".into(), Value::String(ns.clone()));
        }
        sanitize_metadata(meta);
        if let Some(problem) = metadata_problem(meta) {
            return Err(invalid(shown, problem));
        }
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if !labels.is_object() {
            *labels = json!({});
        }
        if let Some(labels) = labels.as_object_mut() {
            labels.insert(
                MANAGED_BY_LABEL.into(),
                Value::String(MANAGED_BY_VALUE.into()),
            );
            labels.insert(PLUGIN_LABEL.into(), Value::String(manifest.name.clone()));
        }
        meta.insert("ownerReferences".into(), json!([owner_ref.clone()]));
        if let Some(obj) = document.as_object_mut() {
            obj.remove("status");
        }
        let resource = api_resource(kind);
        let key = ChildKey {
            api_version: resource.api_version.clone(),
            kind: resource.kind.clone(),
            namespace,
            name,
        };
        children.insert(
            key,
            ChildApply {
                resource,
                document,
                exists: false,
            },
        );
    }
    Ok(children)
}

/// Removes from a child's metadata what the host, not the plugin, controls:
///
/// - `finalizers`: a child's finalizer nobody removes would leave it
///   Terminating forever once pruned;
/// - `ownerReferences`: the host sets the one controller reference to the
///   primary (a plugin could otherwise hang a child on any object);
/// - the host's labels and annotations (`wasm-operator.dev/*` and
///   `app.kubernetes.io/managed-by`): what pruning and audits trust;
/// - fields the server owns (`resourceVersion`, `uid`, `managedFields`,
///   `creationTimestamp`, `generation`, `deletionTimestamp`, ...): sending
///   them back would conflict.
pub fn sanitize_metadata(meta: &mut serde_json::Map<String, Value>) {
    for key in [
        "finalizers",
        "ownerReferences",
        "resourceVersion",
        "uid",
        "managedFields",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "generateName",
    ] {
        meta.remove(key);
    }
    for field in ["labels", "annotations"] {
        if let Some(map) = meta.get_mut(field).and_then(Value::as_object_mut) {
            map.retain(|k, _| !k.starts_with(HOST_ANNOTATION_PREFIX) && k != MANAGED_BY_LABEL);
        }
    }
}

/// Why desired children collide with objects that exist but are not this
/// primary's: one line per child naming it and its current owner. `existing`
/// holds what the owned kinds' caches show at the desired keys.
pub fn conflicts(
    desired: &BTreeMap<ChildKey, ChildApply>,
    existing: &BTreeMap<ChildKey, Arc<CachedObject>>,
    primary_uid: &str,
) -> Vec<String> {
    desired
        .keys()
        .filter_map(|key| {
            let obj = existing.get(key)?;
            let controller = obj
                .owner_references()
                .iter()
                .find(|o| o.controller == Some(true));
            match controller {
                Some(owner) if owner.uid == primary_uid => None,
                Some(owner) => Some(format!(
                    "{key} exists and is controlled by {} {} (uid {})",
                    owner.kind, owner.name, owner.uid
                )),
                None => Some(format!(
                    "{key} exists with no controlling owner (created by someone else)"
                )),
            }
        })
        .collect()
}

/// The keys the desired children will have once completed (the children
/// [`complete`] refuses are left out: the plan refuses them anyway). The
/// controller looks these keys up in the owned kinds' caches for
/// [`super::Observed::existing`].
pub fn desired_keys(
    manifest: &Manifest,
    primary: &DynamicObject,
    desired: &[Value],
) -> Vec<ChildKey> {
    desired
        .iter()
        .filter_map(|child| {
            let kind =
                manifest.owned(str_field(child, "/apiVersion"), str_field(child, "/kind"))?;
            let namespace = match kind.scope {
                Scope::Namespaced => child
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| primary.namespace()),
                Scope::Cluster => None,
            };
            Some(ChildKey {
                api_version: kind.api_version(),
                kind: kind.kind.clone(),
                namespace,
                name: str_field(child, "/metadata/name").to_string(),
            })
        })
        .collect()
}

/// True when `obj` is a child of the primary with uid `primary_uid` managed
/// by `plugin`: labelled with the plugin and controlled (controller
/// ownerReference) by the primary. Pruning only ever considers such objects.
pub fn is_owned_child(obj: &impl Resource, plugin: &str, primary_uid: &str) -> bool {
    let labelled = obj.labels().get(PLUGIN_LABEL).is_some_and(|p| p == plugin);
    let controlled = obj
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && o.uid == primary_uid);
    labelled && controlled
}

/// The observed owned children missing from the desired set. Children
/// already being deleted are left alone: deleting them again changes nothing.
pub fn unwanted(
    observed: &[OwnedChild],
    desired: &BTreeMap<ChildKey, ChildApply>,
) -> BTreeMap<ChildKey, ChildPrune> {
    observed
        .iter()
        .filter(|child| child.object.metadata.deletion_timestamp.is_none())
        .map(|child| (ChildKey::of(&child.resource, child.object.as_ref()), child))
        .filter(|(key, _)| !desired.contains_key(key))
        .map(|(key, child)| {
            (
                key,
                ChildPrune {
                    resource: child.resource.clone(),
                },
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{manifest, primary};
    use super::*;

    #[test]
    fn completes_owned_children() {
        let child = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop", "labels": {"app": "shop"}, "resourceVersion": "9"}, "status": {}});
        let children = complete(&manifest(), &primary(), &[child]).unwrap();
        let (key, apply) = children.iter().next().unwrap();
        let doc = &apply.document;
        assert_eq!(key.namespace.as_deref(), Some("prod"));
        assert_eq!(key.to_string(), "Service prod/shop");
        assert_eq!(doc["metadata"]["namespace"], "prod");
        assert_eq!(doc["metadata"]["labels"]["app"], "shop");
        assert_eq!(doc["metadata"]["labels"][PLUGIN_LABEL], "webapp");
        assert_eq!(doc["metadata"]["labels"][MANAGED_BY_LABEL], "wasm-operator");
        let owner = &doc["metadata"]["ownerReferences"][0];
        assert_eq!(
            (
                owner["uid"].as_str(),
                owner["controller"].as_bool(),
                owner["blockOwnerDeletion"].as_bool()
            ),
            (Some("u-1"), Some(true), Some(true))
        );
        assert!(doc["metadata"].get("resourceVersion").is_none() && doc.get("status").is_none());
    }

    #[test]
    fn only_labelled_and_controlled_objects_are_owned_children() {
        let object = |labels: Value, refs: Value| -> DynamicObject {
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "prod", "labels": labels, "ownerReferences": refs}}))
            .unwrap()
        };
        let ours = json!({PLUGIN_LABEL: "webapp"});
        let controller = json!([{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop", "uid": "u-1", "controller": true}]);
        let not_controller = json!([{"apiVersion": "example.com/v1", "kind": "WebApp", "name": "shop", "uid": "u-1"}]);
        assert!(is_owned_child(
            &object(ours.clone(), controller.clone()),
            "webapp",
            "u-1"
        ));
        // A user's object labelled like ours, or controlled without the label,
        // or only referencing the primary, is never pruned.
        assert!(!is_owned_child(
            &object(ours.clone(), json!([])),
            "webapp",
            "u-1"
        ));
        assert!(!is_owned_child(
            &object(json!({}), controller.clone()),
            "webapp",
            "u-1"
        ));
        assert!(!is_owned_child(
            &object(ours.clone(), not_controller),
            "webapp",
            "u-1"
        ));
        assert!(!is_owned_child(
            &object(json!({PLUGIN_LABEL: "other"}), controller.clone()),
            "webapp",
            "u-1"
        ));
        assert!(!is_owned_child(&object(ours, controller), "webapp", "u-2"));
    }

    #[test]
    fn refuses_unowned_kinds_entirely() {
        let ok = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}});
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}});
        let err = complete(&manifest(), &primary(), &[ok, secret]).unwrap_err();
        assert_eq!(err.reason(), "CapabilityDenied");
        assert!(err.to_string().contains("v1 Secret"), "{err}");
    }

    #[test]
    fn refuses_children_in_other_namespaces() {
        let child = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "other"}});
        let err = complete(&manifest(), &primary(), &[child]).unwrap_err();
        assert_eq!(err.reason(), "PluginInvalidOutput");
        assert!(err.to_string().contains("other"), "{err}");
    }
}
