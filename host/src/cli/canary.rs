//! `wasm-operator canary promote|abort|status|diff NAME`: a release
//! engineer's handle on a WasmPlugin's canary, with a kubeconfig only.
//!
//! `promote` and `abort` set the annotation `wasm-operator.dev/canary-action`
//! on the WasmPlugin (the host acts on it and removes it: the spec is never
//! edited); `status` prints `status.canary`; `diff` prints the field diffs
//! of the candidate's shadow answers from the ConfigMap the host keeps
//! (named in `status.canary.diffsConfigMap`).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::{CliError, OutputFormat};
use crate::contract::HostObject;
use crate::wasmplugin::spec::CanaryStatus;
use crate::wasmplugin::{ACTION_ANNOTATION, DIFFS_KEY, api_resource, diffs_config_map_name};

/// `wasm-operator canary ...`
#[derive(Debug, Subcommand)]
pub enum CanaryCommand {
    /// Promote the candidate: it serves every object (the spec is not edited).
    Promote(Target),
    /// Abort the canary: the stable version serves every object again.
    Abort(Target),
    /// Print where the canary stands: versions, phase, weight, figures,
    /// the last analysis, dry-run failures, shadow counts.
    Status(Target),
    /// Print every differing object's latest field diff (Shadow mode).
    Diff(Target),
}

/// Which WasmPlugin, on which cluster, printed how.
#[derive(Debug, Args)]
pub struct Target {
    /// The WasmPlugin's name.
    pub name: String,
    /// Namespace of the diffs ConfigMap when status does not name it (the
    /// host's namespace; WasmPlugins themselves are cluster-scoped).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

/// Why a canary command failed.
#[derive(Debug, thiserror::Error)]
pub enum CanaryCliError {
    /// No WasmPlugin of that name.
    #[error("WasmPlugin {0} not found; list them with `kubectl get wasmplugins`")]
    NotFound(String),
    /// The WasmPlugin has no canary.
    #[error(
        "WasmPlugin {0} has no canary: add spec.canary (see docs/canary.md), or wait for the host to report it in status.canary"
    )]
    NoCanary(String),
    /// No diffs were written (not a Shadow canary, or nothing compared yet).
    #[error(
        "no shadow diffs for WasmPlugin {name}: ConfigMap {config_map} {why}; diffs exist for a Shadow canary once answers were compared"
    )]
    NoDiffs {
        /// The WasmPlugin.
        name: String,
        /// `namespace/name` looked at.
        config_map: String,
        /// What was missing.
        why: String,
    },
    /// The diffs ConfigMap was not created by the host (a squatter): its
    /// figures are not the canary's.
    #[error(
        "no shadow diffs for WasmPlugin {name}: {message}. Its content is not the canary's diffs; do not promote on it"
    )]
    DiffsNotTheHosts {
        /// The WasmPlugin.
        name: String,
        /// The squatter, what it means and what to do.
        message: String,
    },
    /// The API server refused.
    #[error("cannot {what} WasmPlugin {name}: {source}")]
    Api {
        /// What was tried.
        what: &'static str,
        /// The WasmPlugin.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The output could not be rendered.
    #[error("cannot render the canary of WasmPlugin {name}: {message}")]
    Render {
        /// The WasmPlugin.
        name: String,
        /// What failed.
        message: String,
    },
}

impl From<CanaryCliError> for CliError {
    fn from(error: CanaryCliError) -> CliError {
        CliError::Canary(error)
    }
}

/// Runs a `canary` subcommand and prints its output.
pub async fn execute(command: CanaryCommand) -> Result<(), CliError> {
    let target = match &command {
        CanaryCommand::Promote(t)
        | CanaryCommand::Abort(t)
        | CanaryCommand::Status(t)
        | CanaryCommand::Diff(t) => t,
    };
    let client =
        super::connect::connect(target.kubeconfig.as_deref(), target.context.as_deref()).await?;
    let out = run(&client, &command).await?;
    println!("{}", out.trim_end());
    Ok(())
}

/// Runs `command` against `client` and returns what it prints.
///
/// # Errors
///
/// [`CanaryCliError`] naming the WasmPlugin and what to do.
pub async fn run(client: &kube::Client, command: &CanaryCommand) -> Result<String, CanaryCliError> {
    match command {
        CanaryCommand::Promote(t) => request(client, t, "promote").await,
        CanaryCommand::Abort(t) => request(client, t, "abort").await,
        CanaryCommand::Status(t) => {
            let status = canary_status(client, &t.name).await?;
            render(&t.name, t.output, &status, render_status)
        }
        CanaryCommand::Diff(t) => {
            let diffs = diffs(client, t).await?;
            render(&t.name, t.output, &diffs, render_diffs)
        }
    }
}

async fn request(
    client: &kube::Client,
    t: &Target,
    action: &str,
) -> Result<String, CanaryCliError> {
    // Refuse early and clearly when there is nothing to act on.
    let _ = canary_status(client, &t.name).await?;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let patch = json!({"metadata": {"annotations": {ACTION_ANNOTATION: action}}});
    api.patch(&t.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| CanaryCliError::Api {
            what: "annotate",
            name: t.name.clone(),
            source,
        })?;
    Ok(format!(
        "wasmplugin/{} annotated {ACTION_ANNOTATION}={action}; the host acts on it and removes the annotation. Follow it with `wasm-operator canary status {}`.",
        t.name, t.name
    ))
}

async fn wasmplugin(client: &kube::Client, name: &str) -> Result<DynamicObject, CanaryCliError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    match api.get_opt(name).await {
        Ok(Some(object)) => Ok(object),
        Ok(None) => Err(CanaryCliError::NotFound(name.to_string())),
        Err(source) => Err(CanaryCliError::Api {
            what: "read",
            name: name.to_string(),
            source,
        }),
    }
}

/// `status.canary` of WasmPlugin `name`.
///
/// # Errors
///
/// [`CanaryCliError::NotFound`], [`CanaryCliError::NoCanary`], API errors.
pub async fn canary_status(
    client: &kube::Client,
    name: &str,
) -> Result<CanaryStatus, CanaryCliError> {
    let object = wasmplugin(client, name).await?;
    object
        .data
        .get("status")
        .and_then(|s| s.get("canary"))
        .filter(|c| !c.is_null())
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .ok_or_else(|| CanaryCliError::NoCanary(name.to_string()))
}

async fn diffs(client: &kube::Client, t: &Target) -> Result<Value, CanaryCliError> {
    let status = canary_status(client, &t.name).await?;
    let (namespace, name) = match (&status.diffs_config_map, &t.namespace) {
        (_, Some(ns)) => (ns.clone(), diffs_config_map_name(&t.name)),
        (Some(full), None) => match full.split_once('/') {
            Some((ns, name)) => (ns.to_string(), name.to_string()),
            None => ("default".to_string(), full.clone()),
        },
        (None, None) => ("default".to_string(), diffs_config_map_name(&t.name)),
    };
    let config_map = format!("{namespace}/{name}");
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
    let found = api
        .get_opt(&name)
        .await
        .map_err(|source| CanaryCliError::Api {
            what: "read the diffs of",
            name: t.name.clone(),
            source,
        })?;
    let no_diffs = |why: &str| CanaryCliError::NoDiffs {
        name: t.name.clone(),
        config_map: config_map.clone(),
        why: why.to_string(),
    };
    let found = found.ok_or_else(|| no_diffs("does not exist"))?;
    if !HostObject::CanaryDiffs.created_by_host(found.metadata.labels.as_ref()) {
        return Err(CanaryCliError::DiffsNotTheHosts {
            name: t.name.clone(),
            message: HostObject::CanaryDiffs.squatter_message("ConfigMap", &namespace, &name),
        });
    }
    let text = found
        .data
        .and_then(|mut d| d.remove(DIFFS_KEY))
        .ok_or_else(|| no_diffs(&format!("has no key {DIFFS_KEY}")))?;
    serde_json::from_str(&text).map_err(|e| no_diffs(&format!("holds no JSON document ({e})")))
}

fn render<T: serde::Serialize>(
    name: &str,
    output: OutputFormat,
    value: &T,
    text: fn(&T) -> String,
) -> Result<String, CanaryCliError> {
    let err = |message: String| CanaryCliError::Render {
        name: name.to_string(),
        message,
    };
    match output {
        OutputFormat::Json => serde_json::to_string_pretty(value).map_err(|e| err(e.to_string())),
        OutputFormat::Yaml => serde_yaml::to_string(value).map_err(|e| err(e.to_string())),
        OutputFormat::Text => Ok(text(value)),
    }
}

/// The human-readable `canary status`.
pub fn render_status(s: &CanaryStatus) -> String {
    let mut out = String::new();
    let version = |v: &Option<crate::wasmplugin::spec::CanaryVersion>| match v {
        Some(v) => {
            let mut line = format!(
                "{} ({})",
                v.version.as_deref().unwrap_or("-"),
                v.digest.as_deref().unwrap_or("-")
            );
            if let Some(calls) = v.calls {
                let _ = write!(
                    line,
                    "  calls {calls}, failures {}",
                    v.failures.unwrap_or_default()
                );
            }
            if let Some(p95) = v.p95_millis {
                let _ = write!(line, ", p95 {p95:.1}ms");
            }
            line
        }
        None => "-".into(),
    };
    let _ = writeln!(out, "Stable:     {}", version(&s.stable));
    let _ = writeln!(out, "Candidate:  {}", version(&s.candidate));
    let _ = writeln!(out, "Mode:       {}", s.mode.as_deref().unwrap_or("-"));
    let _ = writeln!(out, "Phase:      {}", s.phase.as_deref().unwrap_or("-"));
    if let Some(w) = s.weight {
        let _ = writeln!(out, "Weight:     {w}%");
    }
    if let Some(sel) = &s.selector {
        let _ = writeln!(out, "Selector:   {sel}");
    }
    if let Some(m) = &s.message {
        let _ = writeln!(out, "Message:    {m}");
    }
    if let Some(a) = &s.last_analysis {
        let _ = writeln!(
            out,
            "Analysis:   {} at {}: {}",
            a.verdict.as_deref().unwrap_or("-"),
            a.time.as_deref().unwrap_or("-"),
            a.message.as_deref().unwrap_or("")
        );
    }
    if let Some(n) = s.failed_checks {
        let _ = writeln!(out, "Failed checks: {n}");
    }
    if let Some(d) = &s.dry_run {
        let _ = writeln!(
            out,
            "Dry run:    {}/{} checked, {} would fail",
            d.checked.unwrap_or_default(),
            d.total.unwrap_or_default(),
            d.failed_count.unwrap_or_default()
        );
        for f in d.failures.iter().flatten() {
            let _ = writeln!(
                out,
                "  {}: {} {}",
                f.object.as_deref().unwrap_or("-"),
                f.reason.as_deref().unwrap_or("-"),
                f.message.as_deref().unwrap_or("")
            );
        }
    }
    if let Some(sh) = &s.shadow {
        let _ = writeln!(
            out,
            "Shadow:     {} compared, {} differing ({} objects differ now)",
            sh.compared.unwrap_or_default(),
            sh.differing.unwrap_or_default(),
            sh.differing_objects.unwrap_or_default()
        );
        for sample in sh.samples.iter().flatten() {
            let _ = writeln!(
                out,
                "  {}: {}",
                sample.object.as_deref().unwrap_or("-"),
                sample.paths.clone().unwrap_or_default().join(", ")
            );
        }
    }
    if let Some(cm) = &s.diffs_config_map {
        let _ = writeln!(
            out,
            "Diffs:      ConfigMap {cm} (wasm-operator canary diff)"
        );
    }
    if let Some(squatter) = &s.diffs_not_the_hosts {
        let _ = writeln!(out, "Diffs:      none: {squatter}");
    }
    out
}

/// The human-readable `canary diff`: per object, each path with the
/// stable and candidate values.
pub fn render_diffs(document: &Value) -> String {
    let mut out = String::new();
    let show = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "(absent)".to_string(),
        Some(v) => v.to_string(),
    };
    let _ = writeln!(
        out,
        "stable {} -> candidate {}",
        document["stable"]["version"].as_str().unwrap_or("-"),
        document["candidate"]["version"].as_str().unwrap_or("-")
    );
    let counts = &document["counts"];
    let _ = writeln!(
        out,
        "{} compared, {} differing",
        counts["compared"].as_u64().unwrap_or_default(),
        counts["differing"].as_u64().unwrap_or_default()
    );
    for object in document["objects"].as_array().into_iter().flatten() {
        let o = &object["object"];
        let name = match o["namespace"].as_str() {
            Some(ns) => format!("{ns}/{}", o["name"].as_str().unwrap_or("-")),
            None => o["name"].as_str().unwrap_or("-").to_string(),
        };
        let _ = writeln!(out, "\n{name}:");
        for field in object["fields"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "  {}: {} -> {}",
                field["path"].as_str().unwrap_or("-"),
                show(field.get("stable")),
                show(field.get("candidate"))
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasmplugin::spec::{CanaryVersion, ShadowStatus};

    #[test]
    fn status_text_names_versions_phase_and_figures() {
        let status = CanaryStatus {
            stable: Some(CanaryVersion {
                version: Some("1.0.0".into()),
                digest: Some("sha256:a".into()),
                calls: Some(10),
                failures: Some(0),
                ..CanaryVersion::default()
            }),
            candidate: Some(CanaryVersion {
                version: Some("1.2.0".into()),
                digest: Some("sha256:b".into()),
                ..CanaryVersion::default()
            }),
            mode: Some("Shadow".into()),
            phase: Some("Shadowing".into()),
            shadow: Some(ShadowStatus {
                compared: Some(4),
                differing: Some(4),
                differing_objects: Some(4),
                samples: None,
            }),
            ..CanaryStatus::default()
        };
        let text = render_status(&status);
        assert!(
            text.contains("Stable:     1.0.0 (sha256:a)  calls 10, failures 0"),
            "{text}"
        );
        assert!(text.contains("Candidate:  1.2.0"), "{text}");
        assert!(text.contains("Phase:      Shadowing"), "{text}");
        assert!(text.contains("4 compared, 4 differing"), "{text}");
    }

    #[test]
    fn diff_text_shows_each_path_with_both_values() {
        let document = json!({
            "stable": {"version": "1.0.0"}, "candidate": {"version": "1.2.0"},
            "counts": {"compared": 1, "differing": 1},
            "objects": [{"object": {"namespace": "ns", "name": "a", "uid": "u"},
                         "fields": [{"path": "children[apps/v1/Deployment/ns/a].spec.replicas", "stable": 2, "candidate": 4},
                                    {"path": "children[v1/Service/ns/a]", "stable": {"kind": "Service"}}]}],
        });
        let text = render_diffs(&document);
        assert!(text.contains("ns/a:"), "{text}");
        assert!(text.contains("spec.replicas: 2 -> 4"), "{text}");
        assert!(text.contains("(absent)"), "{text}");
    }

    #[test]
    fn commands_parse_like_kubectl() {
        use clap::Parser;
        let cli = super::super::Cli::try_parse_from([
            "wasm-operator",
            "canary",
            "diff",
            "webapp",
            "-n",
            "ops",
            "-o",
            "yaml",
        ])
        .unwrap();
        let super::super::Command::Canary(CanaryCommand::Diff(t)) = cli.command else {
            panic!("{cli:?}")
        };
        assert_eq!(t.name, "webapp");
        assert_eq!(t.namespace.as_deref(), Some("ops"));
        assert_eq!(t.output, OutputFormat::Yaml);
        for verb in ["promote", "abort", "status"] {
            assert!(
                super::super::Cli::try_parse_from(["wasm-operator", "canary", verb, "x"]).is_ok()
            );
        }
    }
}
