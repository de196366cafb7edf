//! One running canary of a WasmPlugin, as its driver holds it: the spec it
//! was started for, the loaded candidate, the state of the pure state
//! machine ([`super::machine`]) and the analysis window. The driver feeds it
//! inputs and performs the registry calls; this file turns the state into
//! the status (`status.canary`, the `Canary*` conditions) and carries the
//! small pure helpers the worker needs (selector strings, the
//! `canary-action` annotation).

use std::time::Instant;

use super::analysis::{ShadowFigures, Verdict, WindowFigures};
use super::machine::{Phase, State};
use super::settings::{Plan, Settings};
use crate::cache::LabelSelector;
use crate::contract::Reason;
use crate::registry::{
    CanaryObservations, CounterSnapshot, DryRunState, LoadedVersion, Rollout, RolloutSettings,
    ShadowCounts,
};
use crate::wasmplugin::audit::Transition;
use crate::wasmplugin::spec::{
    AnalysisStatus, CanarySelector, CanarySpec, CanaryStatus, CanaryVersion, DiffSample,
    DryRunStatus, ObjectProblem, ShadowStatus,
};
use crate::wasmplugin::status::{Problem, Serving};

/// The annotation a person sets on a WasmPlugin to promote or abort its
/// canary without editing the spec (`promote` or `abort`); the host removes
/// it once acted upon.
pub const ACTION_ANNOTATION: &str = "wasm-operator.dev/canary-action";

/// Samples of differing objects shown in status.
const STATUS_SAMPLES: usize = 3;
/// Paths per sample shown in status.
const SAMPLE_PATHS: usize = 5;
/// Dry-run failures shown in status.
const STATUS_DRY_RUN_FAILURES: usize = 10;

/// What a `canary-action` annotation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Promote the candidate.
    Promote,
    /// Roll the candidate back.
    Abort,
    /// Anything else (the value as written).
    Unknown(String),
}

/// The `canary-action` annotation of an object's metadata, if set.
pub fn requested_action(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<Action> {
    let value = annotations?.get(ACTION_ANNOTATION)?;
    Some(match value.trim().to_ascii_lowercase().as_str() {
        "promote" => Action::Promote,
        "abort" => Action::Abort,
        _ => Action::Unknown(value.clone()),
    })
}

/// The selector in the string form of `kubectl get -l`.
pub fn selector_string(selector: &CanarySelector) -> String {
    let mut parts: Vec<String> = selector
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in selector.match_expressions.iter().flatten() {
        let values = r.values.clone().unwrap_or_default().join(",");
        parts.push(match r.operator.as_str() {
            "In" => format!("{} in ({values})", r.key),
            "NotIn" => format!("{} notin ({values})", r.key),
            "Exists" => r.key.clone(),
            _ => format!("!{}", r.key),
        });
    }
    parts.join(",")
}

/// The registry's rollout for the canary's state: `DryRun` before it
/// serves, then the plan at the current weight.
///
/// # Errors
///
/// A selector the label-selector grammar refuses, described for people.
pub fn rollout(settings: &Settings, state: &State) -> Result<RolloutSettings, String> {
    let rollout = if state.phase == Phase::DryRun {
        Rollout::DryRun
    } else {
        match &settings.plan {
            Plan::Shadow => Rollout::Shadow,
            Plan::Weighted { .. } => Rollout::Split {
                weight_percent: state.weight,
            },
            Plan::Selector(selector) => {
                let text = selector_string(selector);
                Rollout::Selector(LabelSelector::parse(&text).map_err(|e| {
                    format!("spec.canary.selector is not a valid label selector: {e}")
                })?)
            }
        }
    };
    Ok(RolloutSettings {
        rollout,
        rollout_rate: settings.rollout_rate,
        shadow_concurrency: settings.shadow_concurrency,
        accept_irreversible: settings.accept_irreversible,
    })
}

/// Window figures of the analysis from two counter snapshots.
pub fn window(
    start: &(CounterSnapshot, Option<CounterSnapshot>),
    now: &(CounterSnapshot, Option<CounterSnapshot>),
) -> (WindowFigures, WindowFigures, ShadowFigures) {
    let stable = now.0.since(&start.0);
    let candidate = match (&now.1, &start.1) {
        (Some(now), Some(start)) => now.since(start),
        (Some(now), None) => *now,
        _ => CounterSnapshot::default(),
    };
    let figures = |s: &CounterSnapshot| WindowFigures {
        calls: s.calls,
        failures: s.failures,
        p95: s.p95().map(std::time::Duration::from_secs_f64),
    };
    // Comparisons are counted on the candidate (it computed them) or, when
    // the serving side records them, on the stable version: take either.
    let shadow = ShadowFigures {
        compared: candidate.shadow_compared.max(stable.shadow_compared),
        differing: candidate.shadow_differing.max(stable.shadow_differing),
    };
    (figures(&stable), figures(&candidate), shadow)
}

/// The shadow figures analysis judges: every compared object's latest
/// answers (agreeing or differing now).
pub fn object_agreement(counts: &ShadowCounts) -> ShadowFigures {
    ShadowFigures {
        compared: counts.objects_differing + counts.objects_agreeing,
        differing: counts.objects_differing,
    }
}

/// A running (or finished) canary.
#[derive(Debug)]
pub struct CanaryRun {
    /// The spec it was started for; another spec starts another canary.
    pub spec: CanarySpec,
    /// The settings resolved from it.
    pub settings: Settings,
    /// The plugin.
    pub plugin: String,
    /// The stable version when the canary started.
    pub stable: Serving,
    /// The candidate, once loaded.
    pub candidate: Option<Serving>,
    /// The state machine's state (`None` until the candidate is loaded).
    pub state: Option<State>,
    /// Why the candidate could not be loaded (phase `Failed`), or is not
    /// loaded yet.
    pub problem: Option<Problem>,
    /// The reason of the last notice (the condition reason).
    pub reason: Reason,
    /// Counters at the start of the analysis window.
    pub window_start: Option<(CounterSnapshot, Option<CounterSnapshot>)>,
    /// When the next analysis check is due.
    pub next_check: Instant,
    /// When the last check ran (RFC 3339).
    pub checked_at: Option<String>,
    /// The highest kind of shadow difference already reported as an event.
    pub reported_kinds: u64,
    /// When the diffs ConfigMap was written last.
    pub diffs_written: Option<Instant>,
    /// The diffs ConfigMap, `namespace/name`, once written.
    pub diffs_config_map: Option<String>,
    /// A ConfigMap the host did not create holds the diffs' name: what it
    /// is and what to do (status shows it instead of diffs).
    pub diffs_squatter: Option<String>,
    /// The figures status showed while the candidate was in the registry:
    /// they stay once it left (promoted, rolled back).
    pub last_figures: Option<CanaryStatus>,
    /// Restored from the status of a host that stopped mid-canary: the
    /// candidate is loaded together with the stable version.
    pub resume: bool,
    /// With `spec.canary.requireSigner`: the candidate's signer of that
    /// identity, or why it has none (then a promotion is refused).
    pub required_signer: Option<Result<String, String>>,
}

impl CanaryRun {
    /// A canary of `spec` not started yet, beside `stable` (`None`: no
    /// version serves yet; it starts once one does). A spec that does not
    /// validate makes a run that fails and never uses its settings.
    pub fn new(spec: CanarySpec, stable: Option<Serving>, now: Instant) -> CanaryRun {
        let settings = Settings::from_spec(&spec).unwrap_or_else(|_| Settings::placeholder());
        let stable = stable.unwrap_or_else(|| Serving {
            loaded: LoadedVersion {
                name: String::new(),
                version: String::new(),
                digest: String::new(),
                source: String::new(),
            },
            source_kind: String::new(),
            loaded_at: String::new(),
        });
        CanaryRun {
            plugin: stable.loaded.name.clone(),
            spec,
            settings,
            stable,
            candidate: None,
            state: None,
            problem: None,
            reason: Reason::DryRunStarted,
            window_start: None,
            next_check: now,
            checked_at: None,
            reported_kinds: 0,
            diffs_written: None,
            diffs_config_map: None,
            diffs_squatter: None,
            last_figures: None,
            resume: false,
            required_signer: None,
        }
    }

    /// A transition of this canary from the stable version to the
    /// candidate (empty version and digest before it is loaded), for the
    /// WasmPlugin's event and audit line.
    pub fn transition(&self, reason: Reason, warning: bool, message: String) -> Transition {
        let candidate = self.candidate.as_ref();
        Transition {
            reason: reason.as_str().into(),
            warning,
            retrying: false,
            plugin: self.plugin.clone(),
            from: self.stable.loaded.version.clone(),
            to: candidate
                .map(|c| c.loaded.version.clone())
                .unwrap_or_default(),
            digest: candidate
                .map(|c| c.loaded.digest.clone())
                .unwrap_or_default(),
            source: self.spec.source.describe(),
            message,
        }
    }

    /// The phase status shows.
    pub fn phase(&self) -> Option<Phase> {
        match (&self.state, &self.problem) {
            (Some(state), _) => Some(state.phase),
            (None, Some(_)) => Some(Phase::Failed),
            (None, None) => None,
        }
    }

    /// True once the candidate was promoted.
    pub fn promoted(&self) -> bool {
        self.phase() == Some(Phase::Promoted)
    }

    /// True while the candidate is in the registry beside the stable one.
    pub fn active(&self) -> bool {
        self.state.as_ref().is_some_and(|s| {
            s.phase == Phase::DryRun && s.dry_run_failures.is_empty() || s.is_live()
        })
    }

    /// The `CanaryProgressing`, `CanaryFailed` and `CanaryPromoted`
    /// conditions: (type, status, reason, message).
    pub fn conditions(&self) -> Vec<(&'static str, &'static str, String, String)> {
        let message = self.message();
        let reason = self.reason.as_str().to_string();
        let phase = self.phase();
        let failed_reason = match (&self.problem, phase) {
            (Some(p), Some(Phase::Failed)) => Some(p.reason.clone()),
            (_, Some(Phase::RolledBack)) if self.reason != Reason::CanaryAborted => {
                Some(reason.clone())
            }
            (_, Some(Phase::DryRun))
                if self
                    .state
                    .as_ref()
                    .is_some_and(|s| !s.dry_run_failures.is_empty()) =>
            {
                Some(Reason::DryRunFailed.as_str().to_string())
            }
            _ => None,
        };
        let progressing = !matches!(
            phase,
            Some(Phase::Promoted | Phase::RolledBack | Phase::Failed)
        ) && failed_reason.is_none();
        let promoted = phase == Some(Phase::Promoted);
        let flag = |b: bool| if b { "True" } else { "False" };
        vec![
            (
                "CanaryProgressing",
                flag(progressing),
                reason.clone(),
                message.clone(),
            ),
            (
                "CanaryFailed",
                flag(failed_reason.is_some()),
                failed_reason.unwrap_or_else(|| reason.clone()),
                if self.failed_reason_present() {
                    message.clone()
                } else {
                    String::new()
                },
            ),
            (
                "CanaryPromoted",
                flag(promoted),
                reason,
                if promoted { message } else { String::new() },
            ),
        ]
    }

    fn failed_reason_present(&self) -> bool {
        matches!(self.phase(), Some(Phase::Failed | Phase::RolledBack))
            || self
                .state
                .as_ref()
                .is_some_and(|s| !s.dry_run_failures.is_empty())
    }

    /// What status says happened last.
    pub fn message(&self) -> String {
        match (&self.state, &self.problem) {
            (_, Some(p)) if self.phase() == Some(Phase::Failed) => format!(
                "the candidate from {} cannot be used: {} The stable version {} {} keeps serving every object.",
                self.spec.source.describe(),
                p.message,
                self.stable.loaded.name,
                self.stable.loaded.version
            ),
            (Some(state), _) => state.message.clone(),
            (None, Some(p)) => p.message.clone(),
            (None, None) => "the candidate is being fetched and compiled".into(),
        }
    }

    /// `status.canary`, from the run, the registry's observations of the
    /// candidate and both versions' counters.
    pub fn status(
        &self,
        observations: Option<&CanaryObservations>,
        counters: Option<&(CounterSnapshot, Option<CounterSnapshot>)>,
    ) -> CanaryStatus {
        let version = |s: &Serving, c: Option<&CounterSnapshot>| CanaryVersion {
            version: Some(s.loaded.version.clone()),
            digest: Some(s.loaded.digest.clone()),
            source: Some(s.loaded.source.clone()),
            calls: c.map(|c| c.calls as i64),
            failures: c.map(|c| c.failures as i64),
            p95_millis: c.and_then(CounterSnapshot::p95).map(|s| s * 1000.0),
            signer: None,
        };
        let (weight, selector) = match (&self.settings.plan, &self.state) {
            (Plan::Weighted { .. }, Some(state)) => (Some(i64::from(state.weight)), None),
            (Plan::Selector(selector), _) => (
                self.promoted().then_some(100),
                Some(selector_string(selector)),
            ),
            (Plan::Shadow, Some(state)) => (Some(i64::from(state.weight)), None),
            _ => (None, None),
        };
        let mode = match self.settings.plan {
            Plan::Shadow => "Shadow",
            _ => "Split",
        };
        let state = self.state.as_ref();
        let last_analysis = state.and_then(|s| s.verdict.as_ref()).map(|v| {
            let figures = v.figures();
            AnalysisStatus {
                verdict: Some(v.name().into()),
                time: self.checked_at.clone(),
                message: Some(v.to_string()),
                calls: Some(match v {
                    Verdict::Inconclusive { calls, .. } => *calls as i64,
                    _ => figures.map_or(0, |f| f.calls as i64),
                }),
                candidate_failure_ratio: figures.map(|f| f.candidate_failure_ratio),
                stable_failure_ratio: figures.map(|f| f.stable_failure_ratio),
                diff_ratio: figures.and_then(|f| f.diff_ratio),
                latency_ratio: figures.and_then(|f| f.latency_ratio),
            }
        });
        let dry_run = observations
            .map(CanaryObservations::dry_run)
            .filter(|r| r.state != DryRunState::Pending || r.total > 0)
            .map(|r| DryRunStatus {
                checked: Some(r.done as i64),
                total: Some(r.total as i64),
                failed_count: Some(r.failed as i64),
                failures: (!r.failures.is_empty()).then(|| {
                    r.failures
                        .iter()
                        .take(STATUS_DRY_RUN_FAILURES)
                        .map(|f| ObjectProblem {
                            object: Some(f.object.to_string()),
                            reason: Some(f.reason.clone()),
                            message: Some(f.message.clone()),
                        })
                        .collect()
                }),
            })
            .or_else(|| {
                // The observations are gone with the candidate; the state
                // keeps what the dry run found.
                state
                    .filter(|s| !s.dry_run_failures.is_empty())
                    .map(|s| DryRunStatus {
                        checked: None,
                        total: None,
                        failed_count: Some(s.dry_run_failures.len() as i64),
                        failures: Some(
                            s.dry_run_failures
                                .iter()
                                .take(STATUS_DRY_RUN_FAILURES)
                                .map(|f| ObjectProblem {
                                    object: Some(f.object.clone()),
                                    reason: Some(f.reason.clone()),
                                    message: Some(f.message.clone()),
                                })
                                .collect(),
                        ),
                    })
            });
        let shadow = observations
            .filter(|_| matches!(self.settings.plan, Plan::Shadow))
            .map(|o| {
                let counts = o.shadow_counts();
                let samples: Vec<DiffSample> = o
                    .differing_objects()
                    .into_iter()
                    .take(STATUS_SAMPLES)
                    .map(|d| DiffSample {
                        object: Some(d.object.to_string()),
                        paths: Some(
                            d.fields
                                .iter()
                                .take(SAMPLE_PATHS)
                                .map(|f| f.path.clone())
                                .collect(),
                        ),
                    })
                    .collect();
                ShadowStatus {
                    compared: Some(counts.compared as i64),
                    differing: Some(counts.differing as i64),
                    differing_objects: Some(counts.objects_differing as i64),
                    samples: (!samples.is_empty()).then_some(samples),
                }
            });
        let live = observations.is_some();
        let frozen = self.last_figures.as_ref().filter(|_| !live);
        CanaryStatus {
            stable: match frozen {
                Some(f) => f.stable.clone(),
                None => Some(version(&self.stable, counters.map(|c| &c.0))),
            },
            candidate: match frozen {
                Some(f) => f.candidate.clone(),
                None => self.candidate.as_ref().map(|c| CanaryVersion {
                    signer: self.required_signer.clone().and_then(Result::ok),
                    ..version(c, counters.and_then(|c| c.1.as_ref()))
                }),
            },
            mode: Some(mode.into()),
            phase: self.phase().map(|p| p.as_str().into()),
            weight,
            selector,
            message: Some(self.message()),
            failed_checks: state.map(|s| i64::from(s.failed_checks)),
            last_analysis: last_analysis.or_else(|| {
                self.last_figures
                    .as_ref()
                    .and_then(|f| f.last_analysis.clone())
            }),
            dry_run: dry_run.or_else(|| frozen.and_then(|f| f.dry_run.clone())),
            shadow: match frozen {
                Some(f) => f.shadow.clone(),
                None => shadow,
            },
            diffs_config_map: self.diffs_config_map.clone(),
            diffs_not_the_hosts: self.diffs_squatter.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasmplugin::spec::SelectorRequirement;
    use std::collections::BTreeMap;

    #[test]
    fn the_action_annotation_is_read_case_insensitively() {
        let mut a = BTreeMap::new();
        assert_eq!(requested_action(Some(&a)), None);
        a.insert(ACTION_ANNOTATION.to_string(), "Promote".to_string());
        assert_eq!(requested_action(Some(&a)), Some(Action::Promote));
        a.insert(ACTION_ANNOTATION.to_string(), "abort".to_string());
        assert_eq!(requested_action(Some(&a)), Some(Action::Abort));
        a.insert(ACTION_ANNOTATION.to_string(), "go".to_string());
        assert_eq!(
            requested_action(Some(&a)),
            Some(Action::Unknown("go".into()))
        );
    }

    #[test]
    fn selectors_become_the_kubectl_string_and_parse() {
        let selector = CanarySelector {
            match_labels: Some(BTreeMap::from([("tier".into(), "canary".into())])),
            match_expressions: Some(vec![
                SelectorRequirement {
                    key: "env".into(),
                    operator: "In".into(),
                    values: Some(vec!["a".into(), "b".into()]),
                },
                SelectorRequirement {
                    key: "skip".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
            ]),
        };
        let text = selector_string(&selector);
        assert_eq!(text, "tier=canary,env in (a,b),!skip");
        let parsed = LabelSelector::parse(&text).unwrap();
        let labels = BTreeMap::from([
            ("tier".to_string(), "canary".to_string()),
            ("env".to_string(), "a".to_string()),
        ]);
        assert!(parsed.matches(&labels));
    }
}
