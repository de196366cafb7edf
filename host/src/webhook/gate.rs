//! The round-trip gate: before a plugin version whose manifest implements
//! `migration` may serve conversions, every stored object of its primary
//! kind is converted to each other served version and back with that
//! version's `convert`, and must come back identical. A version that loses a
//! field, breaks the conversion rules or fails on an object is refused with
//! the objects and JSON paths named; the version serving before keeps
//! serving.
//!
//! [`round_trip`] and [`differences`] decide; [`check`] reads the cluster
//! (the CRD's versions and the stored objects) and runs them. The WasmPlugin
//! controller calls [`check`] before a load or swap; a canary dry run can
//! call [`check`] (or [`round_trip`] on the objects it holds) the same way.
//!
//! # Guarantees
//!
//! - Only reads: nothing is written to the cluster.
//! - Every object is checked against every other served version, and every
//!   failure is reported (not only the first), up to [`MAX_REPORTED`].

use std::collections::BTreeSet;

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use super::review;
use crate::engine::LoadedPlugin;

/// Failures named in one refusal; the rest are counted.
pub const MAX_REPORTED: usize = 10;

/// Objects listed per page while reading what is stored.
const PAGE: u32 = 500;

/// One object that did not survive the round trip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObjectFailure {
    /// The object came back different: the JSON paths that differ.
    Lossy {
        /// `Kind namespace/name`.
        object: String,
        /// The version it went through, e.g. `kv.example.com/v1alpha1`.
        via: String,
        /// Paths like `.spec.maxUnavailable` that differ.
        paths: Vec<String>,
    },
    /// `convert` failed (trapped, refused, timed out) or broke the rules
    /// of a conversion (wrong apiVersion, kind, metadata).
    Failed {
        /// `Kind namespace/name`.
        object: String,
        /// The version it was converted to when it failed.
        to: String,
        /// What went wrong.
        error: String,
    },
}

impl ObjectFailure {
    /// True for a difference (which a WasmPlugin may allow), false for a
    /// failing conversion (which is never allowed).
    pub fn is_loss(&self) -> bool {
        matches!(self, ObjectFailure::Lossy { .. })
    }
}

impl std::fmt::Display for ObjectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObjectFailure::Lossy { object, via, paths } => write!(
                f,
                "{object} does not come back identical through {via}: {} differ",
                paths.join(", ")
            ),
            ObjectFailure::Failed { object, to, error } => {
                write!(f, "converting {object} to {to} failed: {error}")
            }
        }
    }
}

/// Why the gate refused a version, or could not decide.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    /// Some objects did not survive the round trip.
    #[error("{plugin} {version}'s convert is refused: {summary} {remedy}", summary = summary(failures, *total), remedy = remedy(failures))]
    NotLossless {
        /// The plugin name.
        plugin: String,
        /// The refused version.
        version: String,
        /// The first [`MAX_REPORTED`] failures.
        failures: Vec<ObjectFailure>,
        /// All failures.
        total: usize,
    },
    /// The CRD or the stored objects could not be read (passes by itself:
    /// check again later).
    #[error(
        "cannot check {plugin} {version}'s convert against the stored {kind} objects: {source}"
    )]
    Unreadable {
        /// The plugin name.
        plugin: String,
        /// The version being checked.
        version: String,
        /// The primary kind, e.g. `distributedkvs.kv.example.com`.
        kind: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
}

fn summary(failures: &[ObjectFailure], total: usize) -> String {
    let mut text = failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if total > failures.len() {
        text.push_str(&format!("; and {} more", total - failures.len()));
    }
    text.push('.');
    text
}

fn remedy(failures: &[ObjectFailure]) -> &'static str {
    if failures.iter().all(ObjectFailure::is_loss) {
        "Fix convert so those fields survive (keep a field the other version cannot hold in an annotation), or set spec.allowLossyConversion: true on the WasmPlugin to accept the loss. The previous version keeps serving."
    } else {
        "Fix convert for those objects; the previous version keeps serving."
    }
}

/// The JSON paths where `before` and `after` differ, compared semantically:
/// a `null` field and an absent one are the same, and so are an empty and
/// an absent `metadata.labels`/`metadata.annotations`; numbers compare by
/// value (`1` and `1.0` are equal). Paths look like `.spec.storage.size`
/// or `.spec.ports[0]`.
pub fn differences(before: &Value, after: &Value) -> Vec<String> {
    let mut out = Vec::new();
    diff(
        &normalize(before, ""),
        &normalize(after, ""),
        String::new(),
        &mut out,
    );
    out
}

/// Drops `null` fields, and empty labels/annotations maps, recursively.
fn normalize(value: &Value, path: &str) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .filter(|(k, v)| {
                    let empty = v.as_object().is_some_and(serde_json::Map::is_empty);
                    !(path == ".metadata" && (*k == "labels" || *k == "annotations") && empty)
                })
                .map(|(k, v)| (k.clone(), normalize(v, &format!("{path}.{k}"))))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| normalize(v, path)).collect()),
        other => other.clone(),
    }
}

fn diff(a: &Value, b: &Value, path: String, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let sub = format!("{path}.{key}");
                match (x.get(key), y.get(key)) {
                    (Some(l), Some(r)) => diff(l, r, sub, out),
                    _ => out.push(sub),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (l, r)) in x.iter().zip(y).enumerate() {
                diff(l, r, format!("{path}[{i}]"), out);
            }
        }
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a == b => {}
        _ => out.push(if path.is_empty() { ".".into() } else { path }),
    }
}

/// Converts each of `objects` (stored at `storage`, i.e. their own
/// `apiVersion`) to each of `others` and back with `plugin`, and returns
/// every object that does not come back identical or fails on the way.
/// Each step is also held to the rules of a conversion webhook
/// ([`review::check_converted`]) and gets the host's marks back as the
/// webhook's answer would ([`review::keep_host_marks`]).
pub async fn round_trip(
    plugin: &LoadedPlugin,
    objects: &[Value],
    others: &[String],
) -> Vec<ObjectFailure> {
    let mut failures = Vec::new();
    for object in objects {
        let name = review::describe(object);
        let home = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        for via in others.iter().filter(|v| **v != home) {
            let there = match convert_checked(plugin, object, via).await {
                Ok(there) => there,
                Err(error) => {
                    failures.push(ObjectFailure::Failed {
                        object: name.clone(),
                        to: via.clone(),
                        error,
                    });
                    continue;
                }
            };
            match convert_checked(plugin, &there, &home).await {
                Ok(back) => {
                    let paths = differences(object, &back);
                    if !paths.is_empty() {
                        failures.push(ObjectFailure::Lossy {
                            object: name.clone(),
                            via: via.clone(),
                            paths,
                        });
                    }
                }
                Err(error) => failures.push(ObjectFailure::Failed {
                    object: name.clone(),
                    to: home.clone(),
                    error,
                }),
            }
        }
    }
    failures
}

async fn convert_checked(plugin: &LoadedPlugin, object: &Value, to: &str) -> Result<Value, String> {
    let mut converted = plugin
        .convert(object.to_string(), to)
        .await
        .map_err(|e| e.to_string())?;
    review::check_converted(object, &converted, to)?;
    // As the webhook answers: the host's marks as they went in.
    review::keep_host_marks(object, &mut converted);
    Ok(converted)
}

/// What [`check`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateReport {
    /// Stored objects that were converted.
    pub objects: usize,
    /// The other served versions they went through.
    pub versions: Vec<String>,
    /// Differences accepted because lossy conversion is allowed.
    pub accepted_losses: Vec<ObjectFailure>,
}

/// Runs the gate for `plugin` against the cluster: reads the primary kind's
/// CRD, lists every object at its storage version and round-trips each
/// through every other served version. Plugins that do not implement
/// `migration`, and CRDs serving one version (or not installed yet), pass
/// with nothing checked.
///
/// # Errors
///
/// [`GateError::NotLossless`] when an object does not come back identical
/// (unless `allow_lossy`, which accepts differences but never failures),
/// [`GateError::Unreadable`] when the CRD or the objects cannot be read.
pub async fn check(
    client: &kube::Client,
    plugin: &LoadedPlugin,
    allow_lossy: bool,
) -> Result<GateReport, GateError> {
    let manifest = plugin.manifest();
    if !manifest.implements.convert {
        return Ok(GateReport::default());
    }
    let primary = &manifest.primary;
    let crd_name = format!("{}.{}", primary.plural, primary.group);
    let unreadable = |source| GateError::Unreadable {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        kind: crd_name.clone(),
        source,
    };
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    let Some(crd) = crds.get_opt(&crd_name).await.map_err(unreadable)? else {
        return Ok(GateReport::default());
    };
    let served: Vec<_> = crd.spec.versions.iter().filter(|v| v.served).collect();
    let Some(storage) = crd.spec.versions.iter().find(|v| v.storage) else {
        return Ok(GateReport::default());
    };
    let others: Vec<String> = served
        .iter()
        .filter(|v| v.name != storage.name)
        .map(|v| format!("{}/{}", primary.group, v.name))
        .collect();
    if others.is_empty() {
        return Ok(GateReport::default());
    }
    let resource = ApiResource {
        group: primary.group.clone(),
        version: storage.name.clone(),
        api_version: format!("{}/{}", primary.group, storage.name),
        kind: primary.kind.clone(),
        plural: primary.plural.clone(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut objects = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&params).await.map_err(unreadable)?;
        for item in page.items {
            let mut value = serde_json::to_value(&item).unwrap_or(Value::Null);
            // A list's items may come without apiVersion/kind.
            value["apiVersion"] = Value::String(resource.api_version.clone());
            value["kind"] = Value::String(resource.kind.clone());
            objects.push(value);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let failures = round_trip(plugin, &objects, &others).await;
    let (losses, refused): (Vec<_>, Vec<_>) = failures
        .into_iter()
        .partition(|f| f.is_loss() && allow_lossy);
    if !refused.is_empty() {
        let total = refused.len();
        return Err(GateError::NotLossless {
            plugin: manifest.name.clone(),
            version: manifest.version.clone(),
            failures: refused.into_iter().take(MAX_REPORTED).collect(),
            total,
        });
    }
    Ok(GateReport {
        objects: objects.len(),
        versions: others,
        accepted_losses: losses,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn identical_objects_have_no_differences() {
        let a = json!({"metadata": {"name": "a"}, "spec": {"x": [1, {"y": 2}]}});
        assert!(differences(&a, &a.clone()).is_empty());
    }

    #[test]
    fn nulls_empty_metadata_maps_and_number_forms_are_equal() {
        let a =
            json!({"metadata": {"name": "a", "annotations": {}}, "spec": {"x": 1, "gone": null}});
        let b = json!({"metadata": {"name": "a"}, "spec": {"x": 1.0}});
        assert!(differences(&a, &b).is_empty());
        // An empty map elsewhere is data.
        let c = json!({"spec": {"m": {}}});
        assert_eq!(differences(&c, &json!({"spec": {}})), [".spec.m"]);
    }

    #[test]
    fn differences_name_json_paths() {
        let a = json!({"spec": {"replicaCount": 3, "maxUnavailable": 2, "ports": [1, 2], "s": {"size": "1Gi"}}});
        let b = json!({"spec": {"replicaCount": 3, "ports": [1, 3], "s": {"size": "2Gi"}, "extra": true}});
        assert_eq!(
            differences(&a, &b),
            [
                ".spec.extra",
                ".spec.maxUnavailable",
                ".spec.ports[1]",
                ".spec.s.size"
            ]
        );
        assert_eq!(
            differences(&json!({"a": [1]}), &json!({"a": [1, 2]})),
            [".a"]
        );
        assert_eq!(differences(&json!(1), &json!(2)), ["."]);
    }

    #[test]
    fn refusals_name_objects_paths_and_the_remedy() {
        let lossy = ObjectFailure::Lossy {
            object: "DistributedKV ns/a".into(),
            via: "kv.example.com/v1alpha1".into(),
            paths: vec![".spec.maxUnavailable".into()],
        };
        let error = GateError::NotLossless {
            plugin: "distributedkv".into(),
            version: "1.1.0".into(),
            failures: vec![lossy.clone()],
            total: 3,
        }
        .to_string();
        assert!(error.contains("distributedkv 1.1.0"), "{error}");
        assert!(error.contains("DistributedKV ns/a does not come back identical through kv.example.com/v1alpha1: .spec.maxUnavailable differ"), "{error}");
        assert!(error.contains("and 2 more"), "{error}");
        assert!(error.contains("allowLossyConversion"), "{error}");
        let failed = ObjectFailure::Failed {
            object: "DistributedKV ns/b".into(),
            to: "kv.example.com/v1alpha1".into(),
            error: "trap".into(),
        };
        assert!(!failed.is_loss() && lossy.is_loss());
        let error = GateError::NotLossless {
            plugin: "p".into(),
            version: "1".into(),
            failures: vec![failed],
            total: 1,
        }
        .to_string();
        assert!(
            error.contains("converting DistributedKV ns/b to kv.example.com/v1alpha1 failed: trap"),
            "{error}"
        );
        assert!(!error.contains("allowLossyConversion"), "{error}");
    }
}
