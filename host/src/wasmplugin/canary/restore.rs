//! A canary as the status written before this host started describes it:
//! one that ended stays ended (a rolled-back candidate does not serve
//! again, a promoted one keeps serving), one that was running resumes
//! where it stood. Pure: read from the last status.

use std::time::Instant;

use serde_json::Value;

use super::machine::{DryRunFailure, Phase, State};
use super::run::CanaryRun;
use super::settings::Plan;
use crate::contract::Reason;
use crate::registry::LoadedVersion;
use crate::wasmplugin::spec::{CanarySpec, CanaryStatus, CanaryVersion, Source};
use crate::wasmplugin::status::{Serving, now, problem};

/// The canary of `spec` as `status` (the status written last, of the
/// object at `generation`) describes it, when that status is of this spec
/// (same generation) and the canary had ended (promoted, rolled back,
/// failed, or stopped by its dry run) or was running (then `resume` is
/// set: the worker loads the stable version and the candidate in one
/// change). `stable_source` is `spec.source`.
pub(super) fn restore(
    status: &Value,
    generation: Option<i64>,
    spec: &CanarySpec,
    stable_source: &Source,
    at: Instant,
) -> Option<CanaryRun> {
    if status.get("observedGeneration").and_then(Value::as_i64) != generation {
        return None;
    }
    let canary: CanaryStatus = serde_json::from_value(status.get("canary")?.clone()).ok()?;
    let condition = |kind: &str| {
        status
            .get("conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
            .cloned()
    };
    let failed = condition("CanaryFailed").filter(|c| c["status"] == "True");
    let phase = match canary.phase.as_deref()? {
        "Promoted" => Phase::Promoted,
        "RolledBack" => Phase::RolledBack,
        "Failed" => Phase::Failed,
        "DryRun" if failed.is_some() => Phase::DryRun,
        // A canary running when the host stopped resumes where it
        // stood: the stable version and the candidate are loaded in one
        // change (see `Worker::sync`), so a split's objects stay where
        // they were.
        "Shadowing" => Phase::Shadowing,
        "Progressing" => Phase::Progressing,
        "Paused" => Phase::Paused,
        _ => return None,
    };
    let serving = |v: &CanaryVersion, source: &Source| Serving {
        loaded: LoadedVersion {
            name: status["plugin"].as_str().unwrap_or_default().to_string(),
            version: v.version.clone().unwrap_or_default(),
            digest: v.digest.clone().unwrap_or_default(),
            source: v.source.clone().unwrap_or_else(|| source.describe()),
        },
        source_kind: source.kind().to_string(),
        loaded_at: now(),
    };
    let mut run = CanaryRun::new(
        spec.clone(),
        Some(serving(canary.stable.as_ref()?, stable_source)),
        at,
    );
    run.candidate = canary.candidate.as_ref().map(|c| serving(c, &spec.source));
    if phase == Phase::Promoted && run.candidate.is_none() {
        return None;
    }
    let text = |c: &Value, key: &str| c[key].as_str().unwrap_or_default().to_string();
    let progressing = condition("CanaryProgressing");
    run.reason = progressing
        .as_ref()
        .and_then(|c| c["reason"].as_str())
        .and_then(|r| Reason::ALL.iter().copied().find(|x| x.as_str() == r))
        .unwrap_or(Reason::CanaryStarted);
    if phase == Phase::Failed {
        let failed = failed?;
        run.problem = Some(problem(&text(&failed, "reason"), text(&failed, "message")));
    } else {
        run.state = Some(restored_state(phase, &canary));
    }
    if let Some(state) = run.state.as_mut()
        && state.is_live()
    {
        // Nothing to resume without the candidate's identity.
        run.candidate.as_ref()?;
        run.resume = true;
        state.step = match &run.settings.plan {
            Plan::Weighted { steps, .. } => {
                steps.iter().position(|w| *w == state.weight).unwrap_or(0)
            }
            _ => 0,
        };
        state.step_since = Some(at);
        if state.phase == Phase::Paused {
            // Why it paused is judged again by the next check.
            state.phase = if matches!(run.settings.plan, Plan::Shadow) {
                Phase::Shadowing
            } else {
                Phase::Progressing
            };
        }
    }
    run.diffs_config_map = canary.diffs_config_map.clone();
    run.diffs_squatter = canary.diffs_not_the_hosts.clone();
    run.last_figures = Some(canary);
    Some(run)
}

/// The state machine's state in `phase` as `status.canary` shows it.
fn restored_state(phase: Phase, canary: &CanaryStatus) -> State {
    let dry_run_failures = canary
        .dry_run
        .as_ref()
        .and_then(|d| d.failures.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|f| DryRunFailure {
            object: f.object.unwrap_or_default(),
            reason: f.reason.unwrap_or_default(),
            message: f.message.unwrap_or_default(),
        })
        .collect();
    State {
        phase,
        pause: None,
        step: 0,
        weight: canary
            .weight
            .and_then(|w| u8::try_from(w).ok())
            .unwrap_or(0),
        step_since: None,
        failed_checks: canary
            .failed_checks
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        verdict: None,
        dry_run_failures,
        message: canary.message.clone().unwrap_or_default(),
    }
}
