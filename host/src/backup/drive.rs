//! One Backup through its phases: `New` (its Job is created from the
//! primary's plan), `Running` (its Job runs), `Completed` (the Job
//! succeeded and said where the data went) or `Failed` (the Job failed,
//! passed its deadline, or the plan could not take it).
//!
//! The Job is named after the Backup ([`super::naming::job_name`]), so a
//! Backup found `Running` after a restart or by a new leader re-adopts its
//! Job by name; a Job that is gone fails the Backup instead of leaving it
//! running forever.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::context::{RunnerContext, StepFailure, already_exists, not_found};
use super::job::{self, JobFrame, JobOutcome, JobOwner};
use super::naming;
use super::resources::{
    self, BACKUP_NAME_ENV, BACKUP_NAME_LABEL, Backup, PRIMARY_LABEL, PRIMARY_UID_LABEL,
    SLOT_ANNOTATION, TRIGGER_LABEL, Trigger,
};
use crate::cache::CachedObject;
use crate::contract::{BackupPlan, Reason};

/// How long after its Job completed a Backup waits for a Pod's termination
/// message (a Pod's status can trail its Job's) before it fails with
/// `LocationNotReported`.
const LOCATION_GRACE: chrono::TimeDelta = chrono::TimeDelta::seconds(30);

/// What one pass over a Backup did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driven {
    /// Nothing to do now (finished, or its Job runs).
    Idle,
    /// It moved to another phase.
    Moved,
    /// Look again soon (waiting for a termination message).
    Soon,
}

/// Drives `backup` one step.
pub(crate) async fn drive(ctx: &RunnerContext, backup: &Backup) -> Driven {
    let status = backup.status.clone().unwrap_or_default();
    let namespace = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let result = match status.phase.as_deref() {
        None | Some("New") => start(ctx, backup, &namespace).await,
        Some("Running") => follow(ctx, backup, &namespace).await,
        _ => return Driven::Idle,
    };
    match result {
        Ok(driven) => driven,
        Err(failure) => {
            fail(ctx, backup, failure).await;
            tracing::info!(backup = %name, %namespace, "backup failed");
            Driven::Moved
        }
    }
}

/// The primary `backup` names, tied to it (a hand-made Backup gets the
/// primary's labels), and its plan; `None` to try again soon.
async fn primary_and_plan(
    ctx: &RunnerContext,
    backup: &Backup,
    namespace: &str,
) -> Result<Option<(Arc<CachedObject>, BackupPlan)>, StepFailure> {
    let reference = &backup.spec.primary;
    let Some(primary) = ctx.primary(namespace, &reference.name) else {
        return Err(StepFailure {
            reason: Reason::PrimaryNotFound,
            message: format!(
                "{} {}/{} does not exist (or is not served by plugin {}); create it, or delete this Backup",
                reference.kind, namespace, reference.name, ctx.deps.plugin
            ),
        });
    };
    let uid = primary.uid().unwrap_or_default();
    if let Some(recorded) = backup.labels().get(PRIMARY_UID_LABEL)
        && *recorded != uid
    {
        return Err(StepFailure {
            reason: Reason::PrimaryReplaced,
            message: format!(
                "this Backup was made for {} {}/{} with uid {recorded}; the object of that name now has uid {uid} (deleted and created again), so it is not backed up under this Backup",
                reference.kind, namespace, reference.name
            ),
        });
    }
    let api = ctx.backups_api(namespace);
    if backup.labels().get(PRIMARY_UID_LABEL).is_none() {
        // A Backup made by hand: tie it to the primary it names now.
        let labels = json!({"metadata": {"labels": {
            PRIMARY_LABEL: reference.name,
            PRIMARY_UID_LABEL: uid,
            TRIGGER_LABEL: Trigger::Manual.as_str(),
        }}});
        if let Err(error) = api
            .patch(
                &backup.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&labels),
            )
            .await
        {
            tracing::warn!(%error, backup = %backup.name_any(), "cannot label the Backup");
            return Ok(None);
        }
    }
    let plan = match ctx.plan(&primary).await {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            return Err(StepFailure {
                reason: Reason::NoBackupPlan,
                message: format!(
                    "plugin {} plans no backup for {} {}/{} (backup.plan returned none)",
                    ctx.deps.plugin, reference.kind, namespace, reference.name
                ),
            });
        }
        Err(error) => {
            return Err(StepFailure {
                reason: Reason::PlanFailed,
                message: format!("backup.plan of plugin {} failed: {error}", ctx.deps.plugin),
            });
        }
    };
    Ok(Some((primary, plan)))
}

/// `New`: labels a hand-made Backup, calls the plan, creates the Job.
async fn start(
    ctx: &RunnerContext,
    backup: &Backup,
    namespace: &str,
) -> Result<Driven, StepFailure> {
    let Some((primary, plan)) = primary_and_plan(ctx, backup, namespace).await? else {
        return Ok(Driven::Soon);
    };
    let reference = &backup.spec.primary;
    let uid = primary.uid().unwrap_or_default();
    let api = ctx.backups_api(namespace);
    let stable = ctx.stable();
    let backup_name = backup.name_any();
    let job_name = naming::job_name(&backup_name, "backup");
    let backup_uid = backup.uid().unwrap_or_default();
    let labels = [
        (BACKUP_NAME_LABEL, backup_name.as_str()),
        (PRIMARY_LABEL, reference.name.as_str()),
    ];
    let env = [(BACKUP_NAME_ENV, backup_name.as_str())];
    let frame = JobFrame {
        name: &job_name,
        namespace,
        owner: JobOwner {
            kind: "Backup",
            name: &backup_name,
            uid: &backup_uid,
        },
        labels: &labels,
        env: &env,
        deadline_seconds: plan
            .job_deadline_seconds
            .unwrap_or(job::DEFAULT_JOB_DEADLINE_SECONDS),
    };
    let job = job::owned_job(&plan.job, &frame).map_err(|error| StepFailure {
        reason: Reason::PlanRefused,
        message: format!("plugin {}: {error}", ctx.deps.plugin),
    })?;
    super::grant::check_job(stable.plugin.manifest(), &stable.grant, &job).map_err(|message| {
        StepFailure {
            reason: Reason::PlanRefused,
            message,
        }
    })?;
    let job_object: DynamicObject = serde_json::from_value(job).map_err(|error| StepFailure {
        reason: Reason::PlanRefused,
        message: format!("the backup Job is not a Kubernetes object: {error}"),
    })?;
    match ctx
        .jobs_api(namespace)
        .create(&PostParams::default(), &job_object)
        .await
    {
        Ok(_) => {}
        Err(error) if already_exists(&error) => {
            // A restart or a new leader: adopt the Job if it is this
            // Backup's.
            let existing = ctx.jobs_api(namespace).get(&job_name).await.ok();
            let ours = existing
                .as_ref()
                .is_some_and(|job| job.owner_references().iter().any(|o| o.uid == backup_uid));
            if !ours {
                return Err(StepFailure {
                    reason: Reason::JobNameTaken,
                    message: format!(
                        "Job {namespace}/{job_name} exists and is not this Backup's; delete it or this Backup"
                    ),
                });
            }
        }
        Err(error) => {
            if super::context::refused(&error) {
                return Err(StepFailure {
                    reason: Reason::JobRefused,
                    message: format!(
                        "the API server refused the backup Job {namespace}/{job_name} (written as plugin {}): {error}",
                        ctx.deps.plugin
                    ),
                });
            }
            tracing::warn!(%error, job = %job_name, "cannot create the backup Job; retrying");
            return Ok(Driven::Soon);
        }
    }
    let slot = backup.annotations().get(SLOT_ANNOTATION).cloned();
    let source = json!({
        "apiVersion": ctx.deps.primary.api_version,
        "kind": ctx.deps.primary.kind,
        "labels": primary.labels(),
        "spec": primary.body().get("spec").cloned().unwrap_or(Value::Null),
    });
    let status = json!({
        "phase": "Running",
        "slot": slot,
        "primaryUid": uid,
        "generation": primary.metadata.generation,
        "plugin": ctx.deps.plugin,
        "pluginVersion": stable.plugin.manifest().version,
        "job": job_name,
        "startTime": now_text(),
        "source": source,
    });
    if let Err(error) = RunnerContext::patch_status(&api, &backup_name, status).await {
        tracing::warn!(%error, backup = %backup_name, "cannot record the running backup");
        return Ok(Driven::Soon);
    }
    let message = format!("backup Job {job_name} started");
    ctx.resource_event(
        &resources::backup_resource(),
        backup,
        false,
        Reason::BackupStarted,
        &message,
    )
    .await;
    Ok(Driven::Moved)
}

/// `Running`: reads the Job; completes or fails the Backup when it ends.
async fn follow(
    ctx: &RunnerContext,
    backup: &Backup,
    namespace: &str,
) -> Result<Driven, StepFailure> {
    let status = backup.status.clone().unwrap_or_default();
    let job_name = status
        .job
        .clone()
        .unwrap_or_else(|| naming::job_name(&backup.name_any(), "backup"));
    let job = match ctx.job(namespace, &job_name) {
        Some(job) => job,
        None => match ctx.jobs_api(namespace).get(&job_name).await {
            Ok(job) => serde_json::to_value(job).unwrap_or(Value::Null),
            Err(error) if not_found(&error) => {
                return Err(StepFailure {
                    reason: Reason::JobMissing,
                    message: format!(
                        "the backup Job {namespace}/{job_name} is gone before it finished (deleted by someone?)"
                    ),
                });
            }
            Err(_) => return Ok(Driven::Soon),
        },
    };
    match job::job_outcome(&job) {
        JobOutcome::Running => Ok(Driven::Idle),
        JobOutcome::Failed {
            reason, message, ..
        } => Err(StepFailure {
            reason: job::failure_reason(&reason),
            message: format!("the backup Job {job_name} failed: {message}"),
        }),
        JobOutcome::Complete { at } => {
            let pods = job_pods(ctx, namespace, &job_name).await;
            match job::reported_location(&pods) {
                Some(Ok(location)) => {
                    complete(ctx, backup, &location, at).await;
                    Ok(Driven::Moved)
                }
                Some(Err(problem)) => Err(StepFailure {
                    reason: Reason::LocationNotReported,
                    message: problem,
                }),
                None => {
                    let completed = at
                        .as_deref()
                        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                        .map_or_else(Utc::now, |t| t.with_timezone(&Utc));
                    if Utc::now() - completed > LOCATION_GRACE {
                        Err(StepFailure {
                            reason: Reason::LocationNotReported,
                            message: format!(
                                "the backup Job {job_name} succeeded but no Pod reported where the data went; its container must write {} to /dev/termination-log",
                                job::TERMINATION_MESSAGE_FORMAT
                            ),
                        })
                    } else {
                        Ok(Driven::Soon)
                    }
                }
            }
        }
    }
}

/// The Pods of Job `job_name`, as JSON (read fresh: the host caches no Pods).
async fn job_pods(ctx: &RunnerContext, namespace: &str, job_name: &str) -> Vec<Value> {
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(ctx.deps.host_client.clone(), namespace);
    match pods
        .list(&ListParams::default().labels(&format!("job-name={job_name}")))
        .await
    {
        Ok(list) => list
            .items
            .iter()
            .filter_map(|pod| serde_json::to_value(pod).ok())
            .collect(),
        Err(error) => {
            tracing::warn!(%error, job = %job_name, "cannot read the backup Job's Pods");
            Vec::new()
        }
    }
}

async fn complete(ctx: &RunnerContext, backup: &Backup, location: &str, at: Option<String>) {
    let namespace = backup.namespace().unwrap_or_default();
    let at = at.unwrap_or_else(now_text);
    let status = json!({
        "phase": "Completed",
        "location": location,
        "completionTime": at,
        "reason": null,
        "message": format!("backed up to {location}"),
    });
    if let Err(error) =
        RunnerContext::patch_status(&ctx.backups_api(&namespace), &backup.name_any(), status).await
    {
        tracing::warn!(%error, backup = %backup.name_any(), "cannot record the completed backup");
        return;
    }
    let trigger = Trigger::from_label(backup.labels().get(TRIGGER_LABEL).map(String::as_str));
    ctx.deps
        .metrics
        .backup_finished(&ctx.deps.plugin, trigger.as_str(), true);
    let message = format!("Backup {} completed: {location}", backup.name_any());
    notify(ctx, backup, false, Reason::BackupCompleted, &message).await;
}

async fn fail(ctx: &RunnerContext, backup: &Backup, failure: StepFailure) {
    let namespace = backup.namespace().unwrap_or_default();
    let status = json!({
        "phase": "Failed",
        "completionTime": now_text(),
        "reason": failure.reason.as_str(),
        "message": failure.message,
    });
    if let Err(error) =
        RunnerContext::patch_status(&ctx.backups_api(&namespace), &backup.name_any(), status).await
    {
        tracing::warn!(%error, backup = %backup.name_any(), "cannot record the failed backup");
        return;
    }
    let trigger = Trigger::from_label(backup.labels().get(TRIGGER_LABEL).map(String::as_str));
    ctx.deps
        .metrics
        .backup_finished(&ctx.deps.plugin, trigger.as_str(), false);
    let message = format!(
        "Backup {} failed ({}): {}",
        backup.name_any(),
        failure.reason,
        failure.message
    );
    notify(ctx, backup, true, Reason::BackupFailed, &message).await;
}

/// An event on the Backup and on its primary (when it still exists).
async fn notify(
    ctx: &RunnerContext,
    backup: &Backup,
    warning: bool,
    reason: Reason,
    message: &str,
) {
    ctx.resource_event(
        &resources::backup_resource(),
        backup,
        warning,
        reason,
        message,
    )
    .await;
    let namespace = backup.namespace().unwrap_or_default();
    if let Some(primary) = ctx.primary(&namespace, &backup.spec.primary.name) {
        ctx.primary_event(&primary, warning, reason, message).await;
    }
}

/// Now, as the API's RFC 3339 text (seconds).
pub(crate) fn now_text() -> String {
    Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}
