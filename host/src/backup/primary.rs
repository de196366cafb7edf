//! One primary's backups: its schedule (take, catch up, skip or report
//! missed slots), the final-backup finalizer, retention, and the summary in
//! its `status.backup`.
//!
//! Every decision is made by the pure functions of [`super::schedule`] and
//! [`super::retention`]; this module reads their inputs from the caches
//! and writes what they decide.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

use super::context::{RunnerContext, already_exists};
use super::drive::now_text;
use super::naming;
use super::resources::{
    self, Backup, FINAL_BACKUP_FINALIZER, KEEP_ANNOTATION, PRIMARY_LABEL, PRIMARY_UID_LABEL,
    SKIP_FINAL_BACKUP_ANNOTATION, SLOT_ANNOTATION, TRIGGER_LABEL, Trigger,
};
use super::retention::{
    BackupPhase, BackupRecord, DEFAULT_KEEP_FAILED, Retention, RetentionPolicy, to_delete,
};
use super::schedule::{
    RunningBackup, Schedule, ScheduleAction, ScheduleState, SkipReason, next_action,
};
use crate::cache::CachedObject;
use crate::contract::{BackupPlan, Reason};

/// How late a slot may still be caught up when the plan does not say.
pub const DEFAULT_STARTING_DEADLINE: Duration = Duration::from_secs(3600);

/// A failed final backup is tried again after this, doubling per attempt
/// up to [`FINAL_RETRY_CAP`].
const FINAL_RETRY_BASE: Duration = Duration::from_secs(10);
const FINAL_RETRY_CAP: Duration = Duration::from_secs(300);

/// One Backup of the primary as this module reads it.
struct Known {
    backup: Backup,
    phase: BackupPhase,
    trigger: Trigger,
    slot: Option<DateTime<Utc>>,
    created: DateTime<Utc>,
}

/// Handles `primary`; returns when to look again (the next slot, a retry).
///
/// `backups` are the primary's Backups (those labelled with its uid);
/// `restoring` the names of the Backups of its namespace an unfinished
/// Restore reads (retention keeps them).
pub(crate) async fn handle(
    ctx: &RunnerContext,
    primary: &CachedObject,
    backups: &[&Backup],
    restoring: &BTreeSet<String>,
) -> Option<DateTime<Utc>> {
    let namespace = primary.namespace().unwrap_or_default();
    let name = primary.name_any();
    let uid = primary.uid().unwrap_or_default();
    let known: Vec<Known> = backups.iter().map(|b| known(b)).collect();
    let plan = ctx.plan(primary).await;
    if primary.metadata.deletion_timestamp.is_some() {
        return final_backup(ctx, primary, &plan, &known).await;
    }
    let plan = match plan {
        Ok(Some(plan)) => plan,
        Ok(None) => {
            set_finalizer(ctx, primary, false).await;
            return None;
        }
        Err(error) => {
            let key = format!("plan/{uid}/{:?}", primary.metadata.generation);
            if ctx.first_report(key) {
                let message = format!(
                    "backup.plan of plugin {} failed for {} {namespace}/{name}: {error}",
                    ctx.deps.plugin, ctx.deps.primary.kind
                );
                ctx.primary_event(primary, true, Reason::BackupPlanFailed, &message)
                    .await;
            }
            return None;
        }
    };
    set_finalizer(ctx, primary, plan.backup_on_delete).await;
    let mut summary = current_summary(primary);
    let wake = schedule(ctx, primary, &plan, &known, &mut summary).await;
    retain(ctx, primary, &plan, &known, restoring).await;
    summarize(ctx, primary, &known, &mut summary);
    write_summary(ctx, primary, summary).await;
    wake
}

fn known(backup: &Backup) -> Known {
    let phase = match backup.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Completed") => BackupPhase::Completed,
        Some("Failed") => BackupPhase::Failed,
        Some("Running") => BackupPhase::Running,
        _ => BackupPhase::New,
    };
    Known {
        phase,
        trigger: Trigger::from_label(backup.labels().get(TRIGGER_LABEL).map(String::as_str)),
        slot: backup
            .annotations()
            .get(SLOT_ANNOTATION)
            .and_then(|t| parse_time(t)),
        created: backup
            .metadata
            .creation_timestamp
            .as_ref()
            .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
            .unwrap_or_else(Utc::now),
        backup: backup.clone(),
    }
}

fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn text(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The primary's `status.backup` as it is now (`{}` when absent).
fn current_summary(primary: &CachedObject) -> Value {
    primary
        .body()
        .pointer("/status/backup")
        .filter(|v| v.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// Runs the schedule; returns the next slot.
async fn schedule(
    ctx: &RunnerContext,
    primary: &CachedObject,
    plan: &BackupPlan,
    known: &[Known],
    summary: &mut Value,
) -> Option<DateTime<Utc>> {
    let uid = primary.uid().unwrap_or_default();
    let schedule = match Schedule::parse(&plan.schedule, plan.time_zone.as_deref()) {
        Ok(schedule) => schedule,
        Err(error) => {
            if ctx.first_report(format!("schedule/{uid}/{}", plan.schedule)) {
                let message = format!("plugin {}: {error}", ctx.deps.plugin);
                ctx.primary_event(primary, true, Reason::BackupScheduleInvalid, &message)
                    .await;
            }
            summary["schedule"] = json!(plan.schedule);
            set_condition(
                summary,
                Reason::BackupScheduleValid.as_str(),
                false,
                Reason::BackupScheduleInvalid.as_str(),
                &error.to_string(),
            );
            return None;
        }
    };
    set_condition(
        summary,
        Reason::BackupScheduleValid.as_str(),
        true,
        Reason::BackupScheduleValid.as_str(),
        "the schedule parses",
    );
    let now = Utc::now();
    let described = format!("{} ({})", schedule.expression(), schedule.time_zone());
    // A new or changed schedule counts its slots from now: the slots of a
    // schedule that did not apply yet are not missed.
    let counting_from = if summary["schedule"].as_str() == Some(described.as_str()) {
        summary["countingFrom"]
            .as_str()
            .and_then(parse_time)
            .unwrap_or(now)
    } else {
        summary["schedule"] = json!(described);
        summary["countingFrom"] = json!(text(now));
        now
    };
    let recorded = summary["lastScheduleTime"].as_str().and_then(parse_time);
    let newest_slot = known.iter().filter_map(|k| k.slot).max();
    let running = known
        .iter()
        .filter(|k| matches!(k.phase, BackupPhase::New | BackupPhase::Running))
        .max_by_key(|k| k.created)
        .map(|k| RunningBackup {
            name: k.backup.name_any(),
            slot: k.slot,
        });
    let state = ScheduleState {
        counting_from,
        last_scheduled: recorded.max(newest_slot),
        running,
    };
    let deadline = plan
        .starting_deadline_seconds
        .map_or(DEFAULT_STARTING_DEADLINE, Duration::from_secs);
    let decision = next_action(&schedule, &state, now, deadline);
    act(
        ctx,
        primary,
        decision.action.clone(),
        &described,
        deadline,
        summary,
    )
    .await;
    summary["lastScheduleTime"] = decision.last_schedule_time.map(text).into();
    summary["nextScheduleTime"] = decision.next_schedule_time.map(text).into();
    decision.next_schedule_time
}

/// Carries out `action` (the schedule's decision) for `primary`: creates
/// the Backup, records the skipped or missed slots (event, metric,
/// condition, count).
async fn act(
    ctx: &RunnerContext,
    primary: &CachedObject,
    action: ScheduleAction,
    described: &str,
    deadline: Duration,
    summary: &mut Value,
) {
    let kind = &ctx.deps.primary.kind;
    let name = primary.name_any();
    match action {
        ScheduleAction::Wait => {}
        ScheduleAction::Take { slot } => {
            create_backup(ctx, primary, Trigger::Scheduled, Some(slot), 1).await;
            set_condition(
                summary,
                Reason::BackupScheduleMissed.as_str(),
                false,
                Reason::BackupOnSchedule.as_str(),
                "no slot was missed",
            );
        }
        ScheduleAction::CatchUp { slot, missed } => {
            let backup = create_backup(ctx, primary, Trigger::Scheduled, Some(slot), 1).await;
            let message = format!(
                "{missed} slot(s) of schedule {described} passed while no host acted on them; caught up once with Backup {backup} for the last one ({})",
                text(slot)
            );
            report_missed(
                ctx,
                primary,
                summary,
                missed,
                Reason::BackupCaughtUp,
                &message,
            )
            .await;
        }
        ScheduleAction::Skip {
            slot,
            reason: SkipReason::AlreadyRunning { running },
            missed_before,
        } => {
            ctx.deps.metrics.backup_slots_skipped(&ctx.deps.plugin, 1);
            add_count(summary, "skippedSlots", 1);
            let message = format!(
                "slot {} of {kind} {name} skipped: Backup {running} still runs (one backup at a time)",
                text(slot)
            );
            ctx.primary_event(primary, true, Reason::BackupSkipped, &message)
                .await;
            if missed_before > 0 {
                let message = format!("{missed_before} slot(s) before {} were missed", text(slot));
                let reason = Reason::BackupScheduleMissed;
                report_missed(ctx, primary, summary, missed_before, reason, &message).await;
            }
        }
        ScheduleAction::Missed {
            missed,
            last_missed,
        } => {
            let message = format!(
                "{missed} slot(s) of schedule {described} were missed, the last at {}, past the starting deadline of {} s: no backup taken for them",
                text(last_missed),
                deadline.as_secs()
            );
            let reason = Reason::BackupScheduleMissed;
            report_missed(ctx, primary, summary, missed, reason, &message).await;
        }
    }
}

/// Reports `count` missed slots of `primary`: the metric, the count and
/// the `BackupScheduleMissed` condition in `summary` (with `reason`), and
/// a Warning event.
async fn report_missed(
    ctx: &RunnerContext,
    primary: &CachedObject,
    summary: &mut Value,
    count: u32,
    reason: Reason,
    message: &str,
) {
    ctx.deps
        .metrics
        .backup_slots_missed(&ctx.deps.plugin, count);
    add_count(summary, "missedSlots", count);
    let condition = Reason::BackupScheduleMissed;
    set_condition(summary, condition.as_str(), true, reason.as_str(), message);
    ctx.primary_event(primary, true, condition, message).await;
}

/// Creates the Backup of `primary` for `trigger` (and `slot`, or the
/// `attempt`-th final one); adopts it when it exists already. Returns its
/// name.
async fn create_backup(
    ctx: &RunnerContext,
    primary: &CachedObject,
    trigger: Trigger,
    slot: Option<DateTime<Utc>>,
    attempt: u32,
) -> String {
    let namespace = primary.namespace().unwrap_or_default();
    let primary_name = primary.name_any();
    let name = match (trigger, slot) {
        (Trigger::Final, _) => {
            naming::final_backup_name(&primary_name, &primary.uid().unwrap_or_default(), attempt)
        }
        (_, Some(slot)) => naming::scheduled_backup_name(&primary_name, slot),
        (_, None) => naming::manual_backup_name(&primary_name, Utc::now()),
    };
    let mut annotations = serde_json::Map::new();
    if let Some(slot) = slot {
        annotations.insert(SLOT_ANNOTATION.into(), json!(text(slot)));
    }
    let object = json!({
        "apiVersion": format!("{}/{}", resources::GROUP, resources::VERSION),
        "kind": "Backup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                PRIMARY_LABEL: primary_name,
                PRIMARY_UID_LABEL: primary.uid().unwrap_or_default(),
                TRIGGER_LABEL: trigger.as_str(),
            },
            "annotations": annotations,
        },
        "spec": {"primary": {
            "apiVersion": ctx.deps.primary.api_version,
            "kind": ctx.deps.primary.kind,
            "name": primary_name,
        }},
    });
    let Ok(object) = serde_json::from_value::<DynamicObject>(object) else {
        return name;
    };
    match ctx
        .backups_api(&namespace)
        .create(&PostParams::default(), &object)
        .await
    {
        Ok(_) => {
            tracing::info!(backup = %name, %namespace, trigger = trigger.as_str(), "backup created");
        }
        // The same slot decided again (a retry, a restart, a new leader):
        // the existing Backup is this slot's; its uid label tells its
        // primary, and a Backup of a former namesake fails on its own.
        Err(error) if already_exists(&error) => {}
        Err(error) => tracing::warn!(%error, backup = %name, "cannot create the Backup"),
    }
    name
}

/// Deletes the Backups retention lets go (their Jobs go with them).
async fn retain(
    ctx: &RunnerContext,
    primary: &CachedObject,
    plan: &BackupPlan,
    known: &[Known],
    restoring: &BTreeSet<String>,
) {
    let policy = RetentionPolicy {
        keep_last: plan.retention.keep_last,
        keep_failed: plan.retention.keep_failed.unwrap_or(DEFAULT_KEEP_FAILED),
        always_keep_completed: plan.retention.always_keep_completed.unwrap_or(1),
    };
    let retention = match Retention::new(policy) {
        Ok(retention) => retention,
        Err(error) => {
            let uid = primary.uid().unwrap_or_default();
            if ctx.first_report(format!("retention/{uid}/{policy:?}")) {
                let message = format!("plugin {}: {error}; no Backup is deleted", ctx.deps.plugin);
                ctx.primary_event(primary, true, Reason::BackupRetentionInvalid, &message)
                    .await;
            }
            return;
        }
    };
    // Final backups are kept (the primary's last state is not rotated
    // out), and so are Backups a Restore reads now.
    let records: Vec<BackupRecord> = known
        .iter()
        .filter(|k| k.trigger != Trigger::Final)
        .filter(|k| !restoring.contains(&k.backup.name_any()))
        .filter(|k| {
            k.backup
                .annotations()
                .get(KEEP_ANNOTATION)
                .map(String::as_str)
                != Some("true")
        })
        .map(|k| BackupRecord {
            name: k.backup.name_any(),
            phase: k.phase,
            created: k.created,
        })
        .collect();
    let namespace = primary.namespace().unwrap_or_default();
    let api = ctx.backups_api(&namespace);
    for name in to_delete(&retention, &records) {
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(_) => tracing::info!(backup = %name, %namespace, "backup deleted by retention"),
            Err(error) => tracing::warn!(%error, backup = %name, "cannot delete the Backup"),
        }
    }
}

/// The newest completed and failed Backups into `summary`, and the age
/// metric.
fn summarize(ctx: &RunnerContext, primary: &CachedObject, known: &[Known], summary: &mut Value) {
    let newest = |phase: BackupPhase| {
        known
            .iter()
            .filter(|k| k.phase == phase)
            .max_by_key(|k| (k.created, k.backup.name_any()))
    };
    if let Some(good) = newest(BackupPhase::Completed) {
        let completed = good
            .backup
            .status
            .as_ref()
            .and_then(|s| s.completion_time.clone());
        summary["lastSuccessfulBackup"] = json!(good.backup.name_any());
        summary["lastBackupTime"] = completed.clone().into();
        if let Some(at) = completed.as_deref().and_then(parse_time) {
            ctx.measure_last_success(
                &primary.namespace().unwrap_or_default(),
                &primary.name_any(),
                at.timestamp(),
            );
        }
    }
    if let Some(bad) = newest(BackupPhase::Failed) {
        summary["lastFailedBackup"] = json!(bad.backup.name_any());
    }
}

/// Writes `summary` as `status.backup` when it changed.
async fn write_summary(ctx: &RunnerContext, primary: &CachedObject, mut summary: Value) {
    // An unset field is absent, as the API server stores it (a merge
    // patch's null removes it), so an unchanged summary compares equal.
    if let Some(fields) = summary.as_object_mut() {
        fields.retain(|_, value| !value.is_null());
    }
    if summary == current_summary(primary) {
        return;
    }
    let namespace = primary.namespace().unwrap_or_default();
    let api = ctx.primaries_api(&namespace);
    if let Err(error) =
        RunnerContext::patch_status(&api, &primary.name_any(), json!({ "backup": summary })).await
    {
        tracing::warn!(%error, primary = %primary.name_any(), "cannot write status.backup");
    }
}

fn add_count(summary: &mut Value, field: &str, count: u32) {
    let before = summary[field].as_u64().unwrap_or(0);
    summary[field] = json!(before.saturating_add(u64::from(count)));
}

/// Sets condition `kind` in `summary.conditions`, keeping its transition
/// time when the status does not change.
fn set_condition(summary: &mut Value, kind: &str, status: bool, reason: &str, message: &str) {
    let status = if status { "True" } else { "False" };
    if !summary["conditions"].is_array() {
        summary["conditions"] = json!([]);
    }
    let Some(conditions) = summary["conditions"].as_array_mut() else {
        return;
    };
    let previous = conditions.iter().position(|c| c["type"] == kind);
    let transition = previous
        .and_then(|i| {
            (conditions[i]["status"] == status).then(|| conditions[i]["lastTransitionTime"].clone())
        })
        .unwrap_or_else(|| json!(now_text()));
    let condition = json!({
        "type": kind, "status": status, "reason": reason,
        "message": crate::util::truncate(message, 1000),
        "lastTransitionTime": transition,
    });
    match previous {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

/// Adds or removes the final-backup finalizer as the plan asks.
async fn set_finalizer(ctx: &RunnerContext, primary: &CachedObject, wanted: bool) {
    let has = primary
        .finalizers()
        .iter()
        .any(|f| f == FINAL_BACKUP_FINALIZER);
    if has == wanted {
        return;
    }
    let namespace = primary.namespace().unwrap_or_default();
    let api: Api<DynamicObject> = ctx.primaries_api(&namespace);
    let object = primary.to_dynamic();
    let result = if wanted {
        crate::apply::finalizer::add(&api, &object, FINAL_BACKUP_FINALIZER).await
    } else {
        crate::apply::finalizer::remove(&api, &object, FINAL_BACKUP_FINALIZER).await
    };
    if let Err(error) = result {
        tracing::warn!(%error, primary = %primary.name_any(), "cannot update the final-backup finalizer");
    }
}

/// A deleting primary: takes the final backup and lets the object go when
/// it completed (or a person skipped it).
async fn final_backup(
    ctx: &RunnerContext,
    primary: &CachedObject,
    plan: &Result<Option<BackupPlan>, String>,
    known: &[Known],
) -> Option<DateTime<Utc>> {
    if !primary
        .finalizers()
        .iter()
        .any(|f| f == FINAL_BACKUP_FINALIZER)
    {
        return None;
    }
    let name = primary.name_any();
    let kind = ctx.deps.primary.kind.clone();
    if primary
        .annotations()
        .get(SKIP_FINAL_BACKUP_ANNOTATION)
        .map(String::as_str)
        == Some("true")
    {
        set_finalizer(ctx, primary, false).await;
        let message = format!(
            "the final backup of {kind} {name} was skipped ({SKIP_FINAL_BACKUP_ANNOTATION}=true); it is deleted without one"
        );
        ctx.primary_event(primary, true, Reason::FinalBackupSkipped, &message)
            .await;
        return None;
    }
    if matches!(plan, Ok(None)) {
        // The plan no longer asks for backups: nothing to wait for.
        set_finalizer(ctx, primary, false).await;
        return None;
    }
    let mut finals: Vec<&Known> = known
        .iter()
        .filter(|k| k.trigger == Trigger::Final)
        .collect();
    finals.sort_by_key(|k| k.created);
    if let Some(done) = finals.iter().find(|k| k.phase == BackupPhase::Completed) {
        set_finalizer(ctx, primary, false).await;
        let message = format!(
            "final backup {} of {kind} {name} completed; the object is released",
            done.backup.name_any()
        );
        ctx.primary_event(primary, false, Reason::FinalBackupCompleted, &message)
            .await;
        return None;
    }
    if finals
        .iter()
        .any(|k| matches!(k.phase, BackupPhase::New | BackupPhase::Running))
    {
        return None;
    }
    let attempt = u32::try_from(finals.len())
        .unwrap_or(u32::MAX)
        .saturating_add(1);
    if let Some(failed) = finals.last() {
        let failed_name = failed.backup.name_any();
        let why = failed
            .backup
            .status
            .as_ref()
            .and_then(|s| s.message.clone())
            .unwrap_or_default();
        let mut summary = current_summary(primary);
        let message = format!(
            "final backup {failed_name} of {kind} {name} failed: {why}; the object is kept and the backup retried. To delete it without a final backup: kubectl annotate {} {name} {SKIP_FINAL_BACKUP_ANNOTATION}=true",
            ctx.deps.primary.plural
        );
        set_condition(
            &mut summary,
            Reason::FinalBackupFailed.as_str(),
            true,
            Reason::FinalBackupFailed.as_str(),
            &message,
        );
        write_summary(ctx, primary, summary).await;
        if ctx.first_report(format!("final-failed/{failed_name}")) {
            ctx.primary_event(primary, true, Reason::FinalBackupFailed, &message)
                .await;
        }
        let exponent = u32::try_from(finals.len().saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(8);
        let backoff = FINAL_RETRY_BASE
            .saturating_mul(2u32.saturating_pow(exponent))
            .min(FINAL_RETRY_CAP);
        let failed_at = failed
            .backup
            .status
            .as_ref()
            .and_then(|s| s.completion_time.as_deref())
            .and_then(parse_time)
            .unwrap_or(failed.created);
        let retry_at = failed_at + chrono::TimeDelta::from_std(backoff).unwrap_or_default();
        if Utc::now() < retry_at {
            return Some(retry_at);
        }
    }
    if let Err(error) = plan {
        let message = format!("backup.plan failed, the final backup cannot be taken yet: {error}");
        if ctx.first_report(format!(
            "final-plan/{}/{error}",
            primary.uid().unwrap_or_default()
        )) {
            ctx.primary_event(primary, true, Reason::FinalBackupFailed, &message)
                .await;
        }
        return Some(Utc::now() + chrono::TimeDelta::seconds(30));
    }
    let backup = create_backup(ctx, primary, Trigger::Final, None, attempt).await;
    let message = format!("{kind} {name} is being deleted: final backup {backup} taken first");
    ctx.primary_event(primary, false, Reason::FinalBackupStarted, &message)
        .await;
    None
}
