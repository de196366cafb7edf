//! The compact form the shared caches keep objects in.
//!
//! The caches hold every object of every watched kind for the host's whole
//! life: at 10,000 WebApps that is 30,000 objects (each WebApp with its
//! Deployment and Service). Kept as kube's `DynamicObject`, whose body is a
//! `serde_json::Value` tree, a defaulted Deployment takes 8–12 KiB: every
//! map, key and string is its own allocation. A [`CachedObject`] keeps what
//! the host reads of every object typed (its metadata: names, UID, labels,
//! owners, finalizers, versions) and the rest (spec, status, data…) as one
//! compact JSON text, about 1.2 KiB for that Deployment.
//!
//! # Trade-off
//!
//! What is read of a body is parsed on demand: a plugin call takes objects
//! as JSON text anyway, so handing one over costs one serialization of the
//! metadata and a copy of the body ([`CachedObject::text`]), less than
//! serializing a `Value` tree did. The readers that need values (the check
//! that a desired child is already in place, a primary entering a reconcile)
//! parse a body of a few KiB, a few microseconds, once per use.

use std::borrow::Cow;
use std::fmt;

use kube::Resource;
use kube::api::{ApiResource, DynamicObject, ObjectMeta, TypeMeta};
use kube::core::DynamicResourceScope;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An object as the shared caches keep it: its type and metadata typed, the
/// other top-level fields as one compact JSON object text.
///
/// Deserializes from an object's JSON as `DynamicObject` does (the
/// reflectors list and watch it directly, so no `Value` tree is ever built
/// for a cached object), and is a [`Resource`] of the dynamic kind
/// [`ApiResource`], so kube-runtime's stores and controllers take it as they
/// take `DynamicObject`.
#[derive(Clone, Debug, PartialEq)]
pub struct CachedObject {
    /// `apiVersion` and `kind`, when the object carried them (a list item
    /// may not; the reflectors fill them in).
    pub types: Option<TypeMeta>,
    /// The object's metadata.
    pub metadata: ObjectMeta,
    /// Every other top-level field, as a compact JSON object (`{}` when
    /// there is none). Always valid JSON: only this module writes it.
    body: Box<str>,
}

impl CachedObject {
    /// The compact form of `object` (tests, and objects read fresh from the
    /// API server that are handed on beside cached ones).
    pub fn from_dynamic(object: &DynamicObject) -> CachedObject {
        let body = match &object.data {
            Value::Object(map) if !map.is_empty() => serde_json::to_string(map)
                .unwrap_or_else(|_| EMPTY_BODY.to_string())
                .into_boxed_str(),
            _ => EMPTY_BODY.into(),
        };
        CachedObject {
            types: object.types.clone(),
            metadata: object.metadata.clone(),
            body,
        }
    }

    /// The object as kube's `DynamicObject`, its body parsed.
    pub fn to_dynamic(&self) -> DynamicObject {
        DynamicObject {
            types: self.types.clone(),
            metadata: self.metadata.clone(),
            data: self.body(),
        }
    }

    /// The top-level fields other than `apiVersion`, `kind` and `metadata`,
    /// parsed: a JSON object.
    pub fn body(&self) -> Value {
        // The text is this module's own serialization of a JSON object, so
        // parsing cannot fail; an empty object stands in if it ever did.
        serde_json::from_str(&self.body).unwrap_or_else(|_| Value::Object(Default::default()))
    }

    /// The whole object as compact JSON text, keys in the order the API
    /// server writes them (`apiVersion`, `kind`, `metadata`, then the body):
    /// what a plugin call is handed. `ar` supplies the type when the object
    /// carries none.
    pub fn text(&self, ar: &ApiResource) -> String {
        let (api_version, kind) = match &self.types {
            Some(types) => (types.api_version.as_str(), types.kind.as_str()),
            None => (ar.api_version.as_str(), ar.kind.as_str()),
        };
        let head = Head {
            api_version,
            kind,
            metadata: &self.metadata,
        };
        // Cannot fail: the metadata's maps have string keys.
        let mut text = serde_json::to_string(&head).unwrap_or_else(|_| "{}".to_string());
        let fields = self
            .body
            .strip_prefix('{')
            .and_then(|inner| inner.strip_suffix('}'))
            .unwrap_or_default();
        if !fields.is_empty() && text.ends_with('}') {
            text.pop();
            text.reserve(fields.len() + 2);
            text.push(',');
            text.push_str(fields);
            text.push('}');
        }
        text
    }
}

/// The body of an object without fields beyond its type and metadata.
const EMPTY_BODY: &str = "{}";

/// The head of [`CachedObject::text`].
#[derive(Serialize)]
struct Head<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'a str,
    kind: &'a str,
    metadata: &'a ObjectMeta,
}

impl Resource for CachedObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for CachedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<CachedObject, D::Error> {
        deserializer.deserialize_map(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = CachedObject;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<CachedObject, A::Error> {
        let mut api_version: Option<String> = None;
        let mut kind: Option<String> = None;
        let mut metadata: Option<ObjectMeta> = None;
        let mut body: Vec<u8> = Vec::with_capacity(512);
        body.push(b'{');
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            match key.as_ref() {
                "apiVersion" => api_version = map.next_value()?,
                "kind" => kind = map.next_value()?,
                "metadata" => metadata = map.next_value()?,
                field => {
                    if body.len() > 1 {
                        body.push(b',');
                    }
                    serde_json::to_writer(&mut body, field).map_err(de::Error::custom)?;
                    body.push(b':');
                    map.next_value_seed(Transcode(&mut body))?;
                }
            }
        }
        body.push(b'}');
        let types = match (api_version, kind) {
            (Some(api_version), Some(kind)) => Some(TypeMeta { api_version, kind }),
            _ => None,
        };
        let body = String::from_utf8(body).map_err(de::Error::custom)?;
        Ok(CachedObject {
            types,
            metadata: metadata.unwrap_or_default(),
            body: body.into_boxed_str(),
        })
    }
}

/// Writes the value being deserialized, whatever the deserializer (serde_json
/// straight from the response, or serde's buffered content inside kube's
/// `ObjectList`, which flattens), as compact JSON into the buffer: the
/// body is never built as a `Value` tree.
struct Transcode<'a>(&'a mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Transcode<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        let mut serializer = serde_json::Serializer::new(&mut *self.0);
        serde_transcode::transcode(deserializer, &mut serializer).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectList;
    use serde_json::json;

    fn deployments() -> ApiResource {
        ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        }
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1",
                "resourceVersion": "7", "labels": {"app": "web"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80}], "resources": {}}]}}},
            "status": {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}],
                "ratio": 0.5, "note": "quote \" and unicode é"},
        })
    }

    #[test]
    fn a_cached_object_writes_the_json_it_was_read_from() {
        let text = serde_json::to_string(&deployment()).unwrap();
        let cached: CachedObject = serde_json::from_str(&text).unwrap();
        assert_eq!(cached.metadata.name.as_deref(), Some("web"));
        assert_eq!(cached.types.as_ref().unwrap().kind, "Deployment");
        // Written as kube writes the `DynamicObject` (the metadata's keys
        // in ObjectMeta's order), the body as it came.
        let dynamic: DynamicObject = serde_json::from_str(&text).unwrap();
        assert_eq!(
            cached.text(&deployments()),
            serde_json::to_string(&dynamic).unwrap()
        );
        let parsed: Value = serde_json::from_str(&cached.text(&deployments())).unwrap();
        assert_eq!(parsed, deployment());
    }

    #[test]
    fn the_body_parses_back_to_the_fields_and_matches_a_dynamic_object() {
        let dynamic: DynamicObject = serde_json::from_value(deployment()).unwrap();
        let cached: CachedObject = serde_json::from_value(deployment()).unwrap();
        assert_eq!(cached.to_dynamic(), dynamic);
        assert_eq!(CachedObject::from_dynamic(&dynamic), cached);
        assert_eq!(cached.body()["status"]["readyReplicas"], 2);
        assert_eq!(cached.body().get("missing"), None);
        assert_eq!(cached.body()["spec"]["replicas"], 2);
    }

    #[test]
    fn list_items_deserialize_through_kubes_flattened_list() {
        // `ObjectList` flattens its type, so serde buffers the whole list
        // before the items are read: the body is transcoded from that buffer.
        let mut item = deployment();
        item.as_object_mut().unwrap().remove("apiVersion");
        item.as_object_mut().unwrap().remove("kind");
        let list = json!({"apiVersion": "apps/v1", "kind": "DeploymentList",
            "metadata": {"resourceVersion": "9"}, "items": [item.clone()]});
        let list: ObjectList<CachedObject> =
            serde_json::from_str(&serde_json::to_string(&list).unwrap()).unwrap();
        let cached = &list.items[0];
        assert_eq!(cached.types, None);
        let parsed: Value = serde_json::from_str(&cached.text(&deployments())).unwrap();
        assert_eq!(parsed, deployment(), "the type is filled from the resource");
        assert_eq!(cached.body()["status"]["note"], "quote \" and unicode é");
    }

    #[test]
    fn an_object_without_a_body_writes_only_its_head() {
        let cached: CachedObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}))
        .unwrap();
        assert_eq!(cached.body(), json!({}));
        assert_eq!(
            cached.text(&deployments()),
            r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}"#
        );
        let empty = CachedObject::from_dynamic(&cached.to_dynamic());
        assert_eq!(empty, cached);
    }

    #[test]
    fn garbage_is_refused_not_cached() {
        assert!(serde_json::from_str::<CachedObject>("[1, 2]").is_err());
        assert!(serde_json::from_str::<CachedObject>(r#"{"metadata": 3}"#).is_err());
        assert!(serde_json::from_str::<CachedObject>(r#"{"spec": {"a": }"#).is_err());
    }
}
