//! The registry of plugin versions: prepare a candidate (compile once, check
//! it), activate it (config, limits, concurrency), unload a plugin, and what
//! serves now.
//!
//! Per plugin the registry holds a [`VersionSet`] behind a shared
//! [`ServingVersions`] holder: the stable version and (later) at most one
//! rollout candidate. It starts nothing: every change of a version set is
//! announced ([`Registry::announcements`]) to whoever runs controllers (the
//! manager), and an activation or unload returns only once that listener has
//! applied it.
//!
//! # Guarantees
//!
//! - A version is compiled once per [`Registry::prepare`], off the async
//!   workers; activating it compiles nothing.
//! - Changes of one registry are serialised: two loads of one name cannot
//!   race, and every announcement is applied before the next change starts.
//! - A refused version never replaces the serving one, and never shows up
//!   in [`Registry::stats`].

pub mod access;
mod admission;
mod announcement;
pub mod assign;
mod audit;
mod candidate;
mod change;
mod error;
mod loaded_version;
mod observations;
mod options;
mod rollout;
mod stats;
mod versions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::cache::Discovery;
use crate::contract::Grant;
use crate::engine::Engine;
use crate::telemetry::Metrics;
use crate::util::lock;

use change::{CheckedActivation, SetEdit};

pub use access::{AccessReport, OutsideGrant, PluginAccess};
pub use admission::{
    AdmissionMode, AdmissionSettings, DEFAULT_ADMISSION_TIMEOUT_SECONDS,
    DEFAULT_AUDIT_INTERVAL_SECONDS, FailurePolicy, MatchCondition,
};
pub use announcement::{Announcement, VersionChange};
pub use audit::{AdmissionAudit, AuditBoard, AuditFinding, MAX_AUDIT_FINDINGS};
pub use candidate::Candidate;
pub use error::{KindRefusal, PermissionDenial, PrimaryKindChange, RegistryError};
pub use loaded_version::LoadedVersion;
pub use observations::{
    CanaryObservations, DiffKind, DryRunFailure, DryRunReport, DryRunState, FieldDiff, MAX_DIFFS,
    MAX_DRY_RUN_FAILURES, MAX_KINDS, MAX_OBJECTS, ObjectDiff, ObjectName, ShadowCounts,
    ShadowOutcome,
};
pub use options::{ActivationOptions, DEFAULT_MAX_INSTANCES, RegistryOptions};
pub use rollout::{DEFAULT_ROLLOUT_RATE, DEFAULT_SHADOW_CONCURRENCY, Rollout, RolloutSettings};
pub use stats::{
    CounterSnapshot, LATENCY_BUCKETS, LatencyHistogram, VersionCounters, VersionRole, VersionStats,
};
pub use versions::{ActiveVersion, RolloutCandidate, ServingVersions, VersionSet};

/// `upgrade`, `rollback` or `reload` (same version, e.g. a rebuilt digest),
/// for the audit trail.
fn transition(from: &str, to: &str) -> &'static str {
    match (semver::Version::parse(from), semver::Version::parse(to)) {
        (Ok(a), Ok(b)) if b > a => "upgrade",
        (Ok(a), Ok(b)) if b < a => "rollback",
        _ => "reload",
    }
}

struct Inner {
    engine: Engine,
    metrics: Metrics,
    default_concurrency: usize,
    plugins: Mutex<HashMap<String, Arc<ServingVersions>>>,
    stats: Mutex<HashMap<String, stats::PluginStats>>,
    /// Serialises activations and unloads so two loads of one name cannot race.
    changes: tokio::sync::Mutex<()>,
    /// Where changes are announced (the manager); `None` until someone listens.
    listener: Mutex<Option<mpsc::UnboundedSender<Announcement>>>,
    /// API discovery, once a client is known ([`Registry::use_discovery`]).
    /// A registry without one (unit tests, `plugin inspect`) does not check
    /// kinds against a cluster: there is none.
    discovery: std::sync::OnceLock<Discovery>,
}

/// The plugin versions of this host. Cheap to clone; clones share everything.
///
/// # Examples
///
/// Prepare a component (compile once, check its manifest) and make it
/// serve, as `run --plugin` does; the manager's controllers pick it up.
///
/// ```no_run
/// use wasm_operator::registry::{ActivationOptions, Registry, RegistryOptions};
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let registry = Registry::new(RegistryOptions::default())?;
/// let bytes = std::fs::read("webapp.wasm")?;
/// let candidate = registry.prepare("file:webapp.wasm", bytes, None).await?;
/// let loaded = registry.activate(candidate, ActivationOptions::default()).await?;
/// println!("{} {} serves ({})", loaded.name, loaded.version, loaded.digest);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("loaded", &self.loaded())
            .finish()
    }
}

impl Registry {
    /// A registry with no plugins.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Engine`] when the wasm engine cannot be created
    /// (e.g. the instance pool cannot reserve its address space).
    pub fn new(mut options: RegistryOptions) -> Result<Registry, RegistryError> {
        // Every call the engine makes is timed into this registry's metrics.
        if options.engine.observer.is_none() {
            options.engine.observer = Some(Arc::new(options.metrics.clone()));
        }
        let engine = Engine::new(options.engine).map_err(RegistryError::Engine)?;
        Ok(Registry {
            inner: Arc::new(Inner {
                engine,
                metrics: options.metrics,
                default_concurrency: options.concurrency.max(1),
                plugins: Mutex::new(HashMap::new()),
                stats: Mutex::new(HashMap::new()),
                changes: tokio::sync::Mutex::new(()),
                listener: Mutex::new(None),
                discovery: std::sync::OnceLock::new(),
            }),
        })
    }

    fn plugins(&self) -> MutexGuard<'_, HashMap<String, Arc<ServingVersions>>> {
        lock(&self.inner.plugins)
    }

    fn stats_map(&self) -> MutexGuard<'_, HashMap<String, stats::PluginStats>> {
        lock(&self.inner.stats)
    }

    /// The engine the plugins run in.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// Where plugin calls and versions are recorded.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Checks every new version's kinds against `discovery` from now on
    /// (the manager sets its client's). Without it the registry trusts
    /// manifests' plurals and scopes: only for registries that serve no
    /// cluster. Set once; later calls are ignored.
    pub fn use_discovery(&self, discovery: Discovery) {
        let _ = self.inner.discovery.set(discovery);
    }

    /// Every later change of a version set. There is one listener, the
    /// composition root: a new call replaces (and closes) the previous
    /// receiver. Changes wait until the listener acknowledges each
    /// [`Announcement`]; a dropped receiver lets them proceed unannounced.
    pub fn announcements(&self) -> mpsc::UnboundedReceiver<Announcement> {
        let (tx, rx) = mpsc::unbounded_channel();
        *lock(&self.inner.listener) = Some(tx);
        rx
    }

    /// Announces `change` and waits until the listener applied it.
    async fn announce(&self, change: VersionChange) {
        let listener = lock(&self.inner.listener).clone();
        let Some(listener) = listener else {
            return;
        };
        let (applied, done) = oneshot::channel();
        if listener.send(Announcement { change, applied }).is_ok() {
            // An error means the listener dropped the announcement (it is
            // stopping): nothing left to wait for.
            let _ = done.await;
        }
    }

    /// Per-version figures of plugin `name`, in the order the versions
    /// were first activated (empty when never loaded).
    /// Each serving version carries its [`VersionRole`].
    pub fn stats(&self, name: &str) -> Vec<VersionStats> {
        let mut all = self
            .stats_map()
            .get(name)
            .map(stats::PluginStats::snapshot)
            .unwrap_or_default();
        if let Some(current) = self.versions(name).map(|v| v.current()) {
            let is = |s: &VersionStats, v: &ActiveVersion| {
                s.version == v.info.version && s.digest == v.info.digest
            };
            for s in &mut all {
                if is(s, &current.stable) {
                    s.role = Some(VersionRole::Stable);
                } else if current
                    .candidate
                    .as_ref()
                    .is_some_and(|c| is(s, &c.version))
                {
                    s.role = Some(VersionRole::Candidate);
                }
            }
        }
        all
    }

    /// Compiles `bytes` (once, off the async workers), reads the manifest and
    /// checks the version against what serves now: the same primary kind,
    /// the plugin `replaces` when given (a deployment of one plugin), and no
    /// rollback below the serving version's `min_compatible_version`.
    /// Nothing changes until [`Registry::activate`].
    ///
    /// # Errors
    ///
    /// [`RegistryError::Load`] (not a component of our world, an invalid
    /// manifest, or the engine's pool was busy: see
    /// [`RegistryError::is_transient`]), [`RegistryError::PrimaryKindChanged`],
    /// [`RegistryError::PluginNameChanged`], [`RegistryError::RollbackRefused`],
    /// and [`RegistryError::Kinds`] from [`Registry::check_kinds`].
    pub async fn prepare(
        &self,
        source: &str,
        bytes: Vec<u8>,
        replaces: Option<&str>,
    ) -> Result<Candidate, RegistryError> {
        let candidate = self.prepare_component(source, bytes, replaces).await?;
        // After the identity checks: a component that may not replace the
        // serving one is refused for that, whatever the cluster serves.
        self.check_kinds(&candidate).await?;
        Ok(candidate)
    }

    /// [`Registry::prepare`] without checking the manifest's kinds against
    /// the cluster: for a caller that installs the CRD the component
    /// carries first (`permissions.crds`), then calls
    /// [`Registry::check_kinds`] itself.
    ///
    /// # Errors
    ///
    /// As [`Registry::prepare`], but never [`RegistryError::Kinds`].
    pub async fn prepare_component(
        &self,
        source: &str,
        bytes: Vec<u8>,
        replaces: Option<&str>,
    ) -> Result<Candidate, RegistryError> {
        let engine = self.inner.engine.clone();
        // Compiling takes seconds of CPU: keep it off the async workers.
        let plugin = tokio::task::spawn_blocking(move || engine.load(&bytes))
            .await
            .map_err(|e| RegistryError::Internal {
                source_name: source.to_string(),
                message: e.to_string(),
            })?
            .map_err(|error| RegistryError::Load {
                source_name: source.to_string(),
                error,
            });
        let plugin = match plugin {
            Ok(plugin) => plugin,
            Err(error) => {
                tracing::warn!(target: "audit", source, "plugin version rejected: {error}");
                return Err(error);
            }
        };
        let candidate = Candidate {
            plugin,
            source: source.to_string(),
            replaces: replaces.map(str::to_string),
        };
        let running = self.current(candidate.target());
        self.admit(&candidate, running.as_deref(), None)?;
        Ok(candidate)
    }

    /// The plugin other than `candidate`'s target that serves its primary
    /// kind (same group and kind, any version), if any.
    fn primary_kind_conflict(&self, candidate: &Candidate) -> Option<RegistryError> {
        let target = candidate.target();
        let primary = &candidate.manifest().primary;
        let plugins = self.plugins();
        let mut serving: Vec<&String> = plugins
            .iter()
            .filter(|(name, versions)| {
                let current = versions.current();
                let theirs = &current.stable.plugin.manifest().primary;
                name.as_str() != target
                    && theirs.group == primary.group
                    && theirs.kind == primary.kind
            })
            .map(|(name, _)| name)
            .collect();
        serving.sort();
        let serving = serving.first()?;
        let new = candidate.manifest();
        Some(RegistryError::PrimaryKindConflict {
            name: new.name.clone(),
            version: new.version.clone(),
            source_name: candidate.source().to_string(),
            kind: format!(
                "{}/{}",
                if primary.group.is_empty() {
                    "core"
                } else {
                    primary.group.as_str()
                },
                primary.kind
            ),
            serving: (*serving).clone(),
        })
    }

    /// Resolves every kind of the candidate's manifest through API
    /// discovery (when the registry has it) and refuses a manifest whose
    /// plural or scope disagrees with the cluster, or that names a kind the
    /// cluster does not serve.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Kinds`] naming every disagreement, or
    /// [`RegistryError::Discovery`] when discovery cannot be read.
    pub async fn check_kinds(&self, candidate: &Candidate) -> Result<(), RegistryError> {
        let Some(discovery) = self.inner.discovery.get() else {
            return Ok(());
        };
        let manifest = candidate.manifest();
        let problems = discovery.check_manifest(manifest).await.map_err(|source| {
            RegistryError::Discovery {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                source_name: candidate.source().to_string(),
                source: Box::new(source),
            }
        })?;
        if problems.is_empty() {
            return Ok(());
        }
        let refusal = RegistryError::Kinds(Box::new(KindRefusal {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            source_name: candidate.source().to_string(),
            problems,
        }));
        self.inner
            .metrics
            .version_refused(&manifest.name, &manifest.version, refusal.reason());
        tracing::warn!(
            target: "audit", plugin = %manifest.name, version = %manifest.version,
            digest = %candidate.digest(), source = %candidate.source(),
            reason = %refusal.reason(), "plugin version rejected: {refusal}"
        );
        Err(refusal)
    }

    /// Runs the candidate's checks against `running` and the other plugins'
    /// primary kinds, and against `grant` when given, logging a refusal.
    fn admit(
        &self,
        candidate: &Candidate,
        running: Option<&ActiveVersion>,
        grant: Option<&Grant>,
    ) -> Result<(), RegistryError> {
        let verdict = match self.primary_kind_conflict(candidate) {
            Some(conflict) => Err(conflict),
            None => candidate.admit(running),
        }
        .and_then(|()| match grant {
            Some(grant) => candidate.check_grant(grant, running),
            None => Ok(()),
        });
        verdict.inspect_err(|refusal| {
            self.inner.metrics.version_refused(
                candidate.name(),
                &candidate.manifest().version,
                refusal.reason(),
            );
            tracing::warn!(
                target: "audit", plugin = %candidate.name(),
                from = %running.map(|r| r.info.version.as_str()).unwrap_or_default(),
                to = %candidate.manifest().version, digest = %candidate.digest(),
                source = %candidate.source(), "plugin version rejected: {refusal}"
            );
        })
    }

    /// Makes `candidate` the stable version of its plugin with `options`.
    /// The checks of [`Registry::prepare`] run again against what serves at
    /// this moment (another version may have been activated meanwhile). The
    /// swap is atomic: calls in flight finish on the old version, new calls
    /// use the new one. Returns once the change was announced and applied.
    ///
    /// # Errors
    ///
    /// The refusals of [`Registry::prepare`]; nothing changes then.
    pub async fn activate(
        &self,
        candidate: Candidate,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        self.activate_with(candidate, options, None).await
    }

    /// [`Registry::activate`] with a rollout candidate set in the same
    /// change (e.g. a host starting mid-canary): no object is ever served
    /// by the stable version alone in between, so a split's assignment
    /// holds from the first reconcile. `canary` is checked against the new
    /// stable version like [`Registry::activate_candidate`] checks it; it
    /// replaces a running candidate. With `canary` `None` this is
    /// [`Registry::activate`].
    ///
    /// Three steps under the change lock: [`Registry::check_activation`]
    /// (every refusal, nothing serves differently yet),
    /// [`Registry::commit_activation`] (the swap) and
    /// [`Registry::announce_activation`] (the audit line, then the listener).
    ///
    /// # Errors
    ///
    /// Those of [`Registry::activate`] and [`Registry::activate_candidate`];
    /// nothing changes then.
    pub async fn activate_with(
        &self,
        candidate: Candidate,
        options: ActivationOptions,
        canary: Option<(Candidate, RolloutSettings, ActivationOptions)>,
    ) -> Result<LoadedVersion, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let holder = self.versions(candidate.target());
        let previous = holder.as_ref().map(|h| h.current());
        let checked = self.check_activation(candidate, options, canary, previous.as_deref())?;
        let info = checked.active.info.clone();
        let (versions, previous) = self.commit_activation(holder, previous.as_deref(), checked);
        self.announce_activation(&info, versions, previous).await;
        Ok(info)
    }

    /// The check step of [`Registry::activate_with`]: `candidate` against
    /// `previous` (the set serving its target now), the other plugins'
    /// primary kinds and its grant, then `canary` against the new stable
    /// version ([`Registry::check_rollout`]). Returns what the change will
    /// serve. Nothing serves differently afterwards; the accepted versions'
    /// counters exist (see [`Registry::active_version`]).
    ///
    /// # Errors
    ///
    /// The refusals of [`Registry::prepare`] and [`Registry::check_rollout`].
    fn check_activation(
        &self,
        candidate: Candidate,
        options: ActivationOptions,
        canary: Option<(Candidate, RolloutSettings, ActivationOptions)>,
        previous: Option<&VersionSet>,
    ) -> Result<CheckedActivation, RegistryError> {
        self.admit(
            &candidate,
            previous.map(|p| p.stable.as_ref()),
            Some(&options.grant),
        )?;
        let concurrency = options
            .concurrency
            .unwrap_or(self.inner.default_concurrency)
            .max(1);
        let active = self.active_version(candidate, options);
        let rollout = match canary {
            None => None,
            Some((next, settings, next_options)) => {
                Some(self.check_rollout(&active, next, settings, next_options)?)
            }
        };
        Ok(CheckedActivation {
            active,
            concurrency,
            rollout,
        })
    }

    /// The commit step of [`Registry::activate_with`]: makes `checked`
    /// serve in `holder` (a new holder for a plugin's first version). A
    /// rollout candidate of `previous` survives the new stable version
    /// (e.g. a config change) unless the change brings its own candidate
    /// or the new stable version is that candidate; a candidate that does
    /// not survive stops observing. Returns the holder and the set that
    /// served before (`None` for a first version).
    fn commit_activation(
        &self,
        holder: Option<Arc<ServingVersions>>,
        previous: Option<&VersionSet>,
        checked: CheckedActivation,
    ) -> (Arc<ServingVersions>, Option<Arc<VersionSet>>) {
        let CheckedActivation {
            active,
            concurrency,
            rollout,
        } = checked;
        let info = active.info.clone();
        if let Some(rollout) = &rollout {
            self.record_candidate_set(&info, rollout);
        }
        let mut set = VersionSet::stable(active, concurrency);
        let running = previous.and_then(|p| p.candidate.clone());
        if rollout.is_some() {
            if let Some(running) = &running {
                running.observations.stop();
            }
            set.candidate = rollout;
        } else if let Some(running) = running {
            if running.version.info.digest == info.digest {
                running.observations.stop();
            } else {
                set.candidate = Some(running);
            }
        }
        self.inner
            .metrics
            .plugin_version_loaded(&info.name, &info.version);
        match holder {
            Some(holder) => {
                let previous = holder.replace(set);
                (holder, Some(previous))
            }
            None => {
                let holder = Arc::new(ServingVersions::new(set));
                self.plugins().insert(info.name.clone(), holder.clone());
                (holder, None)
            }
        }
    }

    /// The announce step of [`Registry::activate_with`]: the audit line
    /// (`plugin loaded`, or `plugin version swapped` from `previous`), then
    /// the [`VersionChange`] to the listener. Returns once it was applied.
    async fn announce_activation(
        &self,
        info: &LoadedVersion,
        versions: Arc<ServingVersions>,
        previous: Option<Arc<VersionSet>>,
    ) {
        match &previous {
            None => tracing::info!(
                target: "audit", plugin = %info.name, version = %info.version,
                digest = %info.digest, source = %info.source, "plugin loaded"
            ),
            Some(old) => tracing::info!(
                target: "audit", plugin = %info.name, from = %old.stable.info.version,
                to = %info.version, digest = %info.digest, source = %info.source,
                transition = transition(&old.stable.info.version, &info.version),
                "plugin version swapped"
            ),
        }
        self.announce(VersionChange::Activated { versions, previous })
            .await;
    }

    /// Checks `next` as a rollout candidate beside `stable` (the same
    /// plugin name, the checks of [`Registry::prepare`] against `stable`,
    /// its grant, and [`RegistryError::CanaryIrreversible`]) and builds it
    /// with fresh observations.
    ///
    /// # Errors
    ///
    /// [`RegistryError::PluginNameChanged`], the refusals of
    /// [`Registry::prepare`], [`RegistryError::PermissionDenied`] and
    /// [`RegistryError::CanaryIrreversible`].
    fn check_rollout(
        &self,
        stable: &ActiveVersion,
        next: Candidate,
        settings: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<RolloutCandidate, RegistryError> {
        if next.target() != stable.info.name {
            return Err(RegistryError::PluginNameChanged {
                source_name: next.source().to_string(),
                expected: stable.info.name.clone(),
                name: next.name().to_string(),
                version: next.manifest().version.clone(),
            });
        }
        // A candidate serves beside the stable version under the stable
        // version's watch of the primary: it must read the same version.
        if next.manifest().primary != stable.plugin.manifest().primary {
            return Err(next.primary_change(stable));
        }
        self.admit(&next, Some(stable), Some(&options.grant))?;
        rollout::check_reversible(&stable.info, next.manifest(), &settings)?;
        let version = Arc::new(self.active_version(next, options));
        let observations = Arc::new(CanaryObservations::new(
            stable.info.clone(),
            version.info.clone(),
            settings.shadow_concurrency,
        ));
        Ok(RolloutCandidate {
            version,
            settings,
            observations,
        })
    }

    /// Records that `rollout` is set beside `stable`: its version in the
    /// metrics, the `canary candidate set` audit line.
    fn record_candidate_set(&self, stable: &LoadedVersion, rollout: &RolloutCandidate) {
        let (version, settings) = (&rollout.version.info, &rollout.settings);
        self.inner
            .metrics
            .plugin_version_loaded(&version.name, &version.version);
        tracing::info!(
            target: "audit", plugin = %stable.name, stable = %stable.version,
            candidate = %version.version, digest = %version.digest,
            source = %version.source, mode = settings.rollout.mode(),
            rollout = ?settings.rollout, "canary candidate set"
        );
    }

    /// The one way a running plugin's version set changes: under the
    /// change lock, `edit` looks at plugin `name`'s serving set and decides.
    /// [`SetEdit::Replace`] makes its set serve and announces the change
    /// (returning once it was applied); [`SetEdit::Keep`] changes nothing.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when no stable version serves `name`,
    /// and `edit`'s own; nothing changes then.
    async fn edit_versions<T>(
        &self,
        name: &str,
        edit: impl FnOnce(&VersionSet) -> Result<SetEdit<T>, RegistryError>,
    ) -> Result<T, RegistryError> {
        let _changes = self.inner.changes.lock().await;
        let holder = self
            .versions(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        let current = holder.current();
        match edit(&current)? {
            SetEdit::Keep(out) => Ok(out),
            SetEdit::Replace(set, out) => {
                let previous = holder.replace(set);
                self.announce(VersionChange::Activated {
                    versions: holder,
                    previous: Some(previous),
                })
                .await;
                Ok(out)
            }
        }
    }

    /// Checks `candidate` (prepared with [`Registry::prepare`], `replaces`
    /// naming the plugin) exactly like a new version against the stable
    /// one (name, primary kind, grant, rollback rule, kinds) and sets it
    /// beside the stable version with `settings`, replacing an earlier
    /// candidate (whose observations stop). Returns once the change was
    /// announced and applied (the manager re-reconciles the objects whose
    /// serving version changed, at `settings.rollout_rate`).
    ///
    /// `options` are the candidate's own config, call limits, grant and
    /// reconcile limits; its `concurrency` is not used (a candidate's
    /// objects are reconciled by the plugin's controller at the stable
    /// version's concurrency, shadow work at `settings.shadow_concurrency`).
    /// The controller watches the kinds of both versions.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when no stable version serves `name`;
    /// the refusals of [`Registry::activate`]; and
    /// [`RegistryError::CanaryIrreversible`] for a Split or Selector
    /// candidate whose `min_compatible_version` is above the stable version,
    /// unless `settings.accept_irreversible`. Nothing changes then.
    pub async fn activate_candidate(
        &self,
        candidate: Candidate,
        settings: RolloutSettings,
        options: ActivationOptions,
    ) -> Result<LoadedVersion, RegistryError> {
        let target = candidate.target().to_string();
        self.edit_versions(&target, |previous| {
            let rollout = self.check_rollout(&previous.stable, candidate, settings, options)?;
            let info = rollout.version.info.clone();
            if let Some(old) = &previous.candidate {
                old.observations.stop();
            }
            self.record_candidate_set(&previous.stable.info, &rollout);
            let mut set = previous.clone();
            set.candidate = Some(rollout);
            Ok(SetEdit::Replace(set, info))
        })
        .await
    }

    /// Changes how plugin `name`'s candidate takes part (a weight step,
    /// DryRun → Shadow or Split, a new selector, rate or shadow
    /// concurrency). Observations are kept. Returns once the change was
    /// applied (objects that change version are re-reconciled at the new
    /// `rollout_rate`).
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`], [`RegistryError::NoCandidate`], and
    /// [`RegistryError::CanaryIrreversible`] as in
    /// [`Registry::activate_candidate`]; nothing changes then.
    pub async fn set_rollout(
        &self,
        name: &str,
        settings: RolloutSettings,
    ) -> Result<(), RegistryError> {
        self.edit_versions(name, |previous| {
            let Some(candidate) = &previous.candidate else {
                return Err(RegistryError::NoCandidate(name.to_string()));
            };
            rollout::check_reversible(
                &previous.stable.info,
                candidate.version.plugin.manifest(),
                &settings,
            )?;
            if candidate.settings == settings {
                return Ok(SetEdit::Keep(()));
            }
            candidate
                .observations
                .set_concurrency(settings.shadow_concurrency);
            tracing::info!(
                target: "audit", plugin = %name, stable = %previous.stable.info.version,
                candidate = %candidate.version.info.version, from = ?candidate.settings.rollout,
                to = ?settings.rollout, rollout_rate = settings.effective_rate(),
                "canary rollout changed"
            );
            let mut set = previous.clone();
            if let Some(c) = set.candidate.as_mut() {
                c.settings = settings;
            }
            Ok(SetEdit::Replace(set, ()))
        })
        .await
    }

    /// Rolls plugin `name`'s candidate back (analysis failed, abort, or it
    /// became unloadable): it stops serving and computing at once, and
    /// every object it served is re-reconciled by the stable version at
    /// the candidate's `rollout_rate`. Returns the dropped candidate
    /// (`None` when there was none) once the change was applied.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when the plugin does not serve.
    pub async fn drop_candidate(&self, name: &str) -> Result<Option<LoadedVersion>, RegistryError> {
        self.edit_versions(name, |previous| {
            let Some(candidate) = previous.candidate.clone() else {
                return Ok(SetEdit::Keep(None));
            };
            candidate.observations.stop();
            tracing::info!(
                target: "audit", plugin = %name, stable = %previous.stable.info.version,
                candidate = %candidate.version.info.version, digest = %candidate.version.info.digest,
                "canary candidate dropped; the stable version serves every object"
            );
            let mut set = previous.clone();
            set.candidate = None;
            Ok(SetEdit::Replace(set, Some(candidate.version.info.clone())))
        })
        .await
    }

    /// Makes plugin `name`'s candidate its stable version: every object it
    /// did not serve yet moves to it (re-reconciled at its `rollout_rate`),
    /// and the old stable version is unloaded once its calls in flight
    /// finish. Returns the new stable version once the change was applied.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`], [`RegistryError::NoCandidate`].
    pub async fn promote_candidate(&self, name: &str) -> Result<LoadedVersion, RegistryError> {
        self.edit_versions(name, |previous| {
            let Some(candidate) = previous.candidate.clone() else {
                return Err(RegistryError::NoCandidate(name.to_string()));
            };
            candidate.observations.stop();
            let info = candidate.version.info.clone();
            tracing::info!(
                target: "audit", plugin = %name, from = %previous.stable.info.version,
                to = %info.version, digest = %info.digest, source = %info.source,
                transition = transition(&previous.stable.info.version, &info.version),
                "canary candidate promoted"
            );
            let set = VersionSet {
                stable: candidate.version,
                candidate: None,
                concurrency: previous.concurrency,
            };
            Ok(SetEdit::Replace(set, info))
        })
        .await
    }

    /// The observations of plugin `name`'s rollout candidate; `None`
    /// without a candidate.
    pub fn canary(&self, name: &str) -> Option<Arc<CanaryObservations>> {
        let versions = self.versions(name)?.current();
        versions.candidate.as_ref().map(|c| c.observations.clone())
    }

    /// The live figures of plugin `name`'s stable version and candidate,
    /// for windowed analysis ([`CounterSnapshot::since`]).
    pub fn counters(&self, name: &str) -> Option<(CounterSnapshot, Option<CounterSnapshot>)> {
        let versions = self.versions(name)?.current();
        Some((
            versions.stable.counters.snapshot(),
            versions
                .candidate
                .as_ref()
                .map(|c| c.version.counters.snapshot()),
        ))
    }

    /// The serving form of an accepted `candidate`: its limits, config,
    /// grant and (shared per version and digest) counters.
    fn active_version(&self, candidate: Candidate, options: ActivationOptions) -> ActiveVersion {
        let plugin = match options.limits {
            Some(limits) => candidate.plugin.with_limits(limits),
            None => candidate.plugin,
        };
        let info = LoadedVersion {
            name: plugin.manifest().name.clone(),
            version: plugin.manifest().version.clone(),
            digest: plugin.digest().to_string(),
            source: candidate.source,
        };
        let config = if options.config.is_null() {
            Value::Object(Default::default())
        } else {
            options.config
        };
        // Created only now that the version is accepted, so a refused one
        // never shows up in the stats.
        let counters = self
            .stats_map()
            .entry(info.name.clone())
            .or_default()
            .counters(&info.version, &info.digest);
        ActiveVersion {
            plugin,
            config,
            limits: options.reconcile_limits.unwrap_or_default(),
            info,
            counters,
            grant: Arc::new(options.grant),
            admission: options.admission,
        }
    }

    /// [`Registry::prepare`] then [`Registry::activate`] with `config` and
    /// the registry's default limits and concurrency: a load of a component
    /// that may be any plugin.
    ///
    /// # Errors
    ///
    /// Those of [`Registry::prepare`] and [`Registry::activate`].
    pub async fn load(
        &self,
        source: &str,
        bytes: &[u8],
        config: Value,
    ) -> Result<LoadedVersion, RegistryError> {
        let candidate = self.prepare(source, bytes.to_vec(), None).await?;
        self.activate(
            candidate,
            ActivationOptions {
                config,
                ..ActivationOptions::default()
            },
        )
        .await
    }

    /// Forgets plugin `name`; returns once the change was announced and
    /// applied (its controller stopped after its calls in flight).
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotLoaded`] when no plugin of that name serves.
    pub async fn unload(&self, name: &str) -> Result<(), RegistryError> {
        let _changes = self.inner.changes.lock().await;
        self.plugins()
            .remove(name)
            .ok_or_else(|| RegistryError::NotLoaded(name.to_string()))?;
        self.stats_map().remove(name);
        self.announce(VersionChange::Unloaded {
            plugin: name.to_string(),
        })
        .await;
        tracing::info!(target: "audit", plugin = %name, "plugin unloaded");
        Ok(())
    }

    /// Forgets every plugin, announcing each unload.
    pub async fn unload_all(&self) {
        let names: Vec<String> = self.plugins().keys().cloned().collect();
        for name in names {
            // A plugin another task unloaded meanwhile is gone either way.
            let _ = self.unload(&name).await;
        }
    }

    /// Every loaded plugin's stable version, sorted by name.
    pub fn loaded(&self) -> Vec<LoadedVersion> {
        let mut out: Vec<LoadedVersion> = self
            .plugins()
            .values()
            .map(|v| v.current().stable.info.clone())
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// The stable version of plugin `name`, with its handle (for tools that
    /// call the plugin directly, e.g. conversion webhooks).
    pub fn current(&self, name: &str) -> Option<Arc<ActiveVersion>> {
        self.plugins().get(name).map(|v| v.current().stable.clone())
    }

    /// The serving-state holder of plugin `name`.
    pub fn versions(&self, name: &str) -> Option<Arc<ServingVersions>> {
        self.plugins().get(name).cloned()
    }
}
