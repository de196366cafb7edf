//! Skipping the server-side apply of children that already are as desired.
//!
//! Re-applying an unchanged child is idempotent but still costs a request
//! (and the API server a merge) on every update pass, requeue and resync: it
//! was the largest source of writes once objects converged. The host
//! remembers, per child, what it last applied ([`LastApplied`]: the child's
//! UID, a digest of the document and the `resourceVersion` the apply
//! returned), and [`skip`] leaves out of the plan every apply that would
//! change nothing.
//!
//! # Guarantees
//!
//! An apply is left out only when all of these hold ([`is_unchanged`]):
//!
//! - the caches show the child as this primary's, not being deleted, with
//!   the UID the host applied to (a child deleted and recreated by someone
//!   else is applied again);
//! - the document is byte for byte the one last applied (same digest): a
//!   field the plugin stops returning changes the document, so the apply
//!   that removes it (server-side apply's field ownership) is sent;
//! - and either the cached child still has the `resourceVersion` the host's
//!   apply returned (nobody wrote it since), or every field of the document
//!   equals the cached child's ([`contains`]; other fields, e.g. a
//!   Deployment's status or defaults the API server filled in, may differ):
//!   a field the host manages that someone else changed or removed fails
//!   this check, so the apply that puts it back is sent.
//!
//! What is not guaranteed: field ownership is not re-asserted while the
//! values agree (another manager that set a field to the host's value
//! co-owns it until the values differ, when the next apply takes it back).
//! The memory lives in the host process: after a restart the first pass
//! applies every child once. A cache that lags behind the host's own apply
//! only costs a redundant apply, never a skipped change.

use std::collections::BTreeMap;

use crate::cache::CachedObject;
use kube::ResourceExt;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use super::{ChildKey, OwnedChild, Plan};

/// A digest of an apply document (SHA-256 of its compact JSON).
pub type Digest = [u8; 32];

/// What the host last applied to one child, as the apply answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastApplied {
    /// The child's UID in the apply's answer.
    pub uid: String,
    /// The digest of the document applied ([`digest`]).
    pub digest: Digest,
    /// The child's `resourceVersion` in the apply's answer.
    pub resource_version: String,
}

/// The digest of an apply document. Two documents with the same digest
/// serialize to the same JSON, key order included (the plugin's order is
/// kept), so an apply of one is an apply of the other.
pub fn digest(document: &Value) -> Digest {
    let mut hasher = Sha256::new();
    // Writing JSON into a hasher cannot fail: `Value` keys are strings.
    let _ = serde_json::to_writer(HashWriter(&mut hasher), document);
    hasher.finalize().into()
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// True when every field of `want` is in `have` with the same value:
/// objects recursively (extra keys in `have` are fine), arrays element by
/// element with the same length, everything else equal. A list the API
/// server or another manager grew (e.g. a container added by someone else)
/// is not contained: the apply is then sent, which is only a redundant
/// write.
pub fn contains(have: &Value, want: &Value) -> bool {
    match (have, want) {
        (Value::Object(have), Value::Object(want)) => want
            .iter()
            .all(|(k, w)| have.get(k).is_some_and(|h| contains(h, w))),
        (Value::Array(have), Value::Array(want)) => {
            have.len() == want.len() && have.iter().zip(want).all(|(h, w)| contains(h, w))
        }
        // 1 and 1.0 are one value to the API server; two integers compare
        // exactly.
        (Value::Number(h), Value::Number(w)) if h.is_f64() || w.is_f64() => {
            h.as_f64() == w.as_f64()
        }
        _ => have == want,
    }
}

/// True when `document` is contained in the cached child `cached`
/// ([`contains`]), the cached child compared as its JSON (`apiVersion`,
/// `kind`, `metadata` and the rest).
fn cached_contains(cached: &CachedObject, document: &Value) -> bool {
    let Some(want) = document.as_object() else {
        return false;
    };
    // Parsed once for this comparison: the cache keeps bodies as text.
    let body = cached.body();
    want.iter().all(|(field, w)| match field.as_str() {
        "apiVersion" => cached
            .types
            .as_ref()
            .is_some_and(|t| Value::String(t.api_version.clone()) == *w),
        "kind" => cached
            .types
            .as_ref()
            .is_some_and(|t| Value::String(t.kind.clone()) == *w),
        "metadata" => serde_json::to_value(&cached.metadata).is_ok_and(|m| contains(&m, w)),
        other => body.get(other).is_some_and(|h| contains(h, w)),
    })
}

/// The decision for one child: true when applying `document` would change
/// nothing, given the cached child and what the host last applied to it
/// (see the [module](self) for the rule and what it guarantees).
pub fn is_unchanged(document: &Value, cached: &CachedObject, last: Option<&LastApplied>) -> bool {
    let Some(last) = last else {
        return false;
    };
    if cached.metadata.deletion_timestamp.is_some()
        || cached.uid().as_deref() != Some(last.uid.as_str())
        || digest(document) != last.digest
    {
        return false;
    }
    cached.resource_version().as_deref() == Some(last.resource_version.as_str())
        || cached_contains(cached, document)
}

/// Leaves out of `plan` the applies of children that are unchanged
/// ([`is_unchanged`]) and returns their keys. Only children the caches show
/// as this primary's (`observed`, see [`super::Observed::children`]) are
/// considered; `last` answers what the host last applied to a child.
pub fn skip(
    plan: &mut Plan,
    observed: &[OwnedChild],
    last: impl Fn(&ChildKey) -> Option<LastApplied>,
) -> Vec<ChildKey> {
    if plan.apply.is_empty() {
        return Vec::new();
    }
    let cached: BTreeMap<ChildKey, &CachedObject> = observed
        .iter()
        .map(|c| {
            (
                ChildKey::of(&c.resource, c.object.as_ref()),
                c.object.as_ref(),
            )
        })
        .collect();
    let unchanged: Vec<ChildKey> = plan
        .apply
        .iter()
        .filter(|(key, child)| {
            child.exists
                && cached
                    .get(*key)
                    .is_some_and(|obj| is_unchanged(&child.document, obj, last(key).as_ref()))
        })
        .map(|(key, _)| key.clone())
        .collect();
    for key in &unchanged {
        plan.apply.remove(key);
    }
    unchanged
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::api::{ApiResource, DynamicObject};
    use serde_json::json;

    use super::*;
    use crate::plan::{ChildApply, Requeue};

    /// [`super::is_unchanged`] of `cached` as the cache keeps it.
    fn is_unchanged(document: &Value, cached: &DynamicObject, last: Option<&LastApplied>) -> bool {
        super::is_unchanged(document, &CachedObject::from_dynamic(cached), last)
    }

    fn services() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "Service".into(),
            plural: "services".into(),
        }
    }

    /// The document the host applies for Service prod/shop.
    fn document() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "shop", "namespace": "prod",
                "labels": {"app": "shop", "wasm-operator.dev/plugin": "webapp"},
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": "WebApp",
                    "name": "shop", "uid": "u-1", "controller": true, "blockOwnerDeletion": true}]},
            "spec": {"selector": {"app": "shop"}, "ports": [{"port": 80}]},
        })
    }

    /// The child as the cache shows it after the apply: what the document
    /// says plus what the API server added.
    fn cached(resource_version: &str) -> DynamicObject {
        let mut value = document();
        value["metadata"]["uid"] = json!("c-1");
        value["metadata"]["resourceVersion"] = json!(resource_version);
        value["metadata"]["creationTimestamp"] = json!("2025-01-02T03:04:05Z");
        value["spec"]["ports"][0]["protocol"] = json!("TCP");
        value["spec"]["clusterIP"] = json!("10.0.0.1");
        value["status"] = json!({"loadBalancer": {}});
        serde_json::from_value(value).unwrap()
    }

    fn last() -> LastApplied {
        LastApplied {
            uid: "c-1".into(),
            digest: digest(&document()),
            resource_version: "7".into(),
        }
    }

    #[test]
    fn skips_what_was_applied_and_not_written_since() {
        assert!(is_unchanged(&document(), &cached("7"), Some(&last())));
    }

    #[test]
    fn skips_a_child_whose_other_fields_changed() {
        // e.g. a Deployment's status: another resourceVersion, our fields intact.
        let mut child = cached("9");
        child.data["status"] = json!({"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}});
        child
            .labels_mut()
            .insert("team".into(), "someone-else".into());
        assert!(is_unchanged(&document(), &child, Some(&last())));
    }

    #[test]
    fn applies_after_a_restart_or_for_a_new_child() {
        assert!(!is_unchanged(&document(), &cached("7"), None));
    }

    #[test]
    fn applies_when_the_document_changed() {
        // A field the plugin stops returning: the apply removes it.
        let mut fewer = document();
        fewer["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("app");
        assert!(!is_unchanged(&fewer, &cached("7"), Some(&last())));
        let mut other = document();
        other["spec"]["ports"][0]["port"] = json!(8080);
        assert!(!is_unchanged(&other, &cached("7"), Some(&last())));
    }

    #[test]
    fn applies_when_someone_changed_a_field_we_manage() {
        let mut changed = cached("9");
        changed.data["spec"]["ports"][0]["port"] = json!(81);
        assert!(!is_unchanged(&document(), &changed, Some(&last())));
        let mut unlabelled = cached("9");
        unlabelled.labels_mut().remove("app");
        assert!(!is_unchanged(&document(), &unlabelled, Some(&last())));
        let mut grown = cached("9");
        grown.data["spec"]["ports"]
            .as_array_mut()
            .unwrap()
            .push(json!({"port": 443}));
        assert!(!is_unchanged(&document(), &grown, Some(&last())));
    }

    #[test]
    fn applies_to_a_recreated_or_deleting_child() {
        let mut recreated = cached("7");
        recreated.metadata.uid = Some("c-2".into());
        assert!(!is_unchanged(&document(), &recreated, Some(&last())));
        let mut deleting = serde_json::to_value(cached("7")).unwrap();
        deleting["metadata"]["deletionTimestamp"] = json!("2025-01-02T03:04:05Z");
        let deleting: DynamicObject = serde_json::from_value(deleting).unwrap();
        assert!(!is_unchanged(&document(), &deleting, Some(&last())));
    }

    #[test]
    fn containment_is_recursive_and_lists_keep_their_length() {
        assert!(contains(
            &json!({"a": {"b": 1, "c": 2}}),
            &json!({"a": {"b": 1}})
        ));
        assert!(!contains(
            &json!({"a": {"b": 1}}),
            &json!({"a": {"b": 1, "c": 2}})
        ));
        assert!(contains(&json!([{"a": 1, "x": 0}]), &json!([{"a": 1}])));
        assert!(!contains(&json!([1, 2]), &json!([1])));
        assert!(contains(&json!(1.0), &json!(1)));
        assert!(!contains(&json!("1"), &json!(1)));
        assert!(contains(&json!(null), &json!(null)));
    }

    #[test]
    fn the_plan_leaves_out_exactly_the_unchanged_applies() {
        let key = ChildKey::of(&services(), &cached("7"));
        let mut other_key = key.clone();
        other_key.name = "new".into();
        let mut new_document = document();
        new_document["metadata"]["name"] = json!("new");
        let mut plan = Plan::idle(Requeue::Resync);
        plan.apply.insert(
            key.clone(),
            ChildApply {
                resource: services(),
                document: document(),
                exists: true,
            },
        );
        plan.apply.insert(
            other_key.clone(),
            ChildApply {
                resource: services(),
                document: new_document,
                exists: false,
            },
        );
        let observed = [OwnedChild {
            resource: services(),
            object: Arc::new(CachedObject::from_dynamic(&cached("7"))),
        }];
        // Without the memory (a restarted host) nothing is skipped.
        let mut after_restart = plan.clone();
        assert!(skip(&mut after_restart, &observed, |_| None).is_empty());
        assert_eq!(after_restart, plan);
        let skipped = skip(&mut plan, &observed, |_| Some(last()));
        assert_eq!(skipped, vec![key]);
        assert_eq!(plan.apply.keys().collect::<Vec<_>>(), vec![&other_key]);
    }
}
