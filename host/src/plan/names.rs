//! The names the host writes on objects: labels on children, annotations and
//! the finalizer on primaries, field managers.
//!
//! They live here, at the start of the data flow, so that the planner, the
//! executor ([`crate::apply`]) and the upgrade walk ([`crate::migration`])
//! read them from one place without importing each other.

/// Label naming the plugin that manages a child.
pub const PLUGIN_LABEL: &str = crate::contract::PLUGIN_CHILD_LABEL;
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
/// (see [`MigrationState`]).
pub const MIGRATION_STATE_ANNOTATION: &str = "wasm-operator.dev/migration-state";
/// Annotation: the oldest plugin version that may still reconcile the object
/// (the managing version's `min_compatible_version`; absent when it declares none).
pub const MIN_COMPATIBLE_VERSION_ANNOTATION: &str = "wasm-operator.dev/min-compatible-version";
/// Annotation: the fencing token (the leader-election Lease's
/// `leaseTransitions` of the term) of the leader that last wrote the
/// object; a replica of an older term refuses to write it.
pub const FENCING_TOKEN_ANNOTATION: &str = "wasm-operator.dev/fencing-token";
/// Annotation: the Lease the [`FENCING_TOKEN_ANNOTATION`]'s term comes from,
/// `<namespace>/<name>/<uid>`. Terms of different Leases are not
/// comparable: only a later term of the same Lease fences a replica.
pub const FENCING_LEASE_ANNOTATION: &str = "wasm-operator.dev/fencing-lease";
/// Prefix of the annotations the host owns on primaries.
pub const HOST_ANNOTATION_PREFIX: &str = "wasm-operator.dev/";

/// The values of [`MIGRATION_STATE_ANNOTATION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MigrationState {
    /// The serving version must upgrade the object and has not started.
    Pending,
    /// The plugin's `upgrade` is running on the object.
    InProgress,
    /// The managing version's upgrade (if any) is done.
    Completed,
}

impl MigrationState {
    /// The annotation value: `pending`, `in-progress` or `completed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            MigrationState::Pending => "pending",
            MigrationState::InProgress => "in-progress",
            MigrationState::Completed => "completed",
        }
    }

    /// The state an annotation value names; `None` for anything else
    /// (absent or hand-edited marks are treated as "not started").
    pub fn parse(value: &str) -> Option<MigrationState> {
        [
            MigrationState::Pending,
            MigrationState::InProgress,
            MigrationState::Completed,
        ]
        .into_iter()
        .find(|state| state.as_str() == value)
    }
}

/// The field manager of a plugin's writes: `wasm-operator/<plugin>`.
pub fn field_manager(plugin: &str) -> String {
    format!("wasm-operator/{plugin}")
}

/// `namespace/name` (or just `name`) of an object, for messages.
pub fn display_name(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migration_states_round_trip() {
        for state in [
            MigrationState::Pending,
            MigrationState::InProgress,
            MigrationState::Completed,
        ] {
            assert_eq!(MigrationState::parse(state.as_str()), Some(state));
        }
        assert_eq!(MigrationState::parse("done"), None);
    }
}
