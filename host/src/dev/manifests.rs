//! Reading example manifests from disk and applying them with server-side
//! apply: CRDs first (waiting until the API server serves them), then the
//! example objects. Everything here is generic over kinds, so a new example
//! directory needs no code change.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use kube::runtime::wait::{await_condition, conditions};
use serde::Deserialize;
use serde_json::Value;

/// Field manager used for everything `wasm-operator dev` applies itself.
pub const DEV_FIELD_MANAGER: &str = "wasm-operator-dev";

/// How long to wait for one CRD to become `Established`.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a manifest could not be read or applied.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The manifest file cannot be read.
    #[error("cannot read manifest {}: {source}", path.display())]
    Read {
        /// The manifest file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A YAML document of the file does not parse.
    #[error("manifest {} is not valid YAML (document {index}): {source}", path.display())]
    Parse {
        /// The manifest file.
        path: PathBuf,
        /// The document's position in the file, counting from 0.
        index: usize,
        /// Where the YAML breaks.
        #[source]
        source: serde_yaml::Error,
    },
    /// A document is not a complete object: it cannot be applied by name.
    #[error("manifest {} document {index} has no apiVersion, kind or metadata.name; every object needs all three", path.display())]
    Incomplete {
        /// The manifest file.
        path: PathBuf,
        /// The document's position in the file, counting from 0.
        index: usize,
    },
    /// The API server refused an object (server-side apply).
    #[error("cannot apply {what} from {}: {source}", path.display())]
    Apply {
        /// Which object, e.g. `WebApp/shop`.
        what: String,
        /// The manifest file it came from.
        path: PathBuf,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
    /// An object's kind is not served (its CRD is not installed): found
    /// by discovery before applying.
    #[error("the API server does not serve {gvk} (needed by {} ); install its CRD first: {source}", path.display())]
    UnknownKind {
        /// The object's `apiVersion kind`.
        gvk: String,
        /// The manifest file it came from.
        path: PathBuf,
        /// The discovery error.
        #[source]
        source: kube::Error,
    },
    /// An applied CRD was not accepted in time, so its objects cannot be
    /// applied yet.
    #[error(
        "CRD {name} did not become Established within {timeout:?}; check `kubectl get crd {name} -o yaml` for its conditions"
    )]
    NotEstablished {
        /// The CRD's name, e.g. `webapps.example.com`.
        name: String,
        /// How long the host waited.
        timeout: Duration,
    },
    /// Watching the CRD for its `Established` condition failed.
    #[error("waiting for CRD {name} failed: {source}")]
    Wait {
        /// The CRD's name.
        name: String,
        /// What the watch reported.
        #[source]
        source: kube::runtime::wait::Error,
    },
}

/// One object read from a manifest file, with where it came from.
#[derive(Debug, Clone)]
pub struct ManifestObject {
    /// The file the object was read from (for error messages).
    pub path: PathBuf,
    /// The object as JSON.
    pub object: Value,
}

impl ManifestObject {
    fn field(&self, pointer: &str) -> Option<&str> {
        self.object.pointer(pointer).and_then(Value::as_str)
    }

    /// `Kind/name` for humans.
    pub fn describe(&self) -> String {
        format!(
            "{}/{}",
            self.field("/kind").unwrap_or("?"),
            self.field("/metadata/name").unwrap_or("?")
        )
    }
}

/// Reads every YAML document of `path`, skipping empty ones and expanding
/// `kind: List` wrappers.
pub fn read_manifest(path: &Path) -> Result<Vec<ManifestObject>, ManifestError> {
    let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_manifest(&text, path)
}

/// Every YAML document of `text` (read from `path`, named in errors),
/// skipping empty ones and expanding `kind: List` wrappers.
fn parse_manifest(text: &str, path: &Path) -> Result<Vec<ManifestObject>, ManifestError> {
    let mut objects = Vec::new();
    for (index, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(document).map_err(|source| ManifestError::Parse {
            path: path.to_path_buf(),
            index,
            source,
        })?;
        if value.is_null() {
            continue;
        }
        let items = match value.get("kind").and_then(Value::as_str) {
            Some("List") => value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            _ => vec![value],
        };
        for object in items {
            let complete = object.get("apiVersion").and_then(Value::as_str).is_some()
                && object.get("kind").and_then(Value::as_str).is_some()
                && object
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some();
            if !complete {
                return Err(ManifestError::Incomplete {
                    path: path.to_path_buf(),
                    index,
                });
            }
            objects.push(ManifestObject {
                path: path.to_path_buf(),
                object,
            });
        }
    }
    Ok(objects)
}

/// Applies the CRDs in `path` and waits until each is `Established`, so that
/// objects of their kinds can be applied right after. Returns the CRD names.
pub async fn install_crds(client: &Client, path: &Path) -> Result<Vec<String>, ManifestError> {
    install_crd_objects(client, read_manifest(path)?, path).await
}

/// [`install_crds`] for CRDs already in hand (e.g. generated from a type),
/// from `path`.
pub async fn install_crd_objects(
    client: &Client,
    objects: Vec<ManifestObject>,
    path: &Path,
) -> Result<Vec<String>, ManifestError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(DEV_FIELD_MANAGER).force();
    let mut names = Vec::new();
    for item in objects {
        let name = item.field("/metadata/name").unwrap_or_default().to_string();
        api.patch(&name, &params, &Patch::Apply(&item.object))
            .await
            .map_err(|source| ManifestError::Apply {
                what: format!("CRD {name}"),
                path: path.to_path_buf(),
                source,
            })?;
        names.push(name);
    }
    for name in &names {
        let established = await_condition(api.clone(), name, conditions::is_crd_established());
        match tokio::time::timeout(CRD_ESTABLISH_TIMEOUT, established).await {
            Ok(Ok(_)) => {}
            Ok(Err(source)) => {
                return Err(ManifestError::Wait {
                    name: name.clone(),
                    source,
                });
            }
            Err(_) => {
                return Err(ManifestError::NotEstablished {
                    name: name.clone(),
                    timeout: CRD_ESTABLISH_TIMEOUT,
                });
            }
        }
    }
    Ok(names)
}

/// Applies every object of `path` with server-side apply. Namespaced objects
/// without a namespace go to `default`; namespaces that do not exist yet are
/// created first, as `kubectl apply` users would otherwise have to.
/// Returns `Kind/name` of every applied object.
pub async fn apply_objects(client: &Client, path: &Path) -> Result<Vec<String>, ManifestError> {
    let params = PatchParams::apply(DEV_FIELD_MANAGER).force();
    let mut applied = Vec::new();
    for item in read_manifest(path)? {
        let api_version = item.field("/apiVersion").unwrap_or_default();
        let kind = item.field("/kind").unwrap_or_default();
        let name = item.field("/metadata/name").unwrap_or_default().to_string();
        let (group, version) = match api_version.split_once('/') {
            Some((group, version)) => (group, version),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let (resource, capabilities) =
            discovery::pinned_kind(client, &gvk)
                .await
                .map_err(|source| ManifestError::UnknownKind {
                    gvk: format!("{api_version} {kind}"),
                    path: path.to_path_buf(),
                    source,
                })?;
        let api: Api<DynamicObject> = match capabilities.scope {
            Scope::Cluster => Api::all_with(client.clone(), &resource),
            Scope::Namespaced => {
                let namespace = item
                    .field("/metadata/namespace")
                    .unwrap_or("default")
                    .to_string();
                ensure_namespace(client, &namespace, path).await?;
                Api::namespaced_with(client.clone(), &namespace, &resource)
            }
        };
        api.patch(&name, &params, &Patch::Apply(&item.object))
            .await
            .map_err(|source| ManifestError::Apply {
                what: item.describe(),
                path: path.to_path_buf(),
                source,
            })?;
        applied.push(item.describe());
    }
    Ok(applied)
}

async fn ensure_namespace(
    client: &Client,
    namespace: &str,
    path: &Path,
) -> Result<(), ManifestError> {
    let api: Api<Namespace> = Api::all(client.clone());
    let exists = api
        .get_opt(namespace)
        .await
        .map_err(|source| ManifestError::Apply {
            what: format!("Namespace/{namespace}"),
            path: path.to_path_buf(),
            source,
        })?
        .is_some();
    if exists {
        return Ok(());
    }
    let object = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": namespace },
    });
    api.patch(
        namespace,
        &PatchParams::apply(DEV_FIELD_MANAGER).force(),
        &Patch::Apply(&object),
    )
    .await
    .map_err(|source| ManifestError::Apply {
        what: format!("Namespace/{namespace}"),
        path: path.to_path_buf(),
        source,
    })?;
    Ok(())
}

/// The example directories under `examples_dir` (sorted, so runs are repeatable).
pub fn example_dirs(examples_dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let entries = std::fs::read_dir(examples_dir).map_err(|source| ManifestError::Read {
        path: examples_dir.to_path_buf(),
        source,
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    dirs.sort();
    Ok(dirs)
}

/// The YAML files of one example directory other than its `crd.yaml`, sorted.
pub fn example_object_files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let entries = std::fs::read_dir(dir).map_err(|source| ManifestError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| {
            let yaml = matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            );
            let crd = path.file_stem().and_then(|s| s.to_str()) == Some("crd");
            yaml && !crd && path.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_yaml_and_lists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects.yaml");
        std::fs::write(
            &path,
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n",
        )
        .unwrap();
        let objects = read_manifest(&path).unwrap();
        let names: Vec<String> = objects.iter().map(ManifestObject::describe).collect();
        assert_eq!(names, vec!["ConfigMap/a", "ConfigMap/b"]);
        std::fs::write(&path, "apiVersion: v1\nkind: ConfigMap\n").unwrap();
        assert!(matches!(
            read_manifest(&path),
            Err(ManifestError::Incomplete { .. })
        ));
    }
}
