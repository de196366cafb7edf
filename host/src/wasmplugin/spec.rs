//! The `spec` of a WasmPlugin as Rust types, and the parsing of its limits
//! (`"5s"`, `"256Mi"`) into engine limits.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use crate::engine::CallLimits;

/// `spec` of a WasmPlugin.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmPluginSpec {
    /// Where the component comes from.
    pub source: Source,
    /// Free JSON passed to the plugin on every call.
    #[serde(default)]
    pub config: Option<Value>,
    /// Per-call resource limits (engine defaults where unset).
    #[serde(default)]
    pub limits: Option<LimitsSpec>,
    /// Reconciles of this plugin running at once.
    #[serde(default)]
    pub concurrency: Option<usize>,
}

/// `spec.source`: exactly one of the three (the CRD schema enforces it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// A file on the host's filesystem.
    File {
        /// Path of the `.wasm` file.
        path: String,
    },
    /// `binaryData[key]` of a ConfigMap (plain or gzip).
    ConfigMap {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// Key under `binaryData`.
        key: String,
    },
    /// An OCI artifact.
    Oci(OciSpec),
}

/// `spec.source.oci`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OciSpec {
    /// Image reference (`host/repo:tag` or `host/repo@sha256:...`).
    pub reference: String,
    /// Pinned manifest digest.
    #[serde(default)]
    pub digest: Option<String>,
    /// A `kubernetes.io/dockerconfigjson` Secret.
    #[serde(default)]
    pub pull_secret: Option<SecretRef>,
    /// How often an unpinned tag is checked (default 5 minutes).
    #[serde(default)]
    pub poll_interval: Option<String>,
}

/// A namespaced Secret.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

/// `spec.limits`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Deadline of one call (`"5s"`).
    #[serde(default)]
    pub call_timeout: Option<String>,
    /// Largest memory of one call (`"256Mi"`).
    #[serde(default)]
    pub memory: Option<String>,
    /// Largest answer of one call (`"16Mi"`).
    #[serde(default)]
    pub output_size: Option<String>,
}

/// Default poll interval of an unpinned OCI tag.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(300);

/// Why a spec value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// `spec` does not match the WasmPlugin schema.
    #[error("spec is not a valid WasmPlugin spec: {0}; see deploy/crds/wasmplugin.yaml")]
    Invalid(String),
    /// A duration such as `callTimeout` is malformed.
    #[error("{field} {value:?} is not a duration; write e.g. \"500ms\", \"5s\", \"5m\" or \"1h\"")]
    Duration { field: &'static str, value: String },
    /// A size such as `memory` is malformed.
    #[error(
        "{field} {value:?} is not a size; write e.g. \"65536\", \"512Ki\", \"256Mi\" or \"1Gi\""
    )]
    Size { field: &'static str, value: String },
}

impl WasmPluginSpec {
    /// Reads `spec` from an object's JSON.
    pub fn from_object(object: &Value) -> Result<WasmPluginSpec, SpecError> {
        let spec = object.get("spec").cloned().unwrap_or(Value::Null);
        serde_json::from_value(spec).map_err(|e| SpecError::Invalid(e.to_string()))
    }

    /// The call limits: `defaults` overridden by what the spec sets.
    pub fn call_limits(&self, defaults: CallLimits) -> Result<CallLimits, SpecError> {
        let mut limits = defaults;
        let Some(spec) = &self.limits else {
            return Ok(limits);
        };
        if let Some(value) = &spec.call_timeout {
            limits.timeout = parse_duration("limits.callTimeout", value)?;
        }
        if let Some(value) = &spec.memory {
            limits.memory_bytes = parse_size("limits.memory", value)?;
        }
        if let Some(value) = &spec.output_size {
            limits.output_bytes = parse_size("limits.outputSize", value)?;
        }
        Ok(limits)
    }

    /// The config handed to the plugin (`{}` when unset).
    pub fn plugin_config(&self) -> Value {
        match &self.config {
            Some(Value::Null) | None => Value::Object(Default::default()),
            Some(config) => config.clone(),
        }
    }
}

impl Source {
    /// `file`, `configMap` or `oci` (the Source printer column).
    pub fn kind(&self) -> &'static str {
        match self {
            Source::File { .. } => "file",
            Source::ConfigMap { .. } => "configMap",
            Source::Oci(_) => "oci",
        }
    }

    /// A short description for status, events and logs, e.g.
    /// `configMap:plugins/webapp#webapp.wasm`.
    pub fn describe(&self) -> String {
        match self {
            Source::File { path } => format!("file:{path}"),
            Source::ConfigMap {
                namespace,
                name,
                key,
            } => format!("configMap:{namespace}/{name}#{key}"),
            Source::Oci(oci) => match &oci.digest {
                Some(digest) => format!("oci:{}@{digest}", oci.reference),
                None => format!("oci:{}", oci.reference),
            },
        }
    }
}

impl OciSpec {
    /// The poll interval of an unpinned tag.
    pub fn poll_interval(&self) -> Result<Duration, SpecError> {
        match &self.poll_interval {
            None => Ok(DEFAULT_POLL_INTERVAL),
            Some(value) => parse_duration("source.oci.pollInterval", value),
        }
    }

    /// True when the reference or `digest` pins one manifest.
    pub fn pinned(&self) -> bool {
        self.digest.is_some() || self.reference.contains("@sha256:")
    }
}

/// Parses `"500ms"`, `"5s"`, `"5m"`, `"1h"`.
pub fn parse_duration(field: &'static str, value: &str) -> Result<Duration, SpecError> {
    let err = || SpecError::Duration {
        field,
        value: value.to_string(),
    };
    let split = value.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
    let (number, unit) = value.split_at(split);
    let n: u64 = number.parse().map_err(|_| err())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n.saturating_mul(60))),
        "h" => Ok(Duration::from_secs(n.saturating_mul(3600))),
        _ => Err(err()),
    }
}

/// Parses `"65536"`, `"512Ki"`, `"256Mi"`, `"1Gi"`.
pub fn parse_size(field: &'static str, value: &str) -> Result<usize, SpecError> {
    let err = || SpecError::Size {
        field,
        value: value.to_string(),
    };
    let split = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, unit) = value.split_at(split);
    let n: usize = number.parse().map_err(|_| err())?;
    let shift = match unit {
        "" => 0,
        "Ki" => 10,
        "Mi" => 20,
        "Gi" => 30,
        _ => return Err(err()),
    };
    n.checked_mul(1usize << shift).ok_or_else(err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_specs_and_limits() {
        let spec = WasmPluginSpec::from_object(&json!({"spec": {
            "source": {"oci": {"reference": "r/x:1", "pollInterval": "1s"}},
            "limits": {"callTimeout": "250ms", "memory": "64Mi", "outputSize": "512Ki"},
            "concurrency": 2,
        }}))
        .unwrap();
        let Source::Oci(oci) = &spec.source else {
            panic!("{spec:?}")
        };
        assert_eq!(oci.poll_interval().unwrap(), Duration::from_secs(1));
        assert!(!oci.pinned());
        let limits = spec.call_limits(CallLimits::default()).unwrap();
        assert_eq!(limits.timeout, Duration::from_millis(250));
        assert_eq!(limits.memory_bytes, 64 << 20);
        assert_eq!(limits.output_bytes, 512 << 10);
        assert_eq!(spec.plugin_config(), json!({}));
        assert!(parse_duration("f", "5").is_err());
        assert!(parse_size("f", "5Xi").is_err());
        let cm = WasmPluginSpec::from_object(&json!({"spec": {
            "source": {"configMap": {"namespace": "n", "name": "c", "key": "k"}}
        }}))
        .unwrap();
        assert_eq!(cm.source.describe(), "configMap:n/c#k");
        assert!(WasmPluginSpec::from_object(&json!({"spec": {}})).is_err());
    }
}
