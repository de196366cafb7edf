//! How a registry refusal reads on a WasmPlugin: the condition reason and
//! a message in terms of the WasmPlugin (the registry's words name a
//! plugin). Shared by the worker's loads and the canary's.

use crate::contract::Reason;
use crate::engine::EngineError;
use crate::registry::RegistryError;

/// The condition reason of a registry refusal.
pub(super) fn condition_reason(error: &RegistryError) -> &'static str {
    match error {
        RegistryError::Load { error, .. } => engine_reason(error),
        other => other.reason(),
    }
}

/// What the WasmPlugin's condition says about a registry refusal: in terms
/// of this WasmPlugin where the registry's words name a plugin.
pub(super) fn refusal_message(error: &RegistryError, digest: &str) -> String {
    match error {
        RegistryError::Load { error, .. } => error.with_remedy().to_string(),
        RegistryError::PrimaryKindChanged(change) => format!(
            "the new component {digest} is plugin {} {} and reconciles {}, but this WasmPlugin serves {} {} which reconciles {}; a primary kind change must be deployed as a new WasmPlugin.",
            change.name,
            change.new_version,
            change.new_kind,
            change.running_name,
            change.running_version,
            change.running_kind
        ),
        RegistryError::PluginNameChanged {
            expected,
            name,
            version,
            ..
        } => format!(
            "the new component {digest} is plugin {name} {version}, but this WasmPlugin serves plugin {expected}; deploy another plugin as its own WasmPlugin."
        ),
        other => other.to_string(),
    }
}

/// The condition reason of a component the engine refused.
fn engine_reason(error: &EngineError) -> &'static str {
    match error {
        EngineError::NotAComponent { .. }
        | EngineError::Compile { .. }
        | EngineError::WrongWorld { .. }
        | EngineError::InvalidManifest { .. } => Reason::InvalidComponent.as_str(),
        EngineError::InstancePoolFull { .. } => Reason::InstancePoolFull.as_str(),
        _ => Reason::LoadFailed.as_str(),
    }
}
