//! One task per WasmPlugin object: loads its source, reloads on spec and
//! source changes, writes status and the audit trail, and unloads the plugin
//! when the object is deleted (behind a finalizer).

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use super::audit::{AuditTrail, Transition};
use super::canary::{CANARY_TICK, CanaryDriver, run::requested_action};
use super::cluster::Cluster;
use super::crds;
use super::refusal::{condition_reason, refusal_message};
use super::release;
use super::spec::WasmPluginSpec;
use super::status::{self, Loaded, Problem, Serving, now, problem};
use super::watch::{self as source_watch, Trigger};
use super::{Claims, FINALIZER, WasmPluginOptions, api_resource};
use crate::apply::finalizer;
use crate::contract::Reason;
use crate::engine::CallLimits;
use crate::registry::{ActivationOptions, Candidate, LoadedVersion, Registry, RegistryError};
use crate::webhook::gate::{self, GateError};
use crate::webhook::{StorageMigrationProgress, WebhookBoard};

/// How often a WasmPlugin waiting for another to let go of its plugin
/// name checks again.
const BLOCKED_RETRY: Duration = Duration::from_secs(2);

/// How long a load that failed for a passing reason (the engine's instance
/// pool was full, a kind is not served yet, discovery could not be read)
/// waits before it is tried again.
const LOAD_RETRY: Duration = Duration::from_secs(5);

/// The longest pause between retries of a load whose problem persists (a
/// CRD that stays missing is looked for again at least this often; each
/// retry fetches and compiles again, so it must not spin).
const LOAD_RETRY_MAX: Duration = Duration::from_secs(60);

/// The pause before the next retry of a load that failed for a passing
/// reason: `LOAD_RETRY` after a new problem, doubled (up to
/// `LOAD_RETRY_MAX`) while the same problem repeats.
fn next_retry(previous: Duration, same_problem: bool) -> Duration {
    if same_problem {
        (previous * 2).min(LOAD_RETRY_MAX)
    } else {
        LOAD_RETRY
    }
}

/// How often the per-version counts in status are compared with the
/// registry's live counters (those `/metrics` exports): status follows
/// them within this period. A status is written only when it differs from
/// the last one written, so this also bounds the counters' writes to one
/// per period per WasmPlugin while reconciles run, and to none when idle.
const STATS_REFRESH: Duration = Duration::from_secs(2);

/// One WasmPlugin's worker: what it loaded, what went wrong, and its
/// canary (driven by [`CanaryDriver`]).
pub(super) struct Worker {
    /// The object, the client, the registry, the audit trail, the write
    /// gate.
    cluster: Cluster,
    claims: Claims,
    /// Several notifications arrive for one file write or ConfigMap update;
    /// wait this long for them to settle before fetching.
    settle: Duration,
    /// A plugin name another WasmPlugin serves, which this one waits for.
    blocked_on: Option<String>,
    /// The last problem passes by itself: load again after `retry_delay`.
    retry_load: bool,
    /// The pause before that retry (see [`next_retry`]).
    retry_delay: Duration,
    /// When that retry is due: a fixed instant, so the loop's other timers
    /// (the status refresh ticks more often than a retry backs off) cannot
    /// restart the wait every time they fire.
    retry_at: tokio::time::Instant,
    default_limits: CallLimits,
    spec: Option<WasmPluginSpec>,
    loaded: Option<Loaded>,
    problem: Option<Problem>,
    last_status: Value,
    source_watch: Option<JoinHandle<()>>,
    /// The canary of `spec.canary`.
    canary: CanaryDriver,
    /// The storage migration progress the last status write saw.
    migration_shown: Option<StorageMigrationProgress>,
    /// Where the webhook posts its conversion target and storage progress.
    webhook: WebhookBoard,
    /// The last thing said about a version's CRD (component digest,
    /// message): said once, not at every reload.
    crd_told: Option<(String, String)>,
}

impl Worker {
    /// Runs the worker for `object` until the object is deleted (the
    /// supervisor closes `updates`) or its deletion is finalized.
    pub(super) fn spawn(
        client: kube::Client,
        registry: Registry,
        audit: AuditTrail,
        options: WasmPluginOptions,
        claims: Claims,
        object: Arc<DynamicObject>,
        updates: watch::Receiver<Arc<DynamicObject>>,
    ) -> JoinHandle<()> {
        let default_limits = registry.engine().config().limits;
        let api = Api::all_with(client.clone(), &api_resource());
        let worker = Worker {
            last_status: object.data.get("status").cloned().unwrap_or(Value::Null),
            cluster: Cluster {
                name: object.metadata.name.clone().unwrap_or_default(),
                client,
                registry,
                audit,
                writes: options.writes.clone(),
                api,
                object,
                verification: options.verification.clone(),
                default_verification: options.verification.clone(),
            },
            claims,
            settle: options.source_settle,
            blocked_on: None,
            retry_load: false,
            retry_delay: LOAD_RETRY,
            retry_at: tokio::time::Instant::now(),
            default_limits,
            spec: None,
            loaded: None,
            problem: None,
            source_watch: None,
            canary: CanaryDriver::default(),
            migration_shown: None,
            webhook: options.webhook.clone(),
            crd_told: None,
        };
        tokio::spawn(worker.run(updates))
    }

    async fn run(mut self, mut updates: watch::Receiver<Arc<DynamicObject>>) {
        let (tx, mut triggers) = mpsc::channel::<Trigger>(16);
        let (canary_tx, mut canary_triggers) = mpsc::channel::<Trigger>(16);
        self.canary.listen(canary_tx);
        // A storage migration of the plugin's CRD publishes its progress
        // on the webhook's board (webhook/storage.rs); this status shows it.
        let mut migration_updates = self.webhook.storage_progress().updates();
        let mut refresh = tokio::time::interval(STATS_REFRESH);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // An interval, not a sleep made anew in each turn of the loop: the
        // refresh above would restart such a sleep before it ends.
        let mut blocked_check = tokio::time::interval(BLOCKED_RETRY);
        blocked_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        self.on_object(&tx).await;
        // A standby that becomes the leader writes what it skipped (the
        // finalizer, the status) at once, not at the next change.
        let mut leadership = self.cluster.writes.subscribe();
        let mut follows_leadership = true;
        loop {
            if self.cluster.object.metadata.deletion_timestamp.is_some() {
                self.finalize().await;
                return;
            }
            tokio::select! {
                changed = updates.changed() => {
                    if changed.is_err() {
                        // The object is gone (deleted without our finalizer,
                        // or the supervisor stops): stop serving it.
                        self.unload().await;
                        return;
                    }
                    self.cluster.object = updates.borrow_and_update().clone();
                    self.on_object(&tx).await;
                }
                Some(trigger) = triggers.recv() => {
                    tokio::time::sleep(self.settle).await;
                    let mut trigger = Some(trigger);
                    while let Ok(next) = triggers.try_recv() {
                        trigger = Some(next);
                    }
                    let stale = match (&trigger, &self.loaded) {
                        (Some(Trigger::OciDigest(digest)), Some(loaded)) => {
                            loaded.revision.as_deref() != Some(digest.as_str())
                        }
                        _ => true,
                    };
                    if stale {
                        self.sync().await;
                    }
                }
                _ = blocked_check.tick(), if self.blocked_on.is_some() => {
                    if self.blocked_on.as_ref().is_some_and(|name| !self.claimed(name)) {
                        // The other WasmPlugin let go of the plugin: retry.
                        self.sync().await;
                    }
                }
                _ = tokio::time::sleep_until(self.retry_at), if self.retry_load => self.sync().await,
                Some(_) = canary_triggers.recv() => {
                    tokio::time::sleep(self.settle).await;
                    while canary_triggers.try_recv().is_ok() {}
                    self.canary.source_changed(&mut self.cluster, &mut self.loaded).await;
                    self.write_status().await;
                }
                _ = tokio::time::sleep(CANARY_TICK), if self.canary.ticking() => {
                    self.canary.tick(&mut self.cluster, &mut self.loaded).await;
                    self.write_status().await;
                }
                _ = refresh.tick() => self.write_status().await,
                changed = leadership.changed(), if follows_leadership => {
                    if changed.is_err() {
                        follows_leadership = false;
                    } else if leadership.borrow_and_update().leading && self.cluster.writes.may_write() {
                        self.on_object(&tx).await;
                    }
                }
                Ok(()) = migration_updates.changed() => {
                    // Another plugin's migration is no news here.
                    let mine = self.loaded.as_ref().and_then(|l| {
                        self.webhook.storage_progress().get(&l.serving.loaded.name)
                    });
                    if mine != self.migration_shown {
                        self.write_status().await;
                    }
                }
            }
        }
    }

    /// A new version of the object: ensure the finalizer, and reload when the
    /// spec changed.
    async fn on_object(&mut self, tx: &mpsc::Sender<Trigger>) {
        if self.cluster.object.metadata.deletion_timestamp.is_some() {
            return;
        }
        self.ensure_finalizer().await;
        let spec = match WasmPluginSpec::from_object(&self.cluster.object.data) {
            Ok(spec) => spec,
            Err(error) => {
                self.reject(
                    problem(Reason::InvalidSpec.as_str(), error.to_string()),
                    false,
                    None,
                )
                .await;
                self.write_status().await;
                return;
            }
        };
        if self.spec.as_ref() == Some(&spec) {
            // Metadata or status changes only (e.g. the canary-action
            // annotation); keep observedGeneration current.
            self.canary_action().await;
            self.write_status().await;
            return;
        }
        let source_changed = self.spec.as_ref().map(|s| &s.source) != Some(&spec.source);
        self.spec = Some(spec.clone());
        self.cluster.verify_with(spec.verification.clone());
        if source_changed {
            if let Some(task) = self.source_watch.take() {
                task.abort();
            }
            self.source_watch = Some(source_watch::spawn(
                self.cluster.client.clone(),
                spec.source.clone(),
                tx.clone(),
            ));
        }
        // The canary first: a removed one is over (an abort, or nothing
        // after a promotion) before spec.source is looked at, so a promoted
        // candidate moved into spec.source is the version that serves.
        let generation = self.cluster.object.metadata.generation;
        self.canary
            .sync(
                &mut self.cluster,
                self.spec.as_ref(),
                &mut self.loaded,
                &self.last_status,
                generation,
            )
            .await;
        self.sync().await;
        self.canary
            .load_candidate(&mut self.cluster, &mut self.loaded)
            .await;
        self.canary_action().await;
        self.write_status().await;
    }

    /// Acts on the `canary-action` annotation (see
    /// [`CanaryDriver::act`]), then writes status.
    async fn canary_action(&mut self) {
        let annotations = self.cluster.object.metadata.annotations.as_ref();
        let Some(action) = requested_action(annotations) else {
            return;
        };
        self.canary
            .act(&mut self.cluster, action, &mut self.loaded)
            .await;
        self.write_status().await;
    }

    /// Fetches the source and loads it unless it is what already serves.
    async fn sync(&mut self) {
        self.retry_load = false;
        let Some(spec) = self.spec.clone() else {
            return;
        };
        // The promoted candidate serves until spec.canary is removed:
        // promotion never rewrites the spec, and spec.source (still the old
        // version) must not swap it back meanwhile. After a host restart it
        // is loaded from spec.canary.source.
        let promoted = self.canary.promoted();
        if let Some((_, Some(candidate))) = &promoted
            && self
                .loaded
                .as_ref()
                .is_some_and(|l| l.serving.loaded.digest == candidate.loaded.digest)
        {
            self.write_status().await;
            return;
        }
        let spec_source = match promoted {
            Some((source, _)) => source,
            None => spec.source.clone(),
        };
        let source = spec_source.describe();
        let options = match activation_options(&spec, self.default_limits) {
            Ok(options) => options,
            Err(invalid) => {
                self.reject(invalid, false, None).await;
                self.write_status().await;
                return;
            }
        };
        self.revoke_if_no_longer_granted(&options).await;
        let fetched = match self.cluster.fetch(&spec_source).await {
            Ok(fetched) => fetched,
            Err(error) => {
                let retries = error.retries();
                self.reject(problem(error.reason(), error.to_string()), retries, None)
                    .await;
                self.write_status().await;
                return;
            }
        };
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&fetched.bytes)));
        if let Some(loaded) = &self.loaded
            && loaded.serving.loaded.digest == digest
            && loaded.serving.loaded.source == source
            && loaded.options == options
        {
            // Same content, same settings: a repeat notification. A problem
            // reported for other content is over, though.
            self.problem = None;
            if let Some(loaded) = self.loaded.as_mut() {
                loaded.revision = fetched.revision.clone();
                loaded.signature = status::signature_status(fetched.signature.as_ref());
            }
            self.write_status().await;
            return;
        }
        // One compile, every identity check: the registry's. A WasmPlugin
        // serves one plugin, so a new version must be the serving plugin.
        let serving_plugin = self.loaded.as_ref().map(|l| l.serving.loaded.name.clone());
        let candidate = match self
            .cluster
            .registry
            .prepare_component(&source, fetched.bytes, serving_plugin.as_deref())
            .await
        {
            Ok(candidate) => candidate,
            Err(error) => {
                self.refuse(&error, &digest).await;
                self.write_status().await;
                return;
            }
        };
        if !self
            .passes_cluster_checks(&candidate, &options, &spec, &digest)
            .await
        {
            self.write_status().await;
            return;
        }
        self.point_conversion(&candidate).await;
        let plugin_name = candidate.name().to_string();
        if let Err(conflict) = self.claim(&plugin_name) {
            self.reject(conflict, false, Some(&digest)).await;
            self.write_status().await;
            return;
        }
        let activated = match self
            .canary
            .resume(&mut self.cluster, candidate, &plugin_name, &options)
            .await
        {
            Ok(result) => result,
            Err(candidate) => {
                self.cluster
                    .registry
                    .activate(candidate, options.clone())
                    .await
            }
        };
        match activated {
            Ok(info) => {
                let serving = Serving {
                    loaded: LoadedVersion {
                        name: info.name.clone(),
                        version: info.version.clone(),
                        digest: info.digest.clone(),
                        source: source.clone(),
                    },
                    source_kind: spec_source.kind().to_string(),
                    loaded_at: now(),
                };
                let previous = self.loaded.replace(Loaded {
                    serving: serving.clone(),
                    options,
                    revision: fetched.revision,
                    signature: status::signature_status(fetched.signature.as_ref()),
                });
                self.problem = None;
                let transition = transition(previous.as_ref().map(|l| &l.serving), &serving);
                self.cluster.record(&transition).await;
            }
            Err(error) => {
                if self.loaded.is_none() {
                    self.release(&plugin_name);
                }
                self.refuse(&error, &digest).await;
            }
        }
        self.write_status().await;
    }

    /// The checks of `candidate` against the cluster, in order: the
    /// conversion round-trip gate (webhook/gate.rs: a `convert` that loses
    /// or breaks stored objects never serves), the plugin's own CRD
    /// (`permissions.crds`, installed before its controller watches the
    /// kind and before the webhook points its conversion), then its kinds
    /// against discovery (after the install, so a carried CRD counts).
    /// False when one refused it (the refusal is recorded; the caller
    /// writes the status).
    async fn passes_cluster_checks(
        &mut self,
        candidate: &Candidate,
        options: &ActivationOptions,
        spec: &WasmPluginSpec,
        digest: &str,
    ) -> bool {
        // The conversion round-trip gate (webhook/gate.rs): a `convert`
        // that loses or breaks stored objects never serves.
        if let Err(refusal) = self.conversion_gate(candidate, options, spec).await {
            let retrying = matches!(refusal, GateError::Unreadable { .. });
            let reason = if retrying {
                Reason::LoadFailed
            } else {
                Reason::ConversionNotLossless
            };
            self.reject(
                problem(reason.as_str(), refusal.to_string()),
                retrying,
                Some(digest),
            )
            .await;
            return false;
        }
        // The plugin's own CRD (permissions.crds) before its controller
        // watches the kind, and before the webhook points its conversion.
        if let Err((refusal, retrying)) = self.install_crd(candidate, options, digest).await {
            self.reject(refusal, retrying, Some(digest)).await;
            return false;
        }
        // The kinds against discovery after the CRD install, so a CRD the
        // plugin carries counts.
        if let Err(error) = self.cluster.registry.check_kinds(candidate).await {
            self.refuse(&error, digest).await;
            return false;
        }
        true
    }

    /// Runs the conversion round-trip gate on `candidate` with this
    /// deployment's call limits.
    async fn conversion_gate(
        &self,
        candidate: &Candidate,
        options: &ActivationOptions,
        spec: &WasmPluginSpec,
    ) -> Result<(), GateError> {
        let plugin = candidate
            .plugin()
            .with_limits(options.limits.unwrap_or(self.default_limits));
        let allow_lossy = spec.allow_lossy_conversion.unwrap_or(false);
        let report = gate::check(&self.cluster.client, &plugin, allow_lossy).await?;
        for loss in &report.accepted_losses {
            tracing::warn!(wasmplugin = %self.cluster.name, plugin = %candidate.name(), version = %candidate.manifest().version, "lossy conversion allowed by spec.allowLossyConversion: {loss}");
        }
        Ok(())
    }

    /// Applies the CRD `candidate` carries as the grant allows
    /// ([`crds::install`]) and tells the WasmPlugin what was done: once per
    /// component digest.
    async fn install_crd(
        &mut self,
        candidate: &Candidate,
        options: &ActivationOptions,
        digest: &str,
    ) -> Result<(), crds::Refused> {
        let plugin = candidate
            .plugin()
            .with_limits(options.limits.unwrap_or(self.default_limits));
        let may_write = self.cluster.writes.may_write();
        let installed =
            crds::install(&self.cluster.client, &plugin, &options.grant, may_write).await?;
        let manifest = candidate.manifest();
        let Some(message) = crds::message(&installed, &manifest.name, &manifest.version) else {
            return Ok(());
        };
        let told = (digest.to_string(), message.clone());
        if self.crd_told.as_ref() == Some(&told) {
            return Ok(());
        }
        self.crd_told = Some(told);
        let not_granted = matches!(installed, crds::Installed::NotGranted { .. });
        let reason = if not_granted {
            Reason::CrdNotApplied
        } else {
            Reason::CrdApplied
        };
        let serving = self.loaded.as_ref().map(|l| &l.serving.loaded);
        let transition = Transition {
            reason: reason.as_str().into(),
            warning: not_granted,
            retrying: false,
            plugin: manifest.name.clone(),
            from: serving.map(|s| s.version.clone()).unwrap_or_default(),
            to: manifest.version.clone(),
            digest: digest.to_string(),
            source: self
                .spec
                .as_ref()
                .map(|s| s.source.describe())
                .unwrap_or_default(),
            message,
        };
        self.cluster.record(&transition).await;
        Ok(())
    }

    /// Points a migrating plugin's CRD at this host's conversion webhook
    /// before the version activates
    /// ([`crate::webhook::point_before_activation`]). Best effort: the
    /// webhook's own sync points it too, shortly after.
    async fn point_conversion(&self, candidate: &Candidate) {
        let pointed = crate::webhook::point_before_activation(
            &self.cluster.client,
            &self.webhook,
            candidate.manifest(),
        )
        .await;
        match pointed {
            Ok(true) => {
                tracing::info!(wasmplugin = %self.cluster.name, plugin = %candidate.name(), "pointed the CRD's conversion at this host's webhook before activating the plugin");
            }
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(wasmplugin = %self.cluster.name, %error, "the webhook points the CRD shortly after activation instead");
            }
        }
    }

    /// A plugin is served by one WasmPlugin: claims plugin `name` for this
    /// one, unless another WasmPlugin serves it (then this one waits for it
    /// to let go). Loading it into the registry would otherwise swap another
    /// WasmPlugin's plugin.
    fn claim(&mut self, name: &str) -> Result<(), Problem> {
        let mut claims = crate::util::lock(&self.claims);
        self.blocked_on = None;
        match claims.get(name) {
            Some(owner) if *owner != self.cluster.name => {
                self.blocked_on = Some(name.to_string());
                Err(problem(
                    Reason::PluginNameConflict.as_str(),
                    format!(
                        "plugin {name} is already served by WasmPlugin {owner}; a plugin is served by one WasmPlugin: edit {owner} or delete it first."
                    ),
                ))
            }
            Some(_) => Ok(()),
            None => {
                claims.insert(name.to_string(), self.cluster.name.clone());
                Ok(())
            }
        }
    }

    /// Records a version the registry refused or could not load (yet).
    async fn refuse(&mut self, error: &RegistryError, digest: &str) {
        let refusal = problem(condition_reason(error), refusal_message(error, digest));
        // A kind not served yet (its CRD comes later), a busy engine or
        // unreadable discovery pass by themselves: load again later.
        self.reject(refusal, error.may_pass(), Some(digest)).await;
    }

    /// True when some WasmPlugin other than this one serves plugin `name`.
    fn claimed(&self, name: &str) -> bool {
        let claims = crate::util::lock(&self.claims);
        claims
            .get(name)
            .is_some_and(|owner| *owner != self.cluster.name)
    }

    /// Gives up this WasmPlugin's claim on plugin `name`.
    fn release(&self, name: &str) {
        let mut claims = crate::util::lock(&self.claims);
        if claims.get(name) == Some(&self.cluster.name) {
            claims.remove(name);
        }
    }

    /// Records a new version that could not be loaded: refused, or not
    /// loaded yet when the problem passes by itself (`retrying`: then a
    /// retry is scheduled). Once per distinct problem.
    async fn reject(&mut self, problem: Problem, retrying: bool, digest: Option<&str>) {
        self.retry_load = retrying;
        let same = self.problem.as_ref() == Some(&problem);
        self.retry_delay = next_retry(self.retry_delay, same);
        self.retry_at = tokio::time::Instant::now() + self.retry_delay;
        if same {
            return;
        }
        let serving = self.loaded.as_ref().map(|l| &l.serving);
        let keeps = match serving {
            Some(s) => format!(
                " The last good version {} {} keeps serving.",
                s.loaded.name, s.loaded.version
            ),
            None => " No version of this plugin serves yet.".to_string(),
        };
        let transition = Transition {
            reason: problem.reason.clone(),
            warning: true,
            retrying,
            plugin: serving.map(|s| s.loaded.name.clone()).unwrap_or_default(),
            from: serving
                .map(|s| s.loaded.version.clone())
                .unwrap_or_default(),
            to: serving
                .map(|s| s.loaded.version.clone())
                .unwrap_or_default(),
            digest: digest.unwrap_or_default().to_string(),
            source: self
                .spec
                .as_ref()
                .map(|s| s.source.describe())
                .unwrap_or_default(),
            message: if self.retry_load {
                format!("not loaded yet: {}{keeps}", sentence(&problem.message))
            } else {
                format!("rejected: {}{keeps}", sentence(&problem.message))
            },
        };
        self.problem = Some(problem);
        self.cluster.record(&transition).await;
    }

    /// Writes status when it differs from what was written last.
    async fn write_status(&mut self) {
        if !self.cluster.writes.may_write() {
            return;
        }
        let serving = self.loaded.as_ref().map(|l| &l.serving);
        let versions = serving
            .map(|s| self.cluster.registry.stats(&s.loaded.name))
            .unwrap_or_default();
        let canary = self.canary.status_part(&self.cluster);
        let migration = serving.and_then(|s| self.webhook.storage_progress().get(&s.loaded.name));
        let mut status = status::build(
            serving,
            self.problem.as_ref(),
            &versions,
            canary.as_ref(),
            migration.as_ref(),
            self.cluster.object.metadata.generation,
            &self.last_status,
            &now(),
        );
        let oci_manifest_digest = self.loaded.as_ref().and_then(|l| l.revision.as_deref());
        status::add_oci_manifest_digest(&mut status, oci_manifest_digest, &self.last_status);
        let signature = self.loaded.as_ref().and_then(|l| l.signature.as_ref());
        status::add_signature(&mut status, signature, &self.last_status);
        let holder = serving.and_then(|s| self.cluster.registry.versions(&s.loaded.name));
        let plugin = serving.map(|s| s.loaded.name.as_str());
        status::add_reports(&mut status, plugin, holder.as_deref(), &self.last_status);
        self.migration_shown = migration;
        if status == self.last_status {
            return;
        }
        let patch = json!({ "status": status });
        match self
            .cluster
            .api
            .patch_status(
                &self.cluster.name,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => self.last_status = status,
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(error) => {
                tracing::warn!(%error, wasmplugin = %self.cluster.name, "cannot write WasmPlugin status; retrying on the next change");
            }
        }
    }

    async fn ensure_finalizer(&self) {
        if !self.cluster.writes.may_write() {
            return;
        }
        if let Err(error) =
            finalizer::add(&self.cluster.api, &*self.cluster.object, FINALIZER).await
        {
            tracing::debug!(%error, wasmplugin = %self.cluster.name, "finalizer update conflicted; retrying on the next change");
        }
    }

    async fn remove_finalizer(&self) {
        if !self.cluster.writes.may_write() {
            return;
        }
        if let Err(error) =
            finalizer::remove(&self.cluster.api, &*self.cluster.object, FINALIZER).await
        {
            tracing::debug!(%error, wasmplugin = %self.cluster.name, "finalizer update conflicted; retrying on the next change");
        }
    }

    /// The object is being deleted: stop its plugin, then let it go.
    async fn finalize(&mut self) {
        if let Some(task) = self.source_watch.take() {
            task.abort();
        }
        self.unload().await;
        self.remove_finalizer().await;
    }

    /// The grant changed and no longer covers what the serving version
    /// asks for: a revocation takes effect, so the serving version stops
    /// (it never keeps powers the cluster operator took back). The source
    /// is still watched; the load that follows reports `PermissionDenied`.
    async fn revoke_if_no_longer_granted(&mut self, options: &ActivationOptions) {
        let Some(loaded) = &self.loaded else {
            return;
        };
        if loaded.options.grant == options.grant {
            return;
        }
        let Some(serving) = self.cluster.registry.current(&loaded.serving.loaded.name) else {
            return;
        };
        let excesses = options.grant.check(serving.plugin.manifest());
        if excesses.is_empty() {
            return;
        }
        let Some(loaded) = self.loaded.take() else {
            return;
        };
        self.release(&loaded.serving.loaded.name);
        let s = &loaded.serving;
        if let Err(error) = self.cluster.registry.unload(&s.loaded.name).await {
            tracing::warn!(%error, wasmplugin = %self.cluster.name, plugin = %s.loaded.name, "cannot unload plugin");
        }
        let excesses: Vec<String> = excesses.iter().map(ToString::to_string).collect();
        let transition = stopped(
            s,
            Reason::PermissionDenied,
            format!(
                "spec.permissions no longer grants what {} {} asks for ({}): it stopped serving",
                s.loaded.name,
                s.loaded.version,
                excesses.join("; ")
            ),
        );
        self.cluster.record(&transition).await;
    }

    async fn unload(&mut self) {
        if let Some(task) = self.source_watch.take() {
            task.abort();
        }
        // Unloading the plugin drops its candidate too.
        self.canary.stop();
        let Some(loaded) = self.loaded.take() else {
            return;
        };
        let s = &loaded.serving;
        // Read before unloading: whether the plugin holds its primaries.
        let manifest = self
            .cluster
            .registry
            .current(&s.loaded.name)
            .map(|active| active.plugin.manifest().clone());
        match self.cluster.registry.unload(&s.loaded.name).await {
            Ok(()) | Err(RegistryError::NotLoaded(_)) => {
                // The controller has stopped: nothing adds the finalizer
                // again. Nothing can finalize any more either, so the host
                // lets go of the primaries (see `release`).
                let mut note = String::new();
                if self.cluster.writes.may_write()
                    && let Some(manifest) = manifest.filter(|m| m.finalizer)
                {
                    let outcome = release::release_primaries(
                        &self.cluster.client,
                        &self.cluster.name,
                        &s.loaded.name,
                        &s.loaded.version,
                        &manifest.primary,
                    )
                    .await;
                    note = format!(
                        "; its finalizer was removed from {} {} (FinalizeSkipped: finalize did not run)",
                        outcome.released, manifest.primary.plural
                    );
                    if !outcome.failed.is_empty() {
                        tracing::warn!(
                            wasmplugin = %self.cluster.name, plugin = %s.loaded.name,
                            failed = %outcome.failed.join("; "),
                            "cannot remove the host's finalizer from some primaries of a deleted plugin; remove wasm-operator.dev/finalizer from them by hand"
                        );
                        note.push_str(&format!(
                            "; could not remove it from: {}",
                            outcome.failed.join("; ")
                        ));
                    }
                }
                let transition = stopped(
                    s,
                    Reason::Unloaded,
                    format!(
                        "WasmPlugin {} deleted: {} {} stopped{note}",
                        self.cluster.name, s.loaded.name, s.loaded.version
                    ),
                );
                self.cluster.record(&transition).await;
            }
            Err(error) => {
                tracing::warn!(%error, wasmplugin = %self.cluster.name, plugin = %s.loaded.name, "cannot unload plugin");
            }
        }
        // Only now may another WasmPlugin waiting for this plugin name load
        // it: its controller must not hold primaries this one releases.
        self.release(&loaded.serving.loaded.name);
    }
}

/// `message` ended as a sentence, so that the next one can follow it
/// (error messages end without a full stop, as Rust's do).
fn sentence(message: &str) -> String {
    let trimmed = message.trim_end();
    if trimmed.ends_with(['.', '!', '?']) {
        trimmed.to_string()
    } else {
        format!("{trimmed}.")
    }
}

/// What a version loaded for `spec` is activated with: its config, call
/// and reconcile limits (over `defaults`), concurrency and grant; an
/// `InvalidSpec` problem when a limit cannot serve.
fn activation_options(
    spec: &WasmPluginSpec,
    defaults: CallLimits,
) -> Result<ActivationOptions, Problem> {
    let invalid =
        |error: &dyn std::fmt::Display| problem(Reason::InvalidSpec.as_str(), error.to_string());
    let limits = spec.call_limits(defaults).map_err(|e| invalid(&e))?;
    let reconcile_limits = spec.reconcile_limits().map_err(|e| invalid(&e))?;
    Ok(ActivationOptions {
        config: spec.plugin_config(),
        limits: Some(limits),
        concurrency: spec.concurrency,
        grant: spec.permissions.clone().unwrap_or_default(),
        reconcile_limits: Some(reconcile_limits),
        admission: spec.admission.clone().unwrap_or_default().settings(),
    })
}

/// `serving` stopped serving for `reason` (unloaded, or its grant
/// revoked): nothing serves after it. A Warning unless it was unloaded.
fn stopped(serving: &Serving, reason: Reason, message: String) -> Transition {
    Transition {
        reason: reason.as_str().into(),
        warning: reason != Reason::Unloaded,
        retrying: false,
        plugin: serving.loaded.name.clone(),
        from: serving.loaded.version.clone(),
        to: String::new(),
        digest: serving.loaded.digest.clone(),
        source: serving.loaded.source.clone(),
        message,
    }
}

/// The transition from `from` (None: first load) to `to`.
fn transition(from: Option<&Serving>, to: &Serving) -> Transition {
    let (reason, message) = match from {
        None => (
            Reason::Loaded.as_str(),
            format!(
                "loaded {} {} ({}) from {}",
                to.loaded.name, to.loaded.version, to.loaded.digest, to.loaded.source
            ),
        ),
        Some(old) if old.loaded.digest == to.loaded.digest => (
            Reason::Reloaded.as_str(),
            format!(
                "reloaded {} {} with new settings from {}",
                to.loaded.name, to.loaded.version, to.loaded.source
            ),
        ),
        Some(old) => {
            let older = match (
                semver::Version::parse(&to.loaded.version),
                semver::Version::parse(&old.loaded.version),
            ) {
                (Ok(new), Ok(old)) => new < old,
                _ => false,
            };
            let reason = if older {
                Reason::RolledBack.as_str()
            } else {
                Reason::Swapped.as_str()
            };
            (
                reason,
                format!(
                    "{} {} {} ({}) -> {} ({}) from {}",
                    if older { "rolled back" } else { "swapped" },
                    to.loaded.name,
                    old.loaded.version,
                    old.loaded.digest,
                    to.loaded.version,
                    to.loaded.digest,
                    to.loaded.source
                ),
            )
        }
    };
    Transition {
        reason: reason.to_string(),
        warning: false,
        retrying: false,
        plugin: to.loaded.name.clone(),
        from: from.map(|s| s.loaded.version.clone()).unwrap_or_default(),
        to: to.loaded.version.clone(),
        digest: to.loaded.digest.clone(),
        source: to.loaded.source.clone(),
        message,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_refusal_ends_its_sentence_before_the_next() {
        assert_eq!(
            super::sentence("pin the digest that was pushed or remove the pin"),
            "pin the digest that was pushed or remove the pin."
        );
        assert_eq!(
            super::sentence("already a sentence. "),
            "already a sentence."
        );
    }

    use super::*;

    #[test]
    fn a_persisting_passing_problem_is_retried_less_and_less_often() {
        assert_eq!(next_retry(LOAD_RETRY, false), LOAD_RETRY);
        let mut delay = LOAD_RETRY;
        for _ in 0..10 {
            delay = next_retry(delay, true);
        }
        assert_eq!(delay, LOAD_RETRY_MAX);
        // A new problem starts over.
        assert_eq!(next_retry(LOAD_RETRY_MAX, false), LOAD_RETRY);
    }
}
