//! One Restore through its phases, by reconcile: the target's reconcile is
//! held (annotation [`RESTORE_HOLD_ANNOTATION`], which the controller
//! honours), the plugin's `restore` Job runs, and the hold is released when
//! it completes. The plugin's next reconcile then recreates the children
//! with their owners: nothing is restored out of order and nothing races
//! the controller.
//!
//! Restoring into an object that does not exist creates it first from the
//! Backup's recorded spec, with the hold already on, so no reconcile runs
//! before the data is back. A failed restore keeps the hold (the object is
//! half restored): the Restore's message says how to release it.

use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::context::{RunnerContext, StepFailure, already_exists, not_found, refused};
use super::drive::now_text;
use super::job::{self, JobFrame, JobOutcome, JobOwner};
use super::naming;
use super::resources::{
    self, Backup, PRIMARY_LABEL, RESTORE_BACKUP_ENV, RESTORE_HOLD_ANNOTATION, RESTORE_NAME_LABEL,
    Restore,
};
use crate::contract::{CallContext, Reason};

/// The Backup a Restore names, when it is of this plugin's primary kind.
pub(crate) fn backup_of<'b>(
    ctx: &RunnerContext,
    restore: &Restore,
    backups: &'b [Backup],
) -> Option<&'b Backup> {
    let namespace = restore.namespace();
    backups.iter().find(|b| {
        b.namespace() == namespace
            && b.name_any() == restore.spec.backup
            && ctx.serves(&b.spec.primary)
    })
}

/// Drives `restore` one step; `backup` is the Backup it names (`None`:
/// not found, or not of this plugin). Returns true when it moved.
pub(crate) async fn drive(ctx: &RunnerContext, restore: &Restore, backup: Option<&Backup>) -> bool {
    let phase = restore.status.as_ref().and_then(|s| s.phase.clone());
    let result = match (phase.as_deref(), backup) {
        (None | Some("New"), _) => start(ctx, restore, backup).await,
        // Only the runner of the Backup's kind follows a running restore.
        (Some("Running"), Some(backup)) => follow(ctx, restore, backup).await,
        _ => return false,
    };
    match result {
        Ok(moved) => moved,
        Err(failure) => {
            finish(ctx, restore, Err(failure)).await;
            true
        }
    }
}

fn hold_value(restore: &Restore) -> String {
    format!(
        "{}/{}",
        restore.namespace().unwrap_or_default(),
        restore.name_any()
    )
}

/// `New`: checks the Backup, holds (or creates) the target.
async fn start(
    ctx: &RunnerContext,
    restore: &Restore,
    backup: Option<&Backup>,
) -> Result<bool, StepFailure> {
    let namespace = restore.namespace().unwrap_or_default();
    let Some(backup) = backup else {
        // Not (yet) in the cache, or another plugin's kind: only a Backup
        // that does not exist at all is this runner's to report.
        return match ctx.backups_api(&namespace).get(&restore.spec.backup).await {
            Err(error) if not_found(&error) => Err(StepFailure::new(
                Reason::BackupNotFound,
                format!(
                    "Backup {namespace}/{} does not exist; name a Backup in the Restore's namespace",
                    restore.spec.backup
                ),
            )),
            _ => Ok(false),
        };
    };
    let status = backup.status.clone().unwrap_or_default();
    match status.phase.as_deref() {
        Some("Completed") => {}
        Some("Failed") => {
            return Err(StepFailure::new(
                Reason::BackupNotCompleted,
                format!(
                    "Backup {} failed ({}); restore from a Completed Backup",
                    backup.name_any(),
                    status.reason.unwrap_or_default()
                ),
            ));
        }
        // Still running: wait for it.
        _ => return Ok(false),
    }
    let target = restore
        .spec
        .target
        .as_ref()
        .and_then(|t| t.name.clone())
        .unwrap_or_else(|| backup.spec.primary.name.clone());
    let api = ctx.primaries_api(&namespace);
    let hold = hold_value(restore);
    let created = match ctx.primary(&namespace, &target) {
        Some(existing) => {
            if let Some(other) = existing.annotations().get(RESTORE_HOLD_ANNOTATION)
                && *other != hold
            {
                return Err(StepFailure::new(
                    Reason::TargetBusy,
                    format!(
                        "{} {namespace}/{target} is held by Restore {other}; wait for it, or delete that Restore and remove the annotation {RESTORE_HOLD_ANNOTATION}",
                        ctx.deps.primary.kind
                    ),
                ));
            }
            let patch = json!({"metadata": {"annotations": {RESTORE_HOLD_ANNOTATION: hold}}});
            api.patch(&target, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|error| {
                    StepFailure::new(
                        Reason::HoldFailed,
                        format!("cannot hold {target}'s reconcile: {error}"),
                    )
                })?;
            false
        }
        None => {
            let Some(source) = status.source.as_ref().filter(|s| s["spec"].is_object()) else {
                return Err(StepFailure::new(
                    Reason::NoRecordedSpec,
                    format!(
                        "{target} does not exist and Backup {} recorded no spec to create it from",
                        backup.name_any()
                    ),
                ));
            };
            let object = json!({
                "apiVersion": source["apiVersion"].as_str().unwrap_or(&ctx.deps.primary.api_version),
                "kind": ctx.deps.primary.kind,
                "metadata": {
                    "name": target,
                    "namespace": namespace,
                    "labels": source["labels"],
                    "annotations": {RESTORE_HOLD_ANNOTATION: hold},
                },
                "spec": source["spec"],
            });
            let object: DynamicObject = serde_json::from_value(object).map_err(|error| {
                StepFailure::new(
                    Reason::NoRecordedSpec,
                    format!("the recorded spec is not an object: {error}"),
                )
            })?;
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {}
                // Created by an earlier pass whose status write was lost.
                Err(error) if already_exists(&error) => {}
                Err(error) => {
                    return Err(StepFailure::new(
                        Reason::TargetNotCreated,
                        format!(
                            "cannot create {} {namespace}/{target} from Backup {}: {error}",
                            ctx.deps.primary.kind,
                            backup.name_any()
                        ),
                    ));
                }
            }
            true
        }
    };
    let status = json!({
        "phase": "Running",
        "target": target,
        "createdTarget": created,
        "startTime": now_text(),
        "pluginVersion": ctx.stable().plugin.manifest().version,
    });
    RunnerContext::patch_status(&ctx.restores_api(&namespace), &restore.name_any(), status)
        .await
        .map_err(|error| StepFailure::new(Reason::StatusNotWritten, error.to_string()))?;
    let message = format!(
        "restoring Backup {} into {} {target}; its reconcile is held until the restore Job completes",
        backup.name_any(),
        ctx.deps.primary.kind
    );
    ctx.resource_event(
        &resources::restore_resource(),
        restore,
        false,
        Reason::RestoreStarted,
        &message,
    )
    .await;
    Ok(true)
}

/// `Running`: creates the restore Job once the target shows the hold,
/// then follows it.
async fn follow(
    ctx: &RunnerContext,
    restore: &Restore,
    backup: &Backup,
) -> Result<bool, StepFailure> {
    let namespace = restore.namespace().unwrap_or_default();
    let status = restore.status.clone().unwrap_or_default();
    let target = status.target.clone().unwrap_or_default();
    let job_name = naming::job_name(&restore.name_any(), "restore");
    let Some(job) = ctx.job(&namespace, &job_name) else {
        return create_job(ctx, restore, backup, &target, &job_name).await;
    };
    match job::job_outcome(&job) {
        JobOutcome::Running => Ok(false),
        JobOutcome::Failed {
            reason, message, ..
        } => Err(StepFailure::new(
            job::failure_reason(&reason),
            format!(
                "the restore Job {job_name} failed: {message}; {target}'s reconcile stays held: fix the data, then remove the annotation {RESTORE_HOLD_ANNOTATION} (kubectl annotate {} {target} {RESTORE_HOLD_ANNOTATION}-)",
                ctx.deps.primary.plural
            ),
        )),
        JobOutcome::Complete { .. } => {
            release(ctx, restore, &target).await?;
            finish(ctx, restore, Ok(())).await;
            Ok(true)
        }
    }
}

async fn create_job(
    ctx: &RunnerContext,
    restore: &Restore,
    backup: &Backup,
    target: &str,
    job_name: &str,
) -> Result<bool, StepFailure> {
    let namespace = restore.namespace().unwrap_or_default();
    // The target as the API server has it now (it may have just been
    // created, before the cache shows it).
    let object = match ctx.primaries_api(&namespace).get(target).await {
        Ok(object) => object,
        Err(error) if not_found(&error) => {
            return Err(StepFailure::new(
                Reason::TargetNotFound,
                format!(
                    "{} {namespace}/{target} was deleted during the restore",
                    ctx.deps.primary.kind
                ),
            ));
        }
        Err(_) => return Ok(false),
    };
    if object.annotations().get(RESTORE_HOLD_ANNOTATION) != Some(&hold_value(restore)) {
        return Err(StepFailure::new(
            Reason::HoldLost,
            format!(
                "the hold annotation {RESTORE_HOLD_ANNOTATION} on {target} was removed or changed before the restore Job started"
            ),
        ));
    }
    let stable = ctx.stable();
    let ctx_call = CallContext {
        plugin_version: stable.plugin.manifest().version.clone(),
        attempt: 1,
        managed_by_version: None,
        config: stable.config.clone(),
    };
    let object_text = serde_json::to_string(&object).unwrap_or_default();
    let backup_text = serde_json::to_string(backup).unwrap_or_default();
    let template = stable
        .plugin
        .restore_job(
            &ctx_call,
            object_text,
            backup_text,
            ctx.deps.cache_reader.clone(),
        )
        .await
        .map_err(|error| {
            StepFailure::new(
                Reason::RestorePlanFailed,
                format!(
                    "backup.restore of plugin {} failed: {error}",
                    ctx.deps.plugin
                ),
            )
        })?;
    let restore_name = restore.name_any();
    let restore_uid = restore.uid().unwrap_or_default();
    let backup_name = backup.name_any();
    let labels = [
        (RESTORE_NAME_LABEL, restore_name.as_str()),
        (PRIMARY_LABEL, target),
    ];
    let env = [(RESTORE_BACKUP_ENV, backup_name.as_str())];
    let frame = JobFrame {
        name: job_name,
        namespace: &namespace,
        owner: JobOwner {
            kind: "Restore",
            name: &restore_name,
            uid: &restore_uid,
        },
        labels: &labels,
        env: &env,
        deadline_seconds: ctx
            .plan_restore_deadline(target, &namespace)
            .await
            .unwrap_or(job::DEFAULT_JOB_DEADLINE_SECONDS),
    };
    let job = job::owned_job(&template, &frame).map_err(|error| {
        StepFailure::new(
            Reason::PlanRefused,
            format!("plugin {}: {error}", ctx.deps.plugin),
        )
    })?;
    super::grant::check_job(stable.plugin.manifest(), &stable.grant, &job)
        .map_err(|message| StepFailure::new(Reason::PlanRefused, message))?;
    let job: DynamicObject = serde_json::from_value(job).map_err(|error| {
        StepFailure::new(
            Reason::PlanRefused,
            format!("the restore Job is not an object: {error}"),
        )
    })?;
    match ctx
        .jobs_api(&namespace)
        .create(&PostParams::default(), &job)
        .await
    {
        Ok(_) => {}
        Err(error) if already_exists(&error) => {}
        Err(error) if refused(&error) => {
            return Err(StepFailure::new(
                Reason::JobRefused,
                format!(
                    "the API server refused the restore Job {namespace}/{job_name} (written as plugin {}): {error}",
                    ctx.deps.plugin
                ),
            ));
        }
        Err(_) => return Ok(false),
    }
    let _ = RunnerContext::patch_status(
        &ctx.restores_api(&namespace),
        &restore_name,
        json!({"job": job_name}),
    )
    .await;
    Ok(true)
}

/// Removes the hold from `target` (only this Restore's).
async fn release(ctx: &RunnerContext, restore: &Restore, target: &str) -> Result<(), StepFailure> {
    let namespace = restore.namespace().unwrap_or_default();
    let api = ctx.primaries_api(&namespace);
    let held_by_us = match api.get(target).await {
        Ok(object) => {
            object.annotations().get(RESTORE_HOLD_ANNOTATION) == Some(&hold_value(restore))
        }
        Err(error) if not_found(&error) => return Ok(()),
        Err(error) => {
            return Err(StepFailure::new(Reason::ReleaseFailed, error.to_string()));
        }
    };
    if held_by_us {
        let patch = json!({"metadata": {"annotations": {RESTORE_HOLD_ANNOTATION: Value::Null}}});
        api.patch(target, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|error| {
                StepFailure::new(
                    Reason::ReleaseFailed,
                    format!("cannot release {target}'s reconcile: {error}"),
                )
            })?;
    }
    Ok(())
}

async fn finish(ctx: &RunnerContext, restore: &Restore, result: Result<(), StepFailure>) {
    let namespace = restore.namespace().unwrap_or_default();
    let (status, warning, reason, message) = match &result {
        Ok(()) => {
            let target = restore
                .status
                .as_ref()
                .and_then(|s| s.target.clone())
                .unwrap_or_default();
            let message = format!(
                "Backup {} restored into {target}; its reconcile is released",
                restore.spec.backup
            );
            (
                json!({"phase": "Completed", "completionTime": now_text(), "reason": null, "message": message}),
                false,
                Reason::RestoreCompleted,
                message,
            )
        }
        Err(failure) => (
            json!({"phase": "Failed", "completionTime": now_text(), "reason": failure.reason.as_str(), "message": failure.message}),
            true,
            Reason::RestoreFailed,
            format!("{}: {}", failure.reason, failure.message),
        ),
    };
    if let Err(error) =
        RunnerContext::patch_status(&ctx.restores_api(&namespace), &restore.name_any(), status)
            .await
    {
        tracing::warn!(%error, restore = %restore.name_any(), "cannot record the restore's end");
        return;
    }
    ctx.deps
        .metrics
        .restore_finished(&ctx.deps.plugin, result.is_ok());
    ctx.resource_event(
        &resources::restore_resource(),
        restore,
        warning,
        reason,
        &message,
    )
    .await;
}
