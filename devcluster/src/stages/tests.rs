//! Unit tests of the stage engine's pure parts: kwok's golden input/output
//! pairs (vendored under `devcluster/stages/kwok/testdata/`), the built-in
//! stages on fixture objects (`devcluster/stages/testdata/`), selectors,
//! the weighted choice and delays.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::model::PatchType;
use super::next::{Effect, apply_patch, effects};
use super::query::Query;
use super::select::{choose, delay, go_duration, matches};
use super::template::Funcs;
use super::template::funcs::KwokFuncs;
use super::{CompiledStage, StageSet, parse_stages};

fn stages_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("stages")
}

fn yaml_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// kwok's test renderer: functions whose values vary answer placeholders
/// (`<Now>`, `<0 of NodeIPsWith("node")>`), as kwok's golden files expect.
struct GoldenFuncs(KwokFuncs);

fn go_args(args: &[Value]) -> String {
    args.iter()
        .map(|a| match a {
            Value::String(s) => format!("{s:?}"),
            other => other.to_string(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Funcs for GoldenFuncs {
    fn call(&self, name: &str, args: Vec<Value>) -> Result<Value, String> {
        let call = format!("{name}({})", go_args(&args));
        Ok(match name {
            "Now" => json!("<Now>"),
            "NodeIP" | "NodeName" | "NodePort" | "Version" => json!(format!("<{name}>")),
            "NodeIPWith" | "PodIPWith" => json!(format!("<{call}>")),
            "NodeIPsWith" | "PodIPsWith" => {
                json!([format!("<0 of {call}>"), format!("<1 of {call}>")])
            }
            _ => return self.0.call(name, args),
        })
    }
}

fn kwok_defaults() -> Vec<CompiledStage> {
    let mut out = Vec::new();
    for (file, text) in super::KWOK_STAGES {
        out.extend(parse_stages(file, text).expect("kwok's stage files load"));
    }
    out
}

/// Runs one of kwok's golden pairs: the stages that match the input, and
/// what each does, equal kwok's recorded output.
fn golden(name: &str) {
    let dir = stages_dir().join("kwok/testdata");
    let input = yaml_file(&dir.join(format!("{name}.input.yaml")));
    let expected = yaml_file(&dir.join(format!("{name}.output.yaml")));
    let stages = kwok_defaults();
    let matching: Vec<&CompiledStage> = stages.iter().filter(|s| matches(s, &input)).collect();
    let names: Vec<&str> = matching.iter().map(|s| s.name()).collect();
    let want: Vec<&str> = expected["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(names, want, "{name}: the matching stages");
    let funcs = GoldenFuncs(KwokFuncs::new("node"));
    for (stage, want) in matching.iter().zip(expected["stages"].as_array().unwrap()) {
        let want_next = want["next"].as_array().unwrap();
        if want_next[0]["kind"] == "delete" {
            assert_eq!(
                effects(stage, &input, &funcs).unwrap(),
                vec![Effect::Delete]
            );
            continue;
        }
        let (patch, template) = &stage.patches[0];
        assert_eq!(patch.subresource, "status");
        let rendered = template.render_json(&input, &funcs).unwrap();
        assert_eq!(
            json!({ patch.root.as_str(): rendered }),
            want_next[0]["data"],
            "{name}: what stage {} renders",
            stage.name()
        );
    }
}

#[test]
fn kwok_golden_pod_pending_becomes_ready() {
    golden("pod-pending");
}

#[test]
fn kwok_golden_running_job_pod_completes() {
    golden("pod-running-with-job");
}

#[test]
fn kwok_golden_terminating_pod_is_deleted() {
    golden("pod-terminating");
}

#[test]
fn kwok_golden_pending_node_is_initialized() {
    golden("node-pending");
}

#[test]
fn default_stages_load_and_names_are_unique() {
    let set = StageSet::defaults().unwrap();
    let mut names: Vec<&str> = set.stages.iter().map(|s| s.name()).collect();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count);
    for want in [
        "pod-ready",
        "pod-complete",
        "pod-delete",
        "node-initialize",
        "node-heartbeat",
        "pod-fail",
        "pod-hang",
        "pod-complete-backup",
        "deployment-status",
        "replicaset-status",
        "statefulset-status",
        "daemonset-status",
        "job-start",
        "job-complete",
        "job-retry",
        "job-fail",
        "job-deadline",
    ] {
        assert!(set.get(want).is_some(), "default stage {want} is missing");
    }
}

#[test]
fn a_custom_file_adds_stages_and_replaces_defaults_by_name() {
    let path = stages_dir().join("testdata/custom-pod-ready.yaml");
    let set = StageSet::defaults_with(&[path]).unwrap();
    let defaults = StageSet::defaults().unwrap();
    assert_eq!(set.stages.len(), defaults.stages.len());
    let replaced = set.get("pod-ready").unwrap();
    assert!(replaced.file.ends_with("custom-pod-ready.yaml"));
    assert!(
        replaced
            .stage
            .spec
            .next
            .status_template
            .contains("custom-ready")
    );
}

#[test]
fn unsupported_kwok_features_are_refused_by_name() {
    let text = std::fs::read_to_string(stages_dir().join("testdata/uses-cel.yaml")).unwrap();
    let err = parse_stages("uses-cel.yaml", &text)
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"uses-cel\""), "{err}");
    assert!(err.contains("CEL"), "{err}");
}

/// The stage the engine picks for `obj` among the defaults (deterministic roll).
fn chosen<'a>(set: &'a StageSet, obj: &Value) -> Option<&'a CompiledStage> {
    let matching: Vec<&CompiledStage> = set.stages.iter().filter(|s| matches(s, obj)).collect();
    choose(&matching, obj, |_| 0)
}

/// Applies the chosen stage's status effects to `obj`, as the driver would.
fn step(set: &StageSet, obj: &Value) -> Option<(String, Value)> {
    let stage = chosen(set, obj)?;
    let mut current = obj.clone();
    for e in effects(stage, obj, &KwokFuncs::new("n")).unwrap() {
        if let Effect::Update { object, .. } = e {
            current = object;
        }
    }
    Some((stage.name().to_string(), current))
}

/// Runs stages until none applies or one changes nothing (the driver then
/// writes nothing, so no event brings the object back); the names of the
/// stages run and the end state.
fn settle(obj: Value) -> (Vec<String>, Value) {
    let set = StageSet::defaults().unwrap();
    let mut names = Vec::new();
    let mut current = obj;
    while let Some((name, next)) = step(&set, &current) {
        assert!(names.len() < 20, "stages do not settle: {names:?}");
        names.push(name);
        if next == current {
            break;
        }
        current = next;
    }
    (names, current)
}

fn fixture(name: &str) -> Value {
    yaml_file(&stages_dir().join("testdata").join(name))
}

#[test]
fn a_failing_pod_is_chosen_over_pod_ready_and_fails() {
    let (names, pod) = settle(fixture("pod-fail-never.yaml"));
    assert_eq!(names, ["pod-fail"]);
    assert_eq!(pod["status"]["phase"], "Failed");
    let state = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(state["exitCode"], 1);
    assert_eq!(state["reason"], "Error");
}

#[test]
fn a_pending_pod_becomes_ready_with_addresses() {
    let (names, pod) = settle(fixture("pod-bound.yaml"));
    assert_eq!(names, ["pod-ready"]);
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["hostIP"], "10.0.0.11");
    assert!(
        pod["status"]["podIP"]
            .as_str()
            .unwrap()
            .starts_with("10.244.")
    );
    let ready = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True");
    // The scheduler's condition stays: kwok patches Pods with a strategic merge.
    assert!(
        pod["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "PodScheduled")
    );
}

#[test]
fn a_deployment_becomes_available_and_moves_again_after_scaling() {
    let (names, d) = settle(fixture("deployment.yaml"));
    assert_eq!(names, ["deployment-status"]);
    let s = &d["status"];
    assert_eq!(
        (s["observedGeneration"].clone(), s["replicas"].clone()),
        (json!(1), json!(3))
    );
    assert_eq!(
        (s["readyReplicas"].clone(), s["availableReplicas"].clone()),
        (json!(3), json!(3))
    );
    assert_eq!(s["updatedReplicas"], 3);
    assert_eq!(s["conditions"][0]["reason"], "MinimumReplicasAvailable");
    assert_eq!(s["conditions"][1]["reason"], "NewReplicaSetAvailable");
    assert!(s.get("unavailableReplicas").is_none());
    let mut scaled = d.clone();
    scaled["spec"]["replicas"] = json!(5);
    scaled["metadata"]["generation"] = json!(2);
    let (names, d) = settle(scaled);
    assert_eq!(names, ["deployment-status"]);
    assert_eq!(d["status"]["availableReplicas"], 5);
    assert_eq!(d["status"]["observedGeneration"], 2);
}

#[test]
fn a_deployment_told_to_fail_stays_unavailable() {
    let mut d = fixture("deployment.yaml");
    d["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] =
        json!("fail");
    let (_, d) = settle(d);
    let s = &d["status"];
    assert!(s.get("readyReplicas").is_none());
    assert!(s.get("availableReplicas").is_none());
    assert_eq!(s["unavailableReplicas"], 3);
    assert_eq!(s["conditions"][0]["status"], "False");
    assert_eq!(s["conditions"][0]["reason"], "MinimumReplicasUnavailable");
}

#[test]
fn a_statefulset_becomes_ready_with_one_revision() {
    let (names, s) = settle(fixture("statefulset.yaml"));
    assert_eq!(names, ["statefulset-status"]);
    let st = &s["status"];
    assert_eq!(st["readyReplicas"], 2);
    assert_eq!(st["currentReplicas"], 2);
    assert_eq!(st["currentRevision"], st["updateRevision"]);
    assert!(st["updateRevision"].as_str().unwrap().starts_with("db-"));
}

/// A Succeeded Pod of `job` (uid `pod-uid`), owned as the Job controller owns it.
fn succeeded_pod_of(job: &Value, uid: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("backup-{uid}"), "namespace": "default", "uid": uid,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                "name": job["metadata"]["name"], "uid": job["metadata"]["uid"], "controller": true}]},
        "status": {"phase": "Succeeded"},
    })
}

#[test]
fn a_job_starts_then_completes_once_a_pod_succeeded() {
    use super::jobs::record_succeeded;
    let mut job = fixture("job.yaml");
    job["metadata"]["uid"] = json!("job-uid");
    let (names, job) = settle(job);
    assert_eq!(names, ["job-start"], "no Pod has Succeeded yet");
    let pod = succeeded_pod_of(&job, "pod-uid");
    let job = record_succeeded(&job, &pod).expect("the Pod is recorded");
    assert_eq!(
        job["status"]["uncountedTerminatedPods"]["succeeded"],
        json!(["pod-uid"])
    );
    assert!(record_succeeded(&job, &pod).is_none(), "recorded once");
    let (names, job) = settle(job);
    assert_eq!(names, ["job-complete"]);
    let s = &job["status"];
    assert_eq!(s["succeeded"], 1);
    assert_eq!(s["uncountedTerminatedPods"], json!({}));
    assert!(
        record_succeeded(&job, &pod).is_none(),
        "the Job is finished"
    );
    assert!(s.get("active").is_none());
    assert!(s["completionTime"].is_string());
    let types: Vec<&str> = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
}

#[test]
fn a_job_told_to_fail_retries_until_its_backoff_limit() {
    let mut job = fixture("job.yaml");
    job["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] =
        json!("fail");
    job["spec"]["backoffLimit"] = json!(2);
    let (names, job) = settle(job);
    assert_eq!(
        names,
        ["job-start", "job-retry", "job-retry", "job-fail"],
        "one failed Pod at a time"
    );
    let s = &job["status"];
    assert_eq!(s["failed"], 3);
    assert_eq!(s["conditions"][0]["type"], "FailureTarget");
    assert_eq!(s["conditions"][1]["type"], "Failed");
    assert_eq!(s["conditions"][1]["reason"], "BackoffLimitExceeded");
}

#[test]
fn a_job_with_backoff_limit_zero_fails_once() {
    let mut job = fixture("job.yaml");
    job["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] =
        json!("fail");
    job["spec"]["backoffLimit"] = json!(0);
    let (names, job) = settle(job);
    assert_eq!(names, ["job-start", "job-fail"]);
    assert_eq!(job["status"]["failed"], 1);
}

#[test]
fn a_job_without_backoff_limit_uses_the_default_of_six() {
    let mut job = fixture("job.yaml");
    job["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] =
        json!("fail");
    let (_, job) = settle(job);
    assert_eq!(job["status"]["failed"], 7);
}

#[test]
fn a_suspended_job_does_not_start() {
    let mut job = fixture("job.yaml");
    job["spec"]["suspend"] = json!(true);
    let (names, _) = settle(job);
    assert!(names.is_empty());
}

#[test]
fn jq_keys_of_kwoks_stages_evaluate_as_gojq_does() {
    let pod = json!({"metadata": {"labels": {"a.b/c": "x"}, "ownerReferences": [{"kind": "Job"}, {"kind": "X"}]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Init", "status": "True"}]}});
    let run = |q: &str| Query::parse(q).unwrap().execute(&pod);
    assert_eq!(
        run(r#".status.conditions.[] | select( .type == "Ready" ) | .status"#),
        [json!("False")]
    );
    assert_eq!(
        run(".metadata.ownerReferences.[].kind"),
        [json!("Job"), json!("X")]
    );
    assert_eq!(run(r#".metadata.labels["a.b/c"]"#), [json!("x")]);
    assert_eq!(run(".metadata.deletionTimestamp"), Vec::<Value>::new());
    // Iterating null is a jq error: no values, as kwok's Execute answers.
    assert_eq!(run(".spec.containers.[] | .name"), Vec::<Value>::new());
    assert_eq!(run("(.status.failed // 0) < 6"), [json!(true)]);
    assert_eq!(
        run(".metadata.generation == .status.observedGeneration"),
        [json!(true)]
    );
    assert!(Query::parse(".a | length").is_err());
}

#[test]
fn weights_decide_among_matching_stages_as_in_kwok() {
    let text = std::fs::read_to_string(stages_dir().join("testdata/weighted.yaml")).unwrap();
    let stages = parse_stages("weighted.yaml", &text).unwrap();
    let all: Vec<&CompiledStage> = stages.iter().collect();
    let obj = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
    // zero (weight 0) never wins against positive weights; light (1) and heavy (3) share 4.
    let pick = |roll: u64| choose(&all, &obj, |n| roll.min(n - 1)).unwrap().name();
    assert_eq!(pick(0), "light");
    assert_eq!(pick(1), "heavy");
    assert_eq!(pick(3), "heavy");
    let zero_only: Vec<&CompiledStage> = stages.iter().filter(|s| s.name() == "zero").collect();
    assert_eq!(choose(&zero_only, &obj, |_| 0).unwrap().name(), "zero");
    assert!(choose(&[], &obj, |_| 0).is_none());
}

#[test]
fn delays_add_jitter_up_to_the_bound_and_read_durations_from_the_object() {
    let text = std::fs::read_to_string(stages_dir().join("testdata/weighted.yaml")).unwrap();
    let stages = parse_stages("weighted.yaml", &text).unwrap();
    let heavy = stages.iter().find(|s| s.name() == "heavy").unwrap();
    let now = chrono::Utc::now();
    let obj = json!({"metadata": {"annotations": {}}});
    assert_eq!(delay(heavy, &obj, now, |_| 0), Duration::from_millis(1000));
    assert_eq!(
        delay(heavy, &obj, now, |n| n - 1),
        Duration::from_millis(2999)
    );
    let from = json!({"metadata": {"annotations": {"delay": "250ms"}}});
    assert_eq!(delay(heavy, &from, now, |_| 0), Duration::from_millis(250));
    let light = stages.iter().find(|s| s.name() == "light").unwrap();
    assert_eq!(delay(light, &obj, now, |_| 0), Duration::ZERO);
    assert_eq!(go_duration("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(go_duration("soon"), None);
}

#[test]
fn strategic_status_patches_merge_conditions_by_type() {
    let pod = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
    let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let out = apply_patch(&pod, &patch, PatchType::Strategic).unwrap();
    assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
    let out = apply_patch(&pod, &patch, PatchType::Merge).unwrap();
    assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 1);
}

#[test]
fn a_failing_pod_that_restarts_always_stays_running_and_never_ready() {
    let mut pod = fixture("pod-fail-never.yaml");
    pod["spec"]["restartPolicy"] = json!("Always");
    let (names, pod) = settle(pod);
    assert_eq!(names, ["pod-fail"]);
    assert_eq!(pod["status"]["phase"], "Running");
    assert_eq!(pod["status"]["conditions"][1]["type"], "Ready");
    assert_eq!(pod["status"]["conditions"][1]["status"], "False");
    let state = &pod["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(state["exitCode"], 1);
}

#[test]
fn a_replicaset_and_a_daemonset_become_ready() {
    let mut rs = fixture("deployment.yaml");
    rs["kind"] = json!("ReplicaSet");
    let (names, rs) = settle(rs);
    assert_eq!(names, ["replicaset-status"]);
    assert_eq!(rs["status"]["readyReplicas"], 3);
    assert_eq!(rs["status"]["availableReplicas"], 3);
    assert_eq!(rs["status"]["observedGeneration"], 1);
    let mut ds = fixture("deployment.yaml");
    ds["kind"] = json!("DaemonSet");
    let (names, ds) = settle(ds);
    assert_eq!(names, ["daemonset-status"]);
    assert_eq!(ds["status"]["desiredNumberScheduled"], 3);
    assert_eq!(ds["status"]["numberReady"], 3);
    assert!(ds["status"].get("numberUnavailable").is_none());
}

#[test]
fn a_deleted_workload_is_left_alone() {
    let mut d = fixture("deployment.yaml");
    d["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let (names, _) = settle(d);
    assert!(names.is_empty());
}

#[test]
fn a_job_gets_one_pod_per_attempt_its_status_counts() {
    use super::jobs::{missing_pods, owned_by};
    let mut job = fixture("job.yaml");
    job["metadata"]["uid"] = json!("job-uid");
    assert!(missing_pods(&job, &[]).is_empty(), "no attempt yet");
    job["status"] = json!({"active": 1, "failed": 1});
    let pods = missing_pods(&job, &[]);
    assert_eq!(pods.len(), 2);
    let pod = &pods[0];
    assert!(owned_by(pod, "job-uid"));
    assert_eq!(pod["metadata"]["generateName"], "backup-");
    assert_eq!(pod["metadata"]["labels"]["job-name"], "backup");
    assert_eq!(pod["metadata"]["labels"]["app"], "backup");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    // Pods that exist count; other Jobs' Pods do not.
    let mut other = pods[1].clone();
    other["metadata"]["ownerReferences"][0]["uid"] = json!("other-uid");
    assert_eq!(missing_pods(&job, &[pods[0].clone(), other]).len(), 1);
    job["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    assert!(
        missing_pods(&job, &[]).is_empty(),
        "a deleted Job gets no Pods"
    );
}

#[test]
fn only_a_succeeded_pod_of_the_job_is_recorded() {
    use super::jobs::record_succeeded;
    let mut job = fixture("job.yaml");
    job["metadata"]["uid"] = json!("job-uid");
    let mut pod = succeeded_pod_of(&job, "pod-uid");
    pod["status"]["phase"] = json!("Running");
    assert!(record_succeeded(&job, &pod).is_none(), "still running");
    pod["status"]["phase"] = json!("Succeeded");
    pod["metadata"]["ownerReferences"][0]["uid"] = json!("other-uid");
    assert!(record_succeeded(&job, &pod).is_none(), "another Job's Pod");
}

fn hang(mut obj: Value) -> Value {
    let labels = if obj["kind"] == "Job" {
        &mut obj["spec"]["template"]["metadata"]["labels"]
    } else {
        &mut obj["metadata"]["labels"]
    };
    labels["simulate.wasm-operator.dev/outcome"] = json!("hang");
    obj
}

#[test]
fn a_pod_told_to_hang_runs_and_never_completes() {
    let mut pod = hang(fixture("pod-bound.yaml"));
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": true}]);
    let (names, pod) = settle(pod);
    assert_eq!(
        names,
        ["pod-ready", "pod-hang"],
        "pod-hang wins over pod-complete"
    );
    assert_eq!(pod["status"]["phase"], "Running");
    let state = &pod["status"]["containerStatuses"][0];
    assert_eq!(state["ready"], true);
    assert!(state["state"]["running"]["startedAt"].is_string());
    // Being deleted, it goes as any Pod does.
    let mut deleted = pod.clone();
    deleted["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let set = StageSet::defaults().unwrap();
    assert_eq!(chosen(&set, &deleted).unwrap().name(), "pod-delete");
}

#[test]
fn a_job_told_to_hang_fails_when_its_deadline_passes() {
    let mut job = hang(fixture("job.yaml"));
    job["spec"]["activeDeadlineSeconds"] = json!(3);
    let (names, _) = settle(job.clone());
    assert_eq!(names, ["job-start", "job-deadline"]);
    // The delay runs until startTime + activeDeadlineSeconds.
    job["status"] = json!({"startTime": "2026-01-01T00:00:00Z", "active": 1, "ready": 0});
    let set = StageSet::defaults().unwrap();
    let stage = chosen(&set, &job).unwrap();
    assert_eq!(stage.name(), "job-deadline");
    let at = |t: &str| chrono::DateTime::parse_from_rfc3339(t).unwrap().to_utc();
    assert_eq!(
        delay(stage, &job, at("2026-01-01T00:00:01Z"), |_| 0),
        Duration::from_secs(2)
    );
    assert_eq!(
        delay(stage, &job, at("2026-01-01T00:00:09Z"), |_| 0),
        Duration::ZERO,
        "a deadline passed already fails the Job at once"
    );
    let (names, job) = settle(job);
    assert_eq!(names, ["job-deadline"]);
    let s = &job["status"];
    assert_eq!(s["failed"], 1, "the active Pod counts as failed");
    assert!(s.get("active").is_none());
    assert!(s.get("completionTime").is_none());
    assert_eq!(s["startTime"], "2026-01-01T00:00:00Z");
    let conditions: Vec<(&str, &str, &str)> = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["type"].as_str().unwrap(),
                c["reason"].as_str().unwrap(),
                c["message"].as_str().unwrap(),
            )
        })
        .collect();
    let message = "Job was active longer than specified deadline";
    assert_eq!(
        conditions,
        [
            ("FailureTarget", "DeadlineExceeded", message),
            ("Failed", "DeadlineExceeded", message)
        ]
    );
}

#[test]
fn a_job_past_its_deadline_loses_its_active_pods_and_gets_no_more() {
    use super::jobs::{missing_pods, pods_to_delete};
    let mut job = hang(fixture("job.yaml"));
    job["metadata"]["uid"] = json!("job-uid");
    job["spec"]["activeDeadlineSeconds"] = json!(3);
    job["status"] = json!({"startTime": "2026-01-01T00:00:00Z", "active": 1});
    let mut running = missing_pods(&job, &[]).remove(0);
    running["metadata"]["name"] = json!("backup-a");
    running["status"] = json!({"phase": "Running"});
    let mut done = running.clone();
    done["metadata"]["name"] = json!("backup-b");
    done["status"]["phase"] = json!("Failed");
    let pods = [running, done];
    assert!(
        pods_to_delete(&job, &pods).is_empty(),
        "not past the deadline"
    );
    let (_, job) = settle(job);
    assert_eq!(pods_to_delete(&job, &pods), ["backup-a"]);
    assert!(missing_pods(&job, &[]).is_empty());
}

#[test]
fn a_job_with_a_deadline_completes_when_its_pod_succeeds_first() {
    use super::jobs::record_succeeded;
    let mut job = fixture("job.yaml");
    job["metadata"]["uid"] = json!("job-uid");
    job["spec"]["activeDeadlineSeconds"] = json!(60);
    job["status"] = json!({"startTime": "2026-01-01T00:00:00Z", "active": 1});
    let set = StageSet::defaults().unwrap();
    assert_eq!(chosen(&set, &job).unwrap().name(), "job-deadline");
    let job = record_succeeded(&job, &succeeded_pod_of(&job, "pod-uid")).unwrap();
    assert_eq!(
        chosen(&set, &job).unwrap().name(),
        "job-complete",
        "the only stage that applies once a Pod Succeeded"
    );
    // A Job told to fail keeps its retries; the deadline is not simulated for it.
    let mut failing = fixture("job.yaml");
    failing["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] =
        json!("fail");
    failing["spec"]["activeDeadlineSeconds"] = json!(1);
    failing["status"] = json!({"startTime": "2026-01-01T00:00:00Z", "active": 1});
    assert_eq!(chosen(&set, &failing).unwrap().name(), "job-retry");
}

#[test]
fn a_backup_pod_completes_with_the_location_as_its_termination_message() {
    let (names, pod) = settle(fixture("pod-backup.yaml"));
    assert_eq!(names, ["pod-ready", "pod-complete-backup"]);
    assert_eq!(pod["status"]["phase"], "Succeeded");
    let statuses = pod["status"]["containerStatuses"].as_array().unwrap();
    let terminated = |i: usize| &statuses[i]["state"]["terminated"];
    assert_eq!(statuses[0]["name"], "dump");
    assert_eq!(terminated(0)["exitCode"], 0);
    assert_eq!(terminated(0)["reason"], "Completed");
    let message: Value = serde_json::from_str(terminated(0)["message"].as_str().unwrap()).unwrap();
    assert_eq!(
        message,
        json!({"location": "s3://bucket/path/kv-1"}),
        "the trailing / of the destination is dropped"
    );
    assert_eq!(
        terminated(0)["message"],
        r#"{"location":"s3://bucket/path/kv-1"}"#
    );
    // A container without a destination completes as pod-complete says.
    assert_eq!(statuses[1]["name"], "sidecar");
    assert_eq!(terminated(1)["exitCode"], 0);
    assert!(terminated(1).get("message").is_none());
}

#[test]
fn a_backup_pod_told_to_fail_or_hang_is_left_to_those_stages() {
    let mut pod = fixture("pod-backup.yaml");
    pod["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] = json!("hang");
    let (names, _) = settle(pod.clone());
    assert_eq!(names, ["pod-ready", "pod-hang"]);
    pod["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"] = json!("fail");
    let (names, _) = settle(pod);
    assert_eq!(names, ["pod-fail"]);
}

#[test]
fn the_stages_shared_with_the_real_control_plane_are_the_same_files() {
    let realcluster = Path::new(env!("CARGO_MANIFEST_DIR")).join("../realcluster/stages");
    for file in ["pod-hang.yaml", "pod-complete-backup.yaml"] {
        let ours = std::fs::read_to_string(stages_dir().join("builtin").join(file)).unwrap();
        let theirs = std::fs::read_to_string(realcluster.join(file)).unwrap();
        assert_eq!(ours, theirs, "{file} differs between the two backends");
    }
}

#[test]
fn jq_adds_and_converts_dates_as_gojq_does() {
    let job = json!({"spec": {"activeDeadlineSeconds": 3}, "status": {"startTime": "2026-01-01T00:00:00Z"}});
    let run = |q: &str| Query::parse(q).unwrap().execute(&job);
    assert_eq!(run(".status.startTime | fromdate"), [json!(1767225600)]);
    assert_eq!(
        run("(.status.startTime | fromdate) + .spec.activeDeadlineSeconds | todate"),
        [json!("2026-01-01T00:00:03Z")]
    );
    assert_eq!(
        run("1767225600.9 | todate"),
        [json!("2026-01-01T00:00:00Z")]
    );
    assert_eq!(
        run(r#""2026-01-01T00:00:00.5Z" | fromdateiso8601"#),
        [json!(1767225600.5)]
    );
    assert_eq!(run(r#""a" + "b""#), [json!("ab")]);
    assert_eq!(run("null + 2 + 0.5"), [json!(2.5)]);
    assert_eq!(run(".missing + 1 == 1"), [json!(true)]);
    // `+` binds tighter than comparisons.
    assert_eq!(run(".spec.activeDeadlineSeconds + 1 > 3"), [json!(true)]);
    // Type errors and unreadable dates yield nothing, as kwok's Execute answers.
    assert_eq!(run(r#"1 + "a""#), Vec::<Value>::new());
    assert_eq!(run(r#""soon" | fromdate"#), Vec::<Value>::new());
}
