//! Read-only access to the host's caches.
//!
//! A plugin may read its primary kind, its owned kinds and the kinds its
//! manifest [`watches`](crate::Manifest::watches); the host refuses anything
//! else with an error naming the kind (and flags the object `CapabilityDenied`).
//!
//! Inside wasm these functions call the host. Compiled natively (unit tests,
//! benchmarks) there is no host, so they read from a [`CacheSource`] installed
//! on the current thread with [`set_native_source`]; without one they return
//! [`CacheError::NoHost`].

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::Failure;

/// Names one object the host may know about.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// `kind`, e.g. `Secret`.
    pub kind: String,
    /// Absent for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectRef {
    /// A reference to the object of type `T` called `name`.
    pub fn of<T: k8s_openapi::Resource>(namespace: Option<&str>, name: &str) -> Self {
        ObjectRef {
            api_version: T::API_VERSION.to_owned(),
            kind: T::KIND.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }
}

/// Why a cache read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// The host refused or failed the read; the message is the host's
    /// (e.g. a `CapabilityDenied` naming an undeclared kind).
    #[error("cache read refused by the host: {0}")]
    Host(String),
    /// The host answered with something that is not the expected object.
    #[error("cache returned {kind} {name:?} that does not parse: {error}")]
    Parse {
        /// Kind that was read.
        kind: String,
        /// Object name, or the list being read.
        name: String,
        /// The deserializer's message.
        error: String,
    },
    /// Compiled natively with no [`CacheSource`] installed on this thread.
    #[error("no host cache outside wasm: install one with cache::set_native_source")]
    NoHost,
}

impl From<CacheError> for Failure {
    /// Cache trouble is worth retrying: caches fill, capabilities get granted
    /// by a new plugin version. The message keeps the host's wording.
    fn from(e: CacheError) -> Self {
        Failure::transient(e.to_string())
    }
}

/// The object of type `T` called `name`, from the host's cache.
pub fn get<T>(namespace: Option<&str>, name: &str) -> Result<Option<T>, CacheError>
where
    T: k8s_openapi::Resource + DeserializeOwned,
{
    let Some(value) = get_json(&ObjectRef::of::<T>(namespace, name))? else {
        return Ok(None);
    };
    T::deserialize(value)
        .map(Some)
        .map_err(|e| CacheError::Parse {
            kind: T::KIND.to_owned(),
            name: name.to_owned(),
            error: e.to_string(),
        })
}

/// Objects of type `T`, optionally in one namespace and matching a label
/// selector such as `app=web,tier in (a,b)`.
pub fn list<T>(namespace: Option<&str>, label_selector: Option<&str>) -> Result<Vec<T>, CacheError>
where
    T: k8s_openapi::Resource + DeserializeOwned,
{
    list_json(T::API_VERSION, T::KIND, namespace, label_selector)?
        .into_iter()
        .map(|value| {
            T::deserialize(value).map_err(|e| CacheError::Parse {
                kind: T::KIND.to_owned(),
                name: format!("list in {}", namespace.unwrap_or("all namespaces")),
                error: e.to_string(),
            })
        })
        .collect()
}

/// One object as JSON, for kinds without a Rust type.
pub fn get_json(object: &ObjectRef) -> Result<Option<Value>, CacheError> {
    let Some(raw) = host::get(object)? else {
        return Ok(None);
    };
    serde_json::from_str(&raw)
        .map(Some)
        .map_err(|e| CacheError::Parse {
            kind: object.kind.clone(),
            name: object.name.clone(),
            error: e.to_string(),
        })
}

/// Objects of a kind as JSON, for kinds without a Rust type.
pub fn list_json(
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Value>, CacheError> {
    host::list(api_version, kind, namespace, label_selector)?
        .iter()
        .map(|raw| {
            serde_json::from_str(raw).map_err(|e| CacheError::Parse {
                kind: kind.to_owned(),
                name: format!("list in {}", namespace.unwrap_or("all namespaces")),
                error: e.to_string(),
            })
        })
        .collect()
}

/// A stand-in for the host's cache when plugin code runs natively.
pub trait CacheSource {
    /// One object as JSON; `Err` is the host's refusal message.
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, String>;
    /// Objects of a kind as JSON; `Err` is the host's refusal message.
    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String>;
}

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static NATIVE_SOURCE: std::cell::RefCell<Option<Box<dyn CacheSource>>> =
        const { std::cell::RefCell::new(None) };
}

/// Installs (or with `None` removes) the cache that native calls on this
/// thread read from. Returns the previous one. Per thread, so parallel tests
/// do not see each other's caches.
#[cfg(not(target_arch = "wasm32"))]
pub fn set_native_source(source: Option<Box<dyn CacheSource>>) -> Option<Box<dyn CacheSource>> {
    NATIVE_SOURCE.with(|s| std::mem::replace(&mut *s.borrow_mut(), source))
}

#[cfg(target_arch = "wasm32")]
mod host {
    use super::{CacheError, ObjectRef};
    use crate::bindings::wasm_operator::plugin::{cache, types};

    pub(super) fn get(object: &ObjectRef) -> Result<Option<String>, CacheError> {
        let wit_ref = types::ObjectRef {
            api_version: object.api_version.clone(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        };
        cache::get(&wit_ref).map_err(CacheError::Host)
    }

    pub(super) fn list(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, CacheError> {
        cache::list(api_version, kind, namespace, label_selector).map_err(CacheError::Host)
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod host {
    use super::{CacheError, NATIVE_SOURCE, ObjectRef};

    pub(super) fn get(object: &ObjectRef) -> Result<Option<String>, CacheError> {
        NATIVE_SOURCE.with(|s| match &*s.borrow() {
            Some(source) => source.get(object).map_err(CacheError::Host),
            None => Err(CacheError::NoHost),
        })
    }

    pub(super) fn list(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, CacheError> {
        NATIVE_SOURCE.with(|s| match &*s.borrow() {
            Some(source) => source
                .list(api_version, kind, namespace, label_selector)
                .map_err(CacheError::Host),
            None => Err(CacheError::NoHost),
        })
    }
}
