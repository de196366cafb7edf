//! What the host does with the CRD a plugin's component carries
//! (`permissions.crds`): the pure decision, made before anything is written.
//!
//! A plugin built with the SDK carries the CRD of its primary kind, derived
//! from its types. A Helm chart's `crds/` is installed once and never
//! upgraded, so a version adding a status field would see it silently
//! pruned; with `permissions.crds` the host applies the carried CRD itself
//! when the version activates. The grant bounds it: only kinds of the
//! primary's group the plugin declares, never a scope change, never
//! dropping a version the API server still stores objects in.

// A refusal names the plugin, its version, the CRD and both groups, so the
// message tells a person what to fix; it is built at most once per version
// activation, so its size (past clippy's 128 bytes) costs nothing.
#![allow(clippy::result_large_err)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use super::Grant;
use crate::contract::{Manifest, Reason};

/// What to do with the carried CRD.
#[derive(Debug, Clone, PartialEq)]
pub enum CrdAction {
    /// Server-side apply `crd` (the carried CRD without `spec.conversion`,
    /// which the host's conversion webhook manages, nor `status`).
    /// `create` when the cluster has no such CRD yet.
    Apply {
        /// The body to apply.
        crd: Value,
        /// The CRD is absent (created) rather than updated.
        create: bool,
    },
    /// The cluster's CRD already says everything the carried one says.
    Unchanged,
    /// `permissions.crds` is not granted and the cluster's CRD is absent
    /// (`absent`) or differs from the carried one: nothing is written, and
    /// the WasmPlugin says so.
    NotGranted {
        /// The cluster has no CRD of that name.
        absent: bool,
        /// The CRD's name.
        name: String,
    },
}

/// Why a carried CRD is not applied (the version does not serve).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrdRefusal {
    /// The carried document is not a CustomResourceDefinition.
    #[error(
        "plugin {plugin} {version} carries a CRD that is not a valid apiextensions.k8s.io/v1 CustomResourceDefinition ({problem}); rebuild the plugin with the SDK's Crd::of"
    )]
    Invalid {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// What the parser said.
        problem: String,
    },
    /// The CRD is not of the primary's group, or not of a kind the plugin
    /// declares.
    #[error(
        "plugin {plugin} {version} carries CRD {name} for {kind} of group {group:?}, but permissions.crds only lets it install the CRD of its primary kind {primary} or of a kind of group {primary_group:?} it declares; fix the plugin's Crd::of (or deploy that CRD yourself)"
    )]
    OutsideGroup {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// The CRD's name.
        name: String,
        /// The CRD's kind.
        kind: String,
        /// The CRD's group.
        group: String,
        /// The primary kind (`Kind.group`).
        primary: String,
        /// The primary's group.
        primary_group: String,
    },
    /// Applying it would drop versions that still have stored objects.
    #[error(
        "plugin {plugin} {version} carries CRD {name} without version(s) {dropped}, which the cluster still stores objects in (status.storedVersions: {stored}); serve them until a storage migration moved every object to the storage version (see docs/conversion.md), then drop them"
    )]
    DropsStoredVersion {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// The CRD's name.
        name: String,
        /// The stored versions the carried CRD lacks, comma-separated.
        dropped: String,
        /// Every stored version, comma-separated.
        stored: String,
    },
    /// Applying it would change the CRD's scope.
    #[error(
        "plugin {plugin} {version} carries CRD {name} with scope {to}, but the cluster's CRD is {from}; the API server never changes a CRD's scope: keep {from}, or deploy the kind under a new name"
    )]
    ScopeChange {
        /// The plugin.
        plugin: String,
        /// Its version.
        version: String,
        /// The CRD's name.
        name: String,
        /// The cluster's scope.
        from: String,
        /// The carried scope.
        to: String,
    },
}

impl CrdRefusal {
    /// The WasmPlugin condition reason of this refusal.
    pub fn reason(&self) -> Reason {
        match self {
            CrdRefusal::OutsideGroup { .. } => Reason::CrdOutsideGroup,
            CrdRefusal::DropsStoredVersion { .. } => Reason::CrdDropsStoredVersion,
            CrdRefusal::Invalid { .. } | CrdRefusal::ScopeChange { .. } => Reason::CrdRejected,
        }
    }
}

/// Decides what to do with `carried`, the CRD the plugin of `manifest`
/// carries, given the cluster's CRD of that name (`existing`) and the
/// WasmPlugin's `grant`. Pure: the caller reads `existing` and applies.
///
/// # Errors
///
/// A [`CrdRefusal`] when the grant allows CRDs but this one may not be
/// applied. Without the grant nothing is refused: nothing is written.
pub fn plan_crd(
    carried: &Value,
    existing: Option<&CustomResourceDefinition>,
    manifest: &Manifest,
    grant: &Grant,
) -> Result<CrdAction, CrdRefusal> {
    let body = apply_body(carried);
    let existing_json = existing.and_then(|e| serde_json::to_value(e).ok());
    let same = existing_json
        .as_ref()
        .is_some_and(|e| contained(&body["spec"], &e["spec"]));
    if !grant.crds {
        if same {
            return Ok(CrdAction::Unchanged);
        }
        return Ok(CrdAction::NotGranted {
            absent: existing.is_none(),
            name: carried["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        });
    }
    let crd: CustomResourceDefinition =
        serde_json::from_value(body.clone()).map_err(|e| CrdRefusal::Invalid {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            problem: e.to_string(),
        })?;
    check_kind(&crd, manifest)?;
    if let Some(existing) = existing {
        check_against(&crd, existing, manifest)?;
    }
    if same {
        return Ok(CrdAction::Unchanged);
    }
    Ok(CrdAction::Apply {
        crd: body,
        create: existing.is_none(),
    })
}

/// The carried CRD as the host applies it: `spec.conversion` is the
/// host's webhook's (it points it when the plugin converts), `status` is
/// the API server's.
fn apply_body(carried: &Value) -> Value {
    let mut body = carried.clone();
    if let Some(spec) = body.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("conversion");
    }
    if let Some(object) = body.as_object_mut() {
        object.remove("status");
        object.insert("apiVersion".into(), json!("apiextensions.k8s.io/v1"));
        object.insert("kind".into(), json!("CustomResourceDefinition"));
    }
    body
}

/// True when every field `part` sets is in `whole` with the same value
/// (`whole` also holds what the API server defaulted).
fn contained(part: &Value, whole: &Value) -> bool {
    match (part, whole) {
        (Value::Object(p), Value::Object(w)) => p
            .iter()
            .all(|(k, v)| v.is_null() || w.get(k).is_some_and(|wv| contained(v, wv))),
        (Value::Array(p), Value::Array(w)) => {
            p.len() == w.len() && p.iter().zip(w).all(|(a, b)| contained(a, b))
        }
        // The cluster's CRD comes back through k8s-openapi's types, whose
        // bounds are f64: the carried `minimum: 1` reads back as `1.0`.
        (Value::Number(p), Value::Number(w)) => p.as_f64() == w.as_f64(),
        _ => part == whole,
    }
}

/// The CRD is of the primary's group, and of the primary kind or a kind of
/// that group the manifest declares.
fn check_kind(crd: &CustomResourceDefinition, manifest: &Manifest) -> Result<(), CrdRefusal> {
    let primary = &manifest.primary;
    let spec = &crd.spec;
    let declared = std::iter::once(primary)
        .chain(&manifest.owns)
        .chain(&manifest.watches)
        .any(|k| k.group == spec.group && k.kind == spec.names.kind);
    if spec.group == primary.group && declared {
        return Ok(());
    }
    Err(CrdRefusal::OutsideGroup {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        name: crd.metadata.name.clone().unwrap_or_default(),
        kind: spec.names.kind.clone(),
        group: spec.group.clone(),
        primary: format!("{}.{}", primary.kind, primary.group),
        primary_group: primary.group.clone(),
    })
}

/// The carried CRD keeps the cluster's scope and every stored version.
fn check_against(
    crd: &CustomResourceDefinition,
    existing: &CustomResourceDefinition,
    manifest: &Manifest,
) -> Result<(), CrdRefusal> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    if crd.spec.scope != existing.spec.scope {
        return Err(CrdRefusal::ScopeChange {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            name,
            from: existing.spec.scope.clone(),
            to: crd.spec.scope.clone(),
        });
    }
    let stored: Vec<String> = existing
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    let dropped: Vec<&str> = stored
        .iter()
        .filter(|v| !crd.spec.versions.iter().any(|c| &c.name == *v))
        .map(String::as_str)
        .collect();
    if dropped.is_empty() {
        return Ok(());
    }
    Err(CrdRefusal::DropsStoredVersion {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        name,
        dropped: dropped.join(", "),
        stored: stored.join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{OptionalInterfaces, ResourceKind, Scope};

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
            owns: vec![
                kind("apps", "Deployment", "deployments"),
                kind("example.com", "WebAppRoute", "webapproutes"),
            ],
            watches: vec![],
            finalizer: false,
            implements: OptionalInterfaces::default(),
            min_compatible_version: None,
        }
    }

    fn granted() -> Grant {
        Grant {
            crds: true,
            ..Grant::default()
        }
    }

    /// A CRD as the SDK's `Crd::of` writes it.
    fn carried(group: &str, kind: &str, plural: &str, versions: &[&str]) -> Value {
        let versions: Vec<Value> = versions
            .iter()
            .enumerate()
            .map(|(i, v)| {
                json!({"name": v, "served": true, "storage": i == 0,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                    "subresources": {"status": {}}})
            })
            .collect();
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}")},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                "versions": versions, "conversion": {"strategy": "None"}}
        })
    }

    /// The cluster's CRD: `crd` with what the API server adds.
    fn existing(crd: &Value, stored: &[&str]) -> CustomResourceDefinition {
        let mut crd = crd.clone();
        crd["spec"]["conversion"] =
            json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"]}});
        crd["status"] = json!({"storedVersions": stored});
        serde_json::from_value(crd).unwrap()
    }

    fn webapp_crd() -> Value {
        carried("example.com", "WebApp", "webapps", &["v1"])
    }

    #[test]
    fn numbers_compare_by_value_as_the_typed_crd_reads_them_back() {
        assert!(contained(&json!({"minimum": 1}), &json!({"minimum": 1.0})));
        assert!(!contained(&json!({"minimum": 1}), &json!({"minimum": 2.0})));
    }

    #[test]
    fn an_absent_crd_is_created_without_the_conversion_the_webhook_manages() {
        let action = plan_crd(&webapp_crd(), None, &manifest(), &granted()).unwrap();
        let CrdAction::Apply { crd, create } = action else {
            panic!("{action:?}")
        };
        assert!(create);
        assert_eq!(crd["metadata"]["name"], "webapps.example.com");
        assert!(crd["spec"].get("conversion").is_none(), "{crd}");
        assert_eq!(crd["spec"]["names"]["kind"], "WebApp");
    }

    #[test]
    fn the_same_crd_is_left_alone_and_a_new_field_updates_it() {
        let on_cluster = existing(&webapp_crd(), &["v1"]);
        assert_eq!(
            plan_crd(&webapp_crd(), Some(&on_cluster), &manifest(), &granted()).unwrap(),
            CrdAction::Unchanged
        );
        let mut newer = webapp_crd();
        newer["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            ["image"] = json!({"type": "string"});
        let action = plan_crd(&newer, Some(&on_cluster), &manifest(), &granted()).unwrap();
        assert!(
            matches!(action, CrdAction::Apply { create: false, .. }),
            "{action:?}"
        );
    }

    #[test]
    fn without_the_grant_nothing_is_written_and_only_a_difference_is_told() {
        let plain = Grant::default();
        assert_eq!(
            plan_crd(&webapp_crd(), None, &manifest(), &plain).unwrap(),
            CrdAction::NotGranted {
                absent: true,
                name: "webapps.example.com".into()
            }
        );
        let same = existing(&webapp_crd(), &["v1"]);
        assert_eq!(
            plan_crd(&webapp_crd(), Some(&same), &manifest(), &plain).unwrap(),
            CrdAction::Unchanged
        );
        let other = existing(
            &carried("example.com", "WebApp", "webapps", &["v2"]),
            &["v2"],
        );
        assert_eq!(
            plan_crd(&webapp_crd(), Some(&other), &manifest(), &plain).unwrap(),
            CrdAction::NotGranted {
                absent: false,
                name: "webapps.example.com".into()
            }
        );
    }

    #[test]
    fn another_group_or_an_undeclared_kind_is_refused() {
        let foreign = carried("evil.example.org", "WebApp", "webapps", &["v1"]);
        let refusal = plan_crd(&foreign, None, &manifest(), &granted()).unwrap_err();
        assert_eq!(refusal.reason(), Reason::CrdOutsideGroup);
        assert!(
            refusal.to_string().contains("evil.example.org"),
            "{refusal}"
        );
        let undeclared = carried("example.com", "Other", "others", &["v1"]);
        let refusal = plan_crd(&undeclared, None, &manifest(), &granted()).unwrap_err();
        assert_eq!(refusal.reason(), Reason::CrdOutsideGroup);
        // A declared kind of the primary's group is the plugin's.
        let route = carried("example.com", "WebAppRoute", "webapproutes", &["v1"]);
        assert!(plan_crd(&route, None, &manifest(), &granted()).is_ok());
    }

    #[test]
    fn dropping_a_stored_version_is_refused_and_names_it() {
        let on_cluster = existing(
            &carried("example.com", "WebApp", "webapps", &["v1", "v1beta1"]),
            &["v1", "v1beta1"],
        );
        let refusal =
            plan_crd(&webapp_crd(), Some(&on_cluster), &manifest(), &granted()).unwrap_err();
        assert_eq!(refusal.reason(), Reason::CrdDropsStoredVersion);
        let message = refusal.to_string();
        assert!(message.contains("v1beta1"), "{message}");
        assert!(message.contains("docs/conversion.md"), "{message}");
        // A served version without stored objects may go.
        let migrated = existing(
            &carried("example.com", "WebApp", "webapps", &["v1", "v1beta1"]),
            &["v1"],
        );
        assert!(plan_crd(&webapp_crd(), Some(&migrated), &manifest(), &granted()).is_ok());
    }

    #[test]
    fn a_scope_change_and_a_broken_crd_are_refused() {
        let mut cluster_scoped = webapp_crd();
        cluster_scoped["spec"]["scope"] = json!("Cluster");
        let on_cluster = existing(&webapp_crd(), &["v1"]);
        let refusal =
            plan_crd(&cluster_scoped, Some(&on_cluster), &manifest(), &granted()).unwrap_err();
        assert_eq!(refusal.reason(), Reason::CrdRejected);
        assert!(refusal.to_string().contains("Namespaced"), "{refusal}");
        let broken = json!({"metadata": {"name": "webapps.example.com"}, "spec": {"group": 3}});
        let refusal = plan_crd(&broken, None, &manifest(), &granted()).unwrap_err();
        assert_eq!(refusal.reason(), Reason::CrdRejected);
    }
}
