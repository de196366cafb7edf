//! `backup.plan` (with `backup-policy.policy`) and `backup.restore` through
//! the engine: on distributedkv, which implements both and exports the
//! policy; on `backup-v1`, built against the contract before
//! `backup-policy` existed; and on webapp, which declares no backups.

use serde_json::{Value, json};
use wasm_operator::contract::{
    BackupRetention, Failure, PodSecurityLevel, WorkloadPolicy, check_workload,
};
use wasm_operator::engine::{CallFailure, LoadedPlugin};

use super::{cache, component, ctx, engine, primary, webapp_spec};

fn kv_spec(backup: Value) -> Value {
    json!({"replicaCount": 3, "image": "kv:1.4", "backup": backup})
}

/// No rule of Pod Security `restricted` (the default grant) broken.
fn assert_restricted(job: &Value) {
    let policy = WorkloadPolicy {
        level: PodSecurityLevel::Restricted,
        service_accounts: &[],
        grant_account: None,
        secrets_granted: false,
    };
    let violations = check_workload(&policy, job).unwrap();
    assert!(violations.is_empty(), "{violations:?} in {job}");
}

async fn plan_of(
    plugin: &LoadedPlugin,
    object: &Value,
) -> Result<Option<wasm_operator::contract::BackupPlan>, wasm_operator::engine::CallError> {
    plugin
        .backup_plan(&ctx(plugin), object.to_string(), cache())
        .await
}

#[tokio::test]
async fn distributedkv_plans_backups_with_its_policy() {
    let plugin = engine().load(&component("distributedkv")).unwrap();
    assert!(plugin.manifest().implements.backup);
    assert!(plugin.exports_backup_policy());
    assert!(
        plugin
            .manifest()
            .owns
            .iter()
            .any(|k| k.group == "batch" && k.kind == "Job")
    );
    let object = primary(
        &plugin,
        "sessions",
        kv_spec(json!({
            "s3Path": "s3://kv-backups/sessions/", "schedule": "0 3 * * *",
            "timeZone": "Europe/Berlin", "backupOnDelete": true, "deadlineSeconds": 900,
            "retention": {"keepLast": 5, "keepFailed": 2, "alwaysKeepCompleted": 1},
            "podLabels": {"simulate.wasm-operator.dev/outcome": "fail"},
        })),
    );
    let plan = plan_of(&plugin, &object).await.unwrap().unwrap();
    assert_eq!(plan.schedule, "0 3 * * *");
    assert_eq!(plan.time_zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!(
        plan.retention,
        BackupRetention {
            keep_last: 5,
            keep_failed: Some(2),
            always_keep_completed: Some(1)
        }
    );
    assert!(plan.backup_on_delete);
    assert_eq!(plan.job_deadline_seconds, Some(900));
    assert_eq!(
        (
            plan.starting_deadline_seconds,
            plan.restore_deadline_seconds
        ),
        (None, None)
    );
    assert_eq!(plan.job["kind"], "Job");
    assert!(plan.job.pointer("/metadata/name").is_none(), "{}", plan.job);
    assert_eq!(
        plan.job["spec"]["template"]["metadata"]["labels"]["simulate.wasm-operator.dev/outcome"],
        "fail"
    );
    assert_restricted(&plan.job);

    // Defaults: keep 7, nothing else said.
    let minimal = primary(
        &plugin,
        "orders",
        kv_spec(json!({"s3Path": "s3://b/orders/", "schedule": "@daily"})),
    );
    let plan = plan_of(&plugin, &minimal).await.unwrap().unwrap();
    assert_eq!(
        plan.retention,
        BackupRetention {
            keep_last: 7,
            keep_failed: None,
            always_keep_completed: None
        }
    );
    assert_eq!((plan.time_zone, plan.job_deadline_seconds), (None, None));
    assert!(!plan.backup_on_delete);

    // No spec.backup: no plan.
    let none = primary(
        &plugin,
        "plain",
        json!({"replicaCount": 1, "image": "kv:1.4"}),
    );
    assert_eq!(plan_of(&plugin, &none).await.unwrap(), None);
}

#[tokio::test]
async fn a_refused_plan_is_a_permanent_failure() {
    let plugin = engine().load(&component("distributedkv")).unwrap();
    let object = primary(
        &plugin,
        "bad",
        kv_spec(
            json!({"s3Path": "s3://b/p/", "schedule": "@daily", "retention": {"keepLast": -1}}),
        ),
    );
    let err = plan_of(&plugin, &object).await.unwrap_err();
    match &err.failure {
        CallFailure::Failed(Failure::Permanent(m)) => {
            assert!(m.contains("retention.keepLast"), "{m}")
        }
        other => panic!("expected a permanent failure, got {other:?}"),
    }
    assert_eq!(err.site.function, "backup.plan");
    assert!(err.is_permanent());
}

#[tokio::test]
async fn distributedkv_restores_from_the_backups_location() {
    let plugin = engine().load(&component("distributedkv")).unwrap();
    let object = primary(
        &plugin,
        "sessions",
        kv_spec(json!({"s3Path": "s3://b/sessions/", "schedule": "@daily"})),
    );
    let backup = json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "Backup",
        "metadata": {"name": "sessions-202611280300", "namespace": "default"},
        "status": {"phase": "Completed", "location": "s3://b/sessions/sessions-202611280300"},
    });
    let job = plugin
        .restore_job(
            &ctx(&plugin),
            object.to_string(),
            backup.to_string(),
            cache(),
        )
        .await
        .unwrap();
    assert_eq!(job["kind"], "Job");
    let env = &job["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(
        env,
        &json!([{"name": "WASM_OPERATOR_RESTORE_FROM", "value": "s3://b/sessions/sessions-202611280300"}])
    );
    assert_restricted(&job);

    let pending =
        json!({"kind": "Backup", "metadata": {"name": "sessions-1", "namespace": "default"}});
    let err = plugin
        .restore_job(
            &ctx(&plugin),
            object.to_string(),
            pending.to_string(),
            cache(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err.failure, CallFailure::Failed(Failure::Permanent(m)) if m.contains("status.location")),
        "{err}"
    );
    assert_eq!(err.site.function, "backup.restore");
}

/// A component built against the contract before `backup-policy`: it loads,
/// and its plan has every policy field left to the host.
#[tokio::test]
async fn a_component_built_before_backup_policy_still_plans() {
    let plugin = engine().load(&component("backup_v1")).unwrap();
    assert_eq!(plugin.manifest().name, "backup-v1");
    assert!(plugin.manifest().implements.backup);
    assert!(!plugin.exports_backup_policy());
    let object = primary(&plugin, "old", json!({}));
    let plan = plan_of(&plugin, &object).await.unwrap().unwrap();
    assert_eq!(plan.schedule, "*/5 * * * *");
    assert_eq!(
        plan.retention,
        BackupRetention {
            keep_last: 3,
            keep_failed: None,
            always_keep_completed: None
        }
    );
    assert!(!plan.backup_on_delete);
    assert_eq!(plan.time_zone, None);
    assert_eq!(
        (
            plan.job_deadline_seconds,
            plan.starting_deadline_seconds,
            plan.restore_deadline_seconds
        ),
        (None, None, None)
    );
    assert_eq!(plan.job["apiVersion"], "batch/v1");
    let job = plugin
        .restore_job(&ctx(&plugin), object.to_string(), "{}".into(), cache())
        .await
        .unwrap();
    assert_eq!(job["kind"], "Job");
}

#[tokio::test]
async fn a_plugin_without_backups_is_not_called() {
    let plugin = engine().load(&component("webapp")).unwrap();
    assert!(!plugin.manifest().implements.backup);
    let object = primary(&plugin, "shop", webapp_spec());
    let err = plan_of(&plugin, &object).await.unwrap_err();
    assert!(matches!(err.failure, CallFailure::NotImplemented), "{err}");
    assert!(err.to_string().contains("backup.plan"), "{err}");
    let err = plugin
        .restore_job(&ctx(&plugin), object.to_string(), "{}".into(), cache())
        .await
        .unwrap_err();
    assert!(matches!(err.failure, CallFailure::NotImplemented), "{err}");
}
