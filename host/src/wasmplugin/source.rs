//! Fetching a WasmPlugin's component bytes from its source: a file, a
//! ConfigMap's `binaryData` (plain or gzip) or an OCI registry.

use std::io::Read;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::oci_source;
use super::spec::{Source, SpecError};
use crate::contract::Reason;

/// A component decompressed from a ConfigMap may be at most this large: a
/// gzip bomb must not exhaust the host's memory.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// The gzip magic number.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Component bytes as fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component (decompressed).
    pub bytes: Vec<u8>,
    /// For OCI: the manifest digest pulled (what polling compares).
    pub revision: Option<String>,
}

/// Why a source could not provide a component. [`SourceError::reason`] is the
/// condition reason.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file does not exist or cannot be read.
    #[error("cannot read plugin file {}: {source}; check spec.source.file.path and that the file is readable by the host", path.display())]
    File {
        /// `spec.source.file.path`.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The ConfigMap does not exist.
    #[error(
        "ConfigMap {namespace}/{name} does not exist; create it with `kubectl create configmap {name} -n {namespace} --from-file=KEY=plugin.wasm` or fix spec.source.configMap"
    )]
    ConfigMapMissing {
        /// The ConfigMap's namespace.
        namespace: String,
        /// The ConfigMap's name.
        name: String,
    },
    /// The ConfigMap has no `binaryData[key]`.
    #[error(
        "ConfigMap {namespace}/{name} has no binaryData key {key:?} (it has: {present}); put the component under that key or fix spec.source.configMap.key"
    )]
    KeyMissing {
        /// The ConfigMap's namespace.
        namespace: String,
        /// The ConfigMap's name.
        name: String,
        /// `spec.source.configMap.key`.
        key: String,
        /// The keys the ConfigMap has (`data` and `binaryData`),
        /// comma-separated, or `no keys`.
        present: String,
    },
    /// Reading the ConfigMap failed (API error).
    #[error(
        "cannot read ConfigMap {namespace}/{name}: {source}; the host retries when the ConfigMap changes"
    )]
    ConfigMapApi {
        /// The ConfigMap's namespace.
        namespace: String,
        /// The ConfigMap's name.
        name: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// gzip data that does not decompress.
    #[error(
        "{what} starts like gzip but does not decompress: {message}; store the component plain or as a valid .gz"
    )]
    Gzip {
        /// Where the data came from, e.g. `ConfigMap ns/name key k`.
        what: String,
        /// The decompressor's error.
        message: String,
    },
    /// Decompressed data beyond [`MAX_COMPONENT_BYTES`].
    #[error(
        "{what} decompresses to more than {MAX_COMPONENT_BYTES} bytes; that is not a plugin component"
    )]
    TooLarge {
        /// Where the data came from, e.g. `ConfigMap ns/name key k`.
        what: String,
    },
    /// A spec value (e.g. the poll interval) is malformed.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// Pulling from the registry failed.
    #[error("{0}")]
    Oci(#[from] oci_source::OciSourceError),
}

impl SourceError {
    /// The condition/event reason an on-call engineer can search for.
    pub fn reason(&self) -> &'static str {
        match self {
            SourceError::File { .. }
            | SourceError::ConfigMapMissing { .. }
            | SourceError::KeyMissing { .. } => Reason::SourceNotFound.as_str(),
            SourceError::ConfigMapApi { .. } => Reason::SourceUnavailable.as_str(),
            SourceError::Gzip { .. } | SourceError::TooLarge { .. } => {
                Reason::InvalidComponent.as_str()
            }
            SourceError::Spec(_) => Reason::InvalidSpec.as_str(),
            SourceError::Oci(e) => e.reason(),
        }
    }
}

/// Fetches the component `source` names.
pub async fn fetch(client: &kube::Client, source: &Source) -> Result<Fetched, SourceError> {
    match source {
        Source::File { path } => {
            let path = PathBuf::from(path);
            let bytes = tokio::fs::read(&path)
                .await
                .map_err(|source| SourceError::File { path, source })?;
            Ok(Fetched {
                bytes,
                revision: None,
            })
        }
        Source::ConfigMap {
            namespace,
            name,
            key,
        } => {
            let bytes = fetch_config_map(client, namespace, name, key).await?;
            Ok(Fetched {
                bytes,
                revision: None,
            })
        }
        Source::Oci(oci) => {
            let pulled = oci_source::pull(client, oci).await?;
            Ok(Fetched {
                bytes: pulled.bytes,
                revision: Some(pulled.digest),
            })
        }
    }
}

async fn fetch_config_map(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    key: &str,
) -> Result<Vec<u8>, SourceError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let config_map = api
        .get_opt(name)
        .await
        .map_err(|source| SourceError::ConfigMapApi {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        })?
        .ok_or_else(|| SourceError::ConfigMapMissing {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })?;
    let binary = config_map.binary_data.unwrap_or_default();
    let Some(data) = binary.get(key) else {
        let mut present: Vec<&str> = binary.keys().map(String::as_str).collect();
        if let Some(data) = &config_map.data {
            present.extend(data.keys().map(String::as_str));
        }
        return Err(SourceError::KeyMissing {
            namespace: namespace.to_string(),
            name: name.to_string(),
            key: key.to_string(),
            present: if present.is_empty() {
                "no keys".to_string()
            } else {
                present.join(", ")
            },
        });
    };
    maybe_gunzip(&data.0, &format!("ConfigMap {namespace}/{name} key {key}"))
}

/// Returns `bytes` as they are, or decompressed when they start with the gzip
/// magic number.
pub fn maybe_gunzip(bytes: &[u8], what: &str) -> Result<Vec<u8>, SourceError> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .take(MAX_COMPONENT_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| SourceError::Gzip {
            what: what.to_string(),
            message: e.to_string(),
        })?;
    if out.len() as u64 > MAX_COMPONENT_BYTES {
        return Err(SourceError::TooLarge {
            what: what.to_string(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gunzips_only_gzip() {
        let plain = b"\0asm\x0d\0\x01\0".to_vec();
        assert_eq!(maybe_gunzip(&plain, "t").unwrap(), plain);
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        enc.write_all(&plain).unwrap();
        let gz = enc.finish().unwrap();
        assert_eq!(maybe_gunzip(&gz, "t").unwrap(), plain);
        let err = maybe_gunzip(&[0x1f, 0x8b, 0, 1, 2], "t").unwrap_err();
        assert_eq!(err.reason(), "InvalidComponent");
    }
}
