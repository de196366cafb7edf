//! Fetching a WasmPlugin's component bytes from its source: a file, a
//! ConfigMap's `binaryData` (plain or gzip) or an OCI registry.

use std::io::Read;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use super::oci_source;
use super::spec::{Source, SpecError};
use crate::contract::Reason;
use crate::oci::signature::{SignatureError, VerificationPolicy, Verified};

/// A component decompressed from a ConfigMap, or read from a file, may be
/// at most this large: a gzip bomb or `/dev/zero` must not exhaust the
/// host's memory.
pub const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// Why a plugin file could not be read: what `spec.source.file.path` and
/// `run --plugin PATH` share.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The operating system refused (missing, unreadable).
    #[error("cannot read plugin file {}: {source}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// Not a regular file: a directory, a FIFO, a device (`/dev/zero`
    /// would be read until memory runs out), a socket.
    #[error("plugin file {} is {what}, not a regular file; a plugin must be a regular .wasm file", path.display())]
    NotAFile {
        /// The path.
        path: PathBuf,
        /// What it is instead, e.g. `a directory`.
        what: &'static str,
    },
    /// Larger than [`MAX_COMPONENT_BYTES`].
    #[error("plugin file {} is larger than {MAX_COMPONENT_BYTES} bytes ({size} bytes or more); that is not a plugin component", path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// Its size, or how much was read before giving up.
        size: u64,
    },
}

impl FileError {
    /// The condition/event reason.
    pub fn reason(&self) -> Reason {
        match self {
            FileError::Io { .. } => Reason::SourceNotFound,
            FileError::NotAFile { .. } => Reason::SourceNotAFile,
            FileError::TooLarge { .. } => Reason::InvalidComponent,
        }
    }
}

/// What a file that is not regular is, for messages.
fn file_kind(file_type: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// Whether `metadata` may be read as a plugin file (pure, for the checks
/// before and after opening).
fn check_file(path: &Path, metadata: &std::fs::Metadata, max: u64) -> Result<(), FileError> {
    if !metadata.is_file() {
        return Err(FileError::NotAFile {
            path: path.to_path_buf(),
            what: file_kind(metadata.file_type()),
        });
    }
    if metadata.len() > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: metadata.len(),
        });
    }
    Ok(())
}

/// Reads the plugin file at `path` (symlinks followed): a regular file of
/// at most `max` bytes, read with a bounded reader. Checked before opening
/// (so a FIFO is never opened) and again on the opened file (opened
/// non-blocking, so one swapped in meanwhile cannot block either), and the
/// read stops after `max + 1` bytes (a file that grows is refused too).
///
/// # Errors
///
/// [`FileError`]: missing or unreadable, not a regular file, too large.
pub fn read_plugin_file_blocking(path: &Path, max: u64) -> Result<Vec<u8>, FileError> {
    let io = |source| FileError::Io {
        path: path.to_path_buf(),
        source,
    };
    check_file(path, &std::fs::metadata(path).map_err(io)?, max)?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path).map_err(io)?;
    let metadata = file.metadata().map_err(io)?;
    check_file(path, &metadata, max)?;
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(max + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > max {
        return Err(FileError::TooLarge {
            path: path.to_path_buf(),
            size: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

/// [`read_plugin_file_blocking`] with the [`MAX_COMPONENT_BYTES`] cap, off
/// the async workers.
///
/// # Errors
///
/// See [`read_plugin_file_blocking`].
pub async fn read_plugin_file(path: &Path) -> Result<Vec<u8>, FileError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || read_plugin_file_blocking(&owned, MAX_COMPONENT_BYTES))
        .await
        .unwrap_or_else(|join| {
            Err(FileError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::other(join.to_string()),
            })
        })
}

/// The gzip magic number.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Component bytes as fetched.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The component (decompressed).
    pub bytes: Vec<u8>,
    /// For OCI: the manifest digest pulled (what polling compares).
    pub revision: Option<String>,
    /// For OCI under a verification policy: who signed that manifest.
    pub signature: Option<Verified>,
}

/// Why a source could not provide a component. [`SourceError::reason`] is the
/// condition reason.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The file does not exist, cannot be read, is not a regular file or
    /// is too large.
    #[error("{0}; check spec.source.file.path names a regular .wasm file readable by the host")]
    File(#[source] FileError),
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
            SourceError::File(error) => error.reason().as_str(),
            SourceError::ConfigMapMissing { .. } | SourceError::KeyMissing { .. } => {
                Reason::SourceNotFound.as_str()
            }
            SourceError::ConfigMapApi { .. } => Reason::SourceUnavailable.as_str(),
            SourceError::Gzip { .. } | SourceError::TooLarge { .. } => {
                Reason::InvalidComponent.as_str()
            }
            SourceError::Spec(_) => Reason::InvalidSpec.as_str(),
            SourceError::Oci(e) => e.reason(),
        }
    }

    /// True when fetching the same source again may succeed without a
    /// change to it: a signature that is not there yet (cosign signs a
    /// manifest after it was pushed, so a poll in between finds it
    /// unsigned), or a registry that failed while the signatures were read.
    pub fn retries(&self) -> bool {
        match self {
            SourceError::Oci(oci_source::OciSourceError::Signature(error)) => {
                error.is_transient() || matches!(error, SignatureError::NotVerified(_))
            }
            _ => false,
        }
    }
}

/// Fetches the component `source` names; an OCI source's manifest is
/// verified under `verification` ([`oci_source::pull`]). File and ConfigMap
/// sources carry no signatures: they are the cluster operator's own (the
/// worker refuses a WasmPlugin's own `spec.verification` on them).
pub async fn fetch(
    client: &kube::Client,
    source: &Source,
    verification: Option<&VerificationPolicy>,
) -> Result<Fetched, SourceError> {
    match source {
        Source::File { path } => {
            let bytes = read_plugin_file(Path::new(path))
                .await
                .map_err(SourceError::File)?;
            Ok(Fetched {
                bytes,
                revision: None,
                signature: None,
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
                signature: None,
            })
        }
        Source::Oci(oci) => {
            let pulled = oci_source::pull(client, oci, verification).await?;
            Ok(Fetched {
                bytes: pulled.bytes,
                revision: Some(pulled.digest),
                signature: pulled.signature,
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
    fn only_regular_files_within_the_cap_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let small = dir.path().join("small.wasm");
        std::fs::write(&small, b"\0asm").unwrap();
        assert_eq!(read_plugin_file_blocking(&small, 16).unwrap(), b"\0asm");

        let big = dir.path().join("big.wasm");
        std::fs::write(&big, vec![0u8; 17]).unwrap();
        let error = read_plugin_file_blocking(&big, 16).unwrap_err();
        assert!(
            matches!(error, FileError::TooLarge { size: 17, .. }),
            "{error}"
        );
        assert_eq!(error.reason(), Reason::InvalidComponent);

        let error = read_plugin_file_blocking(dir.path(), 16).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("is a directory, not a regular file"),
            "{error}"
        );
        assert_eq!(error.reason(), Reason::SourceNotAFile);

        let missing = read_plugin_file_blocking(&dir.path().join("none.wasm"), 16).unwrap_err();
        assert_eq!(missing.reason(), Reason::SourceNotFound);
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_fifos_are_refused_without_reading_or_blocking() {
        let error = read_plugin_file_blocking(Path::new("/dev/zero"), 16).unwrap_err();
        assert!(error.to_string().contains("a character device"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.wasm");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        let error = read_plugin_file_blocking(&fifo, 16).unwrap_err();
        assert!(error.to_string().contains("a FIFO"), "{error}");
    }

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
