//! The upgrade of one object: mark it, call the plugin, write the result.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{STATE_COMPLETED, STATE_IN_PROGRESS, STATE_PENDING, merge_upgraded};
use crate::apply::{
    MANAGED_BY_VERSION_ANNOTATION, MIGRATION_STATE_ANNOTATION, MIN_COMPATIBLE_VERSION_ANNOTATION,
    display_name, field_manager,
};
use crate::cache::{object_json, object_text};
use crate::contract::{CallContext, Failure};
use crate::engine::{CacheReader, CallError, LoadedPlugin};

/// Why an object's upgrade did not complete. Every variant leaves the
/// object's migration-state at `pending` (best effort) so it is retried.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The plugin's `upgrade` failed or returned an unusable object.
    #[error(
        "plugin {plugin} could not upgrade {object} from {from} to {to}: {message}; the host retries with backoff (5 s doubling up to 300 s)"
    )]
    UpgradeFailed {
        plugin: String,
        object: String,
        from: String,
        to: String,
        message: String,
    },
    /// The object changed while it was being upgraded; upgrade the new one.
    #[error(
        "{object} changed while plugin {plugin} upgraded it; the upgrade is retried on the new object"
    )]
    Conflict { plugin: String, object: String },
    /// The API server refused or failed a write.
    #[error(
        "{action} {object} failed during its upgrade from {from} to {to}: {source}; the host retries with backoff, check the API server and RBAC if it persists"
    )]
    Api {
        action: &'static str,
        object: String,
        from: String,
        to: String,
        #[source]
        source: kube::Error,
    },
}

/// How [`upgrade_object`] left the object.
#[derive(Debug)]
pub enum UpgradeOutcome {
    /// The plugin upgraded it; this is the object as written.
    Upgraded(Box<DynamicObject>),
    /// The stored object was already managed by this version or a newer one
    /// (the cache lagged behind); nothing was written.
    Current(Box<DynamicObject>),
}

/// What an upgrade is about.
struct Job<'a> {
    api: Api<DynamicObject>,
    name: String,
    object: String,
    plugin: &'a str,
    from: &'a str,
    to: &'a str,
}

impl Job<'_> {
    fn api_error(&self, action: &'static str, source: kube::Error) -> MigrationError {
        if let kube::Error::Api(status) = &source
            && status.code == 409
        {
            return MigrationError::Conflict {
                plugin: self.plugin.to_string(),
                object: self.object.clone(),
            };
        }
        MigrationError::Api {
            action,
            object: self.object.clone(),
            from: self.from.to_string(),
            to: self.to.to_string(),
            source,
        }
    }

    fn failed(&self, message: String) -> MigrationError {
        MigrationError::UpgradeFailed {
            plugin: self.plugin.to_string(),
            object: self.object.clone(),
            from: self.from.to_string(),
            to: self.to.to_string(),
            message,
        }
    }

    async fn mark(&self, state: &str) -> Result<DynamicObject, MigrationError> {
        let patch = json!({ "metadata": { "annotations": { MIGRATION_STATE_ANNOTATION: state } } });
        self.api
            .patch(
                &self.name,
                &PatchParams::apply(&field_manager(self.plugin)),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(|e| self.api_error("marking the migration state of", e))
    }

    /// Back to `pending` after a failure; best effort (the failure is what
    /// gets reported, and the next attempt marks the object again).
    async fn back_to_pending(&self) {
        if let Err(error) = self.mark(STATE_PENDING).await {
            tracing::warn!(object = %self.object, %error, "cannot mark the migration pending again");
        }
    }
}

/// Upgrades `obj` (last managed by `from`) with `plugin`: marks it
/// `pending` (unless already), then `in-progress`, calls the plugin's
/// `upgrade`, validates the answer, writes it back with a resourceVersion
/// precondition (status through the status subresource), and marks it
/// managed by the plugin's version with migration-state `completed`. Returns
/// the object as written, for the reconcile that follows.
pub async fn upgrade_object(
    client: &Client,
    ar: &ApiResource,
    obj: &DynamicObject,
    from: &str,
    plugin: &LoadedPlugin,
    ctx: &CallContext,
    cache: Arc<dyn CacheReader>,
) -> Result<UpgradeOutcome, MigrationError> {
    let manifest = plugin.manifest();
    let api = match obj.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let job = Job {
        api,
        name: obj.name_any(),
        object: format!(
            "{} {}",
            ar.kind,
            display_name(obj.namespace().as_deref(), &obj.name_any())
        ),
        plugin: &manifest.name,
        from,
        to: &manifest.version,
    };
    // The cache may lag behind an upgrade this host just wrote: decide on
    // the stored object, so a finished upgrade is never walked again.
    let fresh = match job.api.get_opt(&job.name).await {
        Ok(Some(fresh)) => fresh,
        Ok(None) => {
            return Err(MigrationError::Conflict {
                plugin: job.plugin.to_string(),
                object: job.object.clone(),
            });
        }
        Err(e) => return Err(job.api_error("reading", e)),
    };
    let managed_by = fresh
        .annotations()
        .get(MANAGED_BY_VERSION_ANNOTATION)
        .cloned();
    if super::upgrade_from(managed_by.as_deref(), job.to).is_none() {
        return Ok(UpgradeOutcome::Current(Box::new(fresh)));
    }
    let state = fresh.annotations().get(MIGRATION_STATE_ANNOTATION).cloned();
    if !matches!(state.as_deref(), Some(STATE_PENDING | STATE_IN_PROGRESS)) {
        job.mark(STATE_PENDING).await?;
    }
    let current = job.mark(STATE_IN_PROGRESS).await?;
    let stored = object_json(&current, ar);
    let upgraded = match plugin
        .upgrade(ctx, object_text(&current, ar), from, cache)
        .await
    {
        Ok(value) => value,
        Err(error) => {
            job.back_to_pending().await;
            let message = match error {
                CallError::Failed(Failure::Permanent(m) | Failure::Transient(m)) => m,
                other => other.to_string(),
            };
            return Err(job.failed(message));
        }
    };
    let merged = match merge_upgraded(&stored, &upgraded) {
        Ok(merged) => merged,
        Err(problem) => {
            job.back_to_pending().await;
            return Err(job.failed(problem));
        }
    };
    let mut object = merged.object;
    if let Some(annotations) = object
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        annotations.insert(
            MANAGED_BY_VERSION_ANNOTATION.into(),
            json!(manifest.version),
        );
        annotations.insert(MIGRATION_STATE_ANNOTATION.into(), json!(STATE_COMPLETED));
        match &manifest.min_compatible_version {
            Some(min) => annotations.insert(MIN_COMPATIBLE_VERSION_ANNOTATION.into(), json!(min)),
            None => annotations.remove(MIN_COMPATIBLE_VERSION_ANNOTATION),
        };
    }
    let object: DynamicObject = match serde_json::from_value(object) {
        Ok(o) => o,
        Err(e) => {
            job.back_to_pending().await;
            return Err(job.failed(format!(
                "the upgraded object is not a Kubernetes object: {e}"
            )));
        }
    };
    // `current`'s resourceVersion is in `object`: a concurrent change fails
    // the write (409) instead of being overwritten.
    let mut written = match job
        .api
        .replace(&job.name, &PostParams::default(), &object)
        .await
    {
        Ok(o) => o,
        Err(e) => {
            job.back_to_pending().await;
            return Err(job.api_error("writing the upgraded", e));
        }
    };
    if let Some(status) = merged.status {
        // The spec and marks are written; a failed status write is retried
        // by the reconcile that follows (the plugin reports status anyway).
        match job
            .api
            .patch_status(
                &job.name,
                &PatchParams::default(),
                &Patch::Merge(&json!({ "status": status })),
            )
            .await
        {
            Ok(o) => written = o,
            Err(error) => {
                tracing::warn!(object = %job.object, %error, "cannot write the upgraded status")
            }
        }
    }
    Ok(UpgradeOutcome::Upgraded(Box::new(written)))
}
