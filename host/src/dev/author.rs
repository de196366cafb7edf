//! `wasm-operator dev` run inside a plugin author's own crate (a `cdylib`
//! depending on `wasm-operator-sdk`, as `plugin new` writes one) rather than
//! this repository's workspace: build that crate, install the CRD its plugin
//! carries, serve it, apply its `samples/`, and rebuild whenever `src/` or
//! `Cargo.toml` changes. The hot swap itself is the WasmPlugin controller's
//! file reload: a rebuild only writes the component.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::build::{self, BuildError, PluginCrate};
use super::progress::Step;
use super::wasmplugins::{LoadEvent, LoadOutcome};
use crate::contract;

/// A plugin author's crate `dev` runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorCrate {
    /// The crate's directory (holding its Cargo.toml).
    pub dir: PathBuf,
    /// The cargo package name.
    pub package: String,
    /// The library's name (`[lib] name`, else the package's with `_`).
    pub lib: String,
}

/// Why the author's plugin could not be served.
#[derive(Debug, thiserror::Error)]
pub enum AuthorError {
    /// The built component could not be read.
    #[error("cannot read the plugin {} that cargo built: {source}", path.display())]
    Read {
        /// The component file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The component does not load (no manifest, a bad CRD export, ...).
    #[error(
        "the plugin {} that cargo built does not load: {source}; fix it and save again, dev rebuilds it",
        path.display()
    )]
    Load {
        /// The component file.
        path: PathBuf,
        /// What the engine said (boxed: the engine's error is large and
        /// this one travels up through `DevError`).
        #[source]
        source: Box<crate::engine::EngineError>,
    },
    /// The crate does not build.
    #[error(transparent)]
    Build(#[from] BuildError),
}

/// What the author's built component carries.
#[derive(Debug, Clone)]
pub struct Carried {
    /// Its manifest.
    pub manifest: contract::Manifest,
    /// The CRD of its primary kind, if it carries one.
    pub crd: Option<Value>,
}

impl AuthorCrate {
    /// The plugin crate whose Cargo.toml is in `dir`, if it is one: a
    /// `[package]` with a `cdylib` library that depends on
    /// `wasm-operator-sdk`. This repository's root (a workspace without a
    /// package) is not one.
    pub fn detect(dir: &Path) -> Option<AuthorCrate> {
        let text = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
        let package = build::table_value(&text, "package", "name")?;
        let cdylib = build::table_value(&text, "lib", "crate-type")
            .is_some_and(|types| types.contains("cdylib"));
        let sdk = build::table_value(&text, "dependencies", "wasm-operator-sdk").is_some()
            || text.contains("[dependencies.wasm-operator-sdk]");
        if !(cdylib && sdk) {
            return None;
        }
        let lib =
            build::table_value(&text, "lib", "name").unwrap_or_else(|| package.replace('-', "_"));
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
        Some(AuthorCrate { dir, package, lib })
    }

    /// The component's file name (`my_plugin.wasm`).
    pub fn wasm_file_name(&self) -> String {
        format!("{}.wasm", self.lib)
    }

    /// Where cargo writes the component: the crate's own target directory
    /// (or `$CARGO_TARGET_DIR`).
    pub fn wasm_dir(&self) -> PathBuf {
        build::default_wasm_dir(&self.dir)
    }

    /// The built component.
    pub fn wasm_file(&self) -> PathBuf {
        self.wasm_dir().join(self.wasm_file_name())
    }

    /// The sample objects dev applies.
    pub fn samples_dir(&self) -> PathBuf {
        self.dir.join("samples")
    }

    /// Builds the crate (`cargo build --release --target wasm32-wasip2` in it).
    ///
    /// # Errors
    ///
    /// [`BuildError`] with the compiler's output when the build fails.
    pub async fn build(&self) -> Result<(), BuildError> {
        let this = PluginCrate {
            package: self.package.clone(),
            dir: self.dir.clone(),
        };
        build::build_plugins(&self.dir, std::slice::from_ref(&this)).await
    }

    /// Reads what the built component carries (manifest, CRD).
    ///
    /// # Errors
    ///
    /// [`AuthorError`] when the file cannot be read or does not load.
    pub async fn carried(&self) -> Result<Carried, AuthorError> {
        let path = self.wasm_file();
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|source| AuthorError::Read {
                path: path.clone(),
                source,
            })?;
        let inspected =
            tokio::task::spawn_blocking(move || crate::engine::inspect::inspect(&bytes)).await;
        let inspection = match inspected {
            Ok(result) => result.map_err(|source| AuthorError::Load {
                path: path.clone(),
                source: Box::new(source),
            })?,
            Err(join) => {
                return Err(AuthorError::Read {
                    path,
                    source: std::io::Error::other(join.to_string()),
                });
            }
        };
        Ok(Carried {
            manifest: inspection.manifest,
            crd: inspection.crd,
        })
    }
}

/// What [`prepare`] installed: the CRD's name, and the plugin's resources
/// (plurals, primary first) for the kubectl hint.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    /// The CRD installed from the plugin, if it carries one.
    pub crd: Option<String>,
    /// The primary's and the owned kinds' plurals.
    pub resources: Vec<String>,
}

/// Builds `author` (when `build`) and reads what its component carries.
/// Dev does not install the CRD: the WasmPlugin it deploys grants
/// `permissions.crds`, so the host applies the plugin's own CRD when the
/// version activates, as it would in a cluster (and again on every rebuild
/// that changes it). The samples are applied after that.
///
/// # Errors
///
/// [`AuthorError`] naming the step that failed.
pub async fn prepare(author: &AuthorCrate, build: bool) -> Result<Prepared, AuthorError> {
    if build {
        let step = Step::start(format!("Building plugin {}", author.package));
        if let Err(error) = author.build().await {
            step.failed();
            return Err(error.into());
        }
        step.done(author.wasm_file().display().to_string());
    }
    let step = Step::start(format!("Reading the CRD {} carries", author.package));
    let carried = match author.carried().await {
        Ok(carried) => carried,
        Err(error) => {
            step.failed();
            return Err(error);
        }
    };
    let crd = carried
        .crd
        .as_ref()
        .and_then(|crd| crd.pointer("/metadata/name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    match &crd {
        Some(name) => step.done(format!("{name} (the host installs it: permissions.crds)")),
        None => step.done("none: the plugin carries no CRD (`Reconciler::crd`)"),
    }
    let manifest = &carried.manifest;
    let resources = std::iter::once(&manifest.primary)
        .chain(&manifest.owns)
        .map(|kind| kind.plural.clone())
        .collect();
    Ok(Prepared { crd, resources })
}

/// Rebuilds `author` whenever a file under `src/`, `Cargo.toml` or
/// `build.rs` changes (after `debounce` of quiet), until `cancel` fires
/// (the host applies the CRD the new component carries when it swaps it
/// in). A failed build is
/// logged with the compiler's output and broadcast as a
/// [`LoadOutcome::Failed`]; the last good component keeps serving.
pub fn spawn_rebuilder(
    author: AuthorCrate,
    debounce: Duration,
    events: broadcast::Sender<LoadEvent>,
    cancel: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut changes) = mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if let Ok(event) = event
                && !matches!(event.kind, notify::EventKind::Access(_))
            {
                // The receiver is gone only when the rebuilder stopped.
                let _ = tx.send(());
            }
        });
        let mut watcher = match watcher {
            Ok(watcher) => watcher,
            Err(error) => {
                tracing::error!(%error, dir = %author.dir.display(), "cannot watch the plugin crate; rebuild by restarting dev");
                return;
            }
        };
        for (path, mode) in [
            (author.dir.join("src"), RecursiveMode::Recursive),
            (author.dir.join("Cargo.toml"), RecursiveMode::NonRecursive),
            (author.dir.join("build.rs"), RecursiveMode::NonRecursive),
        ] {
            if path.exists()
                && let Err(error) = watcher.watch(&path, mode)
            {
                tracing::warn!(%error, path = %path.display(), "cannot watch; changes there are not rebuilt");
            }
        }
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                change = changes.recv() => if change.is_none() { return },
            }
            // Settle: an editor's save is several events, a `git checkout` many.
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    change = tokio::time::timeout(debounce, changes.recv()) => match change {
                        Ok(Some(())) => continue,
                        Ok(None) => return,
                        Err(_) => break,
                    },
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                () = rebuild(&author, &events) => {}
            }
        }
    })
}

/// One rebuild after a change.
async fn rebuild(author: &AuthorCrate, events: &broadcast::Sender<LoadEvent>) {
    tracing::info!(package = %author.package, "source changed; rebuilding");
    let failed = |message: String| {
        tracing::error!("{message}");
        // Nobody listening is fine: events are for tests and tooling.
        let _ = events.send(LoadEvent {
            file: author.wasm_file(),
            outcome: LoadOutcome::Failed(message),
        });
    };
    if let Err(error) = author.build().await {
        failed(format!(
            "{error}\nThe last good version of {} keeps serving; fix the error and save again.",
            author.package
        ));
        return;
    }
    // The host applies the CRD the new component carries when it swaps it
    // in (permissions.crds), before the new version serves.
    tracing::info!(package = %author.package, "rebuilt; the WasmPlugin controller swaps it in");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_crate_is_a_cdylib_on_the_sdk_and_the_workspace_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| std::fs::write(dir.path().join("Cargo.toml"), text).unwrap();
        write(
            "[package]\nname = \"my-plugin\"\n\n[lib]\ncrate-type = [\"cdylib\", \"rlib\"]\n\n[dependencies]\nwasm-operator-sdk = { path = \"../sdk\" }\n\n[workspace]\n",
        );
        let found = AuthorCrate::detect(dir.path()).unwrap();
        assert_eq!(
            (found.package.as_str(), found.lib.as_str()),
            ("my-plugin", "my_plugin")
        );
        assert_eq!(found.wasm_file_name(), "my_plugin.wasm");
        write("[package]\nname = \"tool\"\n\n[dependencies]\nwasm-operator-sdk = \"0.1\"\n");
        assert!(AuthorCrate::detect(dir.path()).is_none(), "not a cdylib");
        write("[package]\nname = \"lib\"\n\n[lib]\ncrate-type = [\"cdylib\"]\n");
        assert!(AuthorCrate::detect(dir.path()).is_none(), "not on the SDK");
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        assert!(AuthorCrate::detect(&workspace).is_none(), "this repository");
        let webapp = workspace.join("plugins/webapp");
        assert_eq!(
            AuthorCrate::detect(&webapp).map(|c| c.lib),
            Some("webapp".to_string())
        );
    }
}
