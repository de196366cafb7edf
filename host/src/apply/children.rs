//! Children: capability checks, server-side apply and pruning.

use std::collections::HashSet;
use std::sync::Arc;

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{
    ApplyError, MANAGED_BY_LABEL, MANAGED_BY_VALUE, PLUGIN_LABEL, display_name, field_manager,
};
use crate::cache::{CacheLease, api_resource};
use crate::contract::{Manifest, Scope};

/// One child ready to be applied: its kind and the full apply document.
#[derive(Debug, Clone)]
pub struct ChildPlan {
    pub api_resource: ApiResource,
    pub namespaced: bool,
    pub namespace: Option<String>,
    pub name: String,
    pub document: Value,
}

impl ChildPlan {
    /// Identity used to match existing children against the desired set.
    fn key(&self) -> (String, String, Option<String>, String) {
        (
            self.api_resource.api_version.clone(),
            self.api_resource.kind.clone(),
            self.namespace.clone(),
            self.name.clone(),
        )
    }

    fn describe(&self) -> String {
        format!(
            "{} {}",
            self.api_resource.kind,
            display_name(self.namespace.as_deref(), &self.name)
        )
    }
}

fn str_field<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Checks every desired child against the manifest and completes it: the
/// namespace defaults to the primary's, the two host labels and a controller
/// ownerReference to the primary are added. Any child of a kind the plugin
/// does not own refuses the whole set (no partial writes).
pub fn plan_children(
    manifest: &Manifest,
    primary: &DynamicObject,
    desired: &[Value],
) -> Result<Vec<ChildPlan>, ApplyError> {
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
        return Err(ApplyError::CapabilityDenied {
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
    let mut plans = Vec::with_capacity(desired.len());
    for child in desired {
        let Some(kind) = manifest.owned(str_field(child, "/apiVersion"), str_field(child, "/kind"))
        else {
            continue; // unreachable: checked above
        };
        let name = str_field(child, "/metadata/name").to_string();
        let mut document = child.clone();
        let namespaced = kind.scope == Scope::Namespaced;
        let namespace = if namespaced {
            let ns = child
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| owner_namespace.clone());
            // ownerReferences cannot cross namespaces: the garbage collector
            // would treat such a child as orphaned and delete it.
            if owner_namespace.is_some() && ns != owner_namespace {
                return Err(ApplyError::InvalidChild {
                    plugin: manifest.name.clone(),
                    version: manifest.version.clone(),
                    child: format!("{} {}", kind.kind, name),
                    problem: format!(
                        "it is in namespace {:?} but its owner is in {:?}; children must live in their owner's namespace",
                        ns.unwrap_or_default(),
                        owner_namespace.clone().unwrap_or_default()
                    ),
                });
            }
            ns
        } else {
            None
        };
        let Some(meta) = document.get_mut("metadata").and_then(Value::as_object_mut) else {
            continue; // unreachable: validated by the engine (metadata.name exists)
        };
        if let Some(ns) = &namespace {
            meta.insert("namespace".into(), Value::String(ns.clone()));
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
        // Server-side apply owns these; sending them back would conflict.
        for key in [
            "resourceVersion",
            "uid",
            "managedFields",
            "creationTimestamp",
            "generation",
        ] {
            meta.remove(key);
        }
        if let Some(obj) = document.as_object_mut() {
            obj.remove("status");
        }
        plans.push(ChildPlan {
            api_resource: api_resource(kind),
            namespaced,
            namespace,
            name,
            document,
        });
    }
    Ok(plans)
}

fn api_for(client: &Client, ar: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Applies every planned child with server-side apply (force, field manager
/// `wasm-operator/<plugin>`).
pub async fn apply_children(
    client: &Client,
    plugin: &str,
    plans: &[ChildPlan],
) -> Result<(), ApplyError> {
    let params = PatchParams::apply(&field_manager(plugin)).force();
    for plan in plans {
        let api = api_for(
            client,
            &plan.api_resource,
            if plan.namespaced {
                plan.namespace.as_deref()
            } else {
                None
            },
        );
        api.patch(&plan.name, &params, &Patch::Apply(&plan.document))
            .await
            .map_err(|e| ApplyError::api("server-side apply of", plan.describe(), e))?;
    }
    Ok(())
}

/// The children of `primary_uid` in the caches of the owned kinds: labelled
/// with the plugin and controlled (controller ownerReference) by the primary.
pub fn owned_children(
    leases: &[CacheLease],
    plugin: &str,
    primary_uid: &str,
) -> Vec<(ApiResource, Arc<DynamicObject>)> {
    let mut out = Vec::new();
    for lease in leases {
        let ar = lease.api_resource().clone();
        for obj in lease.store().state() {
            let labelled = obj.labels().get(PLUGIN_LABEL).is_some_and(|p| p == plugin);
            let controlled = obj
                .owner_references()
                .iter()
                .any(|o| o.controller == Some(true) && o.uid == primary_uid);
            if labelled && controlled {
                out.push((ar.clone(), obj));
            }
        }
    }
    out.sort_by_key(|(ar, o)| (ar.kind.clone(), o.namespace(), o.name_any()));
    out
}

/// Deletes existing owned children that are not in the desired set.
/// Returns what was deleted (for events).
pub async fn prune_children(
    client: &Client,
    existing: &[(ApiResource, Arc<DynamicObject>)],
    plans: &[ChildPlan],
) -> Result<Vec<String>, ApplyError> {
    let desired: HashSet<_> = plans.iter().map(ChildPlan::key).collect();
    let mut pruned = Vec::new();
    for (ar, obj) in existing {
        let key = (
            ar.api_version.clone(),
            ar.kind.clone(),
            obj.namespace(),
            obj.name_any(),
        );
        if desired.contains(&key) || obj.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let what = format!(
            "{} {}",
            ar.kind,
            display_name(obj.namespace().as_deref(), &obj.name_any())
        );
        let api = api_for(client, ar, obj.namespace().as_deref());
        match api
            .delete(&obj.name_any(), &DeleteParams::background())
            .await
        {
            Ok(_) => pruned.push(what),
            // Already gone: the cache was a little behind.
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(ApplyError::api("pruning", what, e)),
        }
    }
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{OptionalInterfaces, ResourceKind};

    fn kind(group: &str, kind: &str, plural: &str) -> ResourceKind {
        ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            scope: Scope::Namespaced,
        }
    }

    fn manifest() -> Manifest {
        Manifest {
            name: "webapp".into(),
            version: "1.2.0".into(),
            description: String::new(),
            primary: kind("example.com", "WebApp", "webapps"),
            owns: vec![kind("", "Service", "services")],
            watches: vec![],
            finalizer: true,
            implements: OptionalInterfaces::default(),
            min_compatible_version: None,
        }
    }

    fn primary() -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "prod", "uid": "u-1"},
        }))
        .unwrap()
    }

    #[test]
    fn completes_owned_children() {
        let child = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop", "labels": {"app": "shop"}, "resourceVersion": "9"}, "status": {}});
        let plans = plan_children(&manifest(), &primary(), &[child]).unwrap();
        let doc = &plans[0].document;
        assert_eq!(plans[0].namespace.as_deref(), Some("prod"));
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
    fn refuses_unowned_kinds_entirely() {
        let ok = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}});
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "b"}});
        let err = plan_children(&manifest(), &primary(), &[ok, secret]).unwrap_err();
        assert_eq!(err.reason(), "CapabilityDenied");
        assert!(err.to_string().contains("v1 Secret"), "{err}");
        assert!(err.is_permanent());
    }

    #[test]
    fn refuses_children_in_other_namespaces() {
        let child = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "namespace": "other"}});
        let err = plan_children(&manifest(), &primary(), &[child]).unwrap_err();
        assert!(err.to_string().contains("other"), "{err}");
    }
}
