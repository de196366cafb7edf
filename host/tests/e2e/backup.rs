//! Backups and restores of DistributedKVs (issue 29), end to end on both
//! backends: the host's runner calls the plugin's `backup.plan`, creates
//! Backups on schedule, runs their Jobs (which complete, fail or hang as
//! the simulation is told through `spec.backup.podLabels`), reads where
//! the data went from the Pods' termination messages, applies retention,
//! takes the final backup before deletion, and restores by reconcile.
//!
//! Schedules use the six-field form (seconds first) so slots come every
//! few seconds.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasm_operator::backup::resources::{
    BACKUP_NAME_LABEL, PRIMARY_LABEL, RESTORE_HOLD_ANNOTATION, SKIP_FINAL_BACKUP_ANNOTATION,
    SLOT_ANNOTATION, TRIGGER_LABEL,
};
use wasm_operator::backup::{Backup, Restore};

use crate::Host;
use crate::support::{self, wait_until};

const NS: &str = "default";
/// How long a test waits for a backup step (several slots, Jobs on the
/// real control plane included).
const STEP: Duration = Duration::from_secs(90);
/// A schedule that never fires during a test.
const NEVER: &str = "0 0 1 1 *";
const OUTCOME_LABEL: &str = "simulate.wasm-operator.dev/outcome";

async fn start() -> Host {
    let host = Host::builder().simulating_workloads().start().await;
    support::install_crd(
        &host.client(),
        &support::workspace().join("deploy/crds/backup.yaml"),
    )
    .await;
    host.load("distributedkv").await;
    host
}

fn kvs(client: &kube::Client) -> Api<DynamicObject> {
    support::dynamic_api(
        client,
        &support::api_resource(
            "kv.example.com",
            "v1beta1",
            "DistributedKV",
            "distributedkvs",
        ),
        Some(NS),
    )
}

fn backups(client: &kube::Client) -> Api<Backup> {
    Api::namespaced(client.clone(), NS)
}

fn restores(client: &kube::Client) -> Api<Restore> {
    Api::namespaced(client.clone(), NS)
}

/// A DistributedKV `name` with `spec.backup` = `backup`.
async fn create_kv(client: &kube::Client, name: &str, backup: Value) {
    let kv: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kv.example.com/v1beta1",
        "kind": "DistributedKV",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicaCount": 1,
            "image": "registry.example/kv:1.4",
            "storageSize": "1Gi",
            "backup": backup,
        },
    }))
    .unwrap();
    kvs(client)
        .create(&PostParams::default(), &kv)
        .await
        .unwrap_or_else(|e| panic!("creating DistributedKV {name}: {e}"));
}

async fn patch_kv(client: &kube::Client, name: &str, patch: Value) {
    kvs(client)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching DistributedKV {name}: {e}"));
}

/// The Backups of primary `name`.
async fn backups_of(client: &kube::Client, name: &str) -> Vec<Backup> {
    backups(client)
        .list(&ListParams::default().labels(&format!("{PRIMARY_LABEL}={name}")))
        .await
        .unwrap()
        .items
}

fn phase(backup: &Backup) -> &str {
    backup
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn reason(backup: &Backup) -> &str {
    backup
        .status
        .as_ref()
        .and_then(|s| s.reason.as_deref())
        .unwrap_or("")
}

/// `status.backup` of DistributedKV `name`.
async fn summary(client: &kube::Client, name: &str) -> Value {
    support::get_json(&kvs(client), name)
        .await
        .and_then(|kv| kv.pointer("/status/backup").cloned())
        .unwrap_or(Value::Null)
}

/// Waits until Backup `name` is `Completed` or `Failed`.
async fn finished(client: &kube::Client, name: &str) -> Backup {
    wait_until(&format!("Backup {name} to finish"), STEP, || async {
        let backup = backups(client).get(name).await.map_err(|e| e.to_string())?;
        match phase(&backup) {
            "Completed" | "Failed" => Ok(backup),
            other => Err(format!("phase {other:?}")),
        }
    })
    .await
}

/// Creates Backup `name` of DistributedKV `primary` by hand.
async fn backup_by_hand(client: &kube::Client, name: &str, primary: &str) {
    let backup: Backup = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"primary": {"kind": "DistributedKV", "name": primary}},
    }))
    .unwrap();
    backups(client)
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
}

#[test]
fn the_backup_crds_on_disk_are_the_generated_ones() {
    if !support::once_per_run("the_backup_crds_on_disk_are_the_generated_ones") {
        return;
    }
    let generated = wasm_operator::backup::resources::crd_yaml().unwrap();
    let on_disk =
        std::fs::read_to_string(support::workspace().join("deploy/crds/backup.yaml")).unwrap();
    assert!(
        on_disk == generated,
        "deploy/crds/backup.yaml does not match host/src/backup/resources.rs; regenerate it with `bash scripts/render-deploy.sh`"
    );
    let chart = std::fs::read_to_string(
        support::workspace().join("deploy/helm/wasm-operator/crds/backup.yaml"),
    )
    .unwrap();
    let fix = "deploy/helm/wasm-operator/crds/backup.yaml is not the generated CRDs kept on uninstall; regenerate it with `bash scripts/render-deploy.sh`";
    let chart: Vec<Value> = serde_yaml::Deserializer::from_str(&chart)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    let generated: Vec<Value> = serde_yaml::Deserializer::from_str(&generated)
        .map(|doc| serde::Deserialize::deserialize(doc).unwrap())
        .collect();
    assert_eq!(chart.len(), 2, "{fix}");
    for (mut chart, generated) in chart.into_iter().zip(generated) {
        assert_eq!(
            chart["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{fix}"
        );
        chart["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert!(chart == generated, "{fix}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_backups_complete_and_retention_never_deletes_the_last_good_one() {
    let host = start().await;
    let client = host.client();
    create_kv(
        &client,
        "kv",
        json!({
            "s3Path": "s3://b/p/",
            "schedule": "*/2 * * * * *",
            "retention": {"keepLast": 2, "keepFailed": 1, "alwaysKeepCompleted": 1},
        }),
    )
    .await;
    let completed = Mutex::new(BTreeSet::new());
    wait_until("three completed scheduled backups", STEP, || async {
        let all = backups_of(&client, "kv").await;
        let mut completed = completed.lock().unwrap();
        for backup in all {
            if phase(&backup) == "Completed" {
                completed.insert(backup.name_any());
            }
        }
        if completed.len() >= 3 {
            Ok(())
        } else {
            Err(format!("completed so far: {completed:?}"))
        }
    })
    .await;
    let good = backups_of(&client, "kv")
        .await
        .into_iter()
        .find(|b| phase(b) == "Completed")
        .expect("a completed backup");
    let status = good.status.clone().unwrap();
    let name = good.name_any();
    assert_eq!(
        status.location,
        Some(format!("s3://b/p/{name}")),
        "{status:?}"
    );
    assert!(status.slot.is_some(), "{status:?}");
    assert!(
        status.job.is_some() && status.plugin_version.is_some(),
        "{status:?}"
    );
    assert_eq!(status.generation, Some(1), "{status:?}");
    assert_eq!(
        good.labels().get(TRIGGER_LABEL).map(String::as_str),
        Some("scheduled")
    );
    // Retention: at most keepLast finished Backups remain.
    wait_until("retention to keep two finished backups", STEP, || async {
        let finished: Vec<String> = backups_of(&client, "kv")
            .await
            .into_iter()
            .filter(|b| matches!(phase(b), "Completed" | "Failed"))
            .map(|b| b.name_any())
            .collect();
        if finished.len() <= 2 {
            Ok(())
        } else {
            Err(format!("{finished:?}"))
        }
    })
    .await;
    let summary_now = summary(&client, "kv").await;
    for field in [
        "lastScheduleTime",
        "nextScheduleTime",
        "lastSuccessfulBackup",
        "lastBackupTime",
    ] {
        assert!(
            summary_now[field].is_string(),
            "status.backup.{field}: {summary_now}"
        );
    }

    // Every backup fails from now on: the last good one is never deleted.
    patch_kv(
        &client,
        "kv",
        json!({"spec": {"backup": {"podLabels": {OUTCOME_LABEL: "fail"}}}}),
    )
    .await;
    let failed = Mutex::new(BTreeSet::new());
    wait_until("three failed backups", STEP, || async {
        let all = backups_of(&client, "kv").await;
        let mut failed = failed.lock().unwrap();
        for backup in all {
            if phase(&backup) == "Failed" {
                assert_eq!(reason(&backup), "BackoffLimitExceeded", "{backup:?}");
                failed.insert(backup.name_any());
            }
        }
        if failed.len() >= 3 {
            Ok(())
        } else {
            Err(format!("failed so far: {failed:?}"))
        }
    })
    .await;
    let left = backups_of(&client, "kv").await;
    let good: Vec<&Backup> = left.iter().filter(|b| phase(b) == "Completed").collect();
    assert_eq!(
        good.len(),
        1,
        "alwaysKeepCompleted 1 keeps the last good backup through newer failures: {:?}",
        left.iter()
            .map(|b| (b.name_any(), phase(b).to_string()))
            .collect::<Vec<_>>()
    );
    let summary_now = summary(&client, "kv").await;
    assert_eq!(
        summary_now["lastSuccessfulBackup"],
        json!(good[0].name_any())
    );
    assert!(summary_now["lastFailedBackup"].is_string(), "{summary_now}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_backup_fails_at_its_deadline_and_the_next_slot_still_runs() {
    let host = start().await;
    let client = host.client();
    create_kv(
        &client,
        "hung",
        json!({
            "s3Path": "s3://b/p",
            "schedule": "*/2 * * * * *",
            "deadlineSeconds": 4,
            "podLabels": {OUTCOME_LABEL: "hang"},
            "retention": {"keepLast": 10},
        }),
    )
    .await;
    let hung = wait_until("a backup failed at its deadline", STEP, || async {
        let all = backups_of(&client, "hung").await;
        all.iter()
            .find(|b| phase(b) == "Failed")
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{:?}",
                    all.iter()
                        .map(|b| (b.name_any(), phase(b).to_string()))
                        .collect::<Vec<_>>()
                )
            })
    })
    .await;
    assert_eq!(reason(&hung), "DeadlineExceeded", "{hung:?}");
    // Slots that came while it hung were skipped, and said so.
    let summary_now = summary(&client, "hung").await;
    assert!(
        summary_now["skippedSlots"].as_u64().unwrap_or(0) >= 1,
        "status.backup: {summary_now}"
    );
    let events = support::events_about(&client, NS, Some("DistributedKV"), "hung").await;
    assert!(
        events
            .iter()
            .any(|(_, reason, _)| reason == "BackupSkipped"),
        "{events:?}"
    );
    // The schedule goes on: the next backups complete.
    patch_kv(
        &client,
        "hung",
        json!({"spec": {"backup": {"podLabels": null}}}),
    )
    .await;
    wait_until("a later backup to complete", STEP, || async {
        let all = backups_of(&client, "hung").await;
        if all.iter().any(|b| phase(b) == "Completed") {
            Ok(())
        } else {
            Err(format!("{} backups, none completed", all.len()))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_stopped_across_slots_catches_up_once_and_a_running_backup_is_readopted() {
    let mut host = start().await;
    let client = host.client();
    create_kv(
        &client,
        "gap",
        json!({"s3Path": "s3://b/p", "schedule": "*/4 * * * * *", "retention": {"keepLast": 20}}),
    )
    .await;
    wait_until("a first scheduled backup", STEP, || async {
        let all = backups_of(&client, "gap").await;
        if all.iter().any(|b| phase(b) == "Completed") {
            Ok(())
        } else {
            Err(format!("{} backups", all.len()))
        }
    })
    .await;
    // A backup by hand that hangs until its deadline, running when the host
    // stops.
    create_kv(
        &client,
        "midway",
        json!({"s3Path": "s3://b/p", "schedule": NEVER, "deadlineSeconds": 12,
               "podLabels": {OUTCOME_LABEL: "hang"}}),
    )
    .await;
    backup_by_hand(&client, "midway-by-hand", "midway").await;
    wait_until("the hand-made backup to run", STEP, || async {
        let backup = backups(&client)
            .get("midway-by-hand")
            .await
            .map_err(|e| e.to_string())?;
        (phase(&backup) == "Running")
            .then_some(())
            .ok_or_else(|| format!("{backup:?}"))
    })
    .await;

    host.manager.shutdown().await;
    let stopped = chrono::Utc::now();
    // Two slots or more pass while no host runs.
    tokio::time::sleep(Duration::from_secs(9)).await;
    host.restart().await;
    host.load("distributedkv").await;

    let summary_now = wait_until("the missed slots to be reported", STEP, || async {
        let summary_now = summary(&client, "gap").await;
        if summary_now["missedSlots"].as_u64().unwrap_or(0) >= 2 {
            Ok(summary_now)
        } else {
            Err(summary_now.to_string())
        }
    })
    .await;
    let missed = summary_now["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "BackupScheduleMissed"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(missed["status"], "True", "{summary_now}");
    assert_eq!(missed["reason"], "BackupCaughtUp", "{summary_now}");
    // One backup for the slots of the gap, the last of them: the first
    // Backup after the stop is the one the condition names, and its slot
    // is more than a period after the stop (the earlier slots got none).
    let mut after: Vec<(chrono::DateTime<chrono::FixedOffset>, String)> =
        backups_of(&client, "gap")
            .await
            .into_iter()
            .filter_map(|b| {
                let slot = b.annotations().get(SLOT_ANNOTATION)?;
                let slot = chrono::DateTime::parse_from_rfc3339(slot).ok()?;
                (slot > stopped).then(|| (slot, b.name_any()))
            })
            .collect();
    after.sort();
    let (first_slot, first) = after.first().cloned().expect("a backup after the restart");
    assert!(
        missed["message"].as_str().unwrap_or("").contains(&first),
        "the catch-up is the first backup after the stop ({first}): {missed}"
    );
    assert!(
        first_slot > stopped + chrono::TimeDelta::seconds(4),
        "slots between the stop ({stopped}) and the catch-up ({first_slot}) got no backup: {after:?}"
    );

    // The backup running across the restart is re-adopted, not lost or
    // taken twice: it fails at its Job's deadline, with one Job.
    let midway = finished(&client, "midway-by-hand").await;
    assert_eq!(reason(&midway), "DeadlineExceeded", "{midway:?}");
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), NS);
    let jobs = jobs
        .list(&ListParams::default().labels(&format!("{BACKUP_NAME_LABEL}=midway-by-hand")))
        .await
        .unwrap()
        .items;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(
        midway.labels().get(TRIGGER_LABEL).map(String::as_str),
        Some("manual")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_create_takes_one_now_and_names_what_is_wrong() {
    let host = start().await;
    let client = host.client();
    create_kv(
        &client,
        "cli",
        json!({"s3Path": "s3://b/p", "schedule": NEVER}),
    )
    .await;
    let kubeconfig = host.cluster.kubeconfig_path().to_path_buf();
    let run = |args: Vec<&str>| {
        let kubeconfig = kubeconfig.clone();
        let args: Vec<String> = args.into_iter().map(str::to_string).collect();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
                .args(&args)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .output()
                .await
                .unwrap()
        }
    };
    let output = run(vec![
        "backup",
        "create",
        "distributedkv/cli",
        "-n",
        NS,
        "--wait",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("completed: s3://b/p/cli-manual-"),
        "{stdout}"
    );
    assert!(stderr.contains("Completed"), "progress on stderr: {stderr}");
    let taken = backups_of(&client, "cli").await;
    assert_eq!(taken.len(), 1);
    assert_eq!(phase(&taken[0]), "Completed");

    let output = run(vec!["backup", "create", "distributedkv/missing", "-n", NS]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("DistributedKV default/missing not found"),
        "{stderr}"
    );
    let output = run(vec!["backup", "create", "nosuchkind/x"]).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("no namespaced kind \"nosuchkind\""),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_takes_the_final_backup_first_and_a_failing_one_keeps_the_object() {
    let host = start().await;
    let client = host.client();
    let api = kvs(&client);
    for (name, labels) in [
        ("final-ok", json!(null)),
        ("final-bad", json!({OUTCOME_LABEL: "fail"})),
    ] {
        create_kv(
            &client,
            name,
            json!({"s3Path": "s3://b/p", "schedule": NEVER, "backupOnDelete": true, "podLabels": labels}),
        )
        .await;
    }
    for name in ["final-ok", "final-bad"] {
        wait_until(
            &format!("{name}'s final-backup finalizer"),
            STEP,
            || async {
                let kv = support::get_json(&api, name).await.unwrap_or_default();
                let finalizers = support::finalizers(&kv);
                finalizers
                    .iter()
                    .any(|f| f == "backup.wasm-operator.dev/final-backup")
                    .then_some(())
                    .ok_or_else(|| format!("{finalizers:?}"))
            },
        )
        .await;
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    // The good one goes once its final backup completed.
    wait_until("final-ok to be deleted", STEP, || async {
        match support::get_json(&api, "final-ok").await {
            None => Ok(()),
            Some(kv) => Err(kv["metadata"]["finalizers"].to_string()),
        }
    })
    .await;
    let finals: Vec<Backup> = backups_of(&client, "final-ok")
        .await
        .into_iter()
        .filter(|b| b.labels().get(TRIGGER_LABEL).map(String::as_str) == Some("final"))
        .collect();
    assert_eq!(finals.len(), 1, "{finals:?}");
    assert_eq!(phase(&finals[0]), "Completed");

    // The bad one stays, says why, and goes when a person skips it.
    wait_until("FinalBackupFailed on final-bad", STEP, || async {
        let events = support::events_about(&client, NS, Some("DistributedKV"), "final-bad").await;
        events
            .iter()
            .any(|(_, reason, _)| reason == "FinalBackupFailed")
            .then_some(())
            .ok_or_else(|| format!("{events:?}"))
    })
    .await;
    let kv = support::get_json(&api, "final-bad")
        .await
        .expect("kept while its final backup fails");
    let condition = kv
        .pointer("/status/backup/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "FinalBackupFailed").cloned())
        .unwrap_or_default();
    assert_eq!(condition["status"], "True", "{kv}");
    assert!(
        condition["message"]
            .as_str()
            .unwrap_or("")
            .contains(SKIP_FINAL_BACKUP_ANNOTATION),
        "the condition says how to let it go: {condition}"
    );
    api.patch(
        "final-bad",
        &PatchParams::default(),
        &Patch::Merge(
            &json!({"metadata": {"annotations": {SKIP_FINAL_BACKUP_ANNOTATION: "true"}}}),
        ),
    )
    .await
    .unwrap();
    wait_until("final-bad to be deleted once skipped", STEP, || async {
        match support::get_json(&api, "final-bad").await {
            None => Ok(()),
            Some(kv) => Err(kv["metadata"]["finalizers"].to_string()),
        }
    })
    .await;
}

/// The StatefulSet of DistributedKV `name`, as JSON.
async fn stateful_set(client: &kube::Client, name: &str) -> Option<Value> {
    let api = support::dynamic_api(
        client,
        &support::api_resource("apps", "v1", "StatefulSet", "statefulsets"),
        Some(NS),
    );
    support::get_json(&api, name).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_holds_reconcile_until_its_job_completes_and_can_recreate_an_object() {
    let host = start().await;
    let client = host.client();
    let api = kvs(&client);
    create_kv(
        &client,
        "src",
        json!({"s3Path": "s3://b/p", "schedule": NEVER}),
    )
    .await;
    backup_by_hand(&client, "src-1", "src").await;
    let taken = finished(&client, "src-1").await;
    assert_eq!(phase(&taken), "Completed", "{taken:?}");

    // Into a new object: created from the recorded spec, then reconciled.
    let restore: Restore = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "Restore",
        "metadata": {"name": "copy", "namespace": NS},
        "spec": {"backup": "src-1", "target": {"name": "src-copy"}},
    }))
    .unwrap();
    restores(&client)
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    let copy = wait_until("the restore into src-copy", STEP, || async {
        let restore = restores(&client)
            .get("copy")
            .await
            .map_err(|e| e.to_string())?;
        match restore.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Completed") => Ok(restore),
            Some("Failed") => panic!("the restore failed: {restore:?}"),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(
        copy.status.as_ref().and_then(|s| s.created_target),
        Some(true)
    );
    let copied = support::get_json(&api, "src-copy")
        .await
        .expect("src-copy exists");
    assert_eq!(copied["spec"]["replicaCount"], 1, "{copied}");
    assert!(
        copied
            .pointer(&format!(
                "/metadata/annotations/{}",
                RESTORE_HOLD_ANNOTATION.replace('/', "~1")
            ))
            .is_none(),
        "{copied}"
    );
    wait_until("src-copy's StatefulSet", STEP, || async {
        stateful_set(&client, "src-copy")
            .await
            .map(|_| ())
            .ok_or_else(|| "none".to_string())
    })
    .await;

    // In place, with a restore Job that fails: the hold stays, and nothing
    // of a spec change is applied until a person releases it.
    patch_kv(
        &client,
        "src",
        json!({"spec": {"backup": {"podLabels": {OUTCOME_LABEL: "fail"}}}}),
    )
    .await;
    let restore: Restore = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "Restore",
        "metadata": {"name": "in-place", "namespace": NS},
        "spec": {"backup": "src-1"},
    }))
    .unwrap();
    restores(&client)
        .create(&PostParams::default(), &restore)
        .await
        .unwrap();
    let failed = wait_until("the failing restore", STEP, || async {
        let restore = restores(&client)
            .get("in-place")
            .await
            .map_err(|e| e.to_string())?;
        match restore.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Failed") => Ok(restore),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let message = failed.status.and_then(|s| s.message).unwrap_or_default();
    assert!(message.contains(RESTORE_HOLD_ANNOTATION), "{message}");
    patch_kv(&client, "src", json!({"spec": {"replicaCount": 2}})).await;
    // Give the controller every chance to (wrongly) reconcile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = support::get_json(&api, "src").await.unwrap();
    assert_eq!(
        held.pointer(&format!(
            "/metadata/annotations/{}",
            RESTORE_HOLD_ANNOTATION.replace('/', "~1")
        )),
        Some(&json!("default/in-place")),
        "{held}"
    );
    let replicas = stateful_set(&client, "src").await.unwrap()["spec"]["replicas"].clone();
    assert_eq!(replicas, 1, "a held object is not reconciled");
    api.patch(
        "src",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {RESTORE_HOLD_ANNOTATION: null}}})),
    )
    .await
    .unwrap();
    wait_until("the released object to be reconciled", STEP, || async {
        let replicas =
            stateful_set(&client, "src").await.unwrap_or_default()["spec"]["replicas"].clone();
        (replicas == 2)
            .then_some(())
            .ok_or_else(|| replicas.to_string())
    })
    .await;
}
