//! `spec.canary` checked and with every default filled in ([`Settings`]):
//! what the state machine ([`super::machine`]) and the driver run on. The
//! checks are the ones the schema cannot make (contradictory fields, steps
//! that do not increase); each refusal names the field.

use std::time::Duration;

use super::analysis::Thresholds;
use crate::wasmplugin::spec::{
    CanaryMode, CanarySelector, CanarySpec, Promotion, SpecError, parse_duration,
};

/// Default `analysis.interval`.
pub const DEFAULT_ANALYSIS_INTERVAL: Duration = Duration::from_secs(60);
/// Default `analysis.minCalls`.
pub const DEFAULT_MIN_CALLS: u64 = 20;
/// Default `analysis.maxFailureRatio`.
pub const DEFAULT_MAX_FAILURE_RATIO: f64 = 0.05;
/// Default `analysis.maxDiffRatio`.
pub const DEFAULT_MAX_DIFF_RATIO: f64 = 0.05;
/// Default `analysis.maxLatencyRatio`.
pub const DEFAULT_MAX_LATENCY_RATIO: f64 = 2.0;
/// Default `analysis.failureLimit`.
pub const DEFAULT_FAILURE_LIMIT: u32 = 2;
/// Default `stepInterval`.
pub const DEFAULT_STEP_INTERVAL: Duration = Duration::from_secs(60);
/// Default `rolloutRate` (objects per second).
pub const DEFAULT_ROLLOUT_RATE: f64 = 20.0;
/// Default `shadowConcurrency`.
pub const DEFAULT_SHADOW_CONCURRENCY: usize = 2;

/// How the candidate takes part, resolved from the spec.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Computes beside the stable version.
    Shadow,
    /// Serves a hash share of the objects, walking `steps` (one step when
    /// the spec sets a fixed `weight`).
    Weighted {
        /// Percent weights, strictly increasing.
        steps: Vec<u8>,
        /// Least time at each step.
        step_interval: Duration,
    },
    /// Serves the objects the selector picks.
    Selector(CanarySelector),
}

/// `spec.canary`, checked and with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// How the candidate takes part.
    pub plan: Plan,
    /// How often a check runs.
    pub interval: Duration,
    /// The check's thresholds.
    pub thresholds: Thresholds,
    /// Failed checks before rollback.
    pub failure_limit: u32,
    /// Auto or Manual.
    pub promotion: Promotion,
    /// Objects per second re-reconciled when they change version.
    pub rollout_rate: f64,
    /// Shadow computations at once.
    pub shadow_concurrency: usize,
    /// Run the dry run first.
    pub dry_run: bool,
    /// Accept a candidate that makes rollback impossible.
    pub accept_irreversible: bool,
}

fn invalid(field: &'static str, message: impl Into<String>) -> SpecError {
    SpecError::Canary {
        field,
        message: message.into(),
    }
}

impl Settings {
    /// Checks `spec` beyond what the schema can and fills in defaults.
    ///
    /// # Errors
    ///
    /// [`SpecError::Canary`] naming the field and what to write instead,
    /// [`SpecError::Duration`] for a malformed interval.
    pub fn from_spec(spec: &CanarySpec) -> Result<Settings, SpecError> {
        let plan = match spec.mode {
            CanaryMode::Shadow => {
                for (set, field) in [
                    (spec.weight.is_some(), "weight"),
                    (spec.selector.is_some(), "selector"),
                    (spec.steps.is_some(), "steps"),
                    (spec.step_interval.is_some(), "stepInterval"),
                ] {
                    if set {
                        return Err(invalid(
                            field,
                            "applies to mode Split only; remove it, or set mode: Split",
                        ));
                    }
                }
                Plan::Shadow
            }
            CanaryMode::Split => split_plan(spec)?,
        };
        let analysis = spec.analysis.clone().unwrap_or_default();
        let interval = match &analysis.interval {
            Some(value) => parse_duration("spec.canary.analysis.interval", value)?,
            None => DEFAULT_ANALYSIS_INTERVAL,
        };
        if interval < Duration::from_millis(100) {
            return Err(invalid(
                "analysis.interval",
                "must be at least 100ms; checks any closer see no calls",
            ));
        }
        let ratio = |field: &'static str, value: Option<f64>, default: f64, max: f64| match value {
            None => Ok(default),
            Some(v) if v.is_finite() && (0.0..=max).contains(&v) => Ok(v),
            Some(v) => Err(invalid(field, format!("{v} is out of range 0 to {max}"))),
        };
        let thresholds = Thresholds {
            min_calls: analysis.min_calls.unwrap_or(DEFAULT_MIN_CALLS).max(1),
            max_failure_ratio: ratio(
                "analysis.maxFailureRatio",
                analysis.max_failure_ratio,
                DEFAULT_MAX_FAILURE_RATIO,
                1.0,
            )?,
            max_diff_ratio: ratio(
                "analysis.maxDiffRatio",
                analysis.max_diff_ratio,
                DEFAULT_MAX_DIFF_RATIO,
                1.0,
            )?,
            max_latency_ratio: ratio(
                "analysis.maxLatencyRatio",
                analysis.max_latency_ratio,
                DEFAULT_MAX_LATENCY_RATIO,
                f64::MAX,
            )?,
        };
        let rollout_rate = match spec.rollout_rate {
            None => DEFAULT_ROLLOUT_RATE,
            Some(rate) if rate.is_finite() && rate > 0.0 => rate,
            Some(rate) => {
                return Err(invalid(
                    "rolloutRate",
                    format!(
                        "{rate} objects per second is not a rate; write a number above 0, e.g. 20"
                    ),
                ));
            }
        };
        Ok(Settings {
            plan,
            interval,
            thresholds,
            failure_limit: analysis
                .failure_limit
                .unwrap_or(DEFAULT_FAILURE_LIMIT)
                .max(1),
            promotion: spec.promotion.unwrap_or_default(),
            rollout_rate,
            shadow_concurrency: spec
                .shadow_concurrency
                .unwrap_or(DEFAULT_SHADOW_CONCURRENCY)
                .max(1),
            dry_run: !spec.skip_dry_run.unwrap_or(false),
            accept_irreversible: spec.accept_irreversible.unwrap_or(false),
        })
    }

    /// The weight the candidate starts serving with (0 for a shadow or a
    /// selector).
    pub fn first_weight(&self) -> u8 {
        match &self.plan {
            Plan::Weighted { steps, .. } => steps.first().copied().unwrap_or(0),
            _ => 0,
        }
    }
}

fn split_plan(spec: &CanarySpec) -> Result<Plan, SpecError> {
    if let Some(selector) = &spec.selector {
        for (set, field) in [
            (spec.weight.is_some(), "weight"),
            (spec.steps.is_some(), "steps"),
            (spec.step_interval.is_some(), "stepInterval"),
        ] {
            if set {
                return Err(invalid(
                    field,
                    "cannot be combined with selector: a split picks objects either by label or by weight",
                ));
            }
        }
        let empty = selector
            .match_labels
            .as_ref()
            .is_none_or(std::collections::BTreeMap::is_empty)
            && selector
                .match_expressions
                .as_ref()
                .is_none_or(Vec::is_empty);
        if empty {
            return Err(invalid(
                "selector",
                "is empty and would pick every object; give matchLabels or matchExpressions (or use weight: 100)",
            ));
        }
        for requirement in selector.match_expressions.iter().flatten() {
            let values = requirement.values.as_ref().map_or(0, Vec::len);
            let ok = match requirement.operator.as_str() {
                "In" | "NotIn" => values > 0,
                "Exists" | "DoesNotExist" => values == 0,
                _ => false,
            };
            if !ok {
                return Err(invalid(
                    "selector.matchExpressions",
                    format!(
                        "{} {} with {values} values: In/NotIn need values, Exists/DoesNotExist take none",
                        requirement.key, requirement.operator
                    ),
                ));
            }
        }
        return Ok(Plan::Selector(selector.clone()));
    }
    let step_interval = match &spec.step_interval {
        Some(value) => parse_duration("spec.canary.stepInterval", value)?,
        None => DEFAULT_STEP_INTERVAL,
    };
    match (&spec.steps, spec.weight) {
        (Some(_), Some(_)) => Err(invalid(
            "weight",
            "cannot be combined with steps: the first step is the starting weight",
        )),
        (None, None) => Err(invalid(
            "mode",
            "Split needs weight (percent of objects), steps (e.g. [5, 25, 50, 100]) or selector",
        )),
        (None, Some(weight)) => {
            if weight > 100 {
                return Err(invalid("weight", format!("{weight} is above 100 percent")));
            }
            if spec.step_interval.is_some() {
                return Err(invalid(
                    "stepInterval",
                    "applies to steps only; remove it or give steps",
                ));
            }
            Ok(Plan::Weighted {
                steps: vec![weight],
                step_interval,
            })
        }
        (Some(steps), None) => {
            if steps.is_empty() {
                return Err(invalid("steps", "is empty; give e.g. [5, 25, 50, 100]"));
            }
            if steps.iter().any(|s| *s == 0 || *s > 100) {
                return Err(invalid(
                    "steps",
                    format!("{steps:?}: every step is a percent from 1 to 100"),
                ));
            }
            if steps.windows(2).any(|w| w[0] >= w[1]) {
                return Err(invalid(
                    "steps",
                    format!(
                        "{steps:?} must be strictly increasing: a step only moves objects to the candidate"
                    ),
                ));
            }
            Ok(Plan::Weighted {
                steps: steps.clone(),
                step_interval,
            })
        }
    }
}

impl Settings {
    /// Settings for a run whose spec did not validate (it is `Failed` and
    /// never uses them).
    pub fn placeholder() -> Settings {
        Settings {
            plan: Plan::Shadow,
            interval: DEFAULT_ANALYSIS_INTERVAL,
            thresholds: Thresholds {
                min_calls: DEFAULT_MIN_CALLS,
                max_failure_ratio: DEFAULT_MAX_FAILURE_RATIO,
                max_diff_ratio: DEFAULT_MAX_DIFF_RATIO,
                max_latency_ratio: DEFAULT_MAX_LATENCY_RATIO,
            },
            failure_limit: DEFAULT_FAILURE_LIMIT,
            promotion: Promotion::Manual,
            rollout_rate: DEFAULT_ROLLOUT_RATE,
            shadow_concurrency: DEFAULT_SHADOW_CONCURRENCY,
            dry_run: true,
            accept_irreversible: false,
        }
    }
}

/// A Shadow-or-Split `spec.canary` with nothing but `mode` and a file
/// source set (every other field defaults), for tests.
#[cfg(test)]
pub(crate) fn test_spec(mode: CanaryMode) -> CanarySpec {
    use crate::wasmplugin::spec::Source;
    CanarySpec {
        source: Source::File {
            path: "/c.wasm".into(),
        },
        mode,
        weight: None,
        selector: None,
        steps: None,
        step_interval: None,
        analysis: None,
        promotion: None,
        rollout_rate: None,
        shadow_concurrency: None,
        skip_dry_run: None,
        accept_irreversible: None,
        require_signer: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wasmplugin::spec::{AnalysisSpec, SelectorRequirement};

    fn spec(mode: CanaryMode) -> CanarySpec {
        test_spec(mode)
    }

    #[test]
    fn defaults_are_filled_in() {
        let s = Settings::from_spec(&spec(CanaryMode::Shadow)).unwrap();
        assert_eq!(s.plan, Plan::Shadow);
        assert_eq!(s.interval, DEFAULT_ANALYSIS_INTERVAL);
        assert_eq!(s.thresholds.min_calls, DEFAULT_MIN_CALLS);
        assert_eq!(s.failure_limit, DEFAULT_FAILURE_LIMIT);
        assert_eq!(s.promotion, Promotion::Manual);
        assert_eq!(s.rollout_rate, DEFAULT_ROLLOUT_RATE);
        assert!(s.dry_run && !s.accept_irreversible);
        let mut split = spec(CanaryMode::Split);
        split.steps = Some(vec![5, 25, 50, 100]);
        split.step_interval = Some("30s".into());
        split.analysis = Some(AnalysisSpec {
            interval: Some("1s".into()),
            min_calls: Some(3),
            ..AnalysisSpec::default()
        });
        let s = Settings::from_spec(&split).unwrap();
        assert_eq!(
            s.plan,
            Plan::Weighted {
                steps: vec![5, 25, 50, 100],
                step_interval: Duration::from_secs(30)
            }
        );
        assert_eq!(s.first_weight(), 5);
        assert_eq!(s.interval, Duration::from_secs(1));
    }

    #[test]
    fn contradictory_specs_are_refused_naming_the_field() {
        let check = |edit: &dyn Fn(&mut CanarySpec), mode: CanaryMode, field: &str| {
            let mut s = spec(mode);
            edit(&mut s);
            let err = Settings::from_spec(&s).unwrap_err().to_string();
            assert!(
                err.contains(&format!("spec.canary.{field}")),
                "{field}: {err}"
            );
        };
        check(&|s| s.weight = Some(10), CanaryMode::Shadow, "weight");
        check(&|_| {}, CanaryMode::Split, "mode");
        check(
            &|s| {
                s.weight = Some(10);
                s.steps = Some(vec![10, 20]);
            },
            CanaryMode::Split,
            "weight",
        );
        check(
            &|s| s.steps = Some(vec![50, 20]),
            CanaryMode::Split,
            "steps",
        );
        check(&|s| s.steps = Some(vec![0, 20]), CanaryMode::Split, "steps");
        check(&|s| s.weight = Some(101), CanaryMode::Split, "weight");
        check(
            &|s| s.selector = Some(CanarySelector::default()),
            CanaryMode::Split,
            "selector",
        );
        check(
            &|s| {
                s.selector = Some(CanarySelector {
                    match_expressions: Some(vec![SelectorRequirement {
                        key: "a".into(),
                        operator: "In".into(),
                        values: None,
                    }]),
                    ..CanarySelector::default()
                });
            },
            CanaryMode::Split,
            "selector.matchExpressions",
        );
        check(
            &|s| {
                s.weight = Some(10);
                s.rollout_rate = Some(0.0);
            },
            CanaryMode::Split,
            "rolloutRate",
        );
        check(
            &|s| {
                s.analysis = Some(AnalysisSpec {
                    interval: Some("10ms".into()),
                    ..AnalysisSpec::default()
                });
            },
            CanaryMode::Shadow,
            "analysis.interval",
        );
    }
}
