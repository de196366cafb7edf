//! One canary analysis check, as a pure function: the candidate's figures
//! over a window compared with the stable version's over the same window,
//! against the thresholds of `spec.canary.analysis`.
//!
//! # Guarantees
//!
//! - Too few candidate calls (Shadow: compared answers) for `minCalls` is
//!   [`Verdict::Inconclusive`], never a failure: the caller keeps the
//!   window growing until it holds enough.
//! - A failure names every threshold crossed with the figures that crossed
//!   it (the rollback's reason says e.g. "shadow diff ratio 1.00 ...").
//! - A ratio whose baseline is missing (the stable version made no calls,
//!   or no latency was measured) is not judged: it cannot be computed,
//!   and an absent baseline is no evidence against the candidate.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What one version did over an analysis window.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowFigures {
    /// Finished calls (Split: reconciles served; Shadow: the candidate's
    /// shadow computations).
    pub calls: u64,
    /// Calls that failed.
    pub failures: u64,
    /// p95 call latency; `None` when nothing was measured.
    pub p95: Option<Duration>,
}

impl WindowFigures {
    /// failures / calls (0 without calls).
    pub fn failure_ratio(&self) -> f64 {
        ratio(self.failures, self.calls)
    }
}

/// Shadow comparisons over an analysis window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShadowFigures {
    /// Answers compared.
    pub compared: u64,
    /// Compared answers that differ.
    pub differing: u64,
}

/// The thresholds of one check (`spec.canary.analysis` with defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Calls a window needs for a verdict.
    pub min_calls: u64,
    /// Largest candidate failure ratio above the stable one.
    pub max_failure_ratio: f64,
    /// Shadow: largest share of differing answers.
    pub max_diff_ratio: f64,
    /// Largest candidate p95 / stable p95.
    pub max_latency_ratio: f64,
}

/// The figures a verdict was reached on, as status shows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Candidate calls in the window (Shadow: compared answers).
    pub calls: u64,
    /// Candidate failures / calls.
    pub candidate_failure_ratio: f64,
    /// Stable failures / calls.
    pub stable_failure_ratio: f64,
    /// Shadow: differing / compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff_ratio: Option<f64>,
    /// Candidate p95 / stable p95, when both were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ratio: Option<f64>,
}

/// One threshold a candidate crossed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Breach {
    /// The candidate fails more often than the stable version allows.
    FailureRatio {
        /// Candidate failures / calls.
        candidate: f64,
        /// Stable failures / calls.
        stable: f64,
        /// The threshold.
        max: f64,
    },
    /// Too many shadow answers differ.
    DiffRatio {
        /// Differing / compared.
        ratio: f64,
        /// Answers that differ.
        differing: u64,
        /// Answers compared.
        compared: u64,
        /// The threshold.
        max: f64,
    },
    /// The candidate is too slow.
    LatencyRatio {
        /// Candidate p95 / stable p95.
        ratio: f64,
        /// Candidate p95.
        candidate: Duration,
        /// Stable p95.
        stable: Duration,
        /// The threshold.
        max: f64,
    },
}

impl fmt::Display for Breach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Breach::FailureRatio {
                candidate,
                stable,
                max,
            } => write!(
                f,
                "failure ratio {candidate:.2} exceeds the stable version's {stable:.2} by more than maxFailureRatio {max:.2}"
            ),
            Breach::DiffRatio {
                ratio,
                differing,
                compared,
                max,
            } => write!(
                f,
                "shadow diff ratio {ratio:.2} ({differing} of {compared} compared answers differ) exceeds maxDiffRatio {max:.2}"
            ),
            Breach::LatencyRatio {
                ratio,
                candidate,
                stable,
                max,
            } => write!(
                f,
                "p95 latency ratio {ratio:.2} (candidate {candidate:?}, stable {stable:?}) exceeds maxLatencyRatio {max:.2}"
            ),
        }
    }
}

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Fewer calls than `minCalls`: no verdict; the window keeps growing.
    Inconclusive {
        /// Calls in the window.
        calls: u64,
        /// Calls needed.
        min_calls: u64,
    },
    /// Every threshold held.
    Passed(Figures),
    /// At least one threshold was crossed.
    Failed {
        /// The figures.
        figures: Figures,
        /// Every threshold crossed.
        breaches: Vec<Breach>,
    },
}

impl Verdict {
    /// `Passed`, `Failed` or `Inconclusive`, as status shows it.
    pub fn name(&self) -> &'static str {
        match self {
            Verdict::Inconclusive { .. } => "Inconclusive",
            Verdict::Passed(_) => "Passed",
            Verdict::Failed { .. } => "Failed",
        }
    }

    /// The figures (none for an inconclusive check).
    pub fn figures(&self) -> Option<&Figures> {
        match self {
            Verdict::Inconclusive { .. } => None,
            Verdict::Passed(figures) | Verdict::Failed { figures, .. } => Some(figures),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Inconclusive { calls, min_calls } => write!(
                f,
                "inconclusive: {calls} candidate calls in the window, {min_calls} needed (minCalls); the window keeps growing"
            ),
            Verdict::Passed(figures) => write!(f, "passed: {}", describe(figures)),
            Verdict::Failed { breaches, .. } => {
                let all: Vec<String> = breaches.iter().map(ToString::to_string).collect();
                write!(f, "failed: {}", all.join("; "))
            }
        }
    }
}

fn describe(figures: &Figures) -> String {
    let mut parts = vec![
        format!("{} calls", figures.calls),
        format!(
            "failure ratio {:.2} (stable {:.2})",
            figures.candidate_failure_ratio, figures.stable_failure_ratio
        ),
    ];
    if let Some(diff) = figures.diff_ratio {
        parts.push(format!("shadow diff ratio {diff:.2}"));
    }
    if let Some(latency) = figures.latency_ratio {
        parts.push(format!("p95 latency ratio {latency:.2}"));
    }
    parts.join(", ")
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// Judges the candidate over one window. `shadow` is `Some` in Shadow mode:
/// then the compared answers are the calls that count toward `minCalls`
/// and the diff ratio is judged.
pub fn analyse(
    stable: &WindowFigures,
    candidate: &WindowFigures,
    shadow: Option<&ShadowFigures>,
    thresholds: &Thresholds,
) -> Verdict {
    let calls = match shadow {
        Some(shadow) => shadow.compared,
        None => candidate.calls,
    };
    if calls < thresholds.min_calls {
        return Verdict::Inconclusive {
            calls,
            min_calls: thresholds.min_calls,
        };
    }
    let latency_ratio = match (candidate.p95, stable.p95) {
        (Some(c), Some(s)) if !s.is_zero() => Some(c.as_secs_f64() / s.as_secs_f64()),
        _ => None,
    };
    let figures = Figures {
        calls,
        candidate_failure_ratio: candidate.failure_ratio(),
        stable_failure_ratio: stable.failure_ratio(),
        diff_ratio: shadow.map(|s| ratio(s.differing, s.compared)),
        latency_ratio,
    };
    let mut breaches = Vec::new();
    // The stable version's failures are the baseline: a shared cause (the
    // API server refusing writes) fails both and is no verdict on the
    // candidate.
    if figures.candidate_failure_ratio > figures.stable_failure_ratio + thresholds.max_failure_ratio
    {
        breaches.push(Breach::FailureRatio {
            candidate: figures.candidate_failure_ratio,
            stable: figures.stable_failure_ratio,
            max: thresholds.max_failure_ratio,
        });
    }
    if let (Some(shadow), Some(diff)) = (shadow, figures.diff_ratio)
        && diff > thresholds.max_diff_ratio
    {
        breaches.push(Breach::DiffRatio {
            ratio: diff,
            differing: shadow.differing,
            compared: shadow.compared,
            max: thresholds.max_diff_ratio,
        });
    }
    if let (Some(latency), Some(c), Some(s)) = (latency_ratio, candidate.p95, stable.p95)
        && latency > thresholds.max_latency_ratio
    {
        breaches.push(Breach::LatencyRatio {
            ratio: latency,
            candidate: c,
            stable: s,
            max: thresholds.max_latency_ratio,
        });
    }
    if breaches.is_empty() {
        Verdict::Passed(figures)
    } else {
        Verdict::Failed { figures, breaches }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Thresholds = Thresholds {
        min_calls: 10,
        max_failure_ratio: 0.05,
        max_diff_ratio: 0.05,
        max_latency_ratio: 2.0,
    };

    fn w(calls: u64, failures: u64, p95_ms: Option<u64>) -> WindowFigures {
        WindowFigures {
            calls,
            failures,
            p95: p95_ms.map(Duration::from_millis),
        }
    }

    #[test]
    fn too_few_calls_is_inconclusive_not_a_failure() {
        let verdict = analyse(&w(100, 0, None), &w(9, 9, None), None, &T);
        assert_eq!(
            verdict,
            Verdict::Inconclusive {
                calls: 9,
                min_calls: 10
            }
        );
        assert!(verdict.to_string().contains("minCalls"), "{verdict}");
        // Shadow counts compared answers, not calls.
        let shadow = ShadowFigures {
            compared: 3,
            differing: 3,
        };
        assert!(matches!(
            analyse(&w(100, 0, None), &w(100, 0, None), Some(&shadow), &T),
            Verdict::Inconclusive { calls: 3, .. }
        ));
    }

    #[test]
    fn a_failing_candidate_is_judged_against_the_stable_baseline() {
        let failed = analyse(&w(100, 0, None), &w(20, 4, None), None, &T);
        let Verdict::Failed { breaches, figures } = &failed else {
            panic!("{failed:?}")
        };
        assert_eq!(figures.candidate_failure_ratio, 0.2);
        assert!(matches!(breaches[..], [Breach::FailureRatio { .. }]));
        assert!(
            failed.to_string().contains("failure ratio 0.20"),
            "{failed}"
        );
        // Both versions fail alike (a shared cause): no verdict on the candidate.
        assert!(matches!(
            analyse(&w(100, 20, None), &w(20, 4, None), None, &T),
            Verdict::Passed(_)
        ));
    }

    #[test]
    fn differing_shadow_answers_fail_with_the_diff_ratio_named() {
        let shadow = ShadowFigures {
            compared: 10,
            differing: 10,
        };
        let verdict = analyse(&w(10, 0, None), &w(10, 0, None), Some(&shadow), &T);
        assert!(matches!(verdict, Verdict::Failed { .. }), "{verdict:?}");
        let text = verdict.to_string();
        assert!(text.contains("shadow diff ratio 1.00"), "{text}");
        assert!(text.contains("10 of 10"), "{text}");
        assert!(text.contains("maxDiffRatio"), "{text}");
        let same = ShadowFigures {
            compared: 10,
            differing: 0,
        };
        let passed = analyse(&w(10, 0, None), &w(10, 0, None), Some(&same), &T);
        assert_eq!(passed.figures().and_then(|f| f.diff_ratio), Some(0.0));
        assert_eq!(passed.name(), "Passed");
    }

    #[test]
    fn latency_is_a_ratio_of_p95s_and_needs_both() {
        let slow = analyse(&w(50, 0, Some(10)), &w(50, 0, Some(30)), None, &T);
        assert!(
            slow.to_string().contains("p95 latency ratio 3.00"),
            "{slow}"
        );
        let ok = analyse(&w(50, 0, Some(10)), &w(50, 0, Some(15)), None, &T);
        assert_eq!(ok.figures().and_then(|f| f.latency_ratio), Some(1.5));
        // No stable latency measured: not judged.
        let unknown = analyse(&w(0, 0, None), &w(50, 0, Some(1000)), None, &T);
        assert!(matches!(unknown, Verdict::Passed(_)), "{unknown:?}");
    }

    #[test]
    fn every_breach_is_listed() {
        let shadow = ShadowFigures {
            compared: 20,
            differing: 20,
        };
        let verdict = analyse(&w(20, 0, Some(1)), &w(20, 20, Some(10)), Some(&shadow), &T);
        let Verdict::Failed { breaches, .. } = verdict else {
            panic!()
        };
        assert_eq!(breaches.len(), 3);
    }
}
