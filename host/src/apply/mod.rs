//! Turning a plugin's intent into API writes: server-side apply of children,
//! pruning, the finalizer, status and conditions, annotations and events.
//!
//! Every write compares with what the cache shows first and is skipped when
//! nothing would change, so the host's own writes never cause a hot loop.

mod children;
pub mod events;
mod metadata;
mod status;

pub use children::{ChildPlan, apply_children, owned_children, plan_children, prune_children};
pub use events::EventSink;
pub use metadata::{
    VersionMarks, ensure_finalizer, has_finalizer, remove_finalizer, write_version_annotations,
};
pub use status::{FailureStatus, build_status, write_status};

/// Label naming the plugin that manages a child.
pub const PLUGIN_LABEL: &str = "wasm-operator.dev/plugin";
/// Standard label every child carries.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY_VALUE: &str = "wasm-operator";
/// Finalizer the host puts on primaries whose plugin asks for one. One name
/// for every plugin: a primary kind is served by one plugin at a time.
pub const FINALIZER: &str = "wasm-operator.dev/finalizer";
/// Annotation: plugin version that last managed the object.
pub const MANAGED_BY_VERSION_ANNOTATION: &str = "wasm-operator.dev/managed-by-version";
/// Annotation: plugin version of the last successful reconcile.
pub const LAST_RECONCILED_VERSION_ANNOTATION: &str = "wasm-operator.dev/last-reconciled-version";
/// Annotation: where the object's upgrade to the managing version stands
/// (`pending` / `in-progress` / `completed`).
pub const MIGRATION_STATE_ANNOTATION: &str = "wasm-operator.dev/migration-state";
/// Annotation: the oldest plugin version that may still reconcile the object
/// (the managing version's `min_compatible_version`; absent when it declares none).
pub const MIN_COMPATIBLE_VERSION_ANNOTATION: &str = "wasm-operator.dev/min-compatible-version";
/// Prefix of the annotations the host owns on primaries.
pub const HOST_ANNOTATION_PREFIX: &str = "wasm-operator.dev/";

/// The field manager of a plugin's writes.
pub fn field_manager(plugin: &str) -> String {
    format!("wasm-operator/{plugin}")
}

/// Why turning intent into API writes failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The plugin returned children of kinds its manifest does not own;
    /// nothing was written.
    #[error(
        "plugin {plugin} {version} returned children of kinds it does not own: {kinds}; nothing was written. Add the kinds to the manifest's `owns` or stop returning them"
    )]
    CapabilityDenied {
        plugin: String,
        version: String,
        kinds: String,
    },
    /// A child is unusable as returned (e.g. in another namespace than its owner).
    #[error(
        "plugin {plugin} {version} returned an invalid child {child}: {problem}; fix the plugin"
    )]
    InvalidChild {
        plugin: String,
        version: String,
        child: String,
        problem: String,
    },
    /// The API server refused or failed a write; retried with backoff.
    #[error(
        "{action} {target} failed: {source}; the host retries with backoff, check the API server and RBAC if it persists"
    )]
    Api {
        action: &'static str,
        target: String,
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    /// The condition/event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::CapabilityDenied { .. } => "CapabilityDenied",
            ApplyError::InvalidChild { .. } => "PluginInvalidOutput",
            ApplyError::Api { .. } => "ApplyFailed",
        }
    }

    /// True when retrying the same output cannot help.
    pub fn is_permanent(&self) -> bool {
        !matches!(self, ApplyError::Api { .. })
    }

    pub(crate) fn api(
        action: &'static str,
        target: impl Into<String>,
        source: kube::Error,
    ) -> ApplyError {
        ApplyError::Api {
            action,
            target: target.into(),
            source,
        }
    }
}

/// `namespace/name` (or just `name`) of an object, for messages.
pub fn display_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}
