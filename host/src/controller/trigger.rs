//! Trigger streams: cache events turned into controller inputs.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt, future};
use kube::api::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};

use crate::cache::{CacheEvent, CachedObject, NamespaceGate, ObjectIndex};
use crate::plan::FINALIZER;
use crate::plan::names::{FENCING_LEASE_ANNOTATION, FENCING_TOKEN_ANNOTATION};

/// What must change on a primary for it to be reconciled again: its identity
/// (a recreated object gets a new uid), its generation (spec changes),
/// deletion, finalizers, a restore's hold and the fencing mark (an object refused for a newer
/// term is retried once someone removes or changes the mark). Status and
/// other metadata-only changes - including the host's own status and version
/// annotations - are filtered out, which is what keeps reconciles from
/// looping on their own writes (the fencing mark changes once per term: one
/// more reconcile, which writes nothing).
fn primary_fingerprint(obj: &CachedObject) -> u64 {
    let mut h = DefaultHasher::new();
    obj.uid().hash(&mut h);
    obj.metadata.generation.hash(&mut h);
    obj.metadata.deletion_timestamp.is_some().hash(&mut h);
    obj.finalizers().hash(&mut h);
    let annotations = obj.annotations();
    annotations.get(FENCING_TOKEN_ANNOTATION).hash(&mut h);
    annotations.get(FENCING_LEASE_ANNOTATION).hash(&mut h);
    // A restore's hold: released, the object is reconciled again.
    annotations
        .get(crate::backup::RESTORE_HOLD_ANNOTATION)
        .hash(&mut h);
    h.finish()
}

/// The primary's trigger stream: changed primaries only (kube-runtime's
/// generation predicate, extended with deletion and finalizers), and only
/// in the namespaces `gate` allows (the plugin's grant).
pub(super) fn primaries(
    events: impl Stream<Item = CacheEvent> + Send + 'static,
    gate: NamespaceGate,
) -> impl Stream<Item = Result<CachedObject, watcher::Error>> + Send + 'static {
    let mut seen: HashMap<(Option<String>, String), u64> = HashMap::new();
    events.filter_map(move |event| {
        let obj = event.object();
        if !gate.allows_object(obj.as_ref()) && !holds_host_finalizer_while_deleting(obj.as_ref()) {
            // Not fingerprinted: once its namespace is granted, the next
            // event (or the Namespace's) lets it through. A deleting one
            // that still carries the host's finalizer (from before the grant
            // narrowed) passes: the reconcile releases it.
            return future::ready(None);
        }
        let key = (obj.namespace(), obj.name_any());
        let out = match &event {
            CacheEvent::Deleted(_) => {
                seen.remove(&key);
                None
            }
            CacheEvent::Applied(obj) => {
                let fp = primary_fingerprint(obj);
                (seen.insert(key, fp) != Some(fp)).then(|| Ok(obj.as_ref().clone()))
            }
        };
        future::ready(out)
    })
}

/// True when `obj` is being deleted and still carries the host's finalizer.
pub(super) fn holds_host_finalizer_while_deleting(obj: &impl Resource) -> bool {
    let meta = obj.meta();
    meta.deletion_timestamp.is_some() && meta.finalizers.iter().flatten().any(|f| f == FINALIZER)
}

/// Every change (including deletions) of a related kind, as objects.
pub(super) fn related(
    events: impl Stream<Item = CacheEvent> + Send + 'static,
) -> impl Stream<Item = Result<CachedObject, watcher::Error>> + Send + 'static {
    events.map(|event| Ok(event.object().as_ref().clone()))
}

/// The controller's reference to a primary.
fn primary_ref(primary: &CachedObject, ar: &ApiResource) -> ObjectRef<CachedObject> {
    let r = ObjectRef::new_with(&primary.name_any(), ar.clone());
    match primary.namespace() {
        Some(ns) => r.within(&ns),
        None => r,
    }
}

/// The primaries in `namespace`, from the primary cache's namespace index
/// (`primaries`): a change there costs the primaries of that namespace,
/// not a walk of every primary in the cluster.
pub(super) fn primaries_in(
    namespace: &str,
    primaries: &ObjectIndex,
    ar: &ApiResource,
) -> Vec<ObjectRef<CachedObject>> {
    primaries
        .in_namespace(namespace)
        .iter()
        .map(|p| primary_ref(p, ar))
        .collect()
}

/// The primaries a change of the watched object `other` may concern: those
/// of its namespace (from the index), or every primary when `other` is
/// cluster-scoped. Only that last case reads the whole primary store, and
/// there every primary is the answer.
pub(super) fn primaries_near(
    other: &CachedObject,
    primaries: &ObjectIndex,
    store: &Store<CachedObject>,
    ar: &ApiResource,
) -> Vec<ObjectRef<CachedObject>> {
    match other.metadata.namespace.as_deref() {
        Some(ns) => primaries_in(ns, primaries, ar),
        None => store.state().iter().map(|p| primary_ref(p, ar)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::stream;
    use serde_json::json;
    use std::sync::Arc;

    fn obj(generation: i64, rv: &str, finalizers: &[&str]) -> Arc<CachedObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "example.com/v1", "kind": "WebApp",
                "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "generation": generation,
                             "resourceVersion": rv, "finalizers": finalizers},
            }))
            .unwrap(),
        )
    }

    #[tokio::test]
    async fn filters_status_only_changes() {
        let events = vec![
            CacheEvent::Applied(obj(1, "1", &[])),
            CacheEvent::Applied(obj(1, "2", &[])), // status write: filtered
            CacheEvent::Applied(obj(1, "3", &["f"])), // finalizer added: passes
            CacheEvent::Applied(obj(2, "4", &["f"])), // spec change: passes
            CacheEvent::Deleted(obj(2, "5", &["f"])),
            CacheEvent::Applied(obj(2, "6", &["f"])), // seen again after delete: passes
        ];
        let gate = NamespaceGate::new(Default::default(), None);
        let out: Vec<_> = primaries(stream::iter(events), gate).collect().await;
        let rvs: Vec<_> = out
            .into_iter()
            .map(|o| o.unwrap().resource_version().unwrap())
            .collect();
        assert_eq!(rvs, ["1", "3", "4", "6"]);
    }

    #[tokio::test]
    async fn a_changed_or_removed_fencing_mark_triggers() {
        let marked = |rv: &str, annotations: serde_json::Value| {
            Arc::new(
                serde_json::from_value::<CachedObject>(json!({
                    "apiVersion": "example.com/v1", "kind": "WebApp",
                    "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "generation": 1,
                                 "resourceVersion": rv, "annotations": annotations},
                }))
                .unwrap(),
            )
        };
        let lease = "ns/wasm-operator/u9";
        let events = vec![
            CacheEvent::Applied(marked("1", json!({}))),
            // The host's first mark of a term: one more reconcile.
            CacheEvent::Applied(marked(
                "2",
                json!({FENCING_TOKEN_ANNOTATION: "0", FENCING_LEASE_ANNOTATION: lease}),
            )),
            // Another annotation (a version mark): filtered.
            CacheEvent::Applied(marked(
                "3",
                json!({FENCING_TOKEN_ANNOTATION: "0", FENCING_LEASE_ANNOTATION: lease, "x": "y"}),
            )),
            // Removed by hand: passes.
            CacheEvent::Applied(marked("4", json!({"x": "y"}))),
            // Changed to a newer term: passes.
            CacheEvent::Applied(marked(
                "5",
                json!({FENCING_TOKEN_ANNOTATION: "9", FENCING_LEASE_ANNOTATION: lease}),
            )),
        ];
        let gate = NamespaceGate::new(Default::default(), None);
        let rvs: Vec<_> = primaries(stream::iter(events), gate)
            .map(|o| o.unwrap().resource_version().unwrap())
            .collect()
            .await;
        assert_eq!(rvs, ["1", "2", "4", "5"]);
    }

    #[tokio::test]
    async fn primaries_outside_the_grant_never_trigger() {
        let in_ns = |ns: &str, name: &str| {
            Arc::new(
                serde_json::from_value::<CachedObject>(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": ns, "uid": name, "generation": 1},
                }))
                .unwrap(),
            )
        };
        let events = vec![
            CacheEvent::Applied(in_ns("kube-system", "coredns")),
            CacheEvent::Applied(in_ns("team-a", "mine")),
            CacheEvent::Applied(in_ns("team-b", "theirs")),
        ];
        let grant = crate::contract::Grant {
            namespaces: Some(vec!["team-a".into()]),
            ..Default::default()
        };
        let gate = NamespaceGate::new(Arc::new(grant), None);
        let names: Vec<_> = primaries(stream::iter(events), gate)
            .map(|o| o.unwrap().name_any())
            .collect()
            .await;
        assert_eq!(names, ["mine"]);
    }

    fn webapp(ns: &str, name: &str) -> Arc<CachedObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "example.com/v1", "kind": "WebApp",
                "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            }))
            .unwrap(),
        )
    }

    fn webapps() -> ApiResource {
        ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            api_version: "example.com/v1".into(),
            kind: "WebApp".into(),
            plural: "webapps".into(),
        }
    }

    fn refs(mut refs: Vec<ObjectRef<CachedObject>>) -> Vec<String> {
        refs.sort_by_key(|r| (r.namespace.clone(), r.name.clone()));
        refs.iter()
            .map(|r| format!("{}/{}", r.namespace.as_deref().unwrap_or("-"), r.name))
            .collect()
    }

    #[test]
    fn a_watched_object_maps_to_the_primaries_of_its_namespace_or_all() {
        let primaries = [
            webapp("a", "shop"),
            webapp("a", "blog"),
            webapp("b", "wiki"),
        ];
        let index = ObjectIndex::of(primaries.iter().cloned());
        let mut writer = kube::runtime::reflector::store::Writer::new(webapps());
        for p in &primaries {
            writer.apply_watcher_event(&watcher::Event::Apply(p.as_ref().clone()));
        }
        let store = writer.as_reader();
        let secret = |ns: Option<&str>| -> CachedObject {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": ns},
            }))
            .unwrap()
        };
        let near = |other| refs(primaries_near(&other, &index, &store, &webapps()));
        assert_eq!(near(secret(Some("a"))), ["a/blog", "a/shop"]);
        assert_eq!(near(secret(Some("c"))), Vec::<String>::new());
        // Cluster-scoped: every primary.
        assert_eq!(near(secret(None)), ["a/blog", "a/shop", "b/wiki"]);
        // A Namespace's primaries (the grant's namespaceSelector).
        assert_eq!(refs(primaries_in("b", &index, &webapps())), ["b/wiki"]);
        let r = &primaries_in("b", &index, &webapps())[0];
        assert_eq!(r.dyntype.kind, "WebApp");
    }
}
