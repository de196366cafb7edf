//! The driver against a recording I/O handle ([`Recording`]): every call it
//! makes is recorded, every answer is scripted. No cluster, no engine.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::diffs::DiffsWrite;
use super::machine::Phase;
use super::run::Action;
use super::{CanaryDriver, CanaryIo};
use crate::contract::Reason;
use crate::oci::signature::SignerRule;
use crate::registry::{
    ActivationOptions, CanaryObservations, CounterSnapshot, DryRunFailure, LoadedVersion,
    ObjectName, RegistryError, Rollout, RolloutSettings,
};
use crate::wasmplugin::audit::Transition;
use crate::wasmplugin::source::Fetched;
use crate::wasmplugin::spec::{Source, WasmPluginSpec};
use crate::wasmplugin::status::{Loaded, Problem, Serving};
use crate::wasmplugin::watch::Trigger;

const PLUGIN: &str = "webapp";
const STABLE_BYTES: &[u8] = b"stable component 1.0.0";
const CANDIDATE_BYTES: &[u8] = b"candidate component 2.0.0";
const CANDIDATE_SOURCE: &str = "/plugins/webapp-2.wasm";

/// One call the driver made.
#[derive(Debug, Clone, PartialEq)]
enum Call {
    Fetch(String),
    Prepare {
        source: String,
        plugin: String,
    },
    ActivateCandidate {
        candidate: String,
        rollout: Rollout,
    },
    ActivateWithCandidate {
        stable: String,
        candidate: String,
        rollout: Rollout,
    },
    SetRollout(Rollout),
    Promote,
    Drop,
    /// An event and audit line: reason, warning.
    Record(String, bool),
    WriteDiffs,
    RemoveActionAnnotation,
    WatchSource(String),
}

/// The recording handle: records every call, answers from its script.
struct Recording {
    calls: Vec<Call>,
    /// Every transition recorded since the last [`Recording::take`], in full.
    transitions: Vec<Transition>,
    /// Those of the calls the last [`Recording::take`] returned.
    seen: Vec<Transition>,
    clock: Instant,
    /// Fetch answers by source path (absent: the candidate's bytes).
    sources: HashMap<String, Result<Vec<u8>, Problem>>,
    /// The candidate beside the stable version, as the registry holds it.
    observations: Option<Arc<CanaryObservations>>,
    counters: Option<(CounterSnapshot, Option<CounterSnapshot>)>,
    /// The next `set_rollout` is refused with this.
    refuse_rollout: Option<RegistryError>,
    /// What writing the diffs ConfigMap comes to.
    diffs_write: DiffsWrite,
    /// What `signed_by` answers (`spec.canary.requireSigner`).
    signer: Result<String, String>,
}

impl Recording {
    fn new() -> Recording {
        Recording {
            calls: Vec::new(),
            transitions: Vec::new(),
            seen: Vec::new(),
            clock: Instant::now(),
            sources: HashMap::new(),
            observations: None,
            counters: Some(Default::default()),
            refuse_rollout: None,
            diffs_write: DiffsWrite::Written("default/web-canary-diffs".into()),
            signer: Ok("key sha256:release".into()),
        }
    }

    /// The calls since the last look, forgetting them; the transitions
    /// recorded with them move to `seen`.
    fn take(&mut self) -> Vec<Call> {
        self.seen = std::mem::take(&mut self.transitions);
        std::mem::take(&mut self.calls)
    }

    fn advance(&mut self, by: Duration) {
        self.clock += by;
    }

    fn candidate_observations(&self) -> Arc<CanaryObservations> {
        self.observations
            .clone()
            .expect("the candidate is in the registry")
    }
}

fn version(name: &str, v: &str, bytes: &[u8]) -> LoadedVersion {
    LoadedVersion {
        name: name.into(),
        version: v.into(),
        digest: digest(bytes),
        source: String::new(),
    }
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

impl CanaryIo for Recording {
    /// A candidate is named by its source.
    type Candidate = String;

    fn name(&self) -> &str {
        "web"
    }

    fn now(&self) -> Instant {
        self.clock
    }

    fn may_write(&self) -> bool {
        true
    }

    async fn fetch(&mut self, source: &Source) -> Result<Fetched, Problem> {
        let Source::File { path } = source else {
            panic!("the tests use file sources");
        };
        self.calls.push(Call::Fetch(path.clone()));
        self.sources
            .get(path)
            .cloned()
            .unwrap_or_else(|| Ok(CANDIDATE_BYTES.to_vec()))
            .map(|bytes| Fetched {
                bytes,
                revision: None,
                signature: None,
            })
    }

    async fn signed_by(
        &mut self,
        _source: &Source,
        _digest: Option<&str>,
        _rule: &SignerRule,
    ) -> Result<String, String> {
        self.signer.clone()
    }

    async fn prepare(
        &mut self,
        source: &str,
        _bytes: Vec<u8>,
        plugin: &str,
    ) -> Result<String, RegistryError> {
        self.calls.push(Call::Prepare {
            source: source.into(),
            plugin: plugin.into(),
        });
        Ok(source.into())
    }

    async fn activate_candidate(
        &mut self,
        candidate: String,
        rollout: RolloutSettings,
        _options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        self.calls.push(Call::ActivateCandidate {
            candidate,
            rollout: rollout.rollout,
        });
        let loaded = version(PLUGIN, "2.0.0", CANDIDATE_BYTES);
        self.observations = Some(Arc::new(CanaryObservations::new(
            version(PLUGIN, "1.0.0", STABLE_BYTES),
            loaded.clone(),
            2,
        )));
        Ok(loaded)
    }

    async fn activate_with_candidate(
        &mut self,
        stable: String,
        candidate: String,
        rollout: RolloutSettings,
        _options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        self.calls.push(Call::ActivateWithCandidate {
            stable,
            candidate,
            rollout: rollout.rollout,
        });
        let loaded = version(PLUGIN, "1.0.0", STABLE_BYTES);
        self.observations = Some(Arc::new(CanaryObservations::new(
            loaded.clone(),
            version(PLUGIN, "2.0.0", CANDIDATE_BYTES),
            2,
        )));
        Ok(loaded)
    }

    async fn set_rollout(
        &mut self,
        plugin: &str,
        rollout: RolloutSettings,
    ) -> Result<(), RegistryError> {
        assert_eq!(plugin, PLUGIN);
        self.calls.push(Call::SetRollout(rollout.rollout));
        match self.refuse_rollout.take() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    async fn promote_candidate(&mut self, plugin: &str) -> Result<LoadedVersion, RegistryError> {
        assert_eq!(plugin, PLUGIN);
        self.calls.push(Call::Promote);
        self.observations = None;
        Ok(version(PLUGIN, "2.0.0", CANDIDATE_BYTES))
    }

    async fn drop_candidate(&mut self, plugin: &str) -> Result<(), RegistryError> {
        assert_eq!(plugin, PLUGIN);
        self.calls.push(Call::Drop);
        self.observations = None;
        Ok(())
    }

    fn observations(&self, _plugin: &str) -> Option<Arc<CanaryObservations>> {
        self.observations.clone()
    }

    fn counters(&self, _plugin: &str) -> Option<(CounterSnapshot, Option<CounterSnapshot>)> {
        self.counters
    }

    fn primary_kind(&self, _plugin: &str) -> Option<(String, String)> {
        Some(("example.com/v1".into(), "App".into()))
    }

    async fn record(&mut self, transition: &Transition, _related: Option<ObjectReference>) {
        self.calls
            .push(Call::Record(transition.reason.clone(), transition.warning));
        self.transitions.push(transition.clone());
    }

    async fn write_diffs(&mut self, _document: String) -> DiffsWrite {
        self.calls.push(Call::WriteDiffs);
        self.diffs_write.clone()
    }

    async fn remove_action_annotation(&mut self) {
        self.calls.push(Call::RemoveActionAnnotation);
    }

    fn watch_source(&mut self, source: &Source, _: mpsc::Sender<Trigger>) -> JoinHandle<()> {
        self.calls.push(Call::WatchSource(source.describe()));
        tokio::spawn(async {})
    }
}

/// A WasmPlugin spec at generation 1 whose `spec.canary` is `canary`.
fn spec(canary: Value) -> WasmPluginSpec {
    WasmPluginSpec::from_object(&json!({
        "spec": {"source": {"file": {"path": "/plugins/webapp.wasm"}}, "canary": canary}
    }))
    .expect("a valid spec")
}

fn canary(mode: &str, extra: Value) -> Value {
    let mut canary = json!({"source": {"file": {"path": CANDIDATE_SOURCE}}, "mode": mode});
    if let (Some(canary), Value::Object(extra)) = (canary.as_object_mut(), extra) {
        canary.extend(extra);
    }
    canary
}

/// The stable version 1.0.0, serving.
fn stable() -> Option<Loaded> {
    Some(Loaded {
        serving: Serving {
            loaded: LoadedVersion {
                name: PLUGIN.into(),
                version: "1.0.0".into(),
                digest: digest(STABLE_BYTES),
                source: "file:/plugins/webapp.wasm".into(),
            },
            source_kind: "file".into(),
            loaded_at: String::new(),
        },
        options: ActivationOptions::default(),
        revision: None,
        signature: None,
    })
}

fn phase(driver: &CanaryDriver) -> Option<Phase> {
    driver.run().and_then(super::run::CanaryRun::phase)
}

fn record(reason: Reason, warning: bool) -> Call {
    Call::Record(reason.as_str().into(), warning)
}

fn file(path: &str) -> String {
    format!("file:{path}")
}

/// A driver whose canary of `canary` was started beside [`stable`] (no
/// status written before), with the calls of the start forgotten.
async fn started(io: &mut Recording, canary: Value, loaded: &mut Option<Loaded>) -> CanaryDriver {
    let (tx, _rx) = mpsc::channel(1);
    let mut driver = CanaryDriver::default();
    driver.listen(tx);
    let spec = spec(canary);
    driver
        .sync(io, Some(&spec), loaded, &Value::Null, Some(1))
        .await;
    driver.load_candidate(io, loaded).await;
    io.take();
    driver
}

#[tokio::test]
async fn starting_a_shadow_canary_fetches_checks_and_sets_the_candidate_in_dry_run() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let (tx, _rx) = mpsc::channel(1);
    let mut driver = CanaryDriver::default();
    driver.listen(tx);
    let spec = spec(canary("Shadow", json!({})));
    driver
        .sync(&mut io, Some(&spec), &mut loaded, &Value::Null, Some(1))
        .await;
    assert_eq!(io.take(), vec![Call::WatchSource(file(CANDIDATE_SOURCE))]);
    assert_eq!(phase(&driver), None, "nothing starts before the load");
    driver.load_candidate(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::Fetch(CANDIDATE_SOURCE.into()),
            Call::Prepare {
                source: file(CANDIDATE_SOURCE),
                plugin: PLUGIN.into()
            },
            Call::ActivateCandidate {
                candidate: file(CANDIDATE_SOURCE),
                rollout: Rollout::DryRun
            },
            record(Reason::DryRunStarted, false),
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::DryRun));
    let candidate = driver.run().and_then(|r| r.candidate.clone());
    assert_eq!(
        candidate.map(|c| (c.loaded.version, c.loaded.digest)),
        Some(("2.0.0".to_string(), digest(CANDIDATE_BYTES)))
    );
}

#[tokio::test]
async fn a_failed_dry_run_drops_the_candidate_and_serves_nothing() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let mut driver = started(&mut io, canary("Shadow", json!({})), &mut loaded).await;
    let obs = io.candidate_observations();
    obs.dry_run_started(2);
    obs.dry_run_object(None);
    obs.dry_run_object(Some(DryRunFailure {
        object: ObjectName {
            namespace: Some("team-a".into()),
            name: "web".into(),
            uid: "u1".into(),
        },
        reason: "PluginTrapped".into(),
        message: "wasm trap: unreachable".into(),
    }));
    // Running: the tick waits.
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(io.take(), Vec::<Call>::new());
    obs.dry_run_finished();
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![Call::Drop, record(Reason::DryRunFailed, true)]
    );
    assert_eq!(phase(&driver), Some(Phase::DryRun));
    let run = driver.run().expect("the canary stays");
    let state = run.state.as_ref().expect("started");
    assert_eq!(state.dry_run_failures.len(), 1);
    assert_eq!(state.dry_run_failures[0].object, "team-a/web");
    assert!(
        io.seen[0]
            .message
            .starts_with("dry run: 1 of 2 primaries would fail (e.g. team-a/web)"),
        "{}",
        io.seen[0].message
    );
    assert!(!driver.ticking(), "a failed dry run needs no more ticks");
    // The stable version is untouched.
    assert_eq!(loaded, stable());
}

#[tokio::test]
async fn a_passed_dry_run_then_a_promotion_makes_the_candidate_the_stable_version() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let mut driver = started(&mut io, canary("Shadow", json!({})), &mut loaded).await;
    let obs = io.candidate_observations();
    obs.dry_run_started(1);
    obs.dry_run_object(None);
    obs.dry_run_finished();
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::SetRollout(Rollout::Shadow),
            record(Reason::CanaryStarted, false)
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::Shadowing));
    driver.act(&mut io, Action::Promote, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::Promote,
            record(Reason::CanaryPromoted, false),
            Call::RemoveActionAnnotation
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::Promoted));
    let serving = loaded.as_ref().map(|l| l.serving.clone()).expect("serving");
    assert_eq!(serving.loaded.version, "2.0.0");
    assert_eq!(serving.loaded.digest, digest(CANDIDATE_BYTES));
    assert_eq!(serving.loaded.source, file(CANDIDATE_SOURCE));
    // It serves until spec.canary is removed.
    let promoted = driver.promoted().and_then(|(_, candidate)| candidate);
    assert_eq!(
        promoted.map(|c| c.loaded.version),
        Some("2.0.0".to_string())
    );
    // A second promotion finds no canary in progress.
    driver.act(&mut io, Action::Promote, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![record(Reason::NoCanary, true), Call::RemoveActionAnnotation]
    );
}

#[tokio::test]
async fn a_candidate_not_signed_by_the_required_signer_shadows_but_is_never_promoted() {
    let mut io = Recording::new();
    io.signer = Err("no signature of key \"release\"".into());
    let mut loaded = stable();
    let required = json!({"requireSigner": {"publicKey": {"key": "PEM", "name": "release"}}});
    let mut driver = started(&mut io, canary("Shadow", required), &mut loaded).await;
    let obs = io.candidate_observations();
    obs.dry_run_started(1);
    obs.dry_run_object(None);
    obs.dry_run_finished();
    driver.tick(&mut io, &mut loaded).await;
    io.take();
    assert_eq!(
        phase(&driver),
        Some(Phase::Shadowing),
        "it shadows unsigned"
    );
    // A person promotes: refused, said every time, the candidate stays.
    for _ in 0..2 {
        driver.act(&mut io, Action::Promote, &mut loaded).await;
        assert_eq!(
            io.take(),
            vec![
                record(Reason::CanaryPromotionRefused, true),
                Call::RemoveActionAnnotation
            ]
        );
        assert_eq!(phase(&driver), Some(Phase::Paused));
    }
    assert!(
        io.seen[0].message.contains("requireSigner"),
        "{}",
        io.seen[0].message
    );
    assert_eq!(loaded, stable(), "the stable version still serves");
    let run = driver.run().expect("the canary stays");
    let conditions = run.conditions();
    let progressing = conditions
        .iter()
        .find(|c| c.0 == "CanaryProgressing")
        .unwrap();
    assert_eq!(progressing.2, "CanaryPromotionRefused");
}

#[tokio::test]
async fn an_abort_drops_the_candidate_and_removing_the_spec_ends_the_canary() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let mut driver = started(
        &mut io,
        canary("Shadow", json!({"skipDryRun": true})),
        &mut loaded,
    )
    .await;
    assert_eq!(phase(&driver), Some(Phase::Shadowing));
    driver.act(&mut io, Action::Abort, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::Drop,
            record(Reason::CanaryAborted, false),
            Call::RemoveActionAnnotation
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::RolledBack));
    assert_eq!(loaded, stable(), "the stable version keeps serving");
    assert!(
        io.seen[0]
            .message
            .contains("aborted by the annotation wasm-operator.dev/canary-action")
    );
    // The spec without spec.canary: nothing left to abort.
    let without = WasmPluginSpec::from_object(&json!({
        "spec": {"source": {"file": {"path": "/plugins/webapp.wasm"}}}
    }))
    .expect("a valid spec");
    driver
        .sync(&mut io, Some(&without), &mut loaded, &Value::Null, Some(2))
        .await;
    assert_eq!(io.take(), Vec::<Call>::new());
    assert!(driver.run().is_none());
}

#[tokio::test]
async fn removing_the_spec_of_a_live_canary_aborts_it() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let mut driver = started(
        &mut io,
        canary("Shadow", json!({"skipDryRun": true})),
        &mut loaded,
    )
    .await;
    let without = WasmPluginSpec::from_object(&json!({
        "spec": {"source": {"file": {"path": "/plugins/webapp.wasm"}}}
    }))
    .expect("a valid spec");
    driver
        .sync(&mut io, Some(&without), &mut loaded, &Value::Null, Some(2))
        .await;
    assert_eq!(
        io.take(),
        vec![Call::Drop, record(Reason::CanaryAborted, false)]
    );
    assert!(io.seen[0].message.contains("removing spec.canary"));
    assert!(driver.run().is_none());
}

fn counters(calls: u64, failures: u64) -> CounterSnapshot {
    CounterSnapshot {
        calls,
        failures,
        ..Default::default()
    }
}

#[tokio::test]
async fn failed_analysis_rolls_a_split_back_after_the_failure_limit() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let (tx, _rx) = mpsc::channel(1);
    let mut driver = CanaryDriver::default();
    driver.listen(tx);
    let spec = spec(canary(
        "Split",
        json!({"weight": 20, "skipDryRun": true, "analysis": {"interval": "30s", "failureLimit": 2}}),
    ));
    driver
        .sync(&mut io, Some(&spec), &mut loaded, &Value::Null, Some(1))
        .await;
    driver.load_candidate(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::WatchSource(file(CANDIDATE_SOURCE)),
            Call::Fetch(CANDIDATE_SOURCE.into()),
            Call::Prepare {
                source: file(CANDIDATE_SOURCE),
                plugin: PLUGIN.into()
            },
            // Staged at weight 0: the window starts before objects move.
            Call::ActivateCandidate {
                candidate: file(CANDIDATE_SOURCE),
                rollout: Rollout::Split { weight_percent: 0 }
            },
            Call::SetRollout(Rollout::Split { weight_percent: 20 }),
            record(Reason::CanaryStarted, false),
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::Progressing));
    // Before the interval: no check.
    io.counters = Some((counters(100, 0), Some(counters(100, 60))));
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(io.take(), Vec::<Call>::new());
    // First failed check: counted, not yet rolled back.
    io.advance(Duration::from_secs(30));
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(io.take(), vec![record(Reason::AnalysisFailed, true)]);
    assert_eq!(phase(&driver), Some(Phase::Progressing));
    assert_eq!(
        driver
            .run()
            .and_then(|r| r.state.as_ref())
            .map(|s| s.failed_checks),
        Some(1)
    );
    // The second reaches failureLimit: rolled back.
    io.counters = Some((counters(200, 0), Some(counters(200, 120))));
    io.advance(Duration::from_secs(30));
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![Call::Drop, record(Reason::AnalysisFailed, true)]
    );
    assert_eq!(phase(&driver), Some(Phase::RolledBack));
    assert_eq!(loaded, stable());
    assert!(!driver.ticking());
}

#[tokio::test]
async fn a_registry_refusal_fails_the_canary_and_drops_the_candidate() {
    let mut io = Recording::new();
    let mut loaded = stable();
    io.refuse_rollout = Some(RegistryError::NotLoaded(PLUGIN.into()));
    let mut driver = CanaryDriver::default();
    let spec = spec(canary("Split", json!({"weight": 20, "skipDryRun": true})));
    driver
        .sync(&mut io, Some(&spec), &mut loaded, &Value::Null, Some(1))
        .await;
    driver.load_candidate(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::Fetch(CANDIDATE_SOURCE.into()),
            Call::Prepare {
                source: file(CANDIDATE_SOURCE),
                plugin: PLUGIN.into()
            },
            Call::ActivateCandidate {
                candidate: file(CANDIDATE_SOURCE),
                rollout: Rollout::Split { weight_percent: 0 }
            },
            Call::SetRollout(Rollout::Split { weight_percent: 20 }),
            Call::Drop,
            record(Reason::CandidateUnloadable, true),
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::Failed));
    let run = driver.run().expect("the canary stays");
    assert_eq!(
        run.problem.as_ref().map(|p| p.reason.as_str()),
        Some(RegistryError::NotLoaded(PLUGIN.into()).reason())
    );
    assert!(
        io.seen[0]
            .message
            .starts_with("the registry refused the canary: ")
    );
    assert_eq!(loaded, stable());
}

#[tokio::test]
async fn a_broken_canary_source_rolls_the_live_candidate_back() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let mut driver = started(
        &mut io,
        canary("Shadow", json!({"skipDryRun": true})),
        &mut loaded,
    )
    .await;
    io.sources.insert(
        CANDIDATE_SOURCE.into(),
        Err(Problem {
            reason: "SourceNotFound".into(),
            message: "no such file".into(),
        }),
    );
    driver.source_changed(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::Fetch(CANDIDATE_SOURCE.into()),
            Call::Drop,
            record(Reason::CandidateUnloadable, true)
        ]
    );
    assert_eq!(phase(&driver), Some(Phase::RolledBack));
    assert!(
        io.seen[0]
            .message
            .contains("(SourceNotFound: no such file)")
    );
}

/// The status a host wrote for a Shadow canary of generation 1 in `phase`.
fn written_status(phase: &str) -> Value {
    json!({
        "observedGeneration": 1,
        "plugin": PLUGIN,
        "conditions": [
            {"type": "CanaryProgressing", "status": "True", "reason": "CanaryStarted", "message": "m"},
        ],
        "canary": {
            "mode": "Shadow",
            "phase": phase,
            "stable": {"version": "1.0.0", "digest": digest(STABLE_BYTES)},
            "candidate": {"version": "2.0.0", "digest": digest(CANDIDATE_BYTES)},
            "failedChecks": 1,
            "message": "shadowing",
        },
    })
}

#[tokio::test]
async fn a_canary_running_before_a_restart_resumes_with_its_candidate() {
    let mut io = Recording::new();
    // The host starts: nothing serves yet.
    let mut loaded = None;
    let (tx, _rx) = mpsc::channel(1);
    let mut driver = CanaryDriver::default();
    driver.listen(tx);
    let spec = spec(canary("Shadow", json!({})));
    driver
        .sync(
            &mut io,
            Some(&spec),
            &mut loaded,
            &written_status("Shadowing"),
            Some(1),
        )
        .await;
    assert_eq!(
        io.take(),
        Vec::<Call>::new(),
        "restoring reads the status only"
    );
    assert_eq!(phase(&driver), Some(Phase::Shadowing));
    let options = ActivationOptions::default();
    let result = driver
        .resume(&mut io, "stable".to_string(), PLUGIN, &options)
        .await;
    assert!(matches!(result, Ok(Ok(ref v)) if v.version == "1.0.0"));
    assert_eq!(
        io.take(),
        vec![
            Call::Fetch(CANDIDATE_SOURCE.into()),
            Call::Prepare {
                source: file(CANDIDATE_SOURCE),
                plugin: PLUGIN.into()
            },
            // One registry change, in the phase it stood in: no new dry run.
            Call::ActivateWithCandidate {
                stable: "stable".into(),
                candidate: file(CANDIDATE_SOURCE),
                rollout: Rollout::Shadow
            },
        ]
    );
    let run = driver.run().expect("resumed");
    assert_eq!(phase(&driver), Some(Phase::Shadowing));
    assert!(!run.resume);
    assert_eq!(
        run.state.as_ref().map(|s| s.failed_checks),
        Some(1),
        "the failed checks so far still count"
    );
    assert!(driver.ticking());
    // It continues: an abort rolls the resumed candidate back.
    driver.act(&mut io, Action::Abort, &mut loaded).await;
    assert_eq!(
        io.take(),
        vec![
            Call::Drop,
            record(Reason::CanaryAborted, false),
            Call::RemoveActionAnnotation
        ]
    );
}

#[tokio::test]
async fn a_canary_whose_candidate_changed_during_a_restart_starts_over() {
    let mut io = Recording::new();
    io.sources
        .insert(CANDIDATE_SOURCE.into(), Ok(b"another component".to_vec()));
    let mut loaded = None;
    let mut driver = CanaryDriver::default();
    let spec = spec(canary("Shadow", json!({})));
    driver
        .sync(
            &mut io,
            Some(&spec),
            &mut loaded,
            &written_status("Shadowing"),
            Some(1),
        )
        .await;
    let options = ActivationOptions::default();
    let result = driver
        .resume(&mut io, "stable".to_string(), PLUGIN, &options)
        .await;
    assert_eq!(result.err(), Some("stable".to_string()));
    assert_eq!(io.take(), vec![Call::Fetch(CANDIDATE_SOURCE.into())]);
    let run = driver.run().expect("a new canary");
    assert!(run.state.is_none() && run.candidate.is_none());
}

#[tokio::test]
async fn a_canary_that_ended_before_a_restart_stays_ended() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let mut driver = CanaryDriver::default();
    let spec = spec(canary("Shadow", json!({})));
    driver
        .sync(
            &mut io,
            Some(&spec),
            &mut loaded,
            &written_status("RolledBack"),
            Some(1),
        )
        .await;
    driver.load_candidate(&mut io, &mut loaded).await;
    assert_eq!(
        io.take(),
        Vec::<Call>::new(),
        "a rolled-back candidate is not loaded again"
    );
    assert_eq!(phase(&driver), Some(Phase::RolledBack));
    assert!(!driver.ticking());
    // A status of another generation is not this spec's: a new canary.
    let mut driver = CanaryDriver::default();
    driver
        .sync(
            &mut io,
            Some(&spec),
            &mut loaded,
            &written_status("RolledBack"),
            Some(2),
        )
        .await;
    driver.load_candidate(&mut io, &mut loaded).await;
    assert_eq!(phase(&driver), Some(Phase::DryRun));
}

#[tokio::test]
async fn a_shadow_canary_rolled_back_leaves_its_latest_diffs_whatever_the_refresh() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let (tx, _rx) = mpsc::channel(1);
    let mut driver = CanaryDriver::default();
    driver.listen(tx);
    let spec = spec(canary(
        "Shadow",
        json!({"skipDryRun": true, "analysis": {"interval": "1s", "minCalls": 1, "failureLimit": 1}}),
    ));
    driver
        .sync(&mut io, Some(&spec), &mut loaded, &Value::Null, Some(1))
        .await;
    driver.load_candidate(&mut io, &mut loaded).await;
    io.take();
    assert_eq!(phase(&driver), Some(Phase::Shadowing));
    let differ = |name: &str| {
        (
            crate::registry::ObjectName {
                namespace: Some("default".into()),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            crate::registry::ShadowOutcome::Differ {
                fields: Vec::new(),
                signature: "spec.replicas".into(),
            },
        )
    };
    let (object, outcome) = differ("a");
    io.candidate_observations()
        .record_shadow(object, outcome, "2026-01-01T00:00:00Z");
    io.counters = Some((counters(1, 0), Some(counters(1, 0))));
    // Before the interval: the first diffs are written, no check yet.
    driver.tick(&mut io, &mut loaded).await;
    assert!(io.take().contains(&Call::WriteDiffs));
    // A second object differs, then the check fails within the diffs'
    // refresh interval: the rollback still writes the diffs once more.
    let (object, outcome) = differ("b");
    io.candidate_observations()
        .record_shadow(object, outcome, "2026-01-01T00:00:01Z");
    io.counters = Some((counters(2, 0), Some(counters(2, 0))));
    io.advance(Duration::from_secs(1));
    driver.tick(&mut io, &mut loaded).await;
    assert_eq!(phase(&driver), Some(Phase::RolledBack));
    let calls = io.take();
    assert!(calls.contains(&Call::Drop), "{calls:?}");
    assert!(calls.contains(&Call::WriteDiffs), "{calls:?}");
    // Ended: no more writes.
    io.advance(Duration::from_secs(10));
    driver.tick(&mut io, &mut loaded).await;
    assert!(!io.take().contains(&Call::WriteDiffs));
}

#[tokio::test]
async fn a_diffs_configmap_the_host_did_not_create_is_named_in_status_instead_of_diffs() {
    let mut io = Recording::new();
    let mut loaded = stable();
    let (tx, _rx) = mpsc::channel(1);
    let mut driver = CanaryDriver::default();
    driver.listen(tx);
    let spec = spec(canary("Shadow", json!({"skipDryRun": true})));
    driver
        .sync(&mut io, Some(&spec), &mut loaded, &Value::Null, Some(1))
        .await;
    driver.load_candidate(&mut io, &mut loaded).await;
    io.take();
    io.candidate_observations().record_shadow(
        crate::registry::ObjectName {
            namespace: Some("default".into()),
            name: "a".into(),
            uid: "uid-a".into(),
        },
        crate::registry::ShadowOutcome::Differ {
            fields: Vec::new(),
            signature: "spec.replicas".into(),
        },
        "2026-01-01T00:00:00Z",
    );
    let squatter = "ConfigMap default/web-canary-diffs is named like a WasmPlugin's canary diffs ConfigMap but the host did not create it";
    io.diffs_write = DiffsWrite::NotTheHosts(squatter.into());
    driver.tick(&mut io, &mut loaded).await;
    assert!(io.take().contains(&Call::WriteDiffs));
    let part = driver.status_part(&io).expect("a canary's status");
    assert_eq!(part.status.diffs_config_map, None);
    assert_eq!(part.status.diffs_not_the_hosts.as_deref(), Some(squatter));
}
