//! The canary driver: the side of a WasmPlugin's worker that runs
//! `spec.canary`. It loads the candidate through the same fetch and
//! registry checks as a new version, feeds the state machine
//! ([`super::machine`]) its inputs (dry-run report, analysis verdicts, the
//! `canary-action` annotation, a removed spec, a broken source), performs
//! the registry calls it decides, and records every transition (Event +
//! `audit` line), new kinds of shadow difference, and the full diffs in a
//! ConfigMap for `wasm-operator canary diff`.
//!
//! Every read and write goes through the [`CanaryIo`] handle it is given;
//! the driver holds the canary's state only. The worker calls it on spec
//! changes, source changes, the `canary-action` annotation and every
//! [`CANARY_TICK`], and writes status after each call.

use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::CanaryIo;
use super::analysis::analyse;
use super::diffs::{self, DiffsWrite};
use super::machine::{self, DryRunFailure, Input, Next, Phase};
use super::restore::restore;
use super::run::{self, ACTION_ANNOTATION, Action, CanaryRun};
use super::settings::{Plan, Settings};
use crate::contract::Reason;
use crate::registry::{ActivationOptions, CanaryObservations, DryRunState, LoadedVersion};
use crate::registry::{RegistryError, Rollout, RolloutSettings};
use crate::wasmplugin::audit::Transition;
use crate::wasmplugin::refusal::{condition_reason, refusal_message};
use crate::wasmplugin::spec::{Source, WasmPluginSpec};
use crate::wasmplugin::status::{self, CanaryPart, Loaded, Problem, Serving, now, problem};
use crate::wasmplugin::watch::Trigger;

/// How often a canary's dry run, analysis schedule and shadow differences
/// are looked at (analysis itself runs every `analysis.interval`).
pub(crate) const CANARY_TICK: Duration = Duration::from_millis(500);

/// The canary of one WasmPlugin: the run of its `spec.canary`, the watch of
/// that spec's source.
///
/// # Guarantees
///
/// - A removed or replaced `spec.canary` ends the running canary (an
///   abort unless it was promoted) before another starts.
/// - A canary that had ended before the host started stays ended; one
///   that was running resumes with its candidate (see [`super::restore`]).
/// - A refusal of the registry fails the canary and drops its candidate:
///   the stable version then serves every object.
#[derive(Debug, Default)]
pub(crate) struct CanaryDriver {
    /// The canary of `spec.canary`.
    run: Option<CanaryRun>,
    /// The watch of `spec.canary.source`.
    watch: Option<JoinHandle<()>>,
    /// Where that watch sends its triggers (the worker listens).
    triggers: Option<mpsc::Sender<Trigger>>,
    /// The status written before this worker started was looked at for a
    /// canary that had ended (see [`restore`]).
    restore_checked: bool,
}

/// `sha256:<hex>` of a component.
fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl CanaryDriver {
    /// Source changes of `spec.canary.source` go to `triggers`; the worker
    /// hands them back through [`CanaryDriver::source_changed`].
    pub(crate) fn listen(&mut self, triggers: mpsc::Sender<Trigger>) {
        self.triggers = Some(triggers);
    }

    /// The canary, if `spec.canary` is set.
    #[cfg(test)]
    pub(crate) fn run(&self) -> Option<&CanaryRun> {
        self.run.as_ref()
    }

    /// Forgets the canary (the plugin was unloaded, which drops its
    /// candidate too) and stops watching its source.
    pub(crate) fn stop(&mut self) {
        if let Some(task) = self.watch.take() {
            task.abort();
        }
        self.run = None;
    }

    /// The promoted candidate's source and identity while the canary that
    /// promoted it is still in `spec.canary` (it serves until then).
    pub(crate) fn promoted(&self) -> Option<(Source, Option<Serving>)> {
        self.run
            .as_ref()
            .filter(|run| run.promoted())
            .map(|run| (run.spec.source.clone(), run.candidate.clone()))
    }

    /// True while the canary needs its tick (dry run, analysis, diffs).
    pub(crate) fn ticking(&self) -> bool {
        self.run
            .as_ref()
            .is_some_and(|run| run.active() || (run.state.is_none() && run.problem.is_none()))
    }

    /// The canary's share of the status, with the registry's figures while
    /// its candidate is the registry's.
    pub(crate) fn status_part<Io: CanaryIo>(&mut self, io: &Io) -> Option<CanaryPart> {
        let run = self.run.as_mut()?;
        let observations = io.observations(&run.plugin).filter(|o| {
            Some(&o.candidate().digest) == run.candidate.as_ref().map(|c| &c.loaded.digest)
        });
        let counters = observations.as_ref().and_then(|_| io.counters(&run.plugin));
        let status = run.status(observations.as_deref(), counters.as_ref());
        if observations.is_some() {
            run.last_figures = Some(status.clone());
        }
        Some(status::CanaryPart {
            conditions: run.conditions(),
            status,
        })
    }

    /// Makes the canary follow `spec.canary`: starts one for a new spec,
    /// ends the running one (an abort unless it was promoted) when the spec
    /// is removed or replaced. `last_status` and `generation` are the
    /// status written last and the object's generation (for [`restore`]).
    pub(crate) async fn sync<Io: CanaryIo>(
        &mut self,
        io: &mut Io,
        spec: Option<&WasmPluginSpec>,
        loaded: &mut Option<Loaded>,
        last_status: &serde_json::Value,
        generation: Option<i64>,
    ) {
        let wanted = spec.and_then(|s| s.canary.clone());
        if let (Some(wanted), Some(run)) = (&wanted, &self.run)
            && run.spec == *wanted
        {
            return;
        }
        if let Some(mut run) = self.run.take() {
            let by = if wanted.is_some() {
                "a new spec.canary"
            } else {
                "removing spec.canary"
            };
            if run.active() {
                feed(io, &mut run, Input::Abort { by: by.into() }, loaded).await;
            }
            if let Some(task) = self.watch.take() {
                task.abort();
            }
        }
        let (Some(canary), Some(spec)) = (wanted, spec) else {
            return;
        };
        if !self.restore_checked {
            // Once, when the worker starts: a canary that ended before a
            // host restart stays ended (a rolled-back candidate does not
            // serve again, a promoted one keeps serving).
            self.restore_checked = true;
            if let Some(run) = restore(last_status, generation, &canary, &spec.source, io.now()) {
                tracing::info!(
                    wasmplugin = %io.name(), phase = ?run.phase().map(Phase::as_str),
                    "the canary had ended before this host started; it stays ended"
                );
                self.run = Some(run);
                return;
            }
        }
        let Some(stable) = loaded.as_ref().map(|l| l.serving.clone()) else {
            // Started once the stable version serves (see `load_candidate`).
            self.run = Some(CanaryRun::new(canary, None, io.now()));
            return;
        };
        let mut run = CanaryRun::new(canary, Some(stable), io.now());
        self.watch_source(io, &run);
        if let Err(error) = Settings::from_spec(&run.spec) {
            run.problem = Some(problem(Reason::InvalidSpec.as_str(), error.to_string()));
            refused(io, &run).await;
        }
        self.run = Some(run);
    }

    fn watch_source<Io: CanaryIo>(&mut self, io: &mut Io, run: &CanaryRun) {
        if let Some(tx) = &self.triggers {
            self.watch = Some(io.watch_source(&run.spec.source, tx.clone()));
        }
    }

    /// Fetches, compiles and checks the candidate like a new version, then
    /// sets it beside the stable version (in DryRun unless skipped).
    /// Nothing happens while the stable version does not serve yet.
    pub(crate) async fn load_candidate<Io: CanaryIo>(
        &mut self,
        io: &mut Io,
        loaded: &mut Option<Loaded>,
    ) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        self.load_into(io, &mut run, loaded).await;
        self.run = Some(run);
    }

    async fn load_into<Io: CanaryIo>(
        &mut self,
        io: &mut Io,
        run: &mut CanaryRun,
        loaded: &mut Option<Loaded>,
    ) {
        if run.state.is_some() {
            return;
        }
        if run
            .problem
            .as_ref()
            .is_some_and(|p| p.reason == Reason::InvalidSpec.as_str())
        {
            return;
        }
        let Some(stable) = loaded.clone() else {
            return;
        };
        if run.stable.loaded.name.is_empty() {
            run.plugin = stable.serving.loaded.name.clone();
            run.stable = stable.serving.clone();
            self.watch_source(io, run);
        }
        let source = run.spec.source.describe();
        let bytes = match io.fetch(&run.spec.source).await {
            Ok(fetched) => {
                check_signer(io, run, fetched.revision.as_deref()).await;
                fetched.bytes
            }
            Err(failure) => {
                run.problem = Some(failure);
                refused(io, run).await;
                return;
            }
        };
        let digest = digest_of(&bytes);
        if digest == run.stable.loaded.digest {
            run.problem = Some(problem(
                Reason::InvalidSpec.as_str(),
                format!(
                    "spec.canary.source holds {digest}, the component the stable version {} {} already is: there is nothing to compare. Point spec.canary.source at the new version.",
                    run.stable.loaded.name, run.stable.loaded.version
                ),
            ));
            refused(io, run).await;
            return;
        }
        let candidate = match io.prepare(&source, bytes, &run.plugin).await {
            Ok(candidate) => candidate,
            Err(error) => {
                run.problem = Some(problem(
                    condition_reason(&error),
                    refusal_message(&error, &digest),
                ));
                refused(io, run).await;
                return;
            }
        };
        let started = machine::start(&run.settings, io.now());
        let rollout = match run::rollout(&run.settings, &started.state) {
            // A split is staged at weight 0 first: the analysis window then
            // starts before the registry moves any object to the candidate
            // (`started` performs ResetWindow, then Serve).
            Ok(rollout) if rollout.rollout.serves() => RolloutSettings {
                rollout: Rollout::Split { weight_percent: 0 },
                ..rollout
            },
            Ok(rollout) => rollout,
            Err(message) => {
                run.problem = Some(problem(Reason::InvalidSpec.as_str(), message));
                refused(io, run).await;
                return;
            }
        };
        match io
            .activate_candidate(candidate, rollout, stable.options.clone())
            .await
        {
            Ok(info) => {
                run.problem = None;
                run.candidate = Some(Serving {
                    loaded: LoadedVersion {
                        name: info.name,
                        version: info.version,
                        digest: info.digest,
                        source: source.clone(),
                    },
                    source_kind: run.spec.source.kind().to_string(),
                    loaded_at: now(),
                });
                run.state = Some(started.state.clone());
                run.next_check = io.now() + run.settings.interval;
                perform(io, run, started, loaded).await;
            }
            Err(error) => {
                run.problem = Some(problem(
                    condition_reason(&error),
                    refusal_message(&error, &digest),
                ));
                refused(io, run).await;
            }
        }
    }

    /// Loads `stable` with the candidate of a canary that was running when
    /// the host stopped, in one registry change; `Err(stable)` when there
    /// is no such canary (then the caller activates `stable` alone). A
    /// candidate that cannot be resumed (its source changed or is refused)
    /// starts a new canary instead, once the stable version serves.
    /// `stable_plugin` is the plugin `stable` is a version of.
    pub(crate) async fn resume<Io: CanaryIo>(
        &mut self,
        io: &mut Io,
        stable: Io::Candidate,
        stable_plugin: &str,
        options: &ActivationOptions,
    ) -> Result<Result<LoadedVersion, RegistryError>, Io::Candidate> {
        if !self.run.as_ref().is_some_and(|run| run.resume) {
            return Err(stable);
        }
        let Some(mut run) = self.run.take() else {
            return Err(stable);
        };
        run.resume = false;
        let prepared = match io.fetch(&run.spec.source).await {
            Ok(fetched) => {
                check_signer(io, &mut run, fetched.revision.as_deref()).await;
                let bytes = fetched.bytes;
                let digest = digest_of(&bytes);
                if run
                    .candidate
                    .as_ref()
                    .is_some_and(|c| c.loaded.digest == digest)
                {
                    io.prepare(&run.spec.source.describe(), bytes, stable_plugin)
                        .await
                        .ok()
                } else {
                    None
                }
            }
            Err(_) => None,
        };
        let rollout = run
            .state
            .as_ref()
            .and_then(|state| run::rollout(&run.settings, state).ok());
        let (Some(candidate), Some(rollout)) = (prepared, rollout) else {
            // Start over: a new canary once the stable version serves.
            self.run = Some(CanaryRun::new(run.spec.clone(), None, io.now()));
            return Err(stable);
        };
        let result = io
            .activate_with_candidate(stable, candidate, rollout, options.clone())
            .await;
        if result.is_ok() {
            run.window_start = io.counters(&run.plugin);
            run.next_check = io.now() + run.settings.interval;
            tracing::info!(
                wasmplugin = %io.name(), plugin = %run.plugin,
                "the canary running when the host stopped resumes with its candidate"
            );
            self.run = Some(run);
        } else {
            self.run = Some(CanaryRun::new(run.spec.clone(), None, io.now()));
        }
        Ok(result)
    }

    /// The canary's source changed: a broken one rolls a live candidate
    /// back (`CandidateUnloadable`); a loadable one starts a new canary
    /// with it; a candidate that was not loaded yet is tried again.
    pub(crate) async fn source_changed<Io: CanaryIo>(
        &mut self,
        io: &mut Io,
        loaded: &mut Option<Loaded>,
    ) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        if run.state.is_none() {
            run.problem = None;
            self.load_into(io, &mut run, loaded).await;
            self.run = Some(run);
            return;
        }
        if !run.active() {
            self.run = Some(run);
            return;
        }
        let verdict = match io.fetch(&run.spec.source).await {
            Err(failure) => Err(format!("{}: {}", failure.reason, failure.message)),
            Ok(fetched) => {
                let bytes = fetched.bytes;
                if run
                    .candidate
                    .as_ref()
                    .is_some_and(|c| c.loaded.digest == digest_of(&bytes))
                {
                    Ok(false)
                } else {
                    match io
                        .prepare(&run.spec.source.describe(), bytes, &run.plugin)
                        .await
                    {
                        Ok(_) => Ok(true),
                        Err(error) => Err(format!("{}: {error}", condition_reason(&error))),
                    }
                }
            }
        };
        match verdict {
            Ok(false) => {}
            Err(why) => feed(io, &mut run, Input::Lost { why }, loaded).await,
            Ok(true) => {
                // A new candidate at the same source: a new canary.
                let by = "a new component at spec.canary.source".into();
                feed(io, &mut run, Input::Abort { by }, loaded).await;
                let mut fresh =
                    CanaryRun::new(run.spec.clone(), Some(run.stable.clone()), io.now());
                fresh.plugin = run.plugin.clone();
                self.load_into(io, &mut fresh, loaded).await;
                run = fresh;
            }
        }
        self.run = Some(run);
    }

    /// The canary's periodic work: the dry run's end, the analysis when
    /// due, new kinds of shadow difference, the diffs ConfigMap.
    pub(crate) async fn tick<Io: CanaryIo>(&mut self, io: &mut Io, loaded: &mut Option<Loaded>) {
        let Some(mut run) = self.run.take() else {
            return;
        };
        if run.state.is_none() {
            self.load_into(io, &mut run, loaded).await;
        }
        let observations = io.observations(&run.plugin);
        if let Some(obs) = &observations {
            // The figures as they stand before this tick's transition,
            // which may take the candidate out of the registry.
            let counters = io.counters(&run.plugin);
            run.last_figures = Some(run.status(Some(obs), counters.as_ref()));
        }
        if run.active() && observations.is_none() {
            // The candidate left the registry without this worker (the
            // plugin was reloaded with the candidate's component, or
            // unloaded).
            let why = "it is no longer loaded beside the stable version".into();
            feed(io, &mut run, Input::Lost { why }, loaded).await;
        }
        let phase = run.state.as_ref().map(|s| s.phase);
        if let (Some(Phase::DryRun), Some(obs)) = (phase, &observations) {
            if let Some(done) = dry_run_done(obs) {
                feed(io, &mut run, done, loaded).await;
            }
        } else if run.state.as_ref().is_some_and(machine::State::is_live)
            && io.now() >= run.next_check
        {
            check(io, &mut run, observations.as_deref(), loaded).await;
        }
        if let Some(obs) = &observations {
            report_new_differences(io, &mut run, obs).await;
            // A canary that ended in this tick leaves its complete evidence:
            // the comparisons made since the last (rate-limited) write would
            // otherwise never reach the ConfigMap `canary diff` reads.
            let ended = phase != run.state.as_ref().map(|s| s.phase)
                && run.state.as_ref().is_some_and(machine::State::is_final);
            write_diffs(io, &mut run, obs, ended).await;
        }
        self.run = Some(run);
    }

    /// Acts on the `canary-action` annotation (`action`) and removes it.
    pub(crate) async fn act<Io: CanaryIo>(
        &mut self,
        io: &mut Io,
        action: Action,
        loaded: &mut Option<Loaded>,
    ) {
        let live = self
            .run
            .as_ref()
            .is_some_and(|run| run.state.as_ref().is_some_and(|s| !s.is_final()));
        match (&action, live) {
            (Action::Promote | Action::Abort, true) => {
                if let Some(mut run) = self.run.take() {
                    let by = format!("the annotation {ACTION_ANNOTATION}");
                    let input = if action == Action::Promote {
                        Input::Promote { by }
                    } else {
                        Input::Abort { by }
                    };
                    feed(io, &mut run, input, loaded).await;
                    self.run = Some(run);
                }
            }
            (Action::Promote | Action::Abort, false) => {
                let message = format!(
                    "{ACTION_ANNOTATION}={} ignored: WasmPlugin {} has no canary in progress ({}); the annotation was removed",
                    if action == Action::Promote {
                        "promote"
                    } else {
                        "abort"
                    },
                    io.name(),
                    self.run
                        .as_ref()
                        .and_then(CanaryRun::phase)
                        .map_or("no spec.canary", |p| p.as_str())
                );
                notice(io, loaded.as_ref(), Reason::NoCanary, message).await;
            }
            (Action::Unknown(value), _) => {
                let message = format!(
                    "{ACTION_ANNOTATION}={value:?} is not an action: write promote or abort; the annotation was removed"
                );
                notice(io, loaded.as_ref(), Reason::CanaryActionUnknown, message).await;
            }
        }
        io.remove_action_annotation().await;
    }
}

/// The input that ends a finished dry run; `None` while it runs.
fn dry_run_done(obs: &CanaryObservations) -> Option<Input> {
    let report = obs.dry_run();
    if report.state != DryRunState::Finished {
        return None;
    }
    let failures = report
        .failures
        .iter()
        .map(|f| DryRunFailure {
            object: f.object.to_string(),
            reason: f.reason.clone(),
            message: f.message.clone(),
        })
        .collect::<Vec<_>>();
    // More failed than were kept: keep the count honest.
    let failures = if failures.is_empty() && report.failed > 0 {
        vec![DryRunFailure {
            object: format!("{} objects", report.failed),
            reason: Reason::DryRunFailed.as_str().into(),
            message: "failed".into(),
        }]
    } else {
        failures
    };
    Some(Input::DryRunDone {
        checked: report.done as usize,
        failures,
    })
}

/// One analysis check, due now: judges the window and feeds the verdict.
async fn check<Io: CanaryIo>(
    io: &mut Io,
    run: &mut CanaryRun,
    observations: Option<&CanaryObservations>,
    loaded: &mut Option<Loaded>,
) {
    run.next_check = io.now() + run.settings.interval;
    let (Some(start), Some(current)) = (run.window_start, io.counters(&run.plugin)) else {
        return;
    };
    let (stable, candidate, _) = run::window(&start, &current);
    // Shadow: judged on every compared object's latest answers (they stay
    // true while the object does not change, so a quiet kind still gets
    // verdicts), not on the window's comparisons.
    let shadow = match (&run.settings.plan, observations) {
        (Plan::Shadow, Some(obs)) => Some(run::object_agreement(&obs.shadow_counts())),
        (Plan::Shadow, None) => Some(Default::default()),
        _ => None,
    };
    let verdict = analyse(
        &stable,
        &candidate,
        shadow.as_ref(),
        &run.settings.thresholds,
    );
    run.checked_at = Some(now());
    feed(io, run, Input::Checked(verdict), loaded).await;
}

/// One Warning event per new kind of shadow difference.
async fn report_new_differences<Io: CanaryIo>(
    io: &mut Io,
    run: &mut CanaryRun,
    obs: &CanaryObservations,
) {
    for kind in obs.diff_kinds() {
        if kind.seq <= run.reported_kinds {
            continue;
        }
        run.reported_kinds = kind.seq;
        let sample: Vec<String> = kind
            .sample
            .fields
            .iter()
            .take(5)
            .map(|f| {
                let show = |v: &Option<serde_json::Value>| {
                    v.as_ref()
                        .map_or_else(|| "(absent)".to_string(), ToString::to_string)
                };
                format!("{}: {} -> {}", f.path, show(&f.stable), show(&f.candidate))
            })
            .collect();
        let transition = run.transition(Reason::ShadowDiffers, true, format!(
                "the candidate's answers differ from the stable version's in a new way ({}): e.g. {}: {}. See `wasm-operator canary diff {}`.",
                kind.signature,
                kind.sample.object,
                sample.join("; "),
                io.name()
            ));
        // The sample object as the Event's related object: one event per
        // kind, not one series of them.
        let related = io
            .primary_kind(&run.plugin)
            .map(
                |(api_version, kind_name)| k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some(api_version),
                    kind: Some(kind_name),
                    name: Some(kind.sample.object.name.clone()),
                    namespace: kind.sample.object.namespace.clone(),
                    uid: Some(kind.sample.object.uid.clone()),
                    ..Default::default()
                },
            );
        io.record(&transition, related).await;
    }
}

/// Writes every differing object's latest field diff to the diffs
/// ConfigMap (owned by the WasmPlugin), at most every
/// [`diffs::DIFFS_REFRESH`].
///
/// `last`: the canary has just ended, so this write is not rate-limited.
async fn write_diffs<Io: CanaryIo>(
    io: &mut Io,
    run: &mut CanaryRun,
    obs: &CanaryObservations,
    last: bool,
) {
    if !io.may_write() || !matches!(run.settings.plan, Plan::Shadow) {
        return;
    }
    let at = io.now();
    if !last
        && run
            .diffs_written
            .is_some_and(|written| at.saturating_duration_since(written) < diffs::DIFFS_REFRESH)
    {
        return;
    }
    if obs.shadow_counts().compared == 0 {
        return;
    }
    run.diffs_written = Some(at);
    let document = diffs::document(io.name(), &run.plugin, obs, &now());
    match io.write_diffs(document).await {
        DiffsWrite::Written(written) => {
            run.diffs_config_map = Some(written);
            run.diffs_squatter = None;
        }
        DiffsWrite::Failed => {}
        // Status names the squatter instead of a ConfigMap whose figures
        // are not the canary's.
        DiffsWrite::NotTheHosts(message) => {
            run.diffs_config_map = None;
            run.diffs_squatter = Some(message);
        }
    }
}

/// Records that the candidate cannot be used (phase `Failed`).
async fn refused<Io: CanaryIo>(io: &mut Io, run: &CanaryRun) {
    let Some(p) = &run.problem else {
        return;
    };
    let transition = Transition {
        reason: p.reason.clone(),
        warning: true,
        retrying: false,
        plugin: run.plugin.clone(),
        from: run.stable.loaded.version.clone(),
        to: run.stable.loaded.version.clone(),
        digest: String::new(),
        source: run.spec.source.describe(),
        message: run.message(),
    };
    io.record(&transition, None).await;
}

/// Records a Warning about the canary that changes nothing (an annotation
/// that was not acted upon).
async fn notice<Io: CanaryIo>(
    io: &mut Io,
    loaded: Option<&Loaded>,
    reason: Reason,
    message: String,
) {
    let serving = loaded.map(|l| &l.serving);
    let version = serving
        .map(|s| s.loaded.version.clone())
        .unwrap_or_default();
    let transition = Transition {
        reason: reason.as_str().into(),
        warning: true,
        retrying: false,
        plugin: serving.map(|s| s.loaded.name.clone()).unwrap_or_default(),
        from: version.clone(),
        to: version,
        digest: String::new(),
        source: String::new(),
        message,
    };
    io.record(&transition, None).await;
}

/// Applies `input` to the run's state machine and performs the result.
async fn feed<Io: CanaryIo>(
    io: &mut Io,
    run: &mut CanaryRun,
    input: Input,
    loaded: &mut Option<Loaded>,
) {
    let Some(state) = run.state.clone() else {
        return;
    };
    let by_person = matches!(input, Input::Promote { .. });
    let mut next = machine::step(&state, &run.settings, input, io.now());
    if let Some(Err(why)) = &run.required_signer
        && next.actions.contains(&machine::Action::Promote)
    {
        next = machine::promotion_refused(&state, why, by_person);
    }
    perform(io, run, next, loaded).await;
}

/// Checks the fetched candidate (manifest `digest`) against
/// `spec.canary.requireSigner`, when set: [`CanaryRun::required_signer`].
async fn check_signer<Io: CanaryIo>(io: &mut Io, run: &mut CanaryRun, digest: Option<&str>) {
    run.required_signer = match &run.spec.require_signer {
        Some(rule) => Some(
            io.signed_by(&run.spec.source, digest, rule)
                .await
                .map_err(|why| {
                    format!(
                        "the candidate is not signed as spec.canary.requireSigner requires ({why})"
                    )
                }),
        ),
        None => None,
    };
}

/// Performs a transition's registry calls, then records it.
async fn perform<Io: CanaryIo>(
    io: &mut Io,
    run: &mut CanaryRun,
    next: Next,
    loaded: &mut Option<Loaded>,
) {
    let mut next = next;
    for action in next.actions.clone() {
        let result: Result<(), RegistryError> = match action {
            machine::Action::Serve | machine::Action::SetWeight(_) => {
                match run::rollout(&run.settings, &next.state) {
                    Ok(settings) => io.set_rollout(&run.plugin, settings).await,
                    Err(message) => {
                        run.problem = Some(problem(Reason::InvalidSpec.as_str(), message));
                        Ok(())
                    }
                }
            }
            machine::Action::ResetWindow => {
                run.window_start = io.counters(&run.plugin);
                Ok(())
            }
            machine::Action::Promote => match io.promote_candidate(&run.plugin).await {
                Ok(info) => {
                    adopt(loaded, run, info);
                    Ok(())
                }
                Err(error) => Err(error),
            },
            machine::Action::Rollback => io.drop_candidate(&run.plugin).await,
        };
        if let Err(error) = result {
            // The registry refused (e.g. CanaryIrreversible on the way from
            // the dry run to a split): the candidate is dropped and the
            // canary failed, naming why.
            let _ = io.drop_candidate(&run.plugin).await;
            fail(run, &mut next, &error);
            break;
        }
    }
    if let Some(notice) = &next.notice {
        run.reason = notice.reason;
        let transition = run.transition(notice.reason, notice.warning, notice.message.clone());
        io.record(&transition, None).await;
    }
    run.state = Some(next.state);
}

/// The promoted candidate is the stable version now; the worker serves it
/// until spec.source says otherwise (see `Worker::sync`).
fn adopt(loaded: &mut Option<Loaded>, run: &CanaryRun, info: LoadedVersion) {
    if let (Some(loaded), Some(candidate)) = (loaded.as_mut(), run.candidate.as_ref()) {
        loaded.serving = Serving {
            loaded: LoadedVersion {
                name: info.name,
                version: info.version,
                digest: info.digest,
                source: candidate.loaded.source.clone(),
            },
            source_kind: candidate.source_kind.clone(),
            loaded_at: now(),
        };
        loaded.revision = None;
        loaded.signature = None;
    }
}

/// Turns `next` into the canary's failure because the registry refused
/// `error`: phase `Failed`, a `CandidateUnloadable` Warning.
fn fail(run: &mut CanaryRun, next: &mut Next, error: &RegistryError) {
    let reason = condition_reason(error);
    let digest = run
        .candidate
        .as_ref()
        .map(|c| c.loaded.digest.clone())
        .unwrap_or_default();
    run.problem = Some(Problem {
        reason: reason.to_string(),
        message: refusal_message(error, &digest),
    });
    next.state.phase = Phase::Failed;
    next.state.message = format!(
        "the registry refused the canary: {} The stable version serves every object.",
        refusal_message(error, &digest)
    );
    next.notice = Some(machine::Notice {
        reason: Reason::CandidateUnloadable,
        warning: true,
        message: next.state.message.clone(),
    });
}
