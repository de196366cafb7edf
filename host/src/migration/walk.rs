//! The upgrade of one object: mark it, call the plugin, write the result.
//! What to write is decided by [`super::plan`]; this module writes it.

use std::sync::Arc;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::plan::{self, WalkStart};
use crate::cache::{object_json, object_text};
use crate::contract::{CallContext, Failure};
use crate::engine::{CacheReader, CallError, CallFailure};
use crate::plan::{MigrationState, display_name, field_manager};
use crate::registry::ActiveVersion;

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

    async fn mark(&self, state: MigrationState) -> Result<DynamicObject, MigrationError> {
        self.api
            .patch(
                &self.name,
                &PatchParams::apply(&field_manager(self.plugin)),
                &Patch::Merge(&plan::mark_patch(state)),
            )
            .await
            .map_err(|e| self.api_error("marking the migration state of", e))
    }

    /// Back to [`plan::ON_FAILURE`] after a failure, then the failure; the
    /// mark is best effort (the failure is what gets reported, and the next
    /// attempt marks the object again).
    async fn fail(&self, error: MigrationError) -> MigrationError {
        if let Err(mark_error) = self.mark(plan::ON_FAILURE).await {
            tracing::warn!(object = %self.object, error = %mark_error, "cannot mark the migration pending again");
        }
        error
    }
}

/// Upgrades `obj` (last managed by `from`) with the plugin version `active`
/// (its plugin, and its limits for the answer): marks it
/// `pending` (unless already), then `in-progress`, calls the plugin's
/// `upgrade`, validates the answer, writes it back with a resourceVersion
/// precondition (status through the status subresource), and marks it
/// managed by the plugin's version with migration-state `completed`. Returns
/// the object as written, for the reconcile that follows.
///
/// # Errors
///
/// [`MigrationError`]; every failure after the first mark puts the object
/// back to `pending`.
pub async fn upgrade_object(
    client: &Client,
    ar: &ApiResource,
    obj: &DynamicObject,
    from: &str,
    active: &ActiveVersion,
    ctx: &CallContext,
    cache: Arc<dyn CacheReader>,
) -> Result<UpgradeOutcome, MigrationError> {
    let plugin = &active.plugin;
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
    let WalkStart::Mark(marks) = plan::start(&fresh, job.to) else {
        return Ok(UpgradeOutcome::Current(Box::new(fresh)));
    };
    let mut current = fresh;
    for state in marks {
        current = job.mark(state).await?;
    }
    let stored = object_json(&current, ar);
    let upgraded = match plugin
        .upgrade(ctx, object_text(&current, ar), from, cache)
        .await
    {
        Ok(value) => value,
        Err(error) => {
            let message = match error {
                CallError {
                    failure: CallFailure::Failed(Failure::Permanent(m) | Failure::Transient(m)),
                    ..
                } => m,
                other => other.to_string(),
            };
            return Err(job.fail(job.failed(message)).await);
        }
    };
    let write = match plan::finish(&stored, &upgraded, manifest, &active.limits) {
        Ok(write) => write,
        Err(problem) => return Err(job.fail(job.failed(problem)).await),
    };
    if !write.restored.is_empty() {
        tracing::warn!(
            plugin = %manifest.name,
            version = %manifest.version,
            object = %job.object,
            fields = ?write.restored,
            "the plugin's upgrade changed what the host owns; those fields were kept as stored"
        );
    }
    // `current`'s resourceVersion is in the object: a concurrent change fails
    // the write (409) instead of being overwritten.
    let mut written = match job
        .api
        .replace(&job.name, &PostParams::default(), &write.object)
        .await
    {
        Ok(o) => o,
        Err(e) => return Err(job.fail(job.api_error("writing the upgraded", e)).await),
    };
    if let Some(status) = write.status {
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
                tracing::warn!(object = %job.object, %error, "cannot write the upgraded status");
            }
        }
    }
    Ok(UpgradeOutcome::Upgraded(Box::new(written)))
}
