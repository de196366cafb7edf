//! The dev session's plugins as WasmPlugin objects: one file-source
//! WasmPlugin per plugin file, so `dev` loads, hot-reloads and reports its
//! plugins exactly as `run` does in a cluster (and `kubectl get wp` shows
//! them). The WasmPlugin controller's transitions become [`LoadEvent`]s.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::manifests::DEV_FIELD_MANAGER;
use crate::contract::Reason;
use crate::wasmplugin::{self, AuditRecord};

/// The label key marking the WasmPlugins `dev` applied (value `wasm-operator-dev`).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

/// Which files of the watched directory are plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginFilter {
    /// Every `*.wasm` file.
    All,
    /// Only these file names (e.g. `webapp.wasm`).
    Names(BTreeSet<String>),
}

impl PluginFilter {
    /// True when `path` names a plugin file this filter accepts.
    pub fn accepts(&self, path: &Path) -> bool {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            return false;
        };
        if !name.ends_with(".wasm") {
            return false;
        }
        match self {
            PluginFilter::All => true,
            PluginFilter::Names(names) => names.contains(name),
        }
    }
}

/// What happened when a plugin file was (re)loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadOutcome {
    /// A new version is serving.
    Loaded {
        /// The manifest's name.
        name: String,
        /// The manifest's version.
        version: String,
        /// `sha256:<hex>` of the component.
        digest: String,
    },
    /// The file's bytes are the ones already loaded; nothing to do. (The
    /// WasmPlugin controller reports no transition for a repeat, so this is
    /// not produced today; kept for subscribers that match on it.)
    Unchanged,
    /// The file was removed; the loaded version keeps serving.
    Removed,
    /// The file could not be read or loaded; the previous version (if any)
    /// keeps serving. The message says what to do.
    Failed(String),
}

/// One (re)load of one plugin file, broadcast to subscribers of the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadEvent {
    /// The plugin file that changed.
    pub file: PathBuf,
    /// What loading it did.
    pub outcome: LoadOutcome,
}

/// The plugin files currently in `dir` that `filter` accepts, sorted.
pub fn plugin_files(dir: &Path, filter: &PluginFilter) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && filter.accepts(path))
        .collect();
    files.sort();
    files
}

/// The WasmPlugin name of plugin file `file`: its stem as a DNS label
/// (`webapp_v2.wasm` → `webapp-v2`).
pub fn object_name(file: &Path) -> String {
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_ascii_lowercase();
    let name: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-');
    if name.is_empty() {
        "plugin".to_string()
    } else {
        name.chars().take(63).collect()
    }
}

/// The WasmPlugin serving `file` (an absolute path: the controller reads it)
/// with `config`.
pub fn wasmplugin_object(name: &str, file: &Path, config: &Value) -> Value {
    json!({
        "apiVersion": wasmplugin::api_resource().api_version,
        "kind": wasmplugin::KIND,
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: "wasm-operator-dev"}},
        "spec": {
            "source": {"file": {"path": file.display().to_string()}},
            "config": config,
        },
    })
}

/// Grants WasmPlugin `object` the plugin's own CRD (`permissions.crds`),
/// as dev does for an author's crate: the host then installs the CRD the
/// plugin carries when a version activates, and updates it on every
/// rebuild that changes it.
pub fn grant_crds(object: &mut Value) {
    object["spec"]["permissions"] = json!({"crds": true});
}

/// Applies (server-side) the WasmPlugin `object` named `name`.
pub async fn apply_wasmplugin(
    client: &kube::Client,
    name: &str,
    object: &Value,
) -> Result<(), kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &wasmplugin::api_resource());
    api.patch(
        name,
        &PatchParams::apply(DEV_FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await
    .map(|_| ())
}

/// The [`LoadEvent`] a WasmPlugin transition means for plugin file `file`;
/// `None` for transitions that are no outcome (an unload, a load retried
/// because the engine was busy, or what the host did with the CRD the
/// plugin carries, which precedes the verdict on the version).
pub fn load_event(file: &Path, record: &AuditRecord) -> Option<LoadEvent> {
    let t = &record.transition;
    let about_the_crd = [Reason::CrdApplied, Reason::CrdNotApplied]
        .iter()
        .any(|reason| t.reason == reason.as_str());
    if t.retrying || about_the_crd || (t.to.is_empty() && !t.warning) {
        return None;
    }
    let outcome = if !t.warning {
        LoadOutcome::Loaded {
            name: t.plugin.clone(),
            version: t.to.clone(),
            digest: t.digest.clone(),
        }
    } else if !file.exists() {
        LoadOutcome::Removed
    } else {
        LoadOutcome::Failed(format!(
            "failed to load plugin {}: {}; fix the plugin and rebuild it (`cargo build --release --target wasm32-wasip2`), it is reloaded automatically",
            file.display(),
            t.message
        ))
    };
    Some(LoadEvent {
        file: file.to_path_buf(),
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_accepts_only_named_wasm_files() {
        assert!(PluginFilter::All.accepts(Path::new("/t/webapp.wasm")));
        assert!(!PluginFilter::All.accepts(Path::new("/t/webapp.d")));
        let names = PluginFilter::Names(["webapp.wasm".to_string()].into());
        assert!(names.accepts(Path::new("/t/webapp.wasm")));
        assert!(!names.accepts(Path::new("/t/faulty.wasm")));
    }

    fn record(reason: &str, warning: bool, retrying: bool, to: &str) -> AuditRecord {
        AuditRecord {
            wasmplugin: "webapp".into(),
            transition: crate::wasmplugin::Transition {
                reason: reason.into(),
                warning,
                retrying,
                plugin: "webapp".into(),
                from: "1.0.0".into(),
                to: to.into(),
                digest: "sha256:ab".into(),
                source: "file:/t/webapp.wasm".into(),
                message: "rejected: bad. The last good version webapp 1.0.0 keeps serving.".into(),
            },
        }
    }

    #[test]
    fn transitions_become_load_events() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("webapp.wasm");
        std::fs::write(&file, b"x").unwrap();
        let swapped = load_event(&file, &record("Swapped", false, false, "2.0.0")).unwrap();
        assert_eq!(
            swapped.outcome,
            LoadOutcome::Loaded {
                name: "webapp".into(),
                version: "2.0.0".into(),
                digest: "sha256:ab".into()
            }
        );
        let rejected =
            load_event(&file, &record("InvalidComponent", true, false, "1.0.0")).unwrap();
        let LoadOutcome::Failed(message) = rejected.outcome else {
            panic!("{rejected:?}");
        };
        assert!(message.contains("webapp.wasm") && message.contains("keeps serving"));
        // A busy engine is no verdict, an unload no load.
        assert!(load_event(&file, &record("InstancePoolFull", true, true, "1.0.0")).is_none());
        assert!(load_event(&file, &record("Unloaded", false, false, "")).is_none());
        // What the host did with the plugin's CRD comes before the verdict.
        assert!(load_event(&file, &record("CrdApplied", false, false, "1.0.0")).is_none());
        assert!(load_event(&file, &record("CrdNotApplied", true, false, "1.0.0")).is_none());
        std::fs::remove_file(&file).unwrap();
        let removed = load_event(&file, &record("SourceNotFound", true, false, "1.0.0")).unwrap();
        assert_eq!(removed.outcome, LoadOutcome::Removed);
    }

    #[test]
    fn object_names_are_dns_labels() {
        assert_eq!(object_name(Path::new("/t/webapp.wasm")), "webapp");
        assert_eq!(object_name(Path::new("/t/webapp_v2.wasm")), "webapp-v2");
        assert_eq!(object_name(Path::new("/t/_.wasm")), "plugin");
    }

    #[test]
    fn lists_plugin_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.wasm", "a.wasm", "c.txt"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let files = plugin_files(dir.path(), &PluginFilter::All);
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, vec!["a.wasm", "b.wasm"]);
    }
}
