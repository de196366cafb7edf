//! The audit of stored objects (issue 30): the objects of a plugin's
//! primary kind that are already stored, evaluated against its stable
//! version's `validate`, without a second list of the cluster. A rule a new
//! version brings only judges writes from then on; the audit shows what it
//! thinks of what is already there.
//!
//! One task per plugin controller ([`run`]), started and stopped with it.
//! It reads the controller's own primary cache once every cache of the
//! controller has synced, and audits:
//!
//! - when it starts, and whenever the stable version changes (a new
//!   version or digest, a new deployment config: the registry replaces the
//!   version, which the task sees within a second);
//! - every `spec.admission.auditIntervalSeconds` (default 600; 0: only on
//!   the two occasions above).
//!
//! Each object is sent to `validate` as a CREATE of itself, as stored
//! (metadata and status included), with no old object: the question is
//! "would this version admit this object", and an UPDATE would need an old
//! object the host does not have. The call is the webhook's: the same
//! [`CallContext`], the deployment's call limits, the cache view confined
//! to the grant's namespaces ([`super::cache_view`]), and the deployment's
//! mode ignored: a refusal is a violation whatever the mode. Objects in
//! `kube-system`, outside the grant's namespaces, or being deleted are
//! skipped.
//!
//! # Guarantees
//!
//! - Nothing is written to the objects. A run writes the latest
//!   [`AdmissionAudit`] on the plugin's [`ServingVersions`] (the WasmPlugin
//!   shows it as `status.admissionAudit`), three gauges, and Warning
//!   events on violating objects.
//! - A violating object gets one `AdmissionAuditViolation` event per new
//!   verdict: the same refusal is not reported again every period
//!   ([`VerdictMemory`], bounded), at most [`MAX_EVENTS_PER_RUN`] per run
//!   (the others in the following runs), and only where this replica may
//!   write the object's shard.
//! - A call that fails (trap, deadline, memory) counts as an error, not a
//!   violation, is reported once per run, and the run goes on.
//! - A run never holds an async worker the reconciles need: it runs on a
//!   thread of the blocking pool, one object at a time.

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::ResourceExt;
use kube::api::ApiResource;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::config::EXEMPT_NAMESPACES;
use super::decide::{self, Answerer};
use crate::apply::EventSink;
use crate::cache::{CachedObject, NamespaceGate, SharedCache};
use crate::contract::{AdmissionOperation, Reason};
use crate::lease::ShardGates;
use crate::plan::MANAGED_BY_VERSION_ANNOTATION;
use crate::registry::{
    ActiveVersion, AdmissionAudit, AdmissionMode, AuditFinding, FailurePolicy, ServingVersions,
};
use crate::telemetry::Metrics;

/// How often the task looks whether the stable version changed (a pointer
/// comparison) or a periodic run is due.
const CHANGE_POLL: Duration = Duration::from_secs(1);

/// How often a task waiting for the caches looks again.
const SYNC_POLL: Duration = Duration::from_millis(100);

/// Warning events one run writes at most; the violations left over are
/// reported by the following runs.
pub const MAX_EVENTS_PER_RUN: usize = 100;

/// Objects whose last reported verdict is remembered; past this, new
/// violations are counted and named in the status but get no event.
pub const MAX_REMEMBERED: usize = 100_000;

/// What the audit of one plugin reads and writes; built by its controller.
pub struct AuditDeps {
    /// The plugin's manifest name.
    pub plugin: String,
    /// Its serving versions; the audit reads the stable version and writes
    /// its report here.
    pub versions: Arc<ServingVersions>,
    /// The shared caches (the validate calls' reads).
    pub cache: SharedCache,
    /// The controller's primary store: the objects audited.
    pub primary: Store<CachedObject>,
    /// The primary kind.
    pub primary_ar: ApiResource,
    /// The controller's grant: objects outside it are skipped.
    pub gate: NamespaceGate,
    /// Writes the Warning events, as the host.
    pub events: EventSink,
    /// Whether this replica may write an object's shard (events only there).
    pub writes: ShardGates,
    /// Where the gauges go.
    pub metrics: Metrics,
}

/// The message last reported on each object (by UID, as a hash), so a
/// violation is reported once per verdict, not once per run.
#[derive(Debug)]
pub struct VerdictMemory {
    last: HashMap<String, u64>,
    capacity: usize,
}

fn fingerprint(message: &str) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    message.hash(&mut hasher);
    hasher.finish()
}

impl VerdictMemory {
    /// A memory of at most `capacity` objects.
    pub fn new(capacity: usize) -> VerdictMemory {
        VerdictMemory {
            last: HashMap::new(),
            capacity,
        }
    }

    /// True when object `uid`, refused with `message`, is news (never
    /// reported, or reported with another message): the caller reports it,
    /// and it is remembered. False when it was reported as is, or the
    /// memory is full.
    pub fn report(&mut self, uid: &str, message: &str) -> bool {
        let print = fingerprint(message);
        let full = self.last.len() >= self.capacity;
        match self.last.get_mut(uid) {
            Some(last) if *last == print => false,
            Some(last) => {
                *last = print;
                true
            }
            None if full => false,
            None => {
                self.last.insert(uid.to_string(), print);
                true
            }
        }
    }

    /// Object `uid` is allowed now: a later refusal is news again.
    pub fn allowed(&mut self, uid: &str) {
        self.last.remove(uid);
    }

    /// Forgets every object but `seen` (the deleted ones go).
    pub fn keep_only(&mut self, seen: &HashSet<String>) {
        self.last.retain(|uid, _| seen.contains(uid));
    }

    /// Forgets everything (the plugin stopped validating).
    pub fn clear(&mut self) {
        self.last.clear();
    }

    /// Objects remembered.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

/// Whether `obj` is audited: not being deleted, not in an exempt namespace,
/// inside the grant.
fn auditable(obj: &CachedObject, gate: &NamespaceGate) -> bool {
    let exempt = obj
        .metadata
        .namespace
        .as_deref()
        .is_some_and(|ns| EXEMPT_NAMESPACES.contains(&ns));
    obj.metadata.deletion_timestamp.is_none() && !exempt && gate.allows_object(obj)
}

/// The note of the Warning event on an object `version` refuses with
/// `refusal` (which names the plugin and version): what is wrong, what
/// the mode makes of it, what to do.
pub fn violation_note(version: &str, mode: AdmissionMode, refusal: &str) -> String {
    let consequence = match mode {
        AdmissionMode::Enforce => "The API server refuses any change of its spec that keeps it so",
        AdmissionMode::Warn => "Changes of it that keep it so are admitted with a warning",
        AdmissionMode::Audit => "Admission runs in Audit mode: nothing is refused",
    };
    format!(
        "stored before version {version}'s rules, this object would not be admitted now: {refusal}. Nothing was changed. {consequence}; change the object so the rule holds, or roll the plugin back."
    )
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// Audits every stored primary once against `version`: the report, or
/// `None` when `shutdown` stopped the run.
async fn audit_once(
    deps: &AuditDeps,
    version: &ActiveVersion,
    memory: &mut VerdictMemory,
    shutdown: &CancellationToken,
) -> Option<AdmissionAudit> {
    let manifest = version.plugin.manifest();
    let mut objects: Vec<Arc<CachedObject>> = deps
        .primary
        .state()
        .into_iter()
        .filter(|o| auditable(o, &deps.gate))
        .collect();
    objects.sort_by_key(|o| (o.namespace(), o.name_any()));
    let mut audit = AdmissionAudit::starting(&manifest.version, &version.info.digest, now());
    let cache = super::cache_view(Some(&deps.cache), version);
    // A refusal is a violation whatever the mode; the failure policy is
    // not asked (a failed call is an error).
    let by = Answerer {
        plugin: &manifest.name,
        version: &manifest.version,
        mode: AdmissionMode::Enforce,
        failure_policy: FailurePolicy::Fail,
    };
    let mut seen = HashSet::new();
    let mut events = 0;
    for obj in objects {
        if shutdown.is_cancelled() {
            return None;
        }
        let managed_by = obj
            .annotations()
            .get(MANAGED_BY_VERSION_ANNOTATION)
            .cloned();
        let ctx = super::call_context(version, managed_by);
        let text = obj.text(&deps.primary_ar);
        let verdict = version
            .plugin
            .validate(&ctx, AdmissionOperation::Create, text, None, cache.clone())
            .await
            .map_err(|error| error.to_string());
        let decision = decide::validation(by, verdict);
        let uid = obj.uid().unwrap_or_default();
        seen.insert(uid.clone());
        let finding = AuditFinding {
            namespace: obj.namespace(),
            name: obj.name_any(),
            message: decision.message.clone(),
        };
        match decision.result {
            "refused" => {
                audit.violation(finding);
                let may_write = deps.writes.for_uid(Some(uid.as_str())).may_write();
                if !uid.is_empty()
                    && may_write
                    && events < MAX_EVENTS_PER_RUN
                    && memory.report(&uid, &decision.message)
                {
                    events += 1;
                    let note = violation_note(
                        &manifest.version,
                        version.admission.mode,
                        &decision.message,
                    );
                    let reason = Reason::AdmissionAuditViolation.as_str();
                    let object = obj.to_dynamic();
                    (deps.events)
                        .publish(&deps.primary_ar, &object, true, reason, &note, "Audit")
                        .await;
                }
            }
            "error" => audit.error(finding),
            _ => {
                audit.allowed();
                memory.allowed(&uid);
            }
        }
    }
    memory.keep_only(&seen);
    Some(audit.finished(now()))
}

/// Runs one audit of `version` on a thread of the blocking pool (the calls
/// run in place on whatever thread drives them: never a runtime worker
/// here). Returns the report (`None`: stopped) and the memory.
async fn audit_off_the_workers(
    deps: Arc<AuditDeps>,
    version: Arc<ActiveVersion>,
    mut memory: VerdictMemory,
    shutdown: CancellationToken,
) -> (Option<AdmissionAudit>, VerdictMemory) {
    let runtime = tokio::runtime::Handle::current();
    let run = tokio::task::spawn_blocking(move || {
        let report = runtime.block_on(audit_once(&deps, &version, &mut memory, &shutdown));
        (report, memory)
    });
    match run.await {
        Ok(done) => done,
        Err(error) => {
            tracing::error!(%error, "the admission audit's thread failed");
            (None, VerdictMemory::new(MAX_REMEMBERED))
        }
    }
}

/// Publishes a finished run: the report, the gauges, a log line (and a
/// warning when calls failed).
fn publish(deps: &AuditDeps, audit: AdmissionAudit) {
    deps.metrics
        .admission_audit(&deps.plugin, audit.checked, audit.violations, audit.errors);
    tracing::info!(
        target: "audit", plugin = %deps.plugin, version = %audit.version,
        checked = audit.checked, violations = audit.violations, errors = audit.errors,
        "admission audit of stored objects finished"
    );
    if let Some(first) = &audit.first_error {
        tracing::warn!(
            plugin = %deps.plugin, version = %audit.version, errors = audit.errors,
            object = %first.name, message = %first.message,
            "admission audit: validate failed on stored objects"
        );
    }
    deps.versions.admission_audit().set(Some(audit));
}

/// Audits the stored primaries of `deps`' plugin (see the module doc) until
/// `shutdown`, starting once `synced` says every cache of the controller
/// has synced.
pub async fn run(
    deps: AuditDeps,
    synced: impl Fn() -> bool + Send + 'static,
    shutdown: CancellationToken,
) {
    while !synced() {
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(SYNC_POLL) => {}
        }
    }
    let deps = Arc::new(deps);
    let mut memory = VerdictMemory::new(MAX_REMEMBERED);
    let mut audited: Option<Arc<ActiveVersion>> = None;
    let mut last_run = Instant::now();
    loop {
        let stable = deps.versions.current().stable.clone();
        let due = match &audited {
            Some(done) if Arc::ptr_eq(done, &stable) => {
                let every = stable.admission.audit_interval_seconds;
                every > 0 && last_run.elapsed() >= Duration::from_secs(every.into())
            }
            _ => true,
        };
        if due {
            last_run = Instant::now();
            if stable.plugin.admission_functions().validate {
                let (report, kept) =
                    audit_off_the_workers(deps.clone(), stable.clone(), memory, shutdown.clone())
                        .await;
                memory = kept;
                match report {
                    Some(report) => publish(&deps, report),
                    None => break,
                }
            } else if audited.is_some() || deps.versions.admission_audit().latest().is_some() {
                // A version without `validate`: nothing to show.
                deps.versions.admission_audit().set(None);
                deps.metrics.admission_audit_removed(&deps.plugin);
                memory.clear();
            }
            audited = Some(stable);
        }
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(CHANGE_POLL) => {}
        }
    }
    deps.metrics.admission_audit_removed(&deps.plugin);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_violation_is_reported_once_per_verdict() {
        let mut memory = VerdictMemory::new(10);
        assert!(memory.report("uid-a", "replicas must be at most 3"));
        // The next periods find the same refusal: no new event.
        assert!(!memory.report("uid-a", "replicas must be at most 3"));
        assert!(!memory.report("uid-a", "replicas must be at most 3"));
        // Another message (a new version's words, another value): news.
        assert!(memory.report("uid-a", "replicas must be at most 2"));
        assert!(!memory.report("uid-a", "replicas must be at most 2"));
        // Fixed, then broken again the same way: news again.
        memory.allowed("uid-a");
        assert!(memory.report("uid-a", "replicas must be at most 2"));
        assert!(memory.report("uid-b", "replicas must be at most 2"));
        assert_eq!(memory.len(), 2);
    }

    #[test]
    fn the_memory_is_bounded_and_forgets_deleted_objects() {
        let mut memory = VerdictMemory::new(2);
        assert!(memory.report("a", "no"));
        assert!(memory.report("b", "no"));
        // Full: a third object is not remembered, so not reported (it
        // would be reported again every period otherwise).
        assert!(!memory.report("c", "no"));
        // A remembered object's new verdict still counts.
        assert!(memory.report("b", "no, differently"));
        memory.keep_only(&HashSet::from(["b".to_string()]));
        assert_eq!(memory.len(), 1);
        assert!(memory.report("c", "no"));
        memory.clear();
        assert!(memory.is_empty());
    }

    #[test]
    fn the_event_says_what_the_mode_makes_of_the_violation() {
        let refusal = "spec.replicas must be at most 3, got 8 (plugin webapp 1.3.0)";
        let enforce = violation_note("1.3.0", AdmissionMode::Enforce, refusal);
        assert!(enforce.contains(refusal), "{enforce}");
        assert!(enforce.contains("refuses any change"), "{enforce}");
        assert!(enforce.contains("Nothing was changed"), "{enforce}");
        let audit = violation_note("1.3.0", AdmissionMode::Audit, refusal);
        assert!(audit.contains("nothing is refused"), "{audit}");
    }

    #[test]
    fn objects_being_deleted_or_in_kube_system_are_not_audited() {
        use crate::contract::Grant;
        let object = |namespace: &str, deleting: bool| {
            let mut value = serde_json::json!({
                "apiVersion": "example.com/v1", "kind": "WebApp",
                "metadata": {"name": "a", "namespace": namespace},
            });
            if deleting {
                value["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
            }
            CachedObject::from_dynamic(&serde_json::from_value(value).unwrap())
        };
        let gate = NamespaceGate::new(
            Arc::new(Grant {
                namespaces: Some(vec!["default".into(), "kube-system".into()]),
                ..Grant::default()
            }),
            None,
        );
        assert!(auditable(&object("default", false), &gate));
        assert!(!auditable(&object("default", true), &gate));
        assert!(!auditable(&object("kube-system", false), &gate));
        assert!(!auditable(&object("elsewhere", false), &gate));
    }
}
