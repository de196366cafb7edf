//! Storage-version migration: rewrite every object of a CRD so that the API
//! server stores it in the CRD's storage version, then set
//! `status.storedVersions` to that version alone, which is what makes
//! removing an old version from the CRD safe.
//!
//! Each object is read at the storage version and written back unchanged
//! (a replace with its resourceVersion): the API server converts it (through
//! the conversion webhook when the old version needs it) and stores it in
//! the storage version. Pages of [`PAGE`] objects; writes rate-limited so
//! that reconciles are not starved; a conflict re-reads the object and
//! tries again; an object that is gone is skipped; an object the API server
//! refuses to rewrite (e.g. an admission webhook denies it) is reported by
//! name and does not stop the rest. Progress (the list's continue token and
//! the count) is kept in the CRD's annotation [`PROGRESS_ANNOTATION`], so a
//! migration stopped midway (a host killed) resumes where it stopped.
//!
//! # Guarantees
//!
//! - `storedVersions` is narrowed only when every object was rewritten.
//! - Objects are never changed: a write carries exactly what was read.
//!
//! # Errors
//!
//! [`StorageError`]: the CRD or a list cannot be read, or the final status
//! write fails. Per-object refusals are in [`StorageReport::refused`].

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::crd::FIELD_MANAGER;
use super::storage_progress::{StorageMigrationProgress, StorageMigrationState};

/// Objects per list page.
pub const PAGE: u32 = 500;
/// CRD annotation holding the progress of a migration under way.
pub const PROGRESS_ANNOTATION: &str = "wasm-operator.dev/storage-migration";
/// Tries per object when its writes conflict.
const CONFLICT_TRIES: u32 = 5;

/// How a migration runs.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    /// Object writes per second at most (0: unlimited).
    pub writes_per_second: u32,
    /// Stop after this many objects (progress kept, so the next run
    /// resumes); `None` runs to the end. For tests and careful operators.
    pub max_objects: Option<usize>,
}

impl Default for StorageOptions {
    fn default() -> Self {
        StorageOptions {
            writes_per_second: 50,
            max_objects: None,
        }
    }
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageReport {
    /// The CRD's storage version.
    pub storage_version: String,
    /// `status.storedVersions` before.
    pub stored_before: Vec<String>,
    /// Objects rewritten, this run and the runs it resumed.
    pub migrated: usize,
    /// Objects the API server refused to rewrite: `namespace/name: why`.
    pub refused: Vec<String>,
    /// True when `storedVersions` is now the storage version alone.
    pub done: bool,
}

/// Why a migration could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The CRD does not exist.
    #[error("CRD {0} not found; check the name (`kubectl get crd`)")]
    NoCrd(String),
    /// The CRD marks no version as the storage version.
    #[error("CRD {0} has no storage version")]
    NoStorageVersion(String),
    /// Reading or writing through the API failed.
    #[error(
        "storage migration of CRD {crd} failed while {doing}: {source}; run it again to resume"
    )]
    Api {
        /// The CRD.
        crd: String,
        /// What it was doing.
        doing: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
}

/// The saved progress of a migration.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Progress {
    /// The list's continue token for the next page (`None`: from the start).
    #[serde(rename = "continue", default, skip_serializing_if = "Option::is_none")]
    pub continue_token: Option<String>,
    /// Objects rewritten so far.
    pub migrated: usize,
}

/// Reads the saved progress from a CRD's annotations (none or unreadable:
/// from the start).
pub fn saved_progress(crd: &CustomResourceDefinition) -> Progress {
    crd.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(PROGRESS_ANNOTATION))
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default()
}

/// True when `stored` already is `storage` alone: nothing to migrate.
pub fn is_migrated(stored: &[String], storage: &str) -> bool {
    stored.len() == 1 && stored[0] == storage
}

/// The pause between writes for `writes_per_second`.
pub fn write_interval(writes_per_second: u32) -> Option<Duration> {
    (writes_per_second > 0).then(|| Duration::from_secs(1) / writes_per_second)
}

/// What a host publishes about one run of a migration, from its start to
/// its end (see [`super::StorageProgressBoard`]). Pure: each
/// step returns the value to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunProgress {
    start: StorageMigrationProgress,
}

impl RunProgress {
    /// A run of CRD `crd` towards `storage`, `stored` its
    /// `status.storedVersions` now; `known` is what was published for this
    /// CRD before (refusals of an earlier run stay listed until this run
    /// ends).
    pub fn starting(
        crd: &str,
        storage: &str,
        stored: &[String],
        known: Option<&StorageMigrationProgress>,
    ) -> RunProgress {
        RunProgress {
            start: StorageMigrationProgress {
                crd: crd.to_string(),
                storage_version: storage.to_string(),
                stored_versions: stored.to_vec(),
                state: StorageMigrationState::InProgress,
                migrated: 0,
                total: None,
                refused: known.map(|p| p.refused.clone()).unwrap_or_default(),
                error: None,
            },
        }
    }

    /// The run is starting.
    pub fn started(&self) -> StorageMigrationProgress {
        self.start.clone()
    }

    /// Nothing to rewrite: `storedVersions` is the storage version alone.
    pub fn settled(&self) -> StorageMigrationProgress {
        StorageMigrationProgress {
            state: StorageMigrationState::AlreadyMigrated,
            refused: Vec::new(),
            ..self.start.clone()
        }
    }

    /// `migrated` objects rewritten of `total`.
    pub fn advanced(&self, migrated: usize, total: Option<usize>) -> StorageMigrationProgress {
        StorageMigrationProgress {
            migrated,
            total,
            ..self.start.clone()
        }
    }

    /// The run ended with `report`.
    pub fn finished(&self, report: &StorageReport) -> StorageMigrationProgress {
        let state = if report.done {
            StorageMigrationState::Completed
        } else {
            StorageMigrationState::ObjectsRefused
        };
        StorageMigrationProgress {
            state,
            migrated: report.migrated,
            // A run that reached its end saw every object.
            total: Some(report.migrated),
            refused: report.refused.clone(),
            ..self.start.clone()
        }
    }

    /// The run stopped on `error` after `migrated` objects.
    pub fn interrupted(&self, migrated: usize, error: &StorageError) -> StorageMigrationProgress {
        StorageMigrationProgress {
            state: StorageMigrationState::Interrupted,
            migrated,
            error: Some(error.to_string()),
            ..self.start.clone()
        }
    }
}

/// Migrates CRD `crd_name`; `progress` is told `(migrated, total)` after
/// every object (total is an estimate from the API server's
/// `remainingItemCount`, exact on the last page, `None` when the API
/// server gives none).
///
/// # Errors
///
/// See [`StorageError`].
pub async fn migrate(
    client: &kube::Client,
    crd_name: &str,
    options: &StorageOptions,
    mut progress: impl FnMut(usize, Option<usize>),
) -> Result<StorageReport, StorageError> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let api_error = |doing: &str| {
        let crd = crd_name.to_string();
        let doing = doing.to_string();
        move |source| StorageError::Api { crd, doing, source }
    };
    let crd = crds
        .get_opt(crd_name)
        .await
        .map_err(api_error("reading the CRD"))?
        .ok_or_else(|| StorageError::NoCrd(crd_name.to_string()))?;
    let storage = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
        .ok_or_else(|| StorageError::NoStorageVersion(crd_name.to_string()))?;
    let stored_before = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    let mut report = StorageReport {
        storage_version: storage.clone(),
        stored_before: stored_before.clone(),
        ..StorageReport::default()
    };
    if is_migrated(&stored_before, &storage) {
        report.done = true;
        return Ok(report);
    }
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: storage.clone(),
        api_version: format!("{}/{}", crd.spec.group, storage),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut saved = saved_progress(&crd);
    let interval = write_interval(options.writes_per_second);
    let mut this_run = 0usize;
    loop {
        let mut params = ListParams::default().limit(PAGE);
        if let Some(token) = &saved.continue_token {
            params = params.continue_token(token);
        }
        let page = match all.list(&params).await {
            Ok(page) => page,
            // An expired or unknown token: start again (rewriting an
            // object twice is harmless).
            Err(kube::Error::Api(e))
                if saved.continue_token.is_some() && matches!(e.code, 400 | 410) =>
            {
                saved.continue_token = None;
                continue;
            }
            Err(error) => return Err(api_error("listing the objects")(error)),
        };
        let remaining = page
            .metadata
            .remaining_item_count
            .and_then(|n| usize::try_from(n).ok());
        // On the last page nothing remains: the total is exact.
        let last_page = page.metadata.continue_.as_deref().is_none_or(str::is_empty);
        let remaining = remaining.or(last_page.then_some(0));
        let total_estimate =
            |done: usize, left_in_page: usize| remaining.map(|r| done + left_in_page + r);
        let count = page.items.len();
        let at_page_start = saved.migrated;
        for (index, object) in page.items.into_iter().enumerate() {
            if options.max_objects.is_some_and(|max| this_run >= max) {
                // Resume from this page's start next time.
                report.migrated = saved.migrated;
                let resume = Progress {
                    continue_token: saved.continue_token.clone(),
                    migrated: at_page_start,
                };
                save_progress(&crds, crd_name, Some(&resume)).await?;
                return Ok(report);
            }
            if let Err(refusal) = rewrite(client, &resource, object).await {
                report.refused.push(refusal);
            }
            saved.migrated += 1;
            this_run += 1;
            progress(
                saved.migrated,
                total_estimate(saved.migrated, count - index - 1),
            );
            if let Some(pause) = interval {
                tokio::time::sleep(pause).await;
            }
        }
        saved.continue_token = page.metadata.continue_.filter(|c| !c.is_empty());
        if saved.continue_token.is_none() {
            break;
        }
        save_progress(&crds, crd_name, Some(&saved)).await?;
    }
    report.migrated = saved.migrated;
    if !report.refused.is_empty() {
        // Narrowing storedVersions now would strand the refused objects in
        // an old version: keep it, start from the beginning next time.
        save_progress(&crds, crd_name, None).await?;
        return Ok(report);
    }
    let status = json!({"status": {"storedVersions": [storage]}});
    crds.patch_status(crd_name, &params(), &Patch::Merge(&status))
        .await
        .map_err(api_error("setting status.storedVersions"))?;
    save_progress(&crds, crd_name, None).await?;
    report.done = true;
    Ok(report)
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Writes (or with `None` removes) the progress annotation.
async fn save_progress(
    crds: &Api<CustomResourceDefinition>,
    crd_name: &str,
    progress: Option<&Progress>,
) -> Result<(), StorageError> {
    let value = progress.map_or(Value::Null, |p| {
        json!(serde_json::to_string(p).unwrap_or_default())
    });
    let patch = json!({"metadata": {"annotations": {PROGRESS_ANNOTATION: value}}});
    crds.patch(crd_name, &params(), &Patch::Merge(&patch))
        .await
        .map(drop)
        .map_err(|source| StorageError::Api {
            crd: crd_name.to_string(),
            doing: "saving the progress annotation".to_string(),
            source,
        })
}

/// Rewrites one object unchanged; on a conflict reads it again and retries.
/// Returns why it could not, naming the object.
async fn rewrite(
    client: &kube::Client,
    resource: &ApiResource,
    object: DynamicObject,
) -> Result<(), String> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let namespace = object.metadata.namespace.clone();
    let who = match &namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.clone(),
    };
    let api: Api<DynamicObject> = match &namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    };
    let mut current = object;
    for _ in 0..CONFLICT_TRIES {
        match api.replace(&name, &PostParams::default(), &current).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => match api.get_opt(&name).await {
                Ok(Some(fresh)) => current = fresh,
                Ok(None) => return Ok(()),
                Err(error) => return Err(format!("{who}: {error}")),
            },
            Err(error) => return Err(format!("{who}: {error}")),
        }
    }
    Err(format!(
        "{who}: still conflicting after {CONFLICT_TRIES} tries; run the migration again"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_storage_version_alone_is_migrated() {
        assert!(is_migrated(&["v1beta1".into()], "v1beta1"));
        assert!(!is_migrated(
            &["v1alpha1".into(), "v1beta1".into()],
            "v1beta1"
        ));
        assert!(!is_migrated(&["v1alpha1".into()], "v1beta1"));
        assert!(!is_migrated(&[], "v1beta1"));
    }

    #[test]
    fn progress_round_trips_through_the_annotation() {
        let progress = Progress {
            continue_token: Some("abc".into()),
            migrated: 500,
        };
        let mut crd = CustomResourceDefinition::default();
        crd.metadata.annotations = Some(
            [(
                PROGRESS_ANNOTATION.to_string(),
                serde_json::to_string(&progress).unwrap(),
            )]
            .into(),
        );
        assert_eq!(saved_progress(&crd), progress);
        crd.metadata.annotations =
            Some([(PROGRESS_ANNOTATION.to_string(), "junk".to_string())].into());
        assert_eq!(saved_progress(&crd), Progress::default());
    }

    #[test]
    fn a_run_publishes_its_progress_then_its_outcome() {
        let stored = vec!["v1alpha1".to_string(), "v1beta1".to_string()];
        let crd = "distributedkvs.kv.example.com";
        let refused = StorageReport {
            migrated: 3,
            refused: vec!["default/kv-1: denied".into()],
            ..StorageReport::default()
        };
        let earlier = RunProgress::starting(crd, "v1beta1", &stored, None).finished(&refused);
        assert_eq!(earlier.state, StorageMigrationState::ObjectsRefused);
        assert_eq!(earlier.total, Some(3));

        // The next run lists the earlier refusals until it ends.
        let run = RunProgress::starting(crd, "v1beta1", &stored, Some(&earlier));
        assert_eq!(run.started().state, StorageMigrationState::InProgress);
        assert_eq!(run.started().refused, earlier.refused);
        let step = run.advanced(2, Some(3));
        assert_eq!((step.migrated, step.total), (2, Some(3)));
        let done = run.finished(&StorageReport {
            migrated: 3,
            done: true,
            ..StorageReport::default()
        });
        assert_eq!(done.state, StorageMigrationState::Completed);
        assert!(done.refused.is_empty());
        assert_eq!(done.stored_versions, stored);
        let stopped = run.interrupted(1, &StorageError::NoCrd(crd.into()));
        assert_eq!(stopped.state, StorageMigrationState::Interrupted);
        assert!(stopped.error.unwrap().contains(crd));
        assert_eq!(run.settled().state, StorageMigrationState::AlreadyMigrated);
    }

    #[test]
    fn the_rate_becomes_a_pause() {
        assert_eq!(write_interval(0), None);
        assert_eq!(write_interval(50), Some(Duration::from_millis(20)));
    }
}
