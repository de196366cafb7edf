//! Workload simulation: a stage engine compatible with kwok's `Stage`
//! resources (`kwok.x-k8s.io/v1alpha1`), run by the devcluster when
//! [`DevClusterOptions::simulate_workloads`](crate::DevClusterOptions) is on.
//!
//! The devcluster has no scheduler, kubelet or controller manager. With the
//! simulation on it instead:
//! - creates 3 fake Nodes `kwok-node-0..2` (annotation `kwok.x-k8s.io/node:
//!   fake`, label `type: kwok`, 32 cpu, 256Gi memory, 110 pods) that kwok's
//!   node stages make Ready;
//! - binds every unscheduled Pod (no `spec.nodeName`) to the fake node with
//!   the fewest Pods (a built-in step standing in for kube-scheduler);
//! - runs stages: kwok's own files for Pods and Nodes, vendored unchanged
//!   under `devcluster/stages/kwok/` (pod-ready, pod-complete, pod-delete,
//!   node-initialize, node-heartbeat), and built-in stages under
//!   `devcluster/stages/builtin/` that write the status kube-controller-manager
//!   would write for Deployments, ReplicaSets, StatefulSets, DaemonSets and Jobs
//!   (directly: no ReplicaSets or Pods are created for the first four), that
//!   fail Pods and Jobs labelled `simulate.wasm-operator.dev/outcome: fail`,
//!   keep Pods labelled `…/outcome: hang` Running (`pod-hang`), fail a Job
//!   whose `activeDeadlineSeconds` passes (`job-deadline`) and play a backup
//!   tool's termination message (`pod-complete-backup`); `pod-hang` and
//!   `pod-complete-backup` are the same files as the real control plane's
//!   (`realcluster/stages/`);
//! - creates one Pod per attempt a Job's status counts, records its Pods that
//!   Succeeded and deletes the active Pods of a Job past its deadline
//!   ([`jobs`]); the Pod stages run the Pods to `Succeeded` or `Failed`.
//!
//! Files: [`model`] (the Stage resource), [`query`] (kwok's jq subset),
//! [`template`] (kwok's Go-template subset and functions), [`select`]
//! (matching, choosing among stages, delays), [`next`] (what a stage does to
//! an object, as values), [`nodes`] (fake nodes and binding), [`jobs`] (the
//! Pods of Jobs), [`driver`] (the
//! task that watches the store and applies stages through its write path).

pub mod driver;
pub mod jobs;
mod lex;
pub mod model;
pub mod next;
pub mod nodes;
pub mod query;
pub mod select;
pub mod template;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use model::{SelectorOperator, Stage};
use query::{Query, QueryError};
use template::{Template, TemplateError};

/// The label (on a Pod, or on the pod template of a Job, Deployment or
/// StatefulSet) that makes its containers fail, with the value [`FAIL`].
pub const OUTCOME_LABEL: &str = "simulate.wasm-operator.dev/outcome";
/// The value of [`OUTCOME_LABEL`] that makes containers fail.
pub const FAIL: &str = "fail";
/// The value of [`OUTCOME_LABEL`] that keeps containers running, never completing.
pub const HANG: &str = "hang";

/// kwok's stage files, vendored unchanged (see `devcluster/stages/kwok/README.md`).
const KWOK_STAGES: &[(&str, &str)] = &[
    (
        "kwok/node-initialize.yaml",
        include_str!("../../stages/kwok/node-initialize.yaml"),
    ),
    (
        "kwok/node-heartbeat.yaml",
        include_str!("../../stages/kwok/node-heartbeat.yaml"),
    ),
    (
        "kwok/pod-ready.yaml",
        include_str!("../../stages/kwok/pod-ready.yaml"),
    ),
    (
        "kwok/pod-complete.yaml",
        include_str!("../../stages/kwok/pod-complete.yaml"),
    ),
    (
        "kwok/pod-delete.yaml",
        include_str!("../../stages/kwok/pod-delete.yaml"),
    ),
];

/// The devcluster's own stages for what kube-controller-manager (and a
/// kubelet running a failing, hanging or backup container) would do.
const BUILTIN_STAGES: &[(&str, &str)] = &[
    (
        "builtin/pod-fail.yaml",
        include_str!("../../stages/builtin/pod-fail.yaml"),
    ),
    (
        "builtin/pod-hang.yaml",
        include_str!("../../stages/builtin/pod-hang.yaml"),
    ),
    (
        "builtin/pod-complete-backup.yaml",
        include_str!("../../stages/builtin/pod-complete-backup.yaml"),
    ),
    (
        "builtin/deployment.yaml",
        include_str!("../../stages/builtin/deployment.yaml"),
    ),
    (
        "builtin/replicaset.yaml",
        include_str!("../../stages/builtin/replicaset.yaml"),
    ),
    (
        "builtin/statefulset.yaml",
        include_str!("../../stages/builtin/statefulset.yaml"),
    ),
    (
        "builtin/daemonset.yaml",
        include_str!("../../stages/builtin/daemonset.yaml"),
    ),
    (
        "builtin/job.yaml",
        include_str!("../../stages/builtin/job.yaml"),
    ),
];

/// A stage file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The file could not be read.
    #[error("cannot read stage file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not a list of `Stage` YAML documents.
    #[error(
        "stage file {file} is not valid: {message}; each YAML document must be a kwok.x-k8s.io/v1alpha1 Stage"
    )]
    Yaml {
        /// The file.
        file: String,
        /// The parser's complaint.
        message: String,
    },
    /// The stage uses a kwok feature the devcluster's engine does not run.
    #[error(
        "stage {stage:?} in {file} uses {feature}, which the devcluster's stage engine does not support; use matchExpressions with key/operator/values, next.statusTemplate or next.patches"
    )]
    Unsupported {
        /// The stage.
        stage: String,
        /// The file.
        file: String,
        /// What it uses.
        feature: String,
    },
    /// A jq expression is outside the supported subset.
    #[error("stage {stage:?} in {file}: {source}")]
    Query {
        /// The stage.
        stage: String,
        /// The file.
        file: String,
        /// The expression's problem.
        source: QueryError,
    },
    /// A template is malformed.
    #[error("stage {stage:?} in {file}: {source}")]
    Template {
        /// The stage.
        stage: String,
        /// The file.
        file: String,
        /// The template's problem.
        source: TemplateError,
    },
}

/// A match expression, parsed.
#[derive(Debug, Clone)]
pub struct Requirement {
    /// The jq key.
    pub query: Query,
    /// The operator (`In` when absent, as an empty operator never matches in kwok).
    pub operator: SelectorOperator,
    /// The values for `In`/`NotIn`.
    pub values: Vec<String>,
}

/// A stage with its expressions and templates parsed.
#[derive(Debug, Clone)]
pub struct CompiledStage {
    /// The stage as written.
    pub stage: Stage,
    /// Where it came from (`kwok/pod-ready.yaml`, a path).
    pub file: String,
    /// `selector.matchExpressions`, parsed.
    pub requirements: Vec<Requirement>,
    /// `weightFrom`, parsed.
    pub weight_from: Option<Query>,
    /// `delay.durationFrom`, parsed.
    pub duration_from: Option<Query>,
    /// `delay.jitterDurationFrom`, parsed.
    pub jitter_from: Option<Query>,
    /// The patches of `next` (status template first) with their templates parsed.
    pub patches: Vec<(model::StagePatch, Template)>,
}

impl CompiledStage {
    /// Parses the expressions and templates of `stage` from `file`.
    ///
    /// # Errors
    /// [`StageError`] naming the stage and what it uses that cannot run.
    pub fn compile(stage: Stage, file: &str) -> Result<CompiledStage, StageError> {
        let name = stage.name().to_string();
        let unsupported = |feature: &str| StageError::Unsupported {
            stage: name.clone(),
            file: file.to_string(),
            feature: feature.to_string(),
        };
        let query = |source: &str| {
            Query::parse(source).map_err(|source| StageError::Query {
                stage: name.clone(),
                file: file.to_string(),
                source,
            })
        };
        if stage.spec.steps.is_some() {
            return Err(unsupported("spec.steps"));
        }
        let mut requirements = Vec::new();
        let expressions = stage
            .spec
            .selector
            .as_ref()
            .and_then(|s| s.match_expressions.clone());
        for e in expressions.unwrap_or_default() {
            if e.cel.is_some() {
                return Err(unsupported("a CEL match expression"));
            }
            requirements.push(Requirement {
                query: query(&e.key)?,
                operator: e.operator.unwrap_or(SelectorOperator::In),
                values: e.values,
            });
        }
        let from = |f: &Option<model::ExpressionFrom>| {
            f.as_ref().map(|f| query(&f.expression_from)).transpose()
        };
        let delay = stage.spec.delay.clone().unwrap_or_default();
        let mut patches = Vec::new();
        for p in stage.patches() {
            let t = Template::parse(&p.template).map_err(|source| StageError::Template {
                stage: name.clone(),
                file: file.to_string(),
                source,
            })?;
            patches.push((p, t));
        }
        Ok(CompiledStage {
            weight_from: from(&stage.spec.weight_from)?,
            duration_from: from(&delay.duration_from)?,
            jitter_from: from(&delay.jitter_duration_from)?,
            requirements,
            patches,
            file: file.to_string(),
            stage,
        })
    }

    /// The stage's name.
    pub fn name(&self) -> &str {
        self.stage.name()
    }
}

/// Parses the `Stage` documents of one YAML text (`---`-separated).
///
/// # Errors
/// [`StageError`] for YAML that is not a Stage, or a stage that cannot run.
pub fn parse_stages(file: &str, text: &str) -> Result<Vec<CompiledStage>, StageError> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let value = serde_yaml::Value::deserialize(doc).map_err(|e| StageError::Yaml {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        if value.is_null() {
            continue;
        }
        let stage: Stage = serde_yaml::from_value(value).map_err(|e| StageError::Yaml {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        if stage.kind != "Stage" {
            return Err(StageError::Yaml {
                file: file.to_string(),
                message: format!("kind is {:?}, not \"Stage\"", stage.kind),
            });
        }
        out.push(CompiledStage::compile(stage, file)?);
    }
    Ok(out)
}

/// The stages a simulation runs, in order (a later stage of the same name replaces an earlier one).
#[derive(Debug, Clone, Default)]
pub struct StageSet {
    /// The stages.
    pub stages: Vec<CompiledStage>,
}

impl StageSet {
    /// kwok's vendored stage files plus the devcluster's built-in stages.
    ///
    /// # Errors
    /// Only if a vendored file is broken (a build defect; tests load them).
    pub fn defaults() -> Result<StageSet, StageError> {
        let mut set = StageSet::default();
        for (file, text) in KWOK_STAGES.iter().chain(BUILTIN_STAGES) {
            set.add(parse_stages(file, text)?);
        }
        Ok(set)
    }

    /// The defaults with the stages of `files` added, or replacing a default of the same name.
    ///
    /// # Errors
    /// [`StageError`] naming the file that cannot be read or used.
    pub fn defaults_with(files: &[PathBuf]) -> Result<StageSet, StageError> {
        let mut set = StageSet::defaults()?;
        for path in files {
            set.add(load_file(path)?);
        }
        Ok(set)
    }

    /// Adds `stages`, each replacing a stage of the same name in place.
    pub fn add(&mut self, stages: Vec<CompiledStage>) {
        for s in stages {
            match self.stages.iter_mut().find(|o| o.name() == s.name()) {
                Some(existing) => *existing = s,
                None => self.stages.push(s),
            }
        }
    }

    /// The stage named `name`.
    pub fn get(&self, name: &str) -> Option<&CompiledStage> {
        self.stages.iter().find(|s| s.name() == name)
    }
}

/// Reads the stages of one file.
///
/// # Errors
/// [`StageError::Read`] or the errors of [`parse_stages`].
pub fn load_file(path: &Path) -> Result<Vec<CompiledStage>, StageError> {
    let text = std::fs::read_to_string(path).map_err(|source| StageError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_stages(&path.display().to_string(), &text)
}
