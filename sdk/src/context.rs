//! What the host knows about a call, beyond the object itself.

use serde::de::DeserializeOwned;

use crate::Failure;

/// The call context (the WIT `call-context`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// Version of the plugin being called (from its manifest).
    pub plugin_version: String,
    /// 1 for the first attempt; grows with every retry of a failing object.
    pub attempt: u32,
    /// The plugin version that last managed this object, if any.
    pub managed_by_version: Option<String>,
    /// The deployment's `config` as JSON (`{}` when unset).
    pub config_json: String,
}

impl Context {
    /// A first-attempt context with an empty config, for tests and benchmarks.
    pub fn new(plugin_version: impl Into<String>) -> Self {
        Context {
            plugin_version: plugin_version.into(),
            attempt: 1,
            managed_by_version: None,
            config_json: "{}".to_owned(),
        }
    }

    /// Sets the attempt number.
    pub fn with_attempt(mut self, attempt: u32) -> Self {
        self.attempt = attempt;
        self
    }

    /// Sets the version that last managed the object.
    pub fn with_managed_by_version(mut self, version: impl Into<String>) -> Self {
        self.managed_by_version = Some(version.into());
        self
    }

    /// Sets the config JSON.
    pub fn with_config_json(mut self, config: impl Into<String>) -> Self {
        self.config_json = config.into();
        self
    }

    /// The plugin config, deserialized. A config that does not fit `T` is a
    /// permanent failure: retrying cannot fix it, editing the `WasmPlugin` can.
    pub fn config<T: DeserializeOwned>(&self) -> Result<T, Failure> {
        let raw = if self.config_json.trim().is_empty() {
            "{}"
        } else {
            &self.config_json
        };
        serde_json::from_str(raw).map_err(|e| {
            Failure::permanent(format!(
                "plugin config is invalid: {e}; fix spec.config of the WasmPlugin"
            ))
        })
    }

    /// 1 for the first attempt.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Version of the plugin being called.
    pub fn plugin_version(&self) -> &str {
        &self.plugin_version
    }

    /// The plugin version that last managed this object, if any.
    pub fn managed_by_version(&self) -> Option<&str> {
        self.managed_by_version.as_deref()
    }
}
