//! The `status` of a WasmPlugin: what serves, the Ready and Degraded
//! conditions, the per-version counts, and the storage migration of its
//! plugin's CRD (the `StorageMigration` condition, `status.storageMigration`).

use serde_json::{Value, json};

use super::spec::{CanaryStatus, SignatureStatus};
use crate::contract::Reason;
use crate::oci::signature::Verified;
use crate::registry::{
    AccessReport, ActivationOptions, AdmissionAudit, LoadedVersion, ServingVersions, VersionStats,
};
use crate::webhook::STORAGE_CHECK;
use crate::webhook::{StorageMigrationProgress, StorageMigrationState};

/// The condition type of a storage migration.
pub const STORAGE_MIGRATION: &str = "StorageMigration";

/// Refused objects named in the condition and in `status.storageMigration`.
const MAX_REFUSED_NAMED: usize = 10;

/// The version a WasmPlugin serves now: the registry's [`LoadedVersion`]
/// (name, version, digest, source) and what the WasmPlugin adds to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Serving {
    /// The version as the registry loaded it.
    pub loaded: LoadedVersion,
    /// `file`, `configMap` or `oci`.
    pub source_kind: String,
    /// RFC 3339 time of the load.
    pub loaded_at: String,
}

/// What the worker loaded last, to tell a real change from a repeat.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Loaded {
    /// The version that serves.
    pub(crate) serving: Serving,
    /// Config, limits and concurrency it was activated with.
    pub(crate) options: ActivationOptions,
    /// For OCI: the manifest digest pulled.
    pub(crate) revision: Option<String>,
    /// For OCI under a verification policy: who signed it, and when that
    /// was verified.
    pub(crate) signature: Option<SignatureStatus>,
}

/// Why the latest source content was not (or could not be) loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Condition reason (`SourceNotFound`, `InvalidComponent`, ...).
    pub reason: String,
    /// What is wrong and what to do.
    pub message: String,
}

/// The canary's share of the status: its conditions and `status.canary`.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryPart {
    /// `CanaryProgressing`, `CanaryFailed`, `CanaryPromoted`.
    pub conditions: Vec<Condition>,
    /// `status.canary`.
    pub status: CanaryStatus,
}

/// A [`Problem`] of condition reason `reason`.
pub(super) fn problem(reason: &str, message: String) -> Problem {
    Problem {
        reason: reason.to_string(),
        message,
    }
}

/// The wall-clock time as status and events show it (RFC 3339, seconds).
pub(super) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Builds the status from what serves, the current problem, the counts,
/// the canary and the storage migration this host runs for the plugin's
/// CRD (`None`: none this run; the last condition written stays).
/// `previous` is the status as last written: condition transition times
/// are kept while a condition's status does not change.
#[allow(clippy::too_many_arguments)]
pub fn build(
    serving: Option<&Serving>,
    problem: Option<&Problem>,
    versions: &[VersionStats],
    canary: Option<&CanaryPart>,
    migration: Option<&StorageMigrationProgress>,
    generation: Option<i64>,
    previous: &Value,
    now: &str,
) -> Value {
    let (ready, degraded) = conditions(serving, problem);
    let mut all = vec![ready, degraded];
    if let Some(canary) = canary {
        all.extend(canary.conditions.iter().cloned());
    }
    let storage = storage_migration(migration, previous);
    if let Some((condition, _)) = &storage {
        all.push(condition.clone());
    }
    let conditions: Vec<Value> = all
        .into_iter()
        .map(|(kind, status, reason, message)| {
            let since = transition_time(previous, kind, status, now);
            json!({
                "type": kind, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": since, "observedGeneration": generation,
            })
        })
        .collect();
    let mut status = json!({
        "observedGeneration": generation,
        "conditions": conditions,
        "versions": versions,
    });
    match canary {
        Some(canary) => {
            status["canary"] = serde_json::to_value(&canary.status).unwrap_or(Value::Null);
        }
        // A merge patch removes `canary` only when told to.
        None if previous.get("canary").is_some() => status["canary"] = Value::Null,
        None => {}
    }
    if let Some((_, Some(fields))) = storage {
        status["storageMigration"] = fields;
    }
    if let Some(s) = serving {
        status["plugin"] = json!(s.loaded.name);
        status["version"] = json!(s.loaded.version);
        status["digest"] = json!(s.loaded.digest);
        status["source"] = json!(s.loaded.source);
        status["sourceKind"] = json!(s.source_kind);
        status["loadedAt"] = json!(s.loaded_at);
    }
    status
}

/// Sets `status.ociManifestDigest` to the OCI manifest digest the serving
/// version was pulled as (`None`: not from OCI, so a value written for an
/// earlier OCI source is removed by the merge patch).
pub fn add_oci_manifest_digest(status: &mut Value, digest: Option<&str>, previous: &Value) {
    set_or_clear(
        status,
        "ociManifestDigest",
        digest.map(|d| json!(d)),
        previous,
    );
}

/// Sets `status.signature` to the serving version's verified signature
/// (`None`: no policy applied, so an earlier value is removed).
pub fn add_signature(status: &mut Value, signature: Option<&SignatureStatus>, previous: &Value) {
    let value = signature.and_then(|s| serde_json::to_value(s).ok());
    set_or_clear(status, "signature", value, previous);
}

/// The status of a verified signature, verified now.
pub(crate) fn signature_status(verified: Option<&Verified>) -> Option<SignatureStatus> {
    verified.map(|v| SignatureStatus {
        digest: v.digest.clone(),
        signer: v.signer.to_string(),
        format: v.format.to_string(),
        verified_at: now(),
    })
}

/// Sets `status[field]`, or removes it through the merge patch when
/// `previous` had it and `value` is `None`.
fn set_or_clear(status: &mut Value, field: &str, value: Option<Value>, previous: &Value) {
    match value {
        Some(value) => status[field] = value,
        None if previous.get(field).is_some() => status[field] = Value::Null,
        None => {}
    }
}

/// The condition type shown while the API server forbids the plugin's
/// lists, watches or writes.
pub const FORBIDDEN: &str = "Forbidden";

/// The condition type shown while primaries lie outside the plugin's grant.
pub const OUTSIDE_GRANT: &str = "OutsideGrant";

/// Adds what the plugin's controller cannot reach to a `status` made by
/// [`build`]: a `Forbidden` condition while RBAC refuses a list, watch or
/// write (the API server's messages name verb, resource and identity), an
/// `OutsideGrant` condition and `status.outsideGrant` (`count`, a few
/// `examples`) while primaries lie in namespaces the grant excludes. Both
/// go away (a merge patch of `outsideGrant: null`) once healed.
/// `previous` keeps the conditions' transition times, as in [`build`].
pub fn add_access(
    status: &mut Value,
    access: &AccessReport,
    plugin: &str,
    previous: &Value,
    now: &str,
) {
    let mut added: Vec<Condition> = Vec::new();
    if !access.forbidden.is_empty() {
        added.push((
            FORBIDDEN,
            "True",
            Reason::Forbidden.as_str().into(),
            format!(
                "the API server forbids what plugin {plugin} needs: {}. Grant it with the RBAC `wasm-operator plugin rbac --wasm-plugin NAME` prints (apply it for the plugin's service account, or add the rules to the host's own ClusterRole); the condition clears by itself once the API server allows it.",
                access.forbidden.join("; ")
            ),
        ));
    }
    let outside = &access.outside_grant;
    if outside.count > 0 {
        let more = outside.count.saturating_sub(outside.examples.len());
        added.push((
            OUTSIDE_GRANT,
            "True",
            Reason::OutsideGrant.as_str().into(),
            format!(
                "{} object(s) of plugin {plugin}'s primary kind lie in namespaces its grant (spec.permissions.namespaces) excludes and are not reconciled: {}{}. Widen the grant or move them.",
                outside.count,
                outside.examples.join(", "),
                if more > 0 { format!(" and {more} more") } else { String::new() }
            ),
        ));
        status["outsideGrant"] = json!({ "count": outside.count, "examples": outside.examples });
    } else if previous.get("outsideGrant").is_some_and(|v| !v.is_null()) {
        // A merge patch removes `outsideGrant` only when told to.
        status["outsideGrant"] = Value::Null;
    }
    if added.is_empty() {
        return;
    }
    let generation = status
        .get("observedGeneration")
        .cloned()
        .unwrap_or(Value::Null);
    let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return;
    };
    for (kind, state, reason, message) in added {
        let since = transition_time(previous, kind, state, now);
        conditions.push(json!({
            "type": kind, "status": state, "reason": reason, "message": message,
            "lastTransitionTime": since, "observedGeneration": generation,
        }));
    }
}

/// Adds what a plugin's controller reports beside its reconciles (held by
/// its `versions`) to a `status` made by [`build`]: what it cannot reach
/// ([`add_access`]) and the latest audit of its stored objects
/// ([`add_admission_audit`]). `plugin` is the serving plugin's name.
pub fn add_reports(
    status: &mut Value,
    plugin: Option<&str>,
    versions: Option<&ServingVersions>,
    previous: &Value,
) {
    if let (Some(plugin), Some(versions)) = (plugin, versions) {
        add_access(
            status,
            &versions.access().report(),
            plugin,
            previous,
            &now(),
        );
    }
    let audit = versions.and_then(|v| v.admission_audit().latest());
    add_admission_audit(status, audit.as_ref(), previous);
}

/// Sets `status.admissionAudit` to the latest audit of the plugin's stored
/// objects against its serving version's `validate`, or removes it (a
/// merge patch of `null`) when there is none (the serving version does
/// not validate, or nothing serves). No condition: a violation is a
/// finding about objects, not a state of the plugin; the events on the
/// objects and the metric carry it.
pub fn add_admission_audit(status: &mut Value, audit: Option<&AdmissionAudit>, previous: &Value) {
    match audit {
        Some(audit) => {
            status["admissionAudit"] = serde_json::to_value(audit).unwrap_or(Value::Null);
        }
        None if previous.get("admissionAudit").is_some_and(|v| !v.is_null()) => {
            status["admissionAudit"] = Value::Null;
        }
        None => {}
    }
}

/// A condition: type, status, reason, message.
pub type Condition = (&'static str, &'static str, String, String);

/// The `StorageMigration` condition and, when they change,
/// `status.storageMigration`'s fields, from what the migration published.
/// Without news (`None`, or nothing to migrate while the last condition
/// already says it is settled) the last condition written stays and the
/// fields are left alone. The condition is `True` while objects may still
/// be stored in an old version (in progress, refused, interrupted),
/// `False` once `storedVersions` is the storage version alone.
pub fn storage_migration(
    progress: Option<&StorageMigrationProgress>,
    previous: &Value,
) -> Option<(Condition, Option<Value>)> {
    let last = previous
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(STORAGE_MIGRATION))
        })
        .map(|c| {
            let text = |key: &str| {
                c.get(key)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let status = if text("status") == "True" {
                "True"
            } else {
                "False"
            };
            (STORAGE_MIGRATION, status, text("reason"), text("message"))
        });
    let Some(p) = progress else {
        return last.map(|c| (c, None));
    };
    if p.state == StorageMigrationState::AlreadyMigrated {
        // Only news when the last condition still says objects may be in
        // an old version (a run another replica finished, a restart).
        match last {
            Some(c) if c.1 == "True" => {}
            other => return other.map(|c| (c, None)),
        }
    }
    let stored = p.stored_versions.join(", ");
    let of = match p.total {
        Some(total) => format!("{}/{total}", p.migrated),
        None => format!("{} (total not known yet)", p.migrated),
    };
    let named = named_refusals(&p.refused);
    let (status, reason, message) = match p.state {
        StorageMigrationState::InProgress => {
            let mut message = format!(
                "rewriting the objects of CRD {} in storage version {} (storedVersions [{stored}]): {of} objects",
                p.crd, p.storage_version
            );
            if !p.refused.is_empty() {
                message.push_str(&format!(
                    "; the last run could not rewrite {}: {named}",
                    p.refused.len()
                ));
            }
            ("True", Reason::InProgress, message)
        }
        StorageMigrationState::Completed => (
            "False",
            Reason::Completed,
            format!(
                "{} objects of CRD {} rewritten in storage version {}; storedVersions was [{stored}], now [{}]: older versions can be removed from the CRD",
                p.migrated, p.crd, p.storage_version, p.storage_version
            ),
        ),
        StorageMigrationState::AlreadyMigrated => (
            "False",
            Reason::AlreadyMigrated,
            format!(
                "every object of CRD {} is stored in {} (storedVersions [{stored}]); nothing to migrate",
                p.crd, p.storage_version
            ),
        ),
        StorageMigrationState::ObjectsRefused => (
            "True",
            Reason::ObjectsRefused,
            format!(
                "the API server refused to rewrite {} of {} objects of CRD {} in {}: {named}. storedVersions stays [{stored}] until they can be rewritten; fix what refuses them (an admission webhook, a quota, …). Retried every {}s.",
                p.refused.len(),
                p.total.unwrap_or(p.migrated),
                p.crd,
                p.storage_version,
                STORAGE_CHECK.as_secs()
            ),
        ),
        StorageMigrationState::Interrupted => (
            "True",
            Reason::Interrupted,
            format!(
                "the storage migration of CRD {} to {} stopped after {of} objects: {}. It resumes from its saved progress within {}s.",
                p.crd,
                p.storage_version,
                p.error.as_deref().unwrap_or("unknown error"),
                STORAGE_CHECK.as_secs()
            ),
        ),
    };
    let counted = !matches!(p.state, StorageMigrationState::AlreadyMigrated);
    let fields = json!({
        "crd": p.crd,
        "storageVersion": p.storage_version,
        "storedVersions": p.stored_versions,
        "migrated": counted.then_some(p.migrated),
        "total": if counted { p.total } else { None },
        "refused": p.refused.iter().take(MAX_REFUSED_NAMED).collect::<Vec<_>>(),
    });
    Some((
        (STORAGE_MIGRATION, status, reason.as_str().into(), message),
        Some(fields),
    ))
}

/// The refused objects for a message: up to [`MAX_REFUSED_NAMED`], then a
/// count.
/// When condition `kind` last became `status`: its `lastTransitionTime` in
/// the `previous` status when it already had that status there, else `now`
/// (a condition keeps its transition time while its status holds).
fn transition_time<'a>(previous: &'a Value, kind: &str, status: &str, now: &'a str) -> &'a str {
    previous
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter().find(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some(status)
            })
        })
        .and_then(|c| c.get("lastTransitionTime"))
        .and_then(Value::as_str)
        .unwrap_or(now)
}

fn named_refusals(refused: &[String]) -> String {
    let mut named = refused
        .iter()
        .take(MAX_REFUSED_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if refused.len() > MAX_REFUSED_NAMED {
        named.push_str(&format!("; and {} more", refused.len() - MAX_REFUSED_NAMED));
    }
    named
}

fn conditions(serving: Option<&Serving>, problem: Option<&Problem>) -> (Condition, Condition) {
    match (serving, problem) {
        (Some(s), None) => (
            (
                "Ready",
                "True",
                Reason::Loaded.as_str().into(),
                format!(
                    "{} {} ({}) from {} serves",
                    s.loaded.name, s.loaded.version, s.loaded.digest, s.loaded.source
                ),
            ),
            (
                "Degraded",
                "False",
                Reason::Loaded.as_str().into(),
                String::new(),
            ),
        ),
        (Some(s), Some(p)) => (
            (
                "Ready",
                "True",
                Reason::Loaded.as_str().into(),
                format!(
                    "the last good version {} {} ({}) keeps serving; the new one was rejected ({})",
                    s.loaded.name, s.loaded.version, s.loaded.digest, p.reason
                ),
            ),
            (
                "Degraded",
                "True",
                p.reason.clone(),
                format!(
                    "{} The last good version {} {} keeps serving.",
                    p.message, s.loaded.name, s.loaded.version
                ),
            ),
        ),
        (None, Some(p)) => (
            (
                "Ready",
                "False",
                p.reason.clone(),
                format!("no version serves: {}", p.message),
            ),
            ("Degraded", "True", p.reason.clone(), p.message.clone()),
        ),
        (None, None) => (
            (
                "Ready",
                "False",
                "Loading".into(),
                "the plugin is being fetched and compiled".into(),
            ),
            ("Degraded", "False", "Loading".into(), String::new()),
        ),
    }
}

/// A serving version and a rejection, as the tests of status and of the
/// typed status use them.
#[cfg(test)]
pub(super) fn sample() -> (Serving, Problem) {
    let serving = Serving {
        loaded: LoadedVersion {
            name: "webapp".into(),
            version: "0.1.0".into(),
            digest: "sha256:ab".into(),
            source: "file:/x".into(),
        },
        source_kind: "file".into(),
        loaded_at: "2026-01-01T00:00:00Z".into(),
    };
    let problem = Problem {
        reason: Reason::InvalidComponent.as_str().into(),
        message: "not wasm.".into(),
    };
    (serving, problem)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`build`] with no version statistics, canary or storage migration.
    fn plain(
        serving: Option<&Serving>,
        problem: Option<&Problem>,
        generation: i64,
        previous: &Value,
        now: &str,
    ) -> Value {
        build(
            serving,
            problem,
            &[],
            None,
            None,
            Some(generation),
            previous,
            now,
        )
    }

    #[test]
    fn the_status_the_controller_writes_reads_back_typed() {
        let (serving, problem) = sample();
        let versions = [crate::registry::VersionStats {
            version: "0.1.0".into(),
            digest: "sha256:ab".into(),
            reconciles: 3,
            failures: 1,
            ..Default::default()
        }];
        let now = "2026-01-01T00:00:00Z";
        for written in [
            build(
                Some(&serving),
                Some(&problem),
                &versions,
                None,
                None,
                Some(2),
                &Value::Null,
                now,
            ),
            plain(None, None, 1, &Value::Null, now),
            // With a storage migration: its condition and counts.
            build(
                Some(&serving),
                None,
                &versions,
                None,
                Some(&crate::webhook::StorageMigrationProgress {
                    crd: "distributedkvs.kv.example.com".into(),
                    storage_version: "v1beta1".into(),
                    stored_versions: vec!["v1alpha1".into(), "v1beta1".into()],
                    state: crate::webhook::StorageMigrationState::ObjectsRefused,
                    migrated: 4,
                    total: Some(4),
                    refused: vec!["default/kv: denied".into()],
                    error: None,
                }),
                Some(3),
                &Value::Null,
                now,
            ),
        ] {
            let typed: super::super::spec::WasmPluginStatus =
                serde_json::from_value(written.clone()).unwrap();
            assert_eq!(serde_json::to_value(&typed).unwrap(), written);
        }
    }

    #[test]
    fn the_oci_manifest_digest_is_shown_beside_the_component_digest_and_cleared() {
        let (serving, _) = sample();
        let now = "2026-01-01T00:00:00Z";
        let mut status = plain(Some(&serving), None, 1, &Value::Null, now);
        add_oci_manifest_digest(&mut status, Some("sha256:cd"), &Value::Null);
        assert_eq!(status["ociManifestDigest"], "sha256:cd");
        assert_eq!(status["digest"], json!(serving.loaded.digest));
        let typed: super::super::spec::WasmPluginStatus =
            serde_json::from_value(status.clone()).unwrap();
        assert_eq!(typed.oci_manifest_digest.as_deref(), Some("sha256:cd"));
        // A later file source: the merge patch removes the old value.
        let mut next = plain(Some(&serving), None, 2, &status, now);
        add_oci_manifest_digest(&mut next, None, &status);
        assert_eq!(next["ociManifestDigest"], Value::Null);
        let mut quiet = plain(Some(&serving), None, 2, &Value::Null, now);
        add_oci_manifest_digest(&mut quiet, None, &Value::Null);
        assert!(quiet.get("ociManifestDigest").is_none());
    }

    #[test]
    fn degraded_keeps_ready_while_a_version_serves() {
        let (serving, problem) = sample();
        let first = plain(Some(&serving), None, 1, &Value::Null, "t1");
        assert_eq!(first["conditions"][0]["status"], "True");
        assert_eq!(first["conditions"][1]["status"], "False");
        let second = plain(Some(&serving), Some(&problem), 2, &first, "t2");
        assert_eq!(second["conditions"][0]["status"], "True");
        assert_eq!(second["conditions"][0]["lastTransitionTime"], "t1");
        assert_eq!(second["conditions"][1]["status"], "True");
        assert_eq!(second["conditions"][1]["reason"], "InvalidComponent");
        assert_eq!(second["conditions"][1]["lastTransitionTime"], "t2");
        assert_eq!(second["version"], "0.1.0");
        let none = plain(None, Some(&problem), 1, &Value::Null, "t");
        assert_eq!(none["conditions"][0]["status"], "False");
        assert!(none.get("version").is_none());
    }

    fn migration(state: StorageMigrationState) -> StorageMigrationProgress {
        StorageMigrationProgress {
            crd: "distributedkvs.kv.example.com".into(),
            storage_version: "v1beta1".into(),
            stored_versions: vec!["v1alpha1".into(), "v1beta1".into()],
            state,
            migrated: 3,
            total: Some(5),
            refused: Vec::new(),
            error: None,
        }
    }

    fn storage_condition(status: &Value) -> &Value {
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == STORAGE_MIGRATION)
            .unwrap()
    }

    #[test]
    fn a_storage_migration_shows_its_counts_and_refusals() {
        let (serving, _) = sample();
        let status_of = |progress: &StorageMigrationProgress, previous: &Value, now: &str| {
            build(
                Some(&serving),
                None,
                &[],
                None,
                Some(progress),
                Some(1),
                previous,
                now,
            )
        };
        let running = status_of(
            &migration(StorageMigrationState::InProgress),
            &Value::Null,
            "t1",
        );
        let condition = storage_condition(&running);
        assert_eq!(condition["status"], "True");
        assert_eq!(condition["reason"], "InProgress");
        assert!(
            condition["message"]
                .as_str()
                .unwrap()
                .contains("3/5 objects"),
            "{condition}"
        );
        assert_eq!(running["storageMigration"]["migrated"], 3);
        assert_eq!(running["storageMigration"]["total"], 5);

        let mut refused = migration(StorageMigrationState::ObjectsRefused);
        refused.refused = (0..12).map(|i| format!("default/kv-{i}: denied")).collect();
        let stuck = status_of(&refused, &running, "t2");
        let condition = storage_condition(&stuck);
        assert_eq!(condition["reason"], "ObjectsRefused");
        // Still True: objects may still be stored in v1alpha1.
        assert_eq!(condition["lastTransitionTime"], "t1");
        let message = condition["message"].as_str().unwrap();
        assert!(message.contains("default/kv-9: denied"), "{message}");
        assert!(!message.contains("default/kv-10"), "{message}");
        assert!(message.contains("and 2 more"), "{message}");
        assert_eq!(
            stuck["storageMigration"]["refused"]
                .as_array()
                .unwrap()
                .len(),
            10
        );

        let mut done = migration(StorageMigrationState::Completed);
        done.migrated = 5;
        let finished = status_of(&done, &stuck, "t3");
        let condition = storage_condition(&finished);
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["reason"], "Completed");
        assert_eq!(condition["lastTransitionTime"], "t3");
        assert!(
            condition["message"]
                .as_str()
                .unwrap()
                .contains("now [v1beta1]"),
            "{condition}"
        );
        assert_eq!(finished["storageMigration"]["refused"], json!([]));
    }

    #[test]
    fn nothing_to_migrate_is_news_only_after_a_migration_that_did_not_finish() {
        let (serving, _) = sample();
        let already = migration(StorageMigrationState::AlreadyMigrated);
        let status_of = |progress: Option<&StorageMigrationProgress>, previous: &Value| {
            build(
                Some(&serving),
                None,
                &[],
                None,
                progress,
                Some(1),
                previous,
                "t",
            )
        };
        // A plugin whose CRD never needed a migration gets no condition.
        let quiet = status_of(Some(&already), &Value::Null);
        assert!(
            quiet["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| c["type"] != STORAGE_MIGRATION),
            "{quiet}"
        );
        // A finished migration's condition and counts stay.
        let mut done = migration(StorageMigrationState::Completed);
        done.migrated = 5;
        let finished = status_of(Some(&done), &Value::Null);
        let kept = status_of(Some(&already), &finished);
        assert_eq!(storage_condition(&kept), storage_condition(&finished));
        assert!(kept.get("storageMigration").is_none(), "{kept}");
        let kept = status_of(None, &finished);
        assert_eq!(storage_condition(&kept), storage_condition(&finished));
        // One left in progress (a host stopped midway, finished elsewhere)
        // is settled.
        let running = status_of(
            Some(&migration(StorageMigrationState::InProgress)),
            &Value::Null,
        );
        let settled = status_of(Some(&already), &running);
        assert_eq!(storage_condition(&settled)["reason"], "AlreadyMigrated");
        assert_eq!(storage_condition(&settled)["status"], "False");
        assert_eq!(settled["storageMigration"]["migrated"], Value::Null);
    }

    #[test]
    fn forbidden_and_outside_grant_show_as_conditions_and_clear() {
        let (serving, _) = sample();
        let base = || plain(Some(&serving), None, 2, &Value::Null, "t0");
        let access = AccessReport {
            forbidden: vec![r#"list/watch staticsites: staticsites.example.com is forbidden: User "system:serviceaccount:ops:host" cannot list resource "staticsites""#.into()],
            outside_grant: crate::registry::OutsideGrant {
                count: 7,
                examples: vec!["default/a".into(), "default/b".into()],
            },
        };
        let mut status = base();
        add_access(&mut status, &access, "staticsite", &Value::Null, "t1");
        let condition = |status: &Value, kind: &str| {
            status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == kind)
                .cloned()
        };
        let forbidden = condition(&status, FORBIDDEN).unwrap();
        assert_eq!(forbidden["reason"], "Forbidden");
        assert_eq!(forbidden["status"], "True");
        let message = forbidden["message"].as_str().unwrap();
        for needle in [
            "cannot list",
            "staticsites",
            "system:serviceaccount:ops:host",
            "wasm-operator plugin rbac --wasm-plugin",
        ] {
            assert!(message.contains(needle), "{needle}: {message}");
        }
        assert_eq!(status["outsideGrant"]["count"], 7);
        assert_eq!(
            status["outsideGrant"]["examples"],
            json!(["default/a", "default/b"])
        );
        let outside = condition(&status, OUTSIDE_GRANT).unwrap();
        assert_eq!(outside["reason"], "OutsideGrant");
        assert!(
            outside["message"]
                .as_str()
                .unwrap()
                .contains("default/a, default/b and 5 more")
        );
        // Still forbidden later: the transition time stays.
        let mut again = base();
        add_access(&mut again, &access, "staticsite", &status, "t2");
        assert_eq!(
            condition(&again, FORBIDDEN).unwrap()["lastTransitionTime"],
            "t1"
        );
        // Healed: both conditions go, `outsideGrant` is removed.
        let mut healed = base();
        add_access(
            &mut healed,
            &AccessReport::default(),
            "staticsite",
            &again,
            "t3",
        );
        assert!(condition(&healed, FORBIDDEN).is_none());
        assert!(condition(&healed, OUTSIDE_GRANT).is_none());
        assert_eq!(healed["outsideGrant"], Value::Null);
        assert!(healed.get("outsideGrant").is_some());
        // Never shown: nothing to remove.
        let mut clean = base();
        add_access(
            &mut clean,
            &AccessReport::default(),
            "staticsite",
            &Value::Null,
            "t3",
        );
        assert_eq!(clean, base());
    }

    #[test]
    fn the_admission_audit_reads_back_typed_and_goes_away() {
        let (serving, _) = sample();
        let now = "2026-01-01T00:00:00Z";
        let mut audit = crate::registry::AdmissionAudit::starting("1.3.0", "sha256:ab", now.into());
        audit.allowed();
        audit.violation(crate::registry::AuditFinding {
            namespace: Some("default".into()),
            name: "big".into(),
            message: "spec.replicas must be at most 3 (plugin webapp 1.3.0)".into(),
        });
        let audit = audit.finished(now.into());
        let mut status = build(
            Some(&serving),
            None,
            &[],
            None,
            None,
            Some(1),
            &Value::Null,
            now,
        );
        add_admission_audit(&mut status, Some(&audit), &Value::Null);
        assert_eq!(status["admissionAudit"]["checked"], 2);
        assert_eq!(status["admissionAudit"]["violations"], 1);
        assert_eq!(status["admissionAudit"]["first"][0]["name"], "big");
        assert!(status["admissionAudit"]["firstError"].is_null());
        let typed: super::super::spec::WasmPluginStatus =
            serde_json::from_value(status.clone()).unwrap();
        assert_eq!(serde_json::to_value(&typed).unwrap(), status);
        // No audit any more (the version does not validate): removed by
        // the merge patch, and then left out.
        let mut next = build(Some(&serving), None, &[], None, None, Some(1), &status, now);
        add_admission_audit(&mut next, None, &status);
        assert!(next["admissionAudit"].is_null() && next.get("admissionAudit").is_some());
        let mut after = build(Some(&serving), None, &[], None, None, Some(1), &next, now);
        add_admission_audit(&mut after, None, &next);
        assert!(after.get("admissionAudit").is_none());
    }
}
