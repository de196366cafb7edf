//! The canary lifecycle of a WasmPlugin as a pure state machine: given the
//! state, the settings, an [`Input`] and the time, [`step`] returns the next
//! state, the [`Action`]s the worker performs (registry calls) and the
//! [`Notice`] it records (an Event, an `audit` line). No I/O here.
//!
//! Phases: `DryRun` → `Shadowing` (Shadow) | `Progressing` (Split) ⇄
//! `Paused` → `Promoted` | `RolledBack`; `Failed` when the candidate could
//! not be loaded at all. A failed dry run stays in `DryRun` (with the
//! objects that would fail) until `spec.canary` changes.
//!
//! # Guarantees
//!
//! - Nothing serves before the dry run passed (unless it is skipped).
//! - An inconclusive check pauses (phase `Paused`); it never counts as a
//!   failed check.
//! - `failureLimit` failed checks (in total, not only consecutive ones: a
//!   candidate that fails every other check is still rolled back) roll the
//!   candidate back.
//! - The analysis window runs from the start of the current step (the
//!   candidate starting to serve is step one) or from the last failed
//!   check, whichever is later: passing and inconclusive checks let it
//!   grow, so a quiet kind (whose objects only reconcile when they change
//!   version) still reaches `minCalls`. The window starts before the
//!   registry moves objects, so their reconciles count.
//! - A Split weight advances one step per `stepInterval`, only on a
//!   passing check, whose window then lies wholly within the current step.
//! - `Auto` promotes after a passing check at the last step (Split) or
//!   after a passing check (Shadow: a shadow that agrees with the stable
//!   version's answers takes over every object); `Manual` pauses
//!   (`AwaitingPromotion`) until a person promotes or aborts.
//! - `Promoted`, `RolledBack` and `Failed` are final: every input is
//!   ignored.

use std::time::Instant;

use super::analysis::Verdict;
use super::settings::{Plan, Settings};
use crate::contract::Reason;
use crate::wasmplugin::spec::Promotion;

/// Where a canary stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Runs over every existing primary, writing nothing; or failed that
    /// (then it stays here).
    DryRun,
    /// Shadow: computes beside the stable version.
    Shadowing,
    /// Split: serves its share.
    Progressing,
    /// Waiting: a check was inconclusive, or promotion is manual.
    Paused,
    /// Serves every object.
    Promoted,
    /// Stopped; the stable version serves every object again.
    RolledBack,
    /// Could not be loaded.
    Failed,
}

impl Phase {
    /// The phase as status writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::DryRun => "DryRun",
            Phase::Shadowing => "Shadowing",
            Phase::Progressing => "Progressing",
            Phase::Paused => "Paused",
            Phase::Promoted => "Promoted",
            Phase::RolledBack => "RolledBack",
            Phase::Failed => "Failed",
        }
    }
}

/// Why a canary is paused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pause {
    /// The last check had too few calls.
    Inconclusive,
    /// Analysis passed; a person promotes (promotion: Manual).
    AwaitingPromotion,
    /// A promotion was refused: the candidate is not signed by
    /// `requireSigner`'s identity ([`promotion_refused`]).
    SignerRequired,
}

/// One object the dry run found would fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DryRunFailure {
    /// `namespace/name`.
    pub object: String,
    /// The reason (`PluginTrap`, `ReconcileFailed`, ...).
    pub reason: String,
    /// What failed.
    pub message: String,
}

/// The state of one canary.
#[derive(Debug, Clone, PartialEq)]
pub struct State {
    /// The phase.
    pub phase: Phase,
    /// Why it is paused (phase `Paused`).
    pub pause: Option<Pause>,
    /// Index into the weighted plan's steps.
    pub step: usize,
    /// The weight the candidate serves (0: none or a selector or a shadow;
    /// 100 once promoted).
    pub weight: u8,
    /// When the current step began serving.
    pub step_since: Option<Instant>,
    /// Failed checks so far.
    pub failed_checks: u32,
    /// The last conclusive or inconclusive verdict.
    pub verdict: Option<Verdict>,
    /// Objects the dry run found would fail.
    pub dry_run_failures: Vec<DryRunFailure>,
    /// The last notice's message (status `message`).
    pub message: String,
}

impl State {
    /// True when the canary is over (or stuck on a failed dry run) and no
    /// input changes it.
    pub fn is_final(&self) -> bool {
        matches!(
            self.phase,
            Phase::Promoted | Phase::RolledBack | Phase::Failed
        ) || (self.phase == Phase::DryRun && !self.dry_run_failures.is_empty())
    }

    /// True while the candidate takes part (shadows or serves): analysis
    /// runs.
    pub fn is_live(&self) -> bool {
        matches!(
            self.phase,
            Phase::Shadowing | Phase::Progressing | Phase::Paused
        )
    }
}

/// What happens to a canary.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The dry run went over every primary; `failures` would fail.
    DryRunDone {
        /// Primaries checked.
        checked: usize,
        /// Those that would fail.
        failures: Vec<DryRunFailure>,
    },
    /// An analysis check's verdict.
    Checked(Verdict),
    /// A person promotes (annotation or CLI).
    Promote {
        /// Who or what, for the message.
        by: String,
    },
    /// A person aborts, or `spec.canary` was removed.
    Abort {
        /// Who or what, for the message.
        by: String,
    },
    /// The candidate can no longer serve (its source broke, a reload
    /// failed).
    Lost {
        /// Why.
        why: String,
    },
}

/// A registry call the worker makes.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The candidate starts taking part: shadow, a weight or a selector.
    Serve,
    /// The weighted split moves to this weight.
    SetWeight(u8),
    /// The analysis window starts over now.
    ResetWindow,
    /// The candidate becomes the stable version.
    Promote,
    /// The candidate leaves the registry; its objects go back to the
    /// stable version.
    Rollback,
}

/// What the worker records about a transition (Event and `audit` line).
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The Event reason.
    pub reason: Reason,
    /// A Warning.
    pub warning: bool,
    /// What happened and the figures that caused it.
    pub message: String,
}

/// The outcome of one [`step`].
#[derive(Debug, Clone, PartialEq)]
pub struct Next {
    /// The new state.
    pub state: State,
    /// What the worker does, in order.
    pub actions: Vec<Action>,
    /// What it records; `None` when nothing people need to see changed.
    pub notice: Option<Notice>,
}

/// The state a canary starts in once its candidate is loaded: `DryRun`, or
/// (when skipped) already serving.
pub fn start(settings: &Settings, now: Instant) -> Next {
    let state = State {
        phase: Phase::DryRun,
        pause: None,
        step: 0,
        weight: 0,
        step_since: None,
        failed_checks: 0,
        verdict: None,
        dry_run_failures: Vec::new(),
        message: String::new(),
    };
    if settings.dry_run {
        let message = "dry run: the candidate computes its answer for every existing primary, writing nothing".to_string();
        return Next {
            state: State {
                message: message.clone(),
                ..state
            },
            actions: Vec::new(),
            notice: Some(Notice {
                reason: Reason::DryRunStarted,
                warning: false,
                message,
            }),
        };
    }
    serve(
        state,
        settings,
        now,
        "dry run skipped (skipDryRun)".to_string(),
    )
}

/// The candidate starts taking part.
fn serve(mut state: State, settings: &Settings, now: Instant, why: String) -> Next {
    state.weight = settings.first_weight();
    state.step = 0;
    state.step_since = Some(now);
    let (phase, what) = match &settings.plan {
        Plan::Shadow => (
            Phase::Shadowing,
            "shadowing: it computes beside the stable version and writes nothing".to_string(),
        ),
        Plan::Weighted { .. } => (
            Phase::Progressing,
            format!("serving {} percent of the objects", state.weight),
        ),
        Plan::Selector(_) => (
            Phase::Progressing,
            "serving the objects its selector picks".to_string(),
        ),
    };
    state.phase = phase;
    state.message = format!("{why}; {what}");
    Next {
        notice: Some(Notice {
            reason: Reason::CanaryStarted,
            warning: false,
            message: state.message.clone(),
        }),
        state,
        actions: vec![Action::ResetWindow, Action::Serve],
    }
}

/// One transition: `input` applied to `state` at `now`.
pub fn step(state: &State, settings: &Settings, input: Input, now: Instant) -> Next {
    let unchanged = || Next {
        state: state.clone(),
        actions: Vec::new(),
        notice: None,
    };
    if state.is_final() {
        return unchanged();
    }
    match input {
        Input::DryRunDone { checked, failures } => {
            if state.phase != Phase::DryRun {
                return unchanged();
            }
            if failures.is_empty() {
                return serve(
                    state.clone(),
                    settings,
                    now,
                    format!("dry run passed on all {checked} primaries"),
                );
            }
            let mut next = state.clone();
            let names: Vec<&str> = failures.iter().take(5).map(|f| f.object.as_str()).collect();
            next.message = format!(
                "dry run: {} of {checked} primaries would fail (e.g. {}); the candidate serves nothing. Fix the candidate and change spec.canary, or set skipDryRun",
                failures.len(),
                names.join(", ")
            );
            next.dry_run_failures = failures;
            // The candidate leaves the registry: it would only keep
            // computing beside the stable version.
            Next {
                notice: Some(Notice {
                    reason: Reason::DryRunFailed,
                    warning: true,
                    message: next.message.clone(),
                }),
                state: next,
                actions: vec![Action::Rollback],
            }
        }
        Input::Promote { by } => {
            let mut next = state.clone();
            next.phase = Phase::Promoted;
            next.pause = None;
            next.weight = 100;
            next.message = format!("promoted by {by}: the candidate serves every object");
            promoted(next)
        }
        Input::Abort { by } => rollback(
            state,
            Reason::CanaryAborted,
            format!("aborted by {by}: the stable version serves every object again"),
        ),
        Input::Lost { why } => rollback(
            state,
            Reason::CandidateUnloadable,
            format!(
                "the candidate can no longer serve ({why}): rolled back, the stable version serves every object again"
            ),
        ),
        Input::Checked(verdict) => {
            if !state.is_live() {
                return unchanged();
            }
            checked(state, settings, verdict, now)
        }
    }
}

/// A promotion `step` decided from `state`, refused because the candidate
/// is not signed as `spec.canary.requireSigner` says (`why`): the canary
/// pauses where it was (shadowing or serving its share), and says so with a
/// `CanaryPromotionRefused` Warning: every time a person asked, once per
/// pause for automatic promotion.
pub fn promotion_refused(state: &State, why: &str, by_person: bool) -> Next {
    let mut next = state.clone();
    let first = next.pause != Some(Pause::SignerRequired);
    next.phase = Phase::Paused;
    next.pause = Some(Pause::SignerRequired);
    next.message = format!(
        "promotion refused: {why}. The candidate keeps running beside the stable version; sign it with the identity spec.canary.requireSigner names, or abort"
    );
    Next {
        notice: (first || by_person).then(|| Notice {
            reason: Reason::CanaryPromotionRefused,
            warning: true,
            message: next.message.clone(),
        }),
        state: next,
        actions: Vec::new(),
    }
}

/// Rolls back; a Warning unless a person asked for it.
/// The candidate serves every object: `next` (its message already says
/// why) with the `CanaryPromoted` notice.
fn promoted(next: State) -> Next {
    Next {
        notice: Some(Notice {
            reason: Reason::CanaryPromoted,
            warning: false,
            message: next.message.clone(),
        }),
        state: next,
        actions: vec![Action::Promote],
    }
}

fn rollback(state: &State, reason: Reason, message: String) -> Next {
    let mut next = state.clone();
    next.phase = Phase::RolledBack;
    next.pause = None;
    next.weight = 0;
    next.message = message;
    Next {
        notice: Some(Notice {
            reason,
            warning: reason != Reason::CanaryAborted,
            message: next.message.clone(),
        }),
        state: next,
        actions: vec![Action::Rollback],
    }
}

/// The phase the canary runs in when not paused.
fn running_phase(settings: &Settings) -> Phase {
    match settings.plan {
        Plan::Shadow => Phase::Shadowing,
        _ => Phase::Progressing,
    }
}

fn checked(state: &State, settings: &Settings, verdict: Verdict, now: Instant) -> Next {
    let mut next = state.clone();
    next.verdict = Some(verdict.clone());
    match &verdict {
        Verdict::Inconclusive { .. } => {
            // The window keeps growing: no ResetWindow.
            let first = next.pause != Some(Pause::Inconclusive);
            next.phase = Phase::Paused;
            next.pause = Some(Pause::Inconclusive);
            next.message = format!("analysis {verdict}");
            Next {
                notice: first.then(|| Notice {
                    reason: Reason::AnalysisInconclusive,
                    warning: false,
                    message: next.message.clone(),
                }),
                state: next,
                actions: Vec::new(),
            }
        }
        Verdict::Failed { .. } => {
            next.failed_checks += 1;
            if next.failed_checks >= settings.failure_limit {
                let mut rolled = rollback(
                    &next,
                    Reason::AnalysisFailed,
                    format!(
                        "analysis {verdict} (check {} of failureLimit {}): rolled back, the stable version serves every object again",
                        next.failed_checks, settings.failure_limit
                    ),
                );
                rolled.state.verdict = Some(verdict);
                return rolled;
            }
            next.phase = running_phase(settings);
            next.pause = None;
            next.message = format!(
                "analysis {verdict} (check {} of failureLimit {})",
                next.failed_checks, settings.failure_limit
            );
            Next {
                notice: Some(Notice {
                    reason: Reason::AnalysisFailed,
                    warning: true,
                    message: next.message.clone(),
                }),
                state: next,
                actions: vec![Action::ResetWindow],
            }
        }
        Verdict::Passed(_) => passed(next, settings, &verdict, now),
    }
}

fn passed(mut next: State, settings: &Settings, verdict: &Verdict, now: Instant) -> Next {
    let last_step = match &settings.plan {
        Plan::Weighted { steps, .. } => next.step + 1 >= steps.len(),
        _ => true,
    };
    if last_step {
        if settings.promotion == Promotion::Auto {
            next.phase = Phase::Promoted;
            next.pause = None;
            next.weight = 100;
            next.message = format!(
                "analysis {verdict}: promoted (promotion: Auto), the candidate serves every object"
            );
            return promoted(next);
        }
        let first = next.pause != Some(Pause::AwaitingPromotion);
        next.phase = Phase::Paused;
        next.pause = Some(Pause::AwaitingPromotion);
        next.message = format!(
            "analysis {verdict}; waiting for a person to promote (promotion: Manual): `wasm-operator canary promote` or the annotation wasm-operator.dev/canary-action=promote"
        );
        return Next {
            notice: first.then(|| Notice {
                reason: Reason::AwaitingPromotion,
                warning: false,
                message: next.message.clone(),
            }),
            state: next,
            actions: Vec::new(),
        };
    }
    // A weighted split before its last step.
    let Plan::Weighted {
        steps,
        step_interval,
    } = &settings.plan
    else {
        return Next {
            state: next,
            actions: Vec::new(),
            notice: None,
        };
    };
    let was_paused = next.phase == Phase::Paused;
    next.phase = Phase::Progressing;
    next.pause = None;
    let due = next
        .step_since
        .is_none_or(|since| now.saturating_duration_since(since) >= *step_interval);
    if !due {
        next.message = format!(
            "analysis {verdict}; at {} percent until stepInterval has passed",
            next.weight
        );
        return Next {
            notice: was_paused.then(|| Notice {
                reason: Reason::AnalysisPassed,
                warning: false,
                message: next.message.clone(),
            }),
            state: next,
            actions: Vec::new(),
        };
    }
    next.step += 1;
    let from = next.weight;
    next.weight = steps.get(next.step).copied().unwrap_or(100);
    next.step_since = Some(now);
    next.message = format!(
        "analysis {verdict}: weight {from} -> {} percent (step {} of {})",
        next.weight,
        next.step + 1,
        steps.len()
    );
    Next {
        notice: Some(Notice {
            reason: Reason::CanaryStepped,
            warning: false,
            message: next.message.clone(),
        }),
        actions: vec![Action::ResetWindow, Action::SetWeight(next.weight)],
        state: next,
    }
}

#[cfg(test)]
mod tests {
    use super::super::analysis::Figures;
    use super::super::settings::test_spec as spec;
    use super::*;
    use std::time::Duration;

    use crate::wasmplugin::spec::{CanaryMode, CanarySelector};

    fn settings(plan: Plan, promotion: Promotion, failure_limit: u32) -> Settings {
        let mut s = Settings::from_spec(&spec(CanaryMode::Shadow)).unwrap();
        s.plan = plan;
        s.promotion = promotion;
        s.failure_limit = failure_limit;
        s
    }

    fn steps(list: &[u8]) -> Plan {
        Plan::Weighted {
            steps: list.to_vec(),
            step_interval: Duration::from_secs(10),
        }
    }

    fn pass() -> Input {
        Input::Checked(Verdict::Passed(Figures::default()))
    }

    fn fail() -> Input {
        Input::Checked(Verdict::Failed {
            figures: Figures::default(),
            breaches: vec![super::super::analysis::Breach::DiffRatio {
                ratio: 1.0,
                differing: 5,
                compared: 5,
                max: 0.05,
            }],
        })
    }

    fn inconclusive() -> Input {
        Input::Checked(Verdict::Inconclusive {
            calls: 1,
            min_calls: 20,
        })
    }

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn the_dry_run_comes_first_and_a_failure_serves_nothing() {
        let s = settings(Plan::Shadow, Promotion::Auto, 1);
        let t = now();
        let started = start(&s, t);
        assert_eq!(started.state.phase, Phase::DryRun);
        assert!(started.actions.is_empty());
        let failure = DryRunFailure {
            object: "ns/a".into(),
            reason: "PluginTrap".into(),
            message: "trap".into(),
        };
        let failed = step(
            &started.state,
            &s,
            Input::DryRunDone {
                checked: 3,
                failures: vec![failure],
            },
            t,
        );
        assert_eq!(failed.state.phase, Phase::DryRun);
        assert!(failed.state.is_final());
        assert_eq!(failed.actions, vec![Action::Rollback]);
        let notice = failed.notice.unwrap();
        assert_eq!(notice.reason, Reason::DryRunFailed);
        assert!(notice.message.contains("1 of 3") && notice.message.contains("ns/a"));
        // Nothing moves it any more, not even a passing check.
        assert!(step(&failed.state, &s, pass(), t).actions.is_empty());
        let passed = step(
            &started.state,
            &s,
            Input::DryRunDone {
                checked: 3,
                failures: vec![],
            },
            t,
        );
        assert_eq!(passed.state.phase, Phase::Shadowing);
        assert_eq!(passed.actions, vec![Action::ResetWindow, Action::Serve]);
    }

    #[test]
    fn skipping_the_dry_run_serves_at_once() {
        let mut s = settings(steps(&[10, 50]), Promotion::Manual, 1);
        s.dry_run = false;
        let started = start(&s, now());
        assert_eq!(started.state.phase, Phase::Progressing);
        assert_eq!(started.state.weight, 10);
        assert_eq!(started.actions, vec![Action::ResetWindow, Action::Serve]);
    }

    #[test]
    fn a_refused_promotion_pauses_where_it_was_and_tells_a_person_every_time() {
        let s = settings(Plan::Shadow, Promotion::Auto, 1);
        let state = live(&s, now());
        let auto = promotion_refused(&state, "not signed by key sha256:ab", false);
        assert_eq!(auto.state.phase, Phase::Paused);
        assert_eq!(auto.state.pause, Some(Pause::SignerRequired));
        assert_eq!(auto.state.weight, state.weight);
        assert!(auto.actions.is_empty());
        let notice = auto.notice.clone().unwrap();
        assert_eq!(notice.reason, Reason::CanaryPromotionRefused);
        assert!(notice.warning);
        assert!(notice.message.contains("sha256:ab"), "{}", notice.message);
        // Automatic promotion again from the refused pause: no new notice.
        assert!(
            promotion_refused(&auto.state, "again", false)
                .notice
                .is_none()
        );
        // A person asking is always answered.
        assert!(
            promotion_refused(&auto.state, "again", true)
                .notice
                .is_some()
        );
    }

    fn live(s: &Settings, t: Instant) -> State {
        let mut s = s.clone();
        s.dry_run = false;
        start(&s, t).state
    }

    #[test]
    fn an_inconclusive_check_pauses_and_keeps_the_window() {
        let s = settings(Plan::Shadow, Promotion::Auto, 1);
        let t = now();
        let paused = step(&live(&s, t), &s, inconclusive(), t);
        assert_eq!(paused.state.phase, Phase::Paused);
        assert_eq!(paused.state.pause, Some(Pause::Inconclusive));
        assert_eq!(paused.state.failed_checks, 0);
        assert!(paused.actions.is_empty(), "the window keeps growing");
        assert_eq!(paused.notice.unwrap().reason, Reason::AnalysisInconclusive);
        // Once per pause, not once per check.
        assert!(step(&paused.state, &s, inconclusive(), t).notice.is_none());
        // A later passing check promotes (Auto, Shadow).
        let promoted = step(&paused.state, &s, pass(), t);
        assert_eq!(promoted.state.phase, Phase::Promoted);
        assert_eq!(promoted.actions, vec![Action::Promote]);
    }

    #[test]
    fn failed_checks_up_to_the_limit_roll_back() {
        let s = settings(Plan::Shadow, Promotion::Auto, 2);
        let t = now();
        let once = step(&live(&s, t), &s, fail(), t);
        assert_eq!(once.state.phase, Phase::Shadowing);
        assert_eq!(once.state.failed_checks, 1);
        assert_eq!(once.actions, vec![Action::ResetWindow]);
        assert!(once.notice.as_ref().unwrap().warning);
        // Failed checks count in total: a pass in between does not reset them.
        let between = step(
            &once.state,
            &settings(Plan::Shadow, Promotion::Manual, 2),
            pass(),
            t,
        );
        let twice = step(&between.state, &s, fail(), t);
        assert_eq!(twice.state.phase, Phase::RolledBack);
        assert_eq!(twice.actions, vec![Action::Rollback]);
        let notice = twice.notice.unwrap();
        assert_eq!(notice.reason, Reason::AnalysisFailed);
        assert!(
            notice.message.contains("shadow diff ratio 1.00"),
            "{}",
            notice.message
        );
        assert!(twice.state.is_final());
        assert!(step(&twice.state, &s, pass(), t).actions.is_empty());
    }

    #[test]
    fn steps_advance_once_per_interval_while_analysis_passes() {
        let s = settings(steps(&[10, 50, 100]), Promotion::Auto, 1);
        let t = now();
        let state = live(&s, t);
        assert_eq!(state.weight, 10);
        // Too early: stays.
        let early = step(&state, &s, pass(), t + Duration::from_secs(5));
        assert_eq!(early.state.weight, 10);
        assert_eq!(
            early.actions,
            Vec::<Action>::new(),
            "the window keeps growing until the step advances"
        );
        let second = step(&early.state, &s, pass(), t + Duration::from_secs(10));
        assert_eq!(second.state.weight, 50);
        assert_eq!(
            second.actions,
            vec![Action::ResetWindow, Action::SetWeight(50)]
        );
        assert_eq!(second.notice.unwrap().reason, Reason::CanaryStepped);
        // One step per interval, however many checks pass.
        let same = step(&second.state, &s, pass(), t + Duration::from_secs(11));
        assert_eq!(same.state.weight, 50);
        let third = step(&same.state, &s, pass(), t + Duration::from_secs(20));
        assert_eq!(third.state.weight, 100);
        // At the last step a passing check promotes (Auto).
        let promoted = step(&third.state, &s, pass(), t + Duration::from_secs(21));
        assert_eq!(promoted.state.phase, Phase::Promoted);
        assert_eq!(promoted.actions, vec![Action::Promote]);
    }

    #[test]
    fn manual_promotion_waits_for_a_person() {
        let s = settings(steps(&[20]), Promotion::Manual, 1);
        let t = now();
        let waiting = step(&live(&s, t), &s, pass(), t);
        assert_eq!(waiting.state.phase, Phase::Paused);
        assert_eq!(waiting.state.pause, Some(Pause::AwaitingPromotion));
        assert_eq!(waiting.notice.unwrap().reason, Reason::AwaitingPromotion);
        assert!(step(&waiting.state, &s, pass(), t).notice.is_none());
        let promoted = step(
            &waiting.state,
            &s,
            Input::Promote {
                by: "annotation".into(),
            },
            t,
        );
        assert_eq!(promoted.state.phase, Phase::Promoted);
        assert_eq!(promoted.state.weight, 100);
        assert_eq!(promoted.actions, vec![Action::Promote]);
        assert!(promoted.notice.unwrap().message.contains("annotation"));
    }

    #[test]
    fn abort_and_a_lost_candidate_roll_back_from_any_live_phase() {
        let s = settings(
            Plan::Selector(CanarySelector::default()),
            Promotion::Auto,
            1,
        );
        let t = now();
        for state in [live(&s, t), start(&s, t).state] {
            let aborted = step(&state, &s, Input::Abort { by: "cli".into() }, t);
            assert_eq!(aborted.state.phase, Phase::RolledBack);
            assert_eq!(aborted.actions, vec![Action::Rollback]);
            assert_eq!(aborted.notice.unwrap().reason, Reason::CanaryAborted);
            let lost = step(&state, &s, Input::Lost { why: "gone".into() }, t);
            assert_eq!(lost.notice.unwrap().reason, Reason::CandidateUnloadable);
        }
        // A promoted canary is over: an abort changes nothing.
        let promoted = step(&live(&s, t), &s, Input::Promote { by: "cli".into() }, t);
        assert!(
            step(&promoted.state, &s, Input::Abort { by: "cli".into() }, t)
                .actions
                .is_empty()
        );
    }
}
