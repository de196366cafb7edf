//! Typed fixtures for a plugin's unit tests: build the primary, its children
//! and the objects its cache reads answer from typed values, call the
//! reconciler natively through the same JSON path the component's export
//! glue takes ([`reconcile_json`](crate::reconcile_json)), and read typed
//! children, status, conditions and events back.
//!
//! ```
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//! use wasm_operator_sdk::testing::Fixture;
//! use wasm_operator_sdk::{Children, Condition, Context, Desired, Failure, Kind, Manifest, Reconciler};
//!
//! #[derive(Deserialize)]
//! struct Settings { metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, spec: SettingsSpec }
//! #[derive(Deserialize)]
//! struct SettingsSpec { greeting: String }
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! struct SettingsStatus { written: bool }
//!
//! struct Plugin;
//! impl Reconciler for Plugin {
//!     type Object = Settings;
//!     fn manifest() -> Manifest {
//!         Manifest::new("settings", "0.1.0")
//!             .primary(Kind::namespaced("example.com", "v1", "Settings", "settings"))
//!             .owns::<ConfigMap>()
//!     }
//!     fn reconcile(_: &Context, s: Settings, _: &Children) -> Result<Desired, Failure> {
//!         let mut cm = ConfigMap::default();
//!         cm.metadata.name = s.metadata.name.clone();
//!         cm.data = Some([("greeting".to_string(), s.spec.greeting)].into());
//!         Desired::new()
//!             .child(&cm)?
//!             .status_of(&SettingsStatus { written: true })
//!             .map(|d| d.condition(Condition::ready(true, "Written", "the ConfigMap is written")))
//!     }
//! }
//!
//! let outcome = Fixture::<Plugin>::new(&json!({
//!     "apiVersion": "example.com/v1", "kind": "Settings",
//!     "metadata": {"name": "hello", "namespace": "default"},
//!     "spec": {"greeting": "hi"},
//! }))
//! .reconcile()
//! .unwrap();
//! let cm = outcome.child::<ConfigMap>("hello").unwrap();
//! assert_eq!(cm.data.unwrap()["greeting"], "hi");
//! assert_eq!(outcome.status::<SettingsStatus>(), Some(SettingsStatus { written: true }));
//! assert_eq!(outcome.condition("Ready").unwrap().status, "True");
//! ```
//!
//! Golden fixtures of the built component (`wasm-operator plugin test`)
//! check the same answers through the host's engine; these run in
//! `cargo test`, without building the component.

use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::cache::{CacheSource, ObjectRef};
use crate::{Condition, Context, DesiredJson, Event, Failure, Finalized, Reconciler};

/// A primary with its children, cache objects and call context, ready to
/// hand to reconciler `R`.
pub struct Fixture<R> {
    object: Value,
    children: Vec<Value>,
    cache: Vec<Value>,
    context: Context,
    reconciler: PhantomData<R>,
}

/// `value` as JSON; a test's own typed value that does not serialize is a
/// bug of the test.
fn to_json<T: Serialize>(value: &T, what: &str) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("{what} does not serialize to JSON: {e}"))
}

/// A typed object as JSON with its `apiVersion` and `kind`: k8s-openapi
/// types serialize them themselves, and the fields are set when missing.
fn resource_json<T: Serialize + k8s_openapi::Resource>(object: &T, what: &str) -> Value {
    let mut value = to_json(object, what);
    if let Some(map) = value.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| T::API_VERSION.into());
        map.entry("kind").or_insert_with(|| T::KIND.into());
    }
    value
}

impl<R: Reconciler> Fixture<R> {
    /// A fixture for `object`, the primary (a typed value of the author's
    /// or JSON, with apiVersion, kind and metadata), with no children, no
    /// cache objects and the context of the manifest's version, attempt 1.
    ///
    /// # Panics
    ///
    /// When `object` does not serialize to JSON.
    pub fn new<T: Serialize>(object: &T) -> Self {
        Fixture {
            object: to_json(object, "the primary"),
            children: Vec::new(),
            cache: Vec::new(),
            context: Context::new(R::manifest().version),
            reconciler: PhantomData,
        }
    }

    /// Adds an observed owned child, e.g. a `Deployment` with its status.
    ///
    /// # Panics
    ///
    /// When `child` does not serialize to JSON.
    #[must_use]
    pub fn child<T: Serialize + k8s_openapi::Resource>(mut self, child: &T) -> Self {
        self.children.push(resource_json(child, "a child"));
        self
    }

    /// Adds an observed owned child given as JSON.
    #[must_use]
    pub fn child_json(mut self, child: Value) -> Self {
        self.children.push(child);
        self
    }

    /// Adds an object the plugin's cache reads ([`crate::cache::get`],
    /// [`crate::cache::list`]) answer with.
    ///
    /// # Panics
    ///
    /// When `object` does not serialize to JSON.
    #[must_use]
    pub fn cached<T: Serialize + k8s_openapi::Resource>(mut self, object: &T) -> Self {
        self.cache.push(resource_json(object, "a cache object"));
        self
    }

    /// Sets the call context (attempt, config, managed-by version).
    #[must_use]
    pub fn context(mut self, context: Context) -> Self {
        self.context = context;
        self
    }

    /// Calls `R::reconcile` through [`reconcile_json`](crate::reconcile_json),
    /// with the cache reads answered from [`Fixture::cached`] objects.
    ///
    /// # Errors
    ///
    /// The plugin's [`Failure`].
    pub fn reconcile(&self) -> Result<Outcome, Failure> {
        let (object, children) = self.texts();
        let desired =
            self.with_cache(|| crate::reconcile_json::<R>(&self.context, &object, &children))?;
        Ok(Outcome::new(desired))
    }

    /// Calls `R::finalize` through [`finalize_json`](crate::finalize_json).
    ///
    /// # Errors
    ///
    /// The plugin's [`Failure`].
    pub fn finalize(&self) -> Result<Finalized, Failure> {
        let (object, children) = self.texts();
        self.with_cache(|| crate::finalize_json::<R>(&self.context, &object, &children))
    }

    fn texts(&self) -> (String, Vec<String>) {
        (
            self.object.to_string(),
            self.children.iter().map(Value::to_string).collect(),
        )
    }

    /// Runs `call` with this fixture's cache installed on the thread, then
    /// puts back what was installed before.
    fn with_cache<T>(&self, call: impl FnOnce() -> T) -> T {
        let previous =
            crate::cache::set_native_source(Some(Box::new(FixtureCache(self.cache.clone()))));
        let result = call();
        crate::cache::set_native_source(previous);
        result
    }
}

/// Answers cache reads from a fixture's objects. Label selectors of the
/// equality form (`a=b,c!=d`, `e`, `!f`) are matched; any other form is
/// answered with the host's kind of refusal, naming the selector.
struct FixtureCache(Vec<Value>);

fn text<'v>(object: &'v Value, pointer: &str) -> Option<&'v str> {
    object.pointer(pointer).and_then(Value::as_str)
}

fn selector_matches(selector: &str, object: &Value) -> Result<bool, String> {
    let label = |key: &str| {
        text(
            object,
            &format!("/metadata/labels/{}", key.replace('/', "~1")),
        )
    };
    for requirement in selector.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let holds = if let Some((key, value)) = requirement.split_once("!=") {
            label(key.trim()) != Some(value.trim())
        } else if let Some((key, value)) = requirement.split_once('=') {
            label(key.trim()) == Some(value.trim_start_matches('=').trim())
        } else if let Some(key) = requirement.strip_prefix('!') {
            label(key.trim()).is_none()
        } else if requirement.contains([' ', '(', '<', '>']) {
            return Err(format!(
                "the SDK's test cache matches equality selectors only, not {selector:?}; test this read with `wasm-operator plugin test`"
            ));
        } else {
            label(requirement).is_some()
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

fn is_kind(object: &Value, api_version: &str, kind: &str) -> bool {
    text(object, "/apiVersion") == Some(api_version) && text(object, "/kind") == Some(kind)
}

impl CacheSource for FixtureCache {
    fn get(&self, r: &ObjectRef) -> Result<Option<String>, String> {
        Ok(self
            .0
            .iter()
            .find(|o| {
                is_kind(o, &r.api_version, &r.kind)
                    && text(o, "/metadata/namespace") == r.namespace.as_deref()
                    && text(o, "/metadata/name") == Some(r.name.as_str())
            })
            .map(Value::to_string))
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let mut found = Vec::new();
        for object in &self.0 {
            let in_namespace =
                namespace.is_none_or(|ns| text(object, "/metadata/namespace") == Some(ns));
            if is_kind(object, api_version, kind)
                && in_namespace
                && label_selector.map_or(Ok(true), |s| selector_matches(s, object))?
            {
                found.push(object.to_string());
            }
        }
        Ok(found)
    }
}

/// A reconciler's answer, parsed back from the JSON the component would
/// have returned, with typed accessors.
#[derive(Debug, Clone)]
pub struct Outcome {
    desired: DesiredJson,
    children: Vec<Value>,
    status: Option<Value>,
}

impl Outcome {
    fn new(desired: DesiredJson) -> Outcome {
        // The reconciler's own JSON: it always parses.
        let parse = |text: &String| serde_json::from_str(text).unwrap_or(Value::Null);
        Outcome {
            children: desired.children.iter().map(parse).collect(),
            status: desired.status.as_ref().map(parse),
            desired,
        }
    }

    /// Every desired child of type `T`, in the order the plugin answered.
    ///
    /// # Panics
    ///
    /// When a child of `T`'s apiVersion and kind does not parse as `T`.
    pub fn children<T: k8s_openapi::Resource + DeserializeOwned>(&self) -> Vec<T> {
        self.children
            .iter()
            .filter(|c| is_kind(c, T::API_VERSION, T::KIND))
            .map(parse)
            .collect()
    }

    /// The desired child of type `T` called `name`.
    ///
    /// # Panics
    ///
    /// When the child does not parse as `T`.
    pub fn child<T: k8s_openapi::Resource + DeserializeOwned>(&self, name: &str) -> Option<T> {
        self.children
            .iter()
            .find(|c| {
                is_kind(c, T::API_VERSION, T::KIND) && text(c, "/metadata/name") == Some(name)
            })
            .map(parse)
    }

    /// Every desired child as JSON, in the order the plugin answered.
    pub fn raw_children(&self) -> &[Value] {
        &self.children
    }

    /// The status fields as `T`; `None` when the plugin set none.
    ///
    /// # Panics
    ///
    /// When the status does not parse as `T`.
    pub fn status<T: DeserializeOwned>(&self) -> Option<T> {
        self.status.as_ref().map(parse)
    }

    /// The status fields as JSON.
    pub fn status_json(&self) -> Option<&Value> {
        self.status.as_ref()
    }

    /// The conditions, in the order the plugin set them.
    pub fn conditions(&self) -> &[Condition] {
        &self.desired.conditions
    }

    /// The condition of type `kind`.
    pub fn condition(&self, kind: &str) -> Option<&Condition> {
        self.desired.conditions.iter().find(|c| c.kind == kind)
    }

    /// The events, in order.
    pub fn events(&self) -> &[Event] {
        &self.desired.events
    }

    /// The requeue the plugin asked for.
    pub fn requeue_after(&self) -> Option<Duration> {
        self.desired.requeue_after_ms.map(Duration::from_millis)
    }
}

fn parse<T: DeserializeOwned>(value: &Value) -> T {
    T::deserialize(value).unwrap_or_else(|e| {
        panic!(
            "the plugin's answer does not parse as {}: {e}\n{value:#}",
            std::any::type_name::<T>()
        )
    })
}
