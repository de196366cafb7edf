//! Building the workspace's plugins to `wasm32-wasip2` components, the way a
//! plugin author would by hand.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::process::Command;

/// The cargo target the plugins are built for.
pub const WASM_TARGET: &str = "wasm32-wasip2";

/// Why the plugins could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The plugins directory cannot be listed.
    #[error("cannot read the plugins directory {}: {source}", path.display())]
    ReadDir {
        /// The plugins directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// Cargo could not be started.
    #[error("cannot start `{command}`: {source}; is cargo installed and on PATH?")]
    Spawn {
        /// The cargo command line.
        command: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The build ran and failed (a compile error in a plugin).
    #[error(
        "`{command}` failed ({status}); fix the errors below, or pass --no-build to use the .wasm files already built\n{output}"
    )]
    Failed {
        /// The cargo command line.
        command: String,
        /// How cargo exited.
        status: std::process::ExitStatus,
        /// The last lines of cargo's output, where the first error usually is.
        output: String,
    },
}

/// One plugin crate found under the plugins directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginCrate {
    /// The cargo package name (`-p` argument).
    pub package: String,
    /// The crate's directory.
    pub dir: PathBuf,
}

impl PluginCrate {
    /// File name of the component cargo writes for this crate (`my-plugin` →
    /// `my_plugin.wasm`).
    pub fn wasm_file_name(&self) -> String {
        format!("{}.wasm", self.package.replace('-', "_"))
    }
}

/// Every crate directory (one holding a `Cargo.toml`) directly under
/// `plugins_dir`, sorted by package name. Only direct children count: the
/// test fixtures live one level down (`plugins/fixtures/<name>`), so `dev`
/// never builds or loads them.
pub fn find_plugin_crates(plugins_dir: &Path) -> Result<Vec<PluginCrate>, BuildError> {
    let entries = std::fs::read_dir(plugins_dir).map_err(|source| BuildError::ReadDir {
        path: plugins_dir.to_path_buf(),
        source,
    })?;
    let mut crates = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let dir = entry.path();
        let manifest = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        // Exercise builds (e.g. later versions of a plugin used by the upgrade
        // tests) opt out: `dev` would otherwise swap through every version.
        if table_value(&text, "package.metadata.wasm-operator", "dev").as_deref() == Some("false") {
            continue;
        }
        let package = table_value(&text, "package", "name")
            .or_else(|| dir.file_name().and_then(|n| n.to_str()).map(str::to_string));
        if let Some(package) = package {
            crates.push(PluginCrate { package, dir });
        }
    }
    crates.sort_by(|a, b| a.package.cmp(&b.package));
    Ok(crates)
}

/// The value of `key` in the `[table]` of a Cargo.toml, unquoted. A
/// line-based reader is enough for the manifests cargo itself writes and
/// avoids a TOML dependency.
pub(crate) fn table_value(cargo_toml: &str, table: &str, key: &str) -> Option<String> {
    let header = format!("[{table}]");
    let mut in_table = false;
    for line in cargo_toml.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_table = line == header;
            continue;
        }
        if !in_table {
            continue;
        }
        if let Some(rest) = line.strip_prefix(key)
            && let Some(value) = rest.trim_start().strip_prefix('=')
        {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

/// Builds `crates` in release mode for [`WASM_TARGET`] from `workspace_dir`
/// with cargo. Cargo is invoked directly (not through a script) so that
/// stopping `dev` stops the build, and so every crate under the plugins
/// directory is built, not only the ones a script lists.
pub async fn build_plugins(workspace_dir: &Path, crates: &[PluginCrate]) -> Result<(), BuildError> {
    let mut command = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    command.args(["build", "--release", "--target", WASM_TARGET]);
    for plugin in crates {
        command.args(["-p", &plugin.package]);
    }
    let shown = format!("{:?}", command.as_std()).replace('"', "");
    command
        .current_dir(workspace_dir)
        .kill_on_drop(true)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let output = command.output().await.map_err(|source| BuildError::Spawn {
        command: shown.clone(),
        source,
    })?;
    if output.status.success() {
        return Ok(());
    }
    Err(BuildError::Failed {
        command: shown,
        status: output.status,
        output: tail(&output.stdout, &output.stderr, 40),
    })
}

/// The last `lines` lines of a build's combined output: enough to show the
/// first compiler error without flooding the terminal.
fn tail(stdout: &[u8], stderr: &[u8], lines: usize) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr)
    );
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}

/// Where cargo puts release builds for [`WASM_TARGET`]: under
/// `$CARGO_TARGET_DIR` when set, `<workspace>/target` otherwise.
pub fn default_wasm_dir(workspace_dir: &Path) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace_dir.join("target"), PathBuf::from);
    target.join(WASM_TARGET).join("release")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_package_name() {
        let toml =
            "[lib]\nname = \"lib_name\"\n\n[package]\nname = \"my-plugin\"\nversion = \"1.0.0\"\n";
        assert_eq!(
            table_value(toml, "package", "name").as_deref(),
            Some("my-plugin")
        );
        let plugin = PluginCrate {
            package: "my-plugin".into(),
            dir: PathBuf::from("plugins/my-plugin"),
        };
        assert_eq!(plugin.wasm_file_name(), "my_plugin.wasm");
    }

    #[test]
    fn exercise_crates_opt_out_of_dev() {
        let dir = tempfile::tempdir().unwrap();
        for (name, extra) in [
            ("main", ""),
            (
                "exercise",
                "\n[package.metadata.wasm-operator]\ndev = false\n",
            ),
        ] {
            std::fs::create_dir(dir.path().join(name)).unwrap();
            let toml = format!("[package]\nname = \"{name}\"\n{extra}");
            std::fs::write(dir.path().join(name).join("Cargo.toml"), toml).unwrap();
        }
        let found: Vec<String> = find_plugin_crates(dir.path())
            .unwrap()
            .into_iter()
            .map(|c| c.package)
            .collect();
        assert_eq!(found, ["main"]);
    }

    #[test]
    fn crates_below_a_plain_folder_are_not_plugins() {
        let dir = tempfile::tempdir().unwrap();
        for path in ["main", "fixtures/faulty"] {
            std::fs::create_dir_all(dir.path().join(path)).unwrap();
            let name = path.rsplit('/').next().unwrap_or(path);
            let toml = format!("[package]\nname = \"{name}\"\n");
            std::fs::write(dir.path().join(path).join("Cargo.toml"), toml).unwrap();
        }
        let found: Vec<String> = find_plugin_crates(dir.path())
            .unwrap()
            .into_iter()
            .map(|c| c.package)
            .collect();
        assert_eq!(found, ["main"]);
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail(b"a\nb\n", b"c\nd\n", 2), "c\nd");
    }
}
