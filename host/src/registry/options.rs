//! How a registry runs its plugins ([`RegistryOptions`]) and how one
//! activation serves ([`ActivationOptions`]).

use serde_json::Value;

use crate::contract::{Grant, ReconcileLimits};
use crate::engine::{CallLimits, EngineConfig, InstanceAllocation};
use crate::telemetry::Metrics;

/// Per-deployment settings of one activation (e.g. from a `WasmPlugin`'s
/// spec); `None` fields use the registry's defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ActivationOptions {
    /// The `config` handed to every call (`null` means `{}`).
    pub config: Value,
    /// Call limits of this plugin's calls (default: the engine's).
    pub limits: Option<CallLimits>,
    /// Reconciles of this plugin that may run at once (default: the registry's).
    pub concurrency: Option<usize>,
    /// What the cluster operator grants the plugin (`Grant::default()` is
    /// the restricted default). Checked by [`super::Registry::activate`] under its
    /// lock, for every version, so a new version can never escalate; it
    /// travels with the serving version ([`super::ActiveVersion::grant`]) to the
    /// controller (namespaces) and the cache reads. A refused activation
    /// leaves the serving version with its own grant; a caller whose grant
    /// was narrowed (a WasmPlugin's `spec.permissions` edit) stops a serving
    /// version the new grant no longer covers first.
    pub grant: Grant,
    /// Limits per reconcile (default: [`ReconcileLimits::default`]).
    pub reconcile_limits: Option<ReconcileLimits>,
    /// How the plugin's `validate` and `defaults` are served (default:
    /// enforce, fail closed).
    pub admission: super::AdmissionSettings,
}

/// Instances the registry's engine pools by default: calls in flight across
/// all plugins (e.g. 64 plugins at the default concurrency of 4). A call
/// that finds the pool full fails with `InstancePoolFull` and is retried.
pub const DEFAULT_MAX_INSTANCES: u32 = 256;

/// How a [`Registry`](super::Registry) runs its plugins.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// Reconciles per plugin that may run at once (on different objects),
    /// unless an activation says otherwise.
    pub concurrency: usize,
    /// Engine settings, including the default call limits. The default
    /// uses the pooling allocator with [`DEFAULT_MAX_INSTANCES`] slots: in the
    /// `plugin_call` benchmark a pooled call takes about half the time of an
    /// on-demand one.
    pub engine: EngineConfig,
    /// Where plugin calls and versions are recorded.
    pub metrics: Metrics,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        RegistryOptions {
            concurrency: 4,
            engine: EngineConfig {
                allocation: InstanceAllocation::Pooling {
                    max_instances: DEFAULT_MAX_INSTANCES,
                },
                ..EngineConfig::default()
            },
            metrics: Metrics::new(),
        }
    }
}
