//! Hot reload: watches the directory the plugins are built into and loads a
//! plugin again when its `.wasm` changes. A failed load keeps the version that
//! is serving (the registry swaps atomically only on success).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::plugins::Registry;

/// Why the plugin directory cannot be watched.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot create the plugin directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch {} for plugin changes: {source}", path.display())]
    Notify {
        path: PathBuf,
        #[source]
        source: notify::Error,
    },
}

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
    /// The file's bytes are the ones already loaded; nothing to do.
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

/// Loads plugin files into the registry and remembers what it loaded, so that
/// a touch without a content change does not swap versions.
pub struct PluginLoader {
    registry: Registry,
    config: Value,
    /// sha256 of the bytes last loaded successfully, per file.
    loaded: HashMap<PathBuf, String>,
    events: broadcast::Sender<LoadEvent>,
}

impl PluginLoader {
    /// A loader that passes `config` to every plugin it loads.
    pub fn new(registry: Registry, config: Value, events: broadcast::Sender<LoadEvent>) -> Self {
        Self {
            registry,
            config,
            loaded: HashMap::new(),
            events,
        }
    }

    /// Loads (or reloads) `file`, logs the outcome and broadcasts it.
    pub async fn load_file(&mut self, file: &Path) -> LoadOutcome {
        let outcome = self.try_load(file).await;
        match &outcome {
            LoadOutcome::Loaded {
                name,
                version,
                digest,
            } => {
                tracing::info!(file = %file.display(), plugin = %name, %version, %digest, "plugin loaded")
            }
            LoadOutcome::Unchanged => {
                tracing::debug!(file = %file.display(), "plugin file unchanged; keeping the loaded version")
            }
            LoadOutcome::Removed => tracing::warn!(
                file = %file.display(),
                "plugin file removed; the loaded version keeps serving until the host stops"
            ),
            LoadOutcome::Failed(message) => tracing::error!(file = %file.display(), "{message}"),
        }
        // Nobody listening is fine: events are for tests and tooling.
        let _ = self.events.send(LoadEvent {
            file: file.to_path_buf(),
            outcome: outcome.clone(),
        });
        outcome
    }

    async fn try_load(&mut self, file: &Path) -> LoadOutcome {
        let bytes = match tokio::fs::read(file).await {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return LoadOutcome::Removed;
            }
            Err(error) => {
                return LoadOutcome::Failed(format!(
                    "cannot read plugin file {}: {error}; check its permissions",
                    file.display()
                ));
            }
        };
        let sha = hex::encode(Sha256::digest(&bytes));
        if self.loaded.get(file) == Some(&sha) {
            return LoadOutcome::Unchanged;
        }
        let source = format!("file:{}", file.display());
        match self
            .registry
            .load(&source, &bytes, self.config.clone())
            .await
        {
            Ok(version) => {
                self.loaded.insert(file.to_path_buf(), sha);
                LoadOutcome::Loaded {
                    name: version.name,
                    version: version.version,
                    digest: version.digest,
                }
            }
            Err(error) => LoadOutcome::Failed(format!(
                "failed to load plugin {}: {error}; the previously loaded version (if any) keeps serving. \
                 Fix the plugin and rebuild it (`cargo build --release --target wasm32-wasip2`), it is reloaded automatically",
                file.display()
            )),
        }
    }
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

/// Starts watching `dir` and returns the watcher (dropping it stops the
/// watch) with the receiving end of the raw change notifications.
fn watch_dir(
    dir: &Path,
) -> Result<(notify::RecommendedWatcher, mpsc::UnboundedReceiver<PathBuf>), WatchError> {
    std::fs::create_dir_all(dir).map_err(|source| WatchError::CreateDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let (tx, rx) = mpsc::unbounded_channel();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) => {
                // Reads and metadata changes do not change a plugin.
                if matches!(
                    event.kind,
                    EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
                ) {
                    for path in event.paths {
                        let _ = tx.send(path);
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "plugin directory watch reported an error"),
        })
        .map_err(|source| WatchError::Notify {
            path: dir.to_path_buf(),
            source,
        })?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .map_err(|source| WatchError::Notify {
            path: dir.to_path_buf(),
            source,
        })?;
    Ok((watcher, rx))
}

/// Watches `dir` and reloads changed plugin files until `cancel` fires.
/// Changes are debounced: a file is loaded once it has been quiet for
/// `debounce`, so half-written files (a compiler still writing, a copy in
/// progress) are not loaded.
pub fn spawn_reloader(
    dir: &Path,
    filter: PluginFilter,
    debounce: Duration,
    mut loader: PluginLoader,
    cancel: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, WatchError> {
    let (watcher, mut changes) = watch_dir(dir)?;
    tracing::info!(dir = %dir.display(), "watching for plugin changes");
    Ok(tokio::spawn(async move {
        // Keep the watcher alive for as long as the task runs.
        let _watcher = watcher;
        loop {
            let first = tokio::select! {
                _ = cancel.cancelled() => return,
                change = changes.recv() => match change {
                    Some(path) => path,
                    None => return,
                },
            };
            let mut pending = BTreeSet::new();
            if filter.accepts(&first) {
                pending.insert(first);
            }
            // Wait until the directory has been quiet for `debounce`.
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    change = changes.recv() => match change {
                        Some(path) => {
                            if filter.accepts(&path) {
                                pending.insert(path);
                            }
                        }
                        None => return,
                    },
                    _ = tokio::time::sleep(debounce) => break,
                }
            }
            for file in pending {
                loader.load_file(&file).await;
            }
        }
    }))
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
