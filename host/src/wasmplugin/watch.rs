//! Watching a WasmPlugin's source for new content: the file with notify, the
//! ConfigMap with a watch on that one object, an unpinned OCI tag by polling
//! its digest. Each watch runs as a task that sends [`Trigger`]s; aborting
//! the task (or dropping its receiver) ends it.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};
use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::oci_source;
use super::spec::Source;

/// Something may have changed at the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// Fetch again and load when the content differs.
    Changed,
    /// The OCI tag points to this manifest digest now.
    OciDigest(String),
}

/// Starts the watch of `source`; the task sends to `tx` until aborted.
pub fn spawn(client: kube::Client, source: Source, tx: mpsc::Sender<Trigger>) -> JoinHandle<()> {
    tokio::spawn(async move {
        match source {
            Source::File { path } => watch_file(PathBuf::from(path), tx).await,
            Source::ConfigMap {
                namespace, name, ..
            } => watch_config_map(client, &namespace, &name, tx).await,
            Source::Oci(oci) => {
                if oci.pinned() {
                    // A pinned digest never changes: nothing to watch.
                    return;
                }
                // A bad interval is reported by the worker when it loads.
                let Ok(interval) = oci.poll_interval() else {
                    return;
                };
                loop {
                    tokio::time::sleep(interval).await;
                    let trigger = match oci_source::resolve(&client, &oci).await {
                        Ok(digest) => Trigger::OciDigest(digest),
                        // A full fetch reports why (e.g. RegistryUnreachable).
                        Err(_) => Trigger::Changed,
                    };
                    if tx.send(trigger).await.is_err() {
                        return;
                    }
                }
            }
        }
    })
}

/// How often a missing directory of a plugin file is looked for again, and
/// how often a watched one is checked to still exist.
const DIRECTORY_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// Watches the file's directory (editors and `cp` replace files, which a
/// watch on the file itself would miss) and reports changes of the file.
/// A directory that does not exist yet (a volume mounted later, `dev`
/// creating its output directory) is waited for, and one that goes away is
/// waited for again: the source recovers without a restart.
async fn watch_file(path: PathBuf, tx: mpsc::Sender<Trigger>) {
    let Some(dir) = path.parent().map(Path::to_path_buf) else {
        return;
    };
    let Some(file_name) = path.file_name().map(std::ffi::OsStr::to_os_string) else {
        return;
    };
    let mut waited = false;
    loop {
        if !dir.is_dir() {
            if !waited {
                tracing::info!(dir = %dir.display(), path = %path.display(), "the plugin file's directory does not exist; watching for it to appear");
            }
            waited = true;
            tokio::time::sleep(DIRECTORY_POLL).await;
            if tx.is_closed() {
                return;
            }
            continue;
        }
        if waited {
            // The file may have arrived with its directory, before the
            // watch below started.
            tracing::info!(dir = %dir.display(), "the plugin file's directory appeared");
            if tx.send(Trigger::Changed).await.is_err() {
                return;
            }
        }
        match watch_directory(&dir, &path, &file_name, &tx).await {
            DirectoryWatch::Stopped => return,
            DirectoryWatch::Gone => {
                if tx.send(Trigger::Changed).await.is_err() {
                    return;
                }
                waited = true;
            }
            DirectoryWatch::Failed => {
                // Retried after a pause (e.g. the directory vanished between
                // the check and the watch).
                waited = true;
                tokio::time::sleep(DIRECTORY_POLL).await;
            }
        }
    }
}

/// How a watch of an existing directory ended.
enum DirectoryWatch {
    /// Nobody listens any more.
    Stopped,
    /// The directory went away.
    Gone,
    /// The watch could not be set up.
    Failed,
}

async fn watch_directory(
    dir: &Path,
    path: &Path,
    file_name: &std::ffi::OsStr,
    tx: &mpsc::Sender<Trigger>,
) -> DirectoryWatch {
    let (raw_tx, mut raw_rx) = mpsc::unbounded_channel();
    let file_name = file_name.to_os_string();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event
            && matches!(
                event.kind,
                EventKind::Create(_) | EventKind::Modify(_) | EventKind::Remove(_)
            )
            && event
                .paths
                .iter()
                .any(|p| p.file_name() == Some(file_name.as_os_str()))
        {
            let _ = raw_tx.send(());
        }
    });
    let mut watcher = match watcher {
        Ok(watcher) => watcher,
        Err(error) => {
            tracing::warn!(%error, path = %path.display(), "cannot watch plugin file; retrying");
            return DirectoryWatch::Failed;
        }
    };
    if let Err(error) = watcher.watch(dir, RecursiveMode::NonRecursive) {
        tracing::warn!(%error, dir = %dir.display(), "cannot watch plugin directory; retrying");
        return DirectoryWatch::Failed;
    }
    let mut check = tokio::time::interval(DIRECTORY_POLL);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            event = raw_rx.recv() => {
                if event.is_none() || tx.send(Trigger::Changed).await.is_err() {
                    return DirectoryWatch::Stopped;
                }
            }
            _ = check.tick() => {
                if tx.is_closed() {
                    return DirectoryWatch::Stopped;
                }
                if !dir.is_dir() {
                    tracing::info!(dir = %dir.display(), "the plugin file's directory went away; watching for it to appear again");
                    return DirectoryWatch::Gone;
                }
            }
        }
    }
}

/// Watches one ConfigMap (by field selector) and reports every change,
/// creation and deletion.
async fn watch_config_map(
    client: kube::Client,
    namespace: &str,
    name: &str,
    tx: mpsc::Sender<Trigger>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config).default_backoff().boxed();
    while let Some(event) = events.next().await {
        match event {
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone) => {
                if tx.send(Trigger::Changed).await.is_err() {
                    return;
                }
            }
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, namespace, name, "ConfigMap watch error; retrying");
            }
        }
    }
}
