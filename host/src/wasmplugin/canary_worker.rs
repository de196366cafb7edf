//! The worker's side of `spec.canary`: loading the candidate through the
//! same fetch and registry checks as a new version, feeding the state
//! machine ([`super::canary`]) its inputs (dry-run report, analysis
//! verdicts, the `canary-action` annotation, a removed spec, a broken
//! source), performing the registry calls it decides, and recording every
//! transition (Event + `audit` line), new kinds of shadow difference, and
//! the full diffs in a ConfigMap for `wasm-operator canary diff`.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use sha2::{Digest, Sha256};

use super::analysis::analyse;
use super::audit::Transition;
use super::canary::{self, DryRunFailure, Input, Next, Phase, Plan, Settings};
use super::canary_run::{self, ACTION_ANNOTATION, Action, CanaryRun};
use super::status::{Problem, Serving};
use super::watch as source_watch;
use super::worker::{Worker, condition_reason, now, problem, refusal_message};
use crate::contract::Reason;
use crate::registry::{DryRunState, RegistryError};

/// How often a canary's dry run, analysis schedule and shadow differences
/// are looked at (analysis itself runs every `analysis.interval`).
pub(super) const CANARY_TICK: Duration = Duration::from_millis(500);

/// The least time between two writes of the diffs ConfigMap.
const DIFFS_REFRESH: Duration = Duration::from_secs(5);

/// The largest diffs document written (a ConfigMap holds at most 1 MiB).
const DIFFS_MAX_BYTES: usize = 900 * 1024;

/// The key of the diffs document in the ConfigMap.
pub const DIFFS_KEY: &str = "diffs.json";

/// Field manager of the host's writes of the diffs ConfigMap.
const DIFFS_MANAGER: &str = "wasm-operator-canary";

/// The namespace of the diffs ConfigMaps: the host's own (from
/// `POD_NAMESPACE`, set by deploy/deployment.yaml's downward API), else
/// `default`.
fn diffs_namespace() -> String {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string())
}

/// The name of WasmPlugin `wasmplugin`'s diffs ConfigMap.
pub fn diffs_config_map_name(wasmplugin: &str) -> String {
    format!("{wasmplugin}-canary-diffs")
}

impl Worker {
    /// Makes the canary follow `spec.canary`: starts one for a new spec,
    /// ends the running one (an abort unless it was promoted) when the spec
    /// is removed or replaced.
    pub(super) async fn sync_canary(&mut self) {
        let wanted = self.spec.as_ref().and_then(|s| s.canary.clone());
        if let (Some(wanted), Some(run)) = (&wanted, &self.canary)
            && run.spec == *wanted
        {
            return;
        }
        if let Some(mut run) = self.canary.take() {
            let by = if wanted.is_some() {
                "a new spec.canary"
            } else {
                "removing spec.canary"
            };
            if run.active() {
                self.feed(&mut run, Input::Abort { by: by.into() }).await;
            }
            if let Some(task) = self.canary_watch.take() {
                task.abort();
            }
        }
        let Some(spec) = wanted else {
            return;
        };
        if !self.canary_restore_checked {
            // Once, when the worker starts: a canary that ended before a
            // host restart stays ended (a rolled-back candidate does not
            // serve again, a promoted one keeps serving).
            self.canary_restore_checked = true;
            if let Some(run) = self.restore(&spec) {
                self.canary = Some(run);
                return;
            }
        }
        let Some(stable) = self.loaded.as_ref().map(|l| l.serving.clone()) else {
            // Started once the stable version serves (see `load_candidate`).
            self.canary = Some(self.new_run(spec, None));
            return;
        };
        let mut run = self.new_run(spec, Some(stable));
        if let Some(tx) = &self.canary_tx {
            self.canary_watch = Some(source_watch::spawn(
                self.client.clone(),
                run.spec.source.clone(),
                tx.clone(),
            ));
        }
        if let Err(error) = Settings::from_spec(&run.spec) {
            run.problem = Some(problem(Reason::InvalidSpec.as_str(), error.to_string()));
            self.canary_refused(&run).await;
        }
        self.canary = Some(run);
    }

    /// The canary of `spec` as the status written before this worker
    /// started describes it, when that status is of this spec (same
    /// generation) and the canary had ended: promoted, rolled back, failed,
    /// or stopped by its dry run.
    fn restore(&self, spec: &super::spec::CanarySpec) -> Option<CanaryRun> {
        let status = &self.last_status;
        if status
            .get("observedGeneration")
            .and_then(serde_json::Value::as_i64)
            != self.object.metadata.generation
        {
            return None;
        }
        let canary: super::spec::CanaryStatus =
            serde_json::from_value(status.get("canary")?.clone()).ok()?;
        let condition = |kind: &str| {
            status
                .get("conditions")
                .and_then(serde_json::Value::as_array)
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
        let serving = |v: &super::spec::CanaryVersion, source: &super::spec::Source| Serving {
            plugin: status["plugin"].as_str().unwrap_or_default().to_string(),
            version: v.version.clone().unwrap_or_default(),
            digest: v.digest.clone().unwrap_or_default(),
            source: v.source.clone().unwrap_or_else(|| source.describe()),
            source_kind: source.kind().to_string(),
            loaded_at: now(),
        };
        let spec_source = self.spec.as_ref().map(|s| s.source.clone())?;
        let mut run = self.new_run(
            spec.clone(),
            Some(serving(canary.stable.as_ref()?, &spec_source)),
        );
        run.candidate = canary.candidate.as_ref().map(|c| serving(c, &spec.source));
        if phase == Phase::Promoted && run.candidate.is_none() {
            return None;
        }
        let text =
            |c: &serde_json::Value, key: &str| c[key].as_str().unwrap_or_default().to_string();
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
            run.state = Some(canary::State {
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
            });
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
            state.step_since = Some(Instant::now());
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
        run.last_figures = Some(canary);
        tracing::info!(
            wasmplugin = %self.name, phase = phase.as_str(),
            "the canary had ended before this host started; it stays ended"
        );
        Some(run)
    }

    fn new_run(&self, spec: super::spec::CanarySpec, stable: Option<Serving>) -> CanaryRun {
        // A spec that does not validate makes a Failed run that never uses
        // its settings.
        let settings = Settings::from_spec(&spec).unwrap_or_else(|_| unreachable_settings());
        let stable = stable.unwrap_or_else(|| Serving {
            plugin: String::new(),
            version: String::new(),
            digest: String::new(),
            source: String::new(),
            source_kind: String::new(),
            loaded_at: String::new(),
        });
        CanaryRun {
            plugin: stable.plugin.clone(),
            spec,
            settings,
            stable,
            candidate: None,
            state: None,
            problem: None,
            reason: Reason::DryRunStarted,
            window_start: None,
            next_check: Instant::now(),
            checked_at: None,
            reported_kinds: 0,
            diffs_written: None,
            diffs_config_map: None,
            last_figures: None,
            resume: false,
        }
    }

    /// Fetches, compiles and checks the candidate like a new version, then
    /// sets it beside the stable version (in DryRun unless skipped).
    /// Nothing happens while the stable version does not serve yet.
    pub(super) async fn load_candidate(&mut self) {
        let Some(mut run) = self.canary.take() else {
            return;
        };
        self.load_into(&mut run).await;
        self.canary = Some(run);
    }

    async fn load_into(&mut self, run: &mut CanaryRun) {
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
        let Some(loaded) = self.loaded.clone() else {
            return;
        };
        if run.stable.plugin.is_empty() {
            run.plugin = loaded.serving.plugin.clone();
            run.stable = loaded.serving.clone();
            if let Some(tx) = &self.canary_tx {
                self.canary_watch = Some(source_watch::spawn(
                    self.client.clone(),
                    run.spec.source.clone(),
                    tx.clone(),
                ));
            }
        }
        let source = run.spec.source.describe();
        let fetched = match super::source::fetch(&self.client, &run.spec.source).await {
            Ok(fetched) => fetched,
            Err(error) => {
                run.problem = Some(problem(error.reason(), error.to_string()));
                self.canary_refused(run).await;
                return;
            }
        };
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&fetched.bytes)));
        if digest == run.stable.digest {
            run.problem = Some(problem(
                Reason::InvalidSpec.as_str(),
                format!(
                    "spec.canary.source holds {digest}, the component the stable version {} {} already is: there is nothing to compare. Point spec.canary.source at the new version.",
                    run.stable.plugin, run.stable.version
                ),
            ));
            self.canary_refused(run).await;
            return;
        }
        let candidate = match self
            .registry
            .prepare(&source, fetched.bytes, Some(&run.plugin))
            .await
        {
            Ok(candidate) => candidate,
            Err(error) => {
                run.problem = Some(problem(
                    condition_reason(&error),
                    refusal_message(&error, &digest),
                ));
                self.canary_refused(run).await;
                return;
            }
        };
        let started = canary::start(&run.settings, Instant::now());
        let rollout = match canary_run::rollout(&run.settings, &started.state) {
            // A split is staged at weight 0 first: the analysis window then
            // starts before the registry moves any object to the candidate
            // (`started` performs ResetWindow, then Serve).
            Ok(rollout) if rollout.rollout.serves() => crate::registry::RolloutSettings {
                rollout: crate::registry::Rollout::Split { weight_percent: 0 },
                ..rollout
            },
            Ok(rollout) => rollout,
            Err(message) => {
                run.problem = Some(problem(Reason::InvalidSpec.as_str(), message));
                self.canary_refused(run).await;
                return;
            }
        };
        match self
            .registry
            .activate_candidate(candidate, rollout, loaded.options.clone())
            .await
        {
            Ok(info) => {
                run.problem = None;
                run.candidate = Some(Serving {
                    plugin: info.name,
                    version: info.version,
                    digest: info.digest,
                    source: source.clone(),
                    source_kind: run.spec.source.kind().to_string(),
                    loaded_at: now(),
                });
                run.state = Some(started.state.clone());
                run.next_check = Instant::now() + run.settings.interval;
                self.perform(run, started).await;
            }
            Err(error) => {
                run.problem = Some(problem(
                    condition_reason(&error),
                    refusal_message(&error, &digest),
                ));
                self.canary_refused(run).await;
            }
        }
    }

    /// Loads `stable` with the candidate of a canary that was running when
    /// the host stopped, in one registry change; `None` when there is no
    /// such canary (then the caller activates `stable` alone). A candidate
    /// that cannot be resumed (its source changed or is refused) starts a
    /// new canary instead, once the stable version serves.
    pub(super) async fn resume(
        &mut self,
        stable: crate::registry::Candidate,
        options: &crate::registry::ActivationOptions,
    ) -> Result<Result<crate::registry::LoadedVersion, RegistryError>, crate::registry::Candidate>
    {
        if !self.canary.as_ref().is_some_and(|run| run.resume) {
            return Err(stable);
        }
        let Some(mut run) = self.canary.take() else {
            return Err(stable);
        };
        run.resume = false;
        let prepared = match super::source::fetch(&self.client, &run.spec.source).await {
            Ok(fetched) => {
                let digest = format!("sha256:{}", hex::encode(Sha256::digest(&fetched.bytes)));
                if run.candidate.as_ref().is_some_and(|c| c.digest == digest) {
                    self.registry
                        .prepare(
                            &run.spec.source.describe(),
                            fetched.bytes,
                            Some(stable.name()),
                        )
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
            .and_then(|state| canary_run::rollout(&run.settings, state).ok());
        let (Some(candidate), Some(rollout)) = (prepared, rollout) else {
            // Start over: a new canary once the stable version serves.
            let fresh = self.new_run(run.spec.clone(), None);
            self.canary = Some(fresh);
            return Err(stable);
        };
        let result = self
            .registry
            .activate_with(
                stable,
                options.clone(),
                Some((candidate, rollout, options.clone())),
            )
            .await;
        if result.is_ok() {
            run.window_start = self.registry.counters(&run.plugin);
            run.next_check = Instant::now() + run.settings.interval;
            tracing::info!(
                wasmplugin = %self.name, plugin = %run.plugin,
                "the canary running when the host stopped resumes with its candidate"
            );
            self.canary = Some(run);
        } else {
            self.canary = Some(self.new_run(run.spec.clone(), None));
        }
        Ok(result)
    }

    /// Records that the candidate cannot be used (phase `Failed`), once per
    /// distinct problem.
    async fn canary_refused(&mut self, run: &CanaryRun) {
        let Some(p) = &run.problem else {
            return;
        };
        let transition = Transition {
            reason: p.reason.clone(),
            warning: true,
            retrying: false,
            plugin: run.plugin.clone(),
            from: run.stable.version.clone(),
            to: run.stable.version.clone(),
            digest: String::new(),
            source: run.spec.source.describe(),
            message: run.message(),
        };
        self.audit
            .record(&self.name, &self.object_ref(), &transition)
            .await;
    }

    /// The canary's source changed: a broken one rolls a live candidate
    /// back (`CandidateUnloadable`); a loadable one starts a new canary
    /// with it; a candidate that was not loaded yet is tried again.
    pub(super) async fn canary_source_changed(&mut self) {
        let Some(mut run) = self.canary.take() else {
            return;
        };
        if run.state.is_none() {
            run.problem = None;
            self.load_into(&mut run).await;
            self.canary = Some(run);
            self.write_status().await;
            return;
        }
        if !run.active() {
            self.canary = Some(run);
            return;
        }
        let fetched = super::source::fetch(&self.client, &run.spec.source).await;
        let verdict = match fetched {
            Err(error) => Err(format!("{}: {error}", error.reason())),
            Ok(fetched) => {
                let digest = format!("sha256:{}", hex::encode(Sha256::digest(&fetched.bytes)));
                if run.candidate.as_ref().is_some_and(|c| c.digest == digest) {
                    Ok(false)
                } else {
                    match self
                        .registry
                        .prepare(
                            &run.spec.source.describe(),
                            fetched.bytes,
                            Some(&run.plugin),
                        )
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
            Err(why) => self.feed(&mut run, Input::Lost { why }).await,
            Ok(true) => {
                // A new candidate at the same source: a new canary.
                self.feed(
                    &mut run,
                    Input::Abort {
                        by: "a new component at spec.canary.source".into(),
                    },
                )
                .await;
                let mut fresh = self.new_run(run.spec.clone(), Some(run.stable.clone()));
                fresh.plugin = run.plugin.clone();
                self.load_into(&mut fresh).await;
                run = fresh;
            }
        }
        self.canary = Some(run);
        self.write_status().await;
    }

    /// True while the canary needs its tick (dry run, analysis, diffs).
    pub(super) fn canary_ticking(&self) -> bool {
        self.canary
            .as_ref()
            .is_some_and(|run| run.active() || (run.state.is_none() && run.problem.is_none()))
    }

    /// The canary's periodic work: the dry run's end, the analysis when
    /// due, new kinds of shadow difference, the diffs ConfigMap, status.
    pub(super) async fn canary_tick(&mut self) {
        let Some(mut run) = self.canary.take() else {
            return;
        };
        if run.state.is_none() {
            self.load_into(&mut run).await;
        }
        let observations = self.registry.canary(&run.plugin);
        if let Some(obs) = &observations {
            // The figures as they stand before this tick's transition,
            // which may take the candidate out of the registry.
            let counters = self.registry.counters(&run.plugin);
            run.last_figures = Some(run.status(Some(obs), counters.as_ref()));
        }
        if run.active() && observations.is_none() {
            // The candidate left the registry without this worker (the
            // plugin was reloaded with the candidate's component, or
            // unloaded).
            self.feed(
                &mut run,
                Input::Lost {
                    why: "it is no longer loaded beside the stable version".into(),
                },
            )
            .await;
        }
        let phase = run.state.as_ref().map(|s| s.phase);
        if let (Some(Phase::DryRun), Some(obs)) = (phase, &observations) {
            let report = obs.dry_run();
            if report.state == DryRunState::Finished {
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
                self.feed(
                    &mut run,
                    Input::DryRunDone {
                        checked: report.done as usize,
                        failures,
                    },
                )
                .await;
            }
        } else if run.state.as_ref().is_some_and(canary::State::is_live)
            && Instant::now() >= run.next_check
        {
            run.next_check = Instant::now() + run.settings.interval;
            if let (Some(start), Some(current)) =
                (run.window_start, self.registry.counters(&run.plugin))
            {
                let (stable, candidate, _) = canary_run::window(&start, &current);
                // Shadow: judged on every compared object's latest answers
                // (they stay true while the object does not change, so a
                // quiet kind still gets verdicts), not on the window's
                // comparisons.
                let shadow = match (&run.settings.plan, &observations) {
                    (Plan::Shadow, Some(obs)) => {
                        Some(canary_run::object_agreement(&obs.shadow_counts()))
                    }
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
                self.feed(&mut run, Input::Checked(verdict)).await;
            }
        }
        if let Some(obs) = &observations {
            self.report_new_differences(&mut run, obs).await;
            self.write_diffs(&mut run, obs).await;
        }
        self.canary = Some(run);
        self.write_status().await;
    }

    /// One Warning event per new kind of shadow difference.
    async fn report_new_differences(
        &mut self,
        run: &mut CanaryRun,
        obs: &crate::registry::CanaryObservations,
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
                    self.name
                ));
            // The sample object as the Event's related object: one event
            // per kind, not one series of them.
            let related = self.registry.current(&run.plugin).map(|v| {
                let primary = &v.plugin.manifest().primary;
                k8s_openapi::api::core::v1::ObjectReference {
                    api_version: Some(primary.api_version()),
                    kind: Some(primary.kind.clone()),
                    name: Some(kind.sample.object.name.clone()),
                    namespace: kind.sample.object.namespace.clone(),
                    uid: Some(kind.sample.object.uid.clone()),
                    ..Default::default()
                }
            });
            self.audit
                .record_related(&self.name, &self.object_ref(), &transition, related)
                .await;
        }
    }

    /// Writes every differing object's latest field diff to the diffs
    /// ConfigMap (owned by the WasmPlugin), at most every
    /// [`DIFFS_REFRESH`], within [`DIFFS_MAX_BYTES`].
    async fn write_diffs(
        &mut self,
        run: &mut CanaryRun,
        obs: &crate::registry::CanaryObservations,
    ) {
        if !self.writes.may_write() || !matches!(run.settings.plan, Plan::Shadow) {
            return;
        }
        if run
            .diffs_written
            .is_some_and(|at| at.elapsed() < DIFFS_REFRESH)
        {
            return;
        }
        let counts = obs.shadow_counts();
        if counts.compared == 0 {
            return;
        }
        run.diffs_written = Some(Instant::now());
        let mut objects = obs.differing_objects();
        let document = loop {
            let document = json!({
                "wasmplugin": self.name,
                "plugin": run.plugin,
                "stable": {"version": obs.stable().version, "digest": obs.stable().digest},
                "candidate": {"version": obs.candidate().version, "digest": obs.candidate().digest},
                "counts": counts,
                "updatedAt": now(),
                "objects": objects,
            });
            let text = document.to_string();
            if text.len() <= DIFFS_MAX_BYTES || objects.is_empty() {
                break text;
            }
            objects.truncate(objects.len() / 2);
        };
        let namespace = diffs_namespace();
        let name = diffs_config_map_name(&self.name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &namespace);
        let owner = json!({
            "apiVersion": format!("{}/{}", super::GROUP, super::VERSION),
            "kind": super::KIND,
            "name": self.name,
            "uid": self.object.metadata.uid,
        });
        let body = json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"wasm-operator.dev/canary-diffs": self.name},
                "ownerReferences": [owner],
            },
            "data": {DIFFS_KEY: document},
        });
        match api
            .patch(
                &name,
                &PatchParams::apply(DIFFS_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await
        {
            Ok(_) => run.diffs_config_map = Some(format!("{namespace}/{name}")),
            Err(error) => {
                tracing::warn!(%error, wasmplugin = %self.name, configmap = %name, "cannot write the canary diffs ConfigMap; retrying later");
            }
        }
    }

    /// Acts on the `canary-action` annotation and removes it.
    pub(super) async fn canary_action(&mut self) {
        let Some(action) = canary_run::requested_action(self.object.metadata.annotations.as_ref())
        else {
            return;
        };
        let live = self
            .canary
            .as_ref()
            .is_some_and(|run| run.state.as_ref().is_some_and(|s| !s.is_final()));
        match (&action, live) {
            (Action::Promote | Action::Abort, true) => {
                if let Some(mut run) = self.canary.take() {
                    let by = format!("the annotation {ACTION_ANNOTATION}");
                    let input = if action == Action::Promote {
                        Input::Promote { by }
                    } else {
                        Input::Abort { by }
                    };
                    self.feed(&mut run, input).await;
                    self.canary = Some(run);
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
                    self.name,
                    self.canary
                        .as_ref()
                        .and_then(CanaryRun::phase)
                        .map_or("no spec.canary", |p| p.as_str())
                );
                self.canary_notice(Reason::NoCanary, true, message).await;
            }
            (Action::Unknown(value), _) => {
                let message = format!(
                    "{ACTION_ANNOTATION}={value:?} is not an action: write promote or abort; the annotation was removed"
                );
                self.canary_notice(Reason::CanaryActionUnknown, true, message)
                    .await;
            }
        }
        if self.writes.may_write() {
            let patch = json!({"metadata": {"annotations": {ACTION_ANNOTATION: null}}});
            if let Err(error) = self
                .api
                .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(%error, wasmplugin = %self.name, "cannot remove the canary-action annotation");
            }
        }
        self.write_status().await;
    }

    async fn canary_notice(&mut self, reason: Reason, warning: bool, message: String) {
        let serving = self.loaded.as_ref().map(|l| l.serving.clone());
        let transition = Transition {
            reason: reason.as_str().into(),
            warning,
            retrying: false,
            plugin: serving
                .as_ref()
                .map(|s| s.plugin.clone())
                .unwrap_or_default(),
            from: serving
                .as_ref()
                .map(|s| s.version.clone())
                .unwrap_or_default(),
            to: serving
                .as_ref()
                .map(|s| s.version.clone())
                .unwrap_or_default(),
            digest: String::new(),
            source: String::new(),
            message,
        };
        self.audit
            .record(&self.name, &self.object_ref(), &transition)
            .await;
    }

    /// Applies `input` to the run's state machine and performs the result.
    pub(super) async fn feed(&mut self, run: &mut CanaryRun, input: Input) {
        let Some(state) = run.state.clone() else {
            return;
        };
        let next = canary::step(&state, &run.settings, input, Instant::now());
        self.perform(run, next).await;
    }

    /// Performs a transition's registry calls, then records it.
    async fn perform(&mut self, run: &mut CanaryRun, next: Next) {
        let mut next = next;
        for action in next.actions.clone() {
            let result: Result<(), RegistryError> = match action {
                canary::Action::Serve | canary::Action::SetWeight(_) => {
                    match canary_run::rollout(&run.settings, &next.state) {
                        Ok(settings) => self.registry.set_rollout(&run.plugin, settings).await,
                        Err(message) => {
                            run.problem = Some(problem(Reason::InvalidSpec.as_str(), message));
                            Ok(())
                        }
                    }
                }
                canary::Action::ResetWindow => {
                    run.window_start = self.registry.counters(&run.plugin);
                    Ok(())
                }
                canary::Action::Promote => {
                    match self.registry.promote_candidate(&run.plugin).await {
                        Ok(info) => {
                            // The candidate is the stable version now; the
                            // worker serves it until spec.source says
                            // otherwise (see `Worker::sync`).
                            if let (Some(loaded), Some(candidate)) =
                                (self.loaded.as_mut(), run.candidate.as_ref())
                            {
                                loaded.serving = Serving {
                                    plugin: info.name,
                                    version: info.version,
                                    digest: info.digest,
                                    source: candidate.source.clone(),
                                    source_kind: candidate.source_kind.clone(),
                                    loaded_at: now(),
                                };
                                loaded.revision = None;
                            }
                            Ok(())
                        }
                        Err(error) => Err(error),
                    }
                }
                canary::Action::Rollback => {
                    self.registry.drop_candidate(&run.plugin).await.map(|_| ())
                }
            };
            if let Err(error) = result {
                // The registry refused (e.g. CanaryIrreversible on the way
                // from the dry run to a split): the candidate is dropped
                // and the canary failed, naming why.
                let _ = self.registry.drop_candidate(&run.plugin).await;
                let reason = condition_reason(&error);
                let digest = run
                    .candidate
                    .as_ref()
                    .map(|c| c.digest.clone())
                    .unwrap_or_default();
                run.problem = Some(Problem {
                    reason: reason.to_string(),
                    message: refusal_message(&error, &digest),
                });
                next.state.phase = Phase::Failed;
                next.state.message = format!(
                    "the registry refused the canary: {} The stable version serves every object.",
                    refusal_message(&error, &digest)
                );
                next.notice = Some(canary::Notice {
                    reason: Reason::CandidateUnloadable,
                    warning: true,
                    message: next.state.message.clone(),
                });
                break;
            }
        }
        if let Some(notice) = &next.notice {
            run.reason = notice.reason;
            let transition = run.transition(notice.reason, notice.warning, notice.message.clone());
            self.audit
                .record(&self.name, &self.object_ref(), &transition)
                .await;
        }
        run.state = Some(next.state);
    }
}

/// Settings for a run whose spec did not validate (it is `Failed` and never
/// uses them).
fn unreachable_settings() -> Settings {
    Settings {
        plan: Plan::Shadow,
        interval: canary::DEFAULT_ANALYSIS_INTERVAL,
        thresholds: super::analysis::Thresholds {
            min_calls: canary::DEFAULT_MIN_CALLS,
            max_failure_ratio: canary::DEFAULT_MAX_FAILURE_RATIO,
            max_diff_ratio: canary::DEFAULT_MAX_DIFF_RATIO,
            max_latency_ratio: canary::DEFAULT_MAX_LATENCY_RATIO,
        },
        failure_limit: canary::DEFAULT_FAILURE_LIMIT,
        promotion: super::spec::Promotion::Manual,
        rollout_rate: canary::DEFAULT_ROLLOUT_RATE,
        shadow_concurrency: canary::DEFAULT_SHADOW_CONCURRENCY,
        dry_run: true,
        accept_irreversible: false,
    }
}
