//! What every step of one plugin's backup runner shares ([`RunnerContext`]),
//! and the reads and small writes its steps have in common: the plan of a
//! primary (called once per generation and version), the objects in the
//! caches, status patches and events.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::resources::{self, PrimaryRef};
use crate::apply::EventSink;
use crate::cache::{CacheLease, CachedObject, NamespaceGate};
use crate::contract::{BackupPlan, CallContext, Reason};
use crate::engine::CacheReader;
use crate::lease::ShardGates;
use crate::registry::{ActiveVersion, ServingVersions};
use crate::telemetry::Metrics;

/// The caches a runner reads.
#[derive(Clone)]
pub(crate) struct RunnerCaches {
    /// The plugin's primaries.
    pub primaries: CacheLease,
    /// Every Backup.
    pub backups: CacheLease,
    /// Every Restore.
    pub restores: CacheLease,
    /// Every Job.
    pub jobs: CacheLease,
}

impl RunnerCaches {
    /// Every cache, for the sync check and the wake-up stream.
    pub(crate) fn all(&self) -> [&CacheLease; 4] {
        [&self.primaries, &self.backups, &self.restores, &self.jobs]
    }
}

/// What the runner of one plugin is started with.
pub struct RunnerDeps {
    /// The plugin's name.
    pub plugin: String,
    /// Which version serves (backups use the stable one).
    pub versions: Arc<ServingVersions>,
    /// The host's identity: Backups, Restores, primaries' status and
    /// finalizers, Pods' termination messages.
    pub host_client: Client,
    /// The plugin's identity (impersonating its grant's ServiceAccount, if
    /// any): the Jobs, which are the plugin's children.
    pub plugin_client: Client,
    /// The plugin's cache reads, confined to its grant.
    pub cache_reader: Arc<dyn CacheReader>,
    /// The primary kind.
    pub primary: ApiResource,
    /// The namespaces of the plugin's grant.
    pub gate: NamespaceGate,
    /// Whether this replica may write, per shard.
    pub writes: ShardGates,
    /// Events, reported as `wasm-operator/<plugin>`.
    pub events: EventSink,
    /// Where results are counted.
    pub metrics: Metrics,
}

/// A plan as called for one generation of one primary by one version.
#[derive(Clone)]
pub(crate) struct CachedPlan {
    generation: Option<i64>,
    digest: String,
    /// The deployment's `config` the plan was called with.
    config: Value,
    pub plan: Result<Option<BackupPlan>, String>,
}

/// [`RunnerDeps`] plus the caches and what the runner remembers between
/// sweeps.
pub(crate) struct RunnerContext {
    pub deps: RunnerDeps,
    pub caches: RunnerCaches,
    /// Plans by primary uid.
    plans: Mutex<HashMap<String, CachedPlan>>,
    /// Things reported once (events keyed by what they are about).
    reported: Mutex<std::collections::HashSet<String>>,
    /// The primaries (namespace, name) with a last-success series.
    measured: Mutex<std::collections::BTreeSet<(String, String)>>,
}

impl RunnerContext {
    pub(crate) fn new(deps: RunnerDeps, caches: RunnerCaches) -> RunnerContext {
        RunnerContext {
            deps,
            caches,
            plans: Mutex::default(),
            reported: Mutex::default(),
            measured: Mutex::default(),
        }
    }

    /// The version that serves backups: the stable one.
    pub(crate) fn stable(&self) -> Arc<ActiveVersion> {
        self.deps.versions.current().stable.clone()
    }

    /// True the first time `key` is reported (events that must not repeat
    /// on every sweep).
    pub(crate) fn first_report(&self, key: String) -> bool {
        let mut reported = crate::util::lock(&self.reported);
        if reported.len() > 10_000 {
            reported.clear();
        }
        reported.insert(key)
    }

    /// Records when `namespace/name`'s newest Completed backup completed.
    pub(crate) fn measure_last_success(&self, namespace: &str, name: &str, unix_seconds: i64) {
        self.deps
            .metrics
            .backup_last_success(&self.deps.plugin, namespace, name, unix_seconds);
        crate::util::lock(&self.measured).insert((namespace.to_string(), name.to_string()));
    }

    /// Drops the last-success series of primaries that no longer exist
    /// (`present`), so an alert on its age never fires for a deleted one.
    pub(crate) fn forget_absent(&self, present: &std::collections::BTreeSet<(String, String)>) {
        let mut measured = crate::util::lock(&self.measured);
        for (namespace, name) in measured.iter().filter(|key| !present.contains(*key)) {
            self.deps
                .metrics
                .backup_forget(&self.deps.plugin, namespace, name);
        }
        measured.retain(|key| present.contains(key));
    }

    /// Whether this replica may write for the object with `uid` (its shard).
    pub(crate) fn may_write(&self, uid: Option<&str>) -> bool {
        self.deps.writes.for_uid(uid).may_write()
    }

    /// The primary's backup plan: called once per generation of the
    /// primary, serving version and deployment `config`, remembered
    /// otherwise.
    pub(crate) async fn plan(&self, primary: &CachedObject) -> Result<Option<BackupPlan>, String> {
        let uid = primary.uid().unwrap_or_default();
        let stable = self.stable();
        let digest = stable.plugin.digest().to_string();
        let generation = primary.metadata.generation;
        if let Some(cached) = crate::util::lock(&self.plans).get(&uid)
            && cached.generation == generation
            && cached.digest == digest
            && cached.config == stable.config
        {
            return cached.plan.clone();
        }
        let ctx = CallContext {
            plugin_version: stable.plugin.manifest().version.clone(),
            attempt: 1,
            managed_by_version: None,
            config: stable.config.clone(),
        };
        let text = primary.text(&self.deps.primary);
        let plan = stable
            .plugin
            .backup_plan(&ctx, text, self.deps.cache_reader.clone())
            .await
            .map_err(|error| error.to_string());
        let mut plans = crate::util::lock(&self.plans);
        if plans.len() > 100_000 {
            plans.clear();
        }
        plans.insert(
            uid,
            CachedPlan {
                generation,
                digest,
                config: stable.config.clone(),
                plan: plan.clone(),
            },
        );
        plan
    }

    /// The restore Job deadline the plan of primary `namespace/name` asks
    /// for, if it exists and says.
    pub(crate) async fn plan_restore_deadline(&self, name: &str, namespace: &str) -> Option<u64> {
        let primary = self.primary(namespace, name)?;
        self.plan(&primary)
            .await
            .ok()
            .flatten()?
            .restore_deadline_seconds
    }

    /// True when `reference` names this plugin's primary kind.
    pub(crate) fn serves(&self, reference: &PrimaryRef) -> bool {
        let primary = &self.deps.primary;
        reference.kind == primary.kind
            && reference.api_version.as_deref().is_none_or(|api_version| {
                let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
                group == primary.group
            })
    }

    /// The primary `name` in `namespace`, from the cache.
    pub(crate) fn primary(&self, namespace: &str, name: &str) -> Option<Arc<CachedObject>> {
        self.caches
            .primaries
            .in_namespace(namespace)
            .into_iter()
            .find(|p| p.name_any() == name)
    }

    /// The Job `name` in `namespace`, from the cache.
    pub(crate) fn job(&self, namespace: &str, name: &str) -> Option<Value> {
        self.caches
            .jobs
            .in_namespace(namespace)
            .into_iter()
            .find(|j| j.name_any() == name)
            .map(|j| serde_json::to_value(j.to_dynamic()).unwrap_or(Value::Null))
    }

    /// The Backups API in `namespace`, as the host.
    pub(crate) fn backups_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.deps.host_client.clone(),
            namespace,
            &resources::backup_resource(),
        )
    }

    /// The Restores API in `namespace`, as the host.
    pub(crate) fn restores_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.deps.host_client.clone(),
            namespace,
            &resources::restore_resource(),
        )
    }

    /// The primaries API in `namespace`, as the host.
    pub(crate) fn primaries_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.deps.host_client.clone(), namespace, &self.deps.primary)
    }

    /// The Jobs API in `namespace`, as the plugin.
    pub(crate) fn jobs_api(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.deps.plugin_client.clone(),
            namespace,
            &ApiResource {
                group: "batch".into(),
                version: "v1".into(),
                api_version: "batch/v1".into(),
                kind: "Job".into(),
                plural: "jobs".into(),
            },
        )
    }

    /// Merges `status` into the status of `name` through `api`.
    pub(crate) async fn patch_status(
        api: &Api<DynamicObject>,
        name: &str,
        status: Value,
    ) -> kube::Result<()> {
        api.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "status": status })),
        )
        .await
        .map(|_| ())
    }

    /// Records an event on `primary` (of the plugin's primary kind), best
    /// effort.
    pub(crate) async fn primary_event(
        &self,
        primary: &CachedObject,
        warning: bool,
        reason: Reason,
        message: &str,
    ) {
        let object = primary.to_dynamic();
        self.deps
            .events
            .publish(
                &self.deps.primary,
                &object,
                warning,
                reason.as_str(),
                message,
                "Backup",
            )
            .await;
    }

    /// Records an event on `object`, a Backup or a Restore (of `ar`), best
    /// effort.
    pub(crate) async fn resource_event<K: serde::Serialize + kube::Resource>(
        &self,
        ar: &ApiResource,
        object: &K,
        warning: bool,
        reason: Reason,
        message: &str,
    ) {
        let object = as_dynamic(object, ar);
        self.deps
            .events
            .publish(ar, &object, warning, reason.as_str(), message, "Backup")
            .await;
    }
}

/// `object` (a typed Backup or Restore) as the `DynamicObject` events
/// take; only its name and namespace when it does not serialize.
fn as_dynamic<K: serde::Serialize + kube::Resource>(object: &K, ar: &ApiResource) -> DynamicObject {
    serde_json::to_value(object)
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
        .unwrap_or_else(|| {
            DynamicObject::new(&object.name_any(), ar)
                .within(&object.namespace().unwrap_or_default())
        })
}

/// Why a Backup or Restore failed: its `status.reason` and `message`.
#[derive(Debug)]
pub(crate) struct StepFailure {
    /// The reason.
    pub reason: Reason,
    /// What happened, for people.
    pub message: String,
}

impl StepFailure {
    pub(crate) fn new(reason: Reason, message: String) -> StepFailure {
        StepFailure { reason, message }
    }
}

/// The API server's "already exists" answer.
pub(crate) fn already_exists(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(response) if response.code == 409 && response.reason == "AlreadyExists")
}

/// A refusal of the request itself (400, 403, 404, 405, 413, 415, 422):
/// the same request is refused again, so retrying cannot help.
pub(crate) fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(response)
        if matches!(response.code, 400 | 403 | 404 | 405 | 413 | 415 | 422))
}

/// The API server's "not found" answer.
pub(crate) fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(response) if response.code == 404)
}
