//! `wasm-operator plugin test`: runs a plugin's golden fixtures (see
//! [`super::fixture`]) in process, through the production engine and
//! limits, and compares each answer with the case's `expected.yaml`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use super::fixture::{self, Case, InputError};
use super::inspect::{InspectArgs, InspectError, read_component};
use super::{CliError, OutputFormat};
use crate::engine::{Engine, EngineConfig, LoadedPlugin};

/// Arguments of `wasm-operator plugin test`.
#[derive(Debug, Args)]
pub struct PluginTestArgs {
    /// The plugin component: a .wasm file, a .wasm.gz, or
    /// oci://REGISTRY/REPOSITORY:TAG, read as by `plugin inspect`.
    #[arg(value_name = "PLUGIN.wasm")]
    pub file: PathBuf,
    /// The fixtures: one subdirectory per case, each with input.yaml and
    /// expected.yaml.
    #[arg(value_name = "FIXTURES_DIR", default_value = "fixtures")]
    pub fixtures: PathBuf,
    /// Write each case's answer to its expected.yaml instead of comparing.
    #[arg(long)]
    pub update: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = TestFormat::Text)]
    pub output: TestFormat,
    /// Where compiled plugins are cached (by digest), as for `run`: a rerun
    /// of an unchanged plugin skips compiling it (default:
    /// `$XDG_CACHE_HOME/wasm-operator`, else `$HOME/.cache/wasm-operator`).
    #[arg(long, env = "WASM_OPERATOR_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

/// How `plugin test` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TestFormat {
    /// A line per case, a diff per mismatch, a summary.
    Text,
    /// One JSON document: every case, its verdict and diff.
    Json,
}

/// Why `plugin test` did not pass.
#[derive(Debug, thiserror::Error)]
pub enum PluginTestError {
    /// The component could not be read or loaded.
    #[error(transparent)]
    Load(#[from] InspectError),
    /// A fixture file is unusable (exit 2).
    #[error(transparent)]
    Input(#[from] InputError),
    /// Some answers differ from their expected.yaml (exit 1).
    #[error(
        "{failed} of {total} fixture cases of {} failed; if the new answers are right, rerun with --update and review the diff of expected.yaml",
        fixtures.display()
    )]
    Mismatch {
        /// Cases that failed.
        failed: usize,
        /// Cases run.
        total: usize,
        /// The fixtures directory.
        fixtures: PathBuf,
    },
}

impl PluginTestError {
    /// The process exit code: 1 for a mismatch, 2 for unusable input.
    pub fn exit_code(&self) -> u8 {
        match self {
            PluginTestError::Mismatch { .. } => 1,
            PluginTestError::Load(_) | PluginTestError::Input(_) => 2,
        }
    }
}

/// One case's verdict.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The case's name.
    pub name: String,
    /// True when the answer matched (or `--update` wrote it).
    pub passed: bool,
    /// A unified diff, expected → actual, when it did not match.
    pub diff: Option<String>,
}

/// Runs `wasm-operator plugin test`.
pub async fn plugin_test(args: PluginTestArgs) -> Result<(), CliError> {
    let cache_dir = args.cache_dir.clone().or_else(EngineConfig::user_cache_dir);
    let plugin = load(&args.file, cache_dir)
        .await
        .map_err(CliError::PluginTest)?;
    let verdicts = run(&plugin, &args.fixtures, args.update)
        .await
        .map_err(CliError::PluginTest)?;
    let failed = verdicts.iter().filter(|v| !v.passed).count();
    let passed = verdicts.len() - failed;
    match args.output {
        TestFormat::Text => {
            for verdict in &verdicts {
                let word = match (verdict.passed, args.update) {
                    (true, true) => "updated",
                    (true, false) => "ok",
                    (false, _) => "FAILED",
                };
                println!("{word:7} {}", verdict.name);
                if let Some(diff) = &verdict.diff {
                    println!("{}", diff.trim_end());
                }
            }
            println!("{passed} passed, {failed} failed");
        }
        TestFormat::Json => {
            let cases: Vec<Value> = verdicts
                .iter()
                .map(|v| json!({"name": v.name, "passed": v.passed, "diff": v.diff}))
                .collect();
            let report = json!({"cases": cases, "passed": passed, "failed": failed});
            println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            );
        }
    }
    if failed > 0 {
        return Err(CliError::PluginTest(PluginTestError::Mismatch {
            failed,
            total: verdicts.len(),
            fixtures: args.fixtures,
        }));
    }
    Ok(())
}

/// Loads the component as the controller does: the production engine with
/// its default limits (compiled artifacts cached in `cache_dir`, if any).
///
/// # Errors
///
/// The file cannot be read, or the engine refuses the component.
pub async fn load(
    file: &Path,
    cache_dir: Option<PathBuf>,
) -> Result<LoadedPlugin, PluginTestError> {
    let args = InspectArgs {
        file: Some(file.to_path_buf()),
        oci: None,
        output: OutputFormat::Text,
    };
    let component = read_component(&args).await?;
    let path = component.path.clone();
    let bytes = component.bytes;
    let inspect = |source| InspectError::Inspect {
        path: path.clone(),
        source,
    };
    let engine = Engine::new(EngineConfig {
        cache_dir,
        ..EngineConfig::default()
    })
    .map_err(inspect)?;
    let plugin = tokio::task::spawn_blocking(move || engine.load(&bytes))
        .await
        .map_err(|e| InspectError::Render {
            path: path.clone(),
            format: "text",
            message: format!("the loading task failed: {e}"),
        })?
        .map_err(inspect)?;
    Ok(plugin)
}

/// Runs every case under `dir`; with `update`, writes each answer to its
/// expected.yaml.
///
/// # Errors
///
/// A case's input is unusable, or an expected.yaml cannot be read or written.
pub async fn run(
    plugin: &LoadedPlugin,
    dir: &Path,
    update: bool,
) -> Result<Vec<Verdict>, PluginTestError> {
    let mut verdicts = Vec::new();
    for case in fixture::cases(dir)? {
        verdicts.push(run_one(plugin, &case, update).await?);
    }
    Ok(verdicts)
}

/// Runs one case; see [`run`].
///
/// # Errors
///
/// As [`run`].
pub async fn run_one(
    plugin: &LoadedPlugin,
    case: &Case,
    update: bool,
) -> Result<Verdict, PluginTestError> {
    let input_path = case.input_path();
    let input = fixture::read_input(&input_path)?;
    let actual = fixture::run_case(plugin, &input)
        .await
        .map_err(|problem| InputError {
            path: input_path.clone(),
            problem,
        })?;
    let expected_path = case.expected_path();
    let actual_text = yaml(&actual, &expected_path)?;
    // A round trip that loses something fails whatever expected.yaml says:
    // --update must not bless it.
    let trip_lost = actual
        .get("roundTrip")
        .is_some_and(|verdict| verdict != "equal");
    if update {
        std::fs::write(&expected_path, &actual_text).map_err(|e| InputError {
            path: expected_path.clone(),
            problem: format!("cannot write: {e}"),
        })?;
        let diff = trip_lost.then(|| round_trip_diff(&input.object, &actual));
        return Ok(Verdict {
            name: case.name.clone(),
            passed: !trip_lost,
            diff,
        });
    }
    let expected = match std::fs::read_to_string(&expected_path) {
        Ok(text) => serde_yaml::from_str::<Value>(&text).map_err(|e| InputError {
            path: expected_path.clone(),
            problem: format!("{e}; regenerate it with --update"),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Value::Null,
        Err(e) => {
            return Err(InputError {
                path: expected_path,
                problem: format!("cannot read: {e}"),
            }
            .into());
        }
    };
    if expected == actual && !trip_lost {
        return Ok(Verdict {
            name: case.name.clone(),
            passed: true,
            diff: None,
        });
    }
    let diff = if expected == actual {
        round_trip_diff(&input.object, &actual)
    } else {
        let expected_text = if expected.is_null() {
            String::new()
        } else {
            yaml(&expected, &expected_path)?
        };
        unified_diff(
            &expected_text,
            &actual_text,
            &format!("{}/expected.yaml", case.name),
            "actual",
        )
    };
    Ok(Verdict {
        name: case.name.clone(),
        passed: false,
        diff: Some(diff),
    })
}

/// The diff of a round trip that changed the object: input → back.
fn round_trip_diff(input: &Value, actual: &Value) -> String {
    let back = actual
        .pointer("/roundTrip/differs")
        .unwrap_or(&actual["roundTrip"]);
    let text = |v: &Value| serde_yaml::to_string(v).unwrap_or_default();
    unified_diff(
        &text(input),
        &text(back),
        "input object",
        "converted and back",
    )
}

fn yaml(value: &Value, path: &Path) -> Result<String, InputError> {
    serde_yaml::to_string(value).map_err(|e| InputError {
        path: path.to_path_buf(),
        problem: format!("cannot render the answer as YAML: {e}"),
    })
}

/// A unified diff of two texts, line by line, with 3 lines of context.
pub fn unified_diff(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(old_name, new_name)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::unified_diff;

    #[test]
    fn the_diff_names_the_changed_line_only() {
        let old = "a: 1\nb: 2\nc: 3\n";
        let new = "a: 1\nb: 5\nc: 3\n";
        let diff = unified_diff(old, new, "expected", "actual");
        assert_eq!(
            diff,
            "--- expected\n+++ actual\n@@ -1,3 +1,3 @@\n a: 1\n-b: 2\n+b: 5\n c: 3\n"
        );
    }
}
