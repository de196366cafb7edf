//! A loaded plugin and how one call runs: fresh store + instance from the
//! plugin's `InstancePre`, deadline, memory limiter, output checks, and the
//! mapping of every way a call can end to a [`CallError`].

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use wasmtime::component::{Component, Instance, InstancePre};
use wasmtime::{Store, Trap};

use super::bindings::{
    admission, backup, backup_policy, migration, migration_functions, reconciler, schema,
    types as wit,
};
use super::compile::LoadStats;
use super::convert::{self, OutputProblem};
use super::error::{CallError, CallFailure, CallSite, EngineError, NamespaceDenial};
use super::host::HostState;
use super::trap;
use super::{CacheReader, CallLimits, CallReport, EPOCH_TICK, Engine, FixedClock};
use crate::contract;

/// How a call body can fail before it is attributed to a plugin.
enum Fault {
    /// Instantiation failed for a reason that is not the plugin's code.
    Instantiate(wasmtime::Error),
    /// The pooling allocator has no free slot.
    PoolFull,
    /// The guest trapped, ran out of time or memory, or a host function failed.
    Wasm(wasmtime::Error),
    Output(OutputProblem),
    Failed(contract::Failure),
}

impl From<OutputProblem> for Fault {
    fn from(p: OutputProblem) -> Self {
        Fault::Output(p)
    }
}

struct Inner {
    engine: Engine,
    pre: InstancePre<HostState>,
    reconciler: reconciler::GuestIndices,
    migration: Option<migration::GuestIndices>,
    /// Looked up at load so that a manifest declaring `backup` without the
    /// interface is refused then; [`LoadedPlugin::backup_plan`] and
    /// [`LoadedPlugin::restore_job`] call it through these indices.
    backup: Option<backup::GuestIndices>,
    /// The optional `backup-policy` export; absent from components built
    /// before it existed, whose plans get the host's defaults.
    backup_policy: Option<backup_policy::GuestIndices>,
    /// The optional `schema` export (the plugin's own CRD); absent from
    /// components built before it existed.
    schema: Option<schema::GuestIndices>,
    /// The optional `admission` export; absent from components built
    /// before it existed and from `reconciler-plugin` components.
    admission: Option<admission::GuestIndices>,
    /// What `admission.implemented` said at load; none without the export.
    admission_functions: contract::AdmissionFunctions,
    manifest: Arc<contract::Manifest>,
    name: Arc<str>,
    version: Arc<str>,
    /// True once `name` and `version` are the manifest's, not the
    /// placeholders of the `manifest` call itself.
    named: bool,
    /// The `manifest` call made before the plugin had a name: reported to
    /// the observer once the name is known, so no metric series ever
    /// carries a placeholder name or version (and a failed `manifest` call,
    /// which leaves the plugin nameless, is reported by its load error).
    unnamed_call: Mutex<Option<ObservedCall>>,
    digest: String,
    stats: LoadStats,
}

/// A finished call, as the observer is told about it (without the plugin's
/// name and version, which the report takes from [`Inner`]).
#[derive(Debug, Clone, Copy)]
struct ObservedCall {
    function: &'static str,
    duration: Duration,
    instantiation: Duration,
    memory_bytes: usize,
    outcome: &'static str,
    log_bytes: usize,
    log_dropped: usize,
}

impl Inner {
    /// Tells the engine's observer about `call`, under this plugin's name.
    fn observe(&self, call: &ObservedCall) {
        if let Some(observer) = &self.engine.inner.config.observer {
            observer.observe(&CallReport {
                plugin: &self.name,
                version: &self.version,
                function: call.function,
                duration: call.duration,
                instantiation: call.instantiation,
                memory_bytes: call.memory_bytes,
                outcome: call.outcome,
                log_bytes: call.log_bytes,
                log_dropped: call.log_dropped,
            });
        }
    }
}

/// A plugin version ready to call. Cheap to clone; clones share the compiled
/// code, each call still gets its own instance.
#[derive(Clone)]
pub struct LoadedPlugin {
    inner: Arc<Inner>,
    limits: CallLimits,
    /// The wall clock of this handle's calls; `None`: the real one.
    clock: Option<FixedClock>,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.inner.name)
            .field("version", &self.inner.version)
            .field("digest", &self.inner.digest)
            .field("limits", &self.limits)
            .field("clock", &self.clock)
            .finish()
    }
}

/// Epoch ticks for a timeout: rounded up, plus one because the current tick
/// is already partly over.
fn deadline_ticks(timeout: Duration) -> u64 {
    let tick = EPOCH_TICK.as_nanos().max(1);
    (timeout.as_nanos().div_ceil(tick) as u64).saturating_add(1)
}

impl LoadedPlugin {
    /// Links a compiled component, calls and validates its manifest.
    pub(crate) fn link(
        engine: Engine,
        component: Component,
        digest: String,
        stats: LoadStats,
    ) -> Result<LoadedPlugin, EngineError> {
        let wrong = |missing: String| EngineError::WrongWorld {
            digest: digest.clone(),
            missing,
        };
        let pre = engine
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| {
                wrong(format!(
                    "it imports something the host does not provide ({e:#})"
                ))
            })?;
        let reconciler =
            reconciler::GuestIndices::new(&pre).map_err(|e| wrong(format!("{e:#}")))?;
        let migration = migration::GuestIndices::new(&pre).ok();
        let backup = backup::GuestIndices::new(&pre).ok();
        let backup_policy = backup_policy::GuestIndices::new(&pre).ok();
        let schema = schema::GuestIndices::new(&pre).ok();
        let admission = admission::GuestIndices::new(&pre).ok();
        let short = digest.get(7..19).unwrap_or(&digest).to_string();
        let mut plugin = LoadedPlugin {
            limits: engine.inner.config.limits,
            clock: None,
            inner: Arc::new(Inner {
                engine,
                pre,
                reconciler,
                migration,
                backup,
                backup_policy,
                schema,
                admission,
                admission_functions: contract::AdmissionFunctions::default(),
                manifest: Arc::new(placeholder_manifest()),
                name: Arc::from(format!("<{short}>")),
                version: Arc::from("unknown"),
                named: false,
                unnamed_call: Mutex::new(None),
                digest: digest.clone(),
                stats,
            }),
        };
        let invalid = |problem: String| EngineError::InvalidManifest {
            digest: digest.clone(),
            problem,
        };
        // `admission.implemented` is read in the same instance, right after
        // `manifest` (both must be pure): one call at load, reported as
        // `manifest`.
        let manifest_call = plugin.execute("manifest", None, |store, instance, inner| {
            // With the export indices found above, loading the interface can
            // only fail because its functions have other types than this
            // host's contract (another contract version). That is answered as
            // a value, so it is told from a failing call by where it arose.
            let guest = match inner.reconciler.load(&mut *store, instance) {
                Ok(guest) => guest,
                Err(mismatch) => return Ok(Err(("reconciler", mismatch))),
            };
            let raw = guest.call_manifest(&mut *store).map_err(Fault::Wasm)?;
            let Some(admission) = &inner.admission else {
                return Ok(Ok((raw, None)));
            };
            let guest = match admission.load(&mut *store, instance) {
                Ok(guest) => guest,
                Err(mismatch) => return Ok(Err(("admission", mismatch))),
            };
            let implemented = guest.call_implemented(&mut *store).map_err(Fault::Wasm)?;
            Ok(Ok((raw, Some(implemented))))
        });
        let (raw, admission_functions) = match manifest_call {
            Ok(Ok(answer)) => answer,
            Ok(Err((interface, mismatch))) => {
                return Err(wrong(format!(
                    "its `{interface}` exports have other types ({mismatch:#})"
                )));
            }
            Err(CallError {
                failure: CallFailure::InstancePoolFull { max_instances },
                ..
            }) => {
                return Err(EngineError::InstancePoolFull {
                    digest: digest.clone(),
                    max_instances,
                });
            }
            Err(e) if plugin.inner.admission.is_some() => {
                return Err(invalid(format!(
                    "calling `manifest` and `admission.implemented` failed: {e}"
                )));
            }
            Err(e) => return Err(invalid(format!("calling `manifest` failed: {e}"))),
        };
        let mut manifest = convert::manifest(raw);
        convert::validate_manifest(&manifest).map_err(invalid)?;
        let functions = migration_functions::GuestIndices::new(&plugin.inner.pre).ok();
        if manifest.implements.migration
            && let Some(functions) = functions
        {
            // Which functions of `migration` are real; a component without
            // this export predates it and implements both.
            let implemented = plugin
                .execute("implemented", None, |store, instance, _| {
                    let guest = functions.load(&mut *store, instance).map_err(Fault::Wasm)?;
                    guest.call_implemented(&mut *store).map_err(Fault::Wasm)
                })
                .map_err(|e| {
                    invalid(format!(
                        "calling `migration-functions.implemented` failed: {e}"
                    ))
                })?;
            convert::migration_functions(&mut manifest.implements, implemented).map_err(invalid)?;
        }
        if manifest.implements.migration && plugin.inner.migration.is_none() {
            return Err(invalid(
                "it declares `migration` but does not export the migration interface".into(),
            ));
        }
        if manifest.implements.backup && plugin.inner.backup.is_none() {
            return Err(invalid(
                "it declares `backup` but does not export the backup interface".into(),
            ));
        }
        let inner = Arc::get_mut(&mut plugin.inner)
            .ok_or_else(|| invalid("internal: plugin shared during load".into()))?;
        inner.name = Arc::from(manifest.name.as_str());
        inner.version = Arc::from(manifest.version.as_str());
        inner.manifest = Arc::new(manifest);
        inner.admission_functions = admission_functions
            .map(convert::admission_functions)
            .unwrap_or_default();
        inner.named = true;
        let unnamed = match inner.unnamed_call.get_mut() {
            Ok(call) => call.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(call) = unnamed {
            inner.observe(&call);
        }
        Ok(plugin)
    }

    /// The CRD of the primary kind the plugin carries (its optional
    /// `schema` export), or `None` when it carries none: built before the
    /// export existed, or its author did not derive one.
    pub fn crd(&self) -> Result<Option<Value>, CallError> {
        let Some(schema) = self.inner.schema.clone() else {
            return Ok(None);
        };
        let text = self.execute("schema.crd", None, |store, instance, _| {
            let guest = schema.load(&mut *store, instance).map_err(Fault::Wasm)?;
            guest.call_crd(&mut *store).map_err(Fault::Wasm)
        })?;
        text.map(|text| {
            serde_json::from_str(&text).map_err(|e| {
                self.call_error(
                    "schema.crd",
                    CallFailure::InvalidOutput {
                        problem: format!("the CRD is not JSON: {e}"),
                    },
                )
            })
        })
        .transpose()
    }

    /// The compiled component (for `inspect`).
    pub(crate) fn component(&self) -> &Component {
        self.inner.pre.component()
    }

    /// The validated manifest.
    pub fn manifest(&self) -> &contract::Manifest {
        &self.inner.manifest
    }

    /// `sha256:<hex>` of the component bytes.
    pub fn digest(&self) -> &str {
        &self.inner.digest
    }

    /// Whether this load compiled the component or used the disk cache.
    pub fn load_stats(&self) -> LoadStats {
        self.inner.stats
    }

    /// The limits of this handle's calls.
    pub fn limits(&self) -> CallLimits {
        self.limits
    }

    /// The same plugin with other call limits (e.g. from a `WasmPlugin`'s
    /// resources).
    pub fn with_limits(&self, limits: CallLimits) -> LoadedPlugin {
        LoadedPlugin {
            inner: self.inner.clone(),
            limits,
            clock: self.clock,
        }
    }

    /// The same plugin whose calls read `clock` instead of the real clocks
    /// (`None`: the real ones again), for reproducible answers.
    pub fn with_clock(&self, clock: Option<FixedClock>) -> LoadedPlugin {
        LoadedPlugin {
            inner: self.inner.clone(),
            limits: self.limits,
            clock,
        }
    }

    /// Computes the desired state of one primary object. `object` and
    /// `children` are the objects' compact JSON text (see
    /// `cache::object_text`): the engine passes it to the plugin as is.
    pub async fn reconcile(
        &self,
        ctx: &contract::CallContext,
        object: String,
        children: Vec<String>,
        cache: Arc<dyn CacheReader>,
    ) -> Result<contract::Desired, CallError> {
        let guest_call = reconcile_guest_call(ctx, object, children);
        self.call(
            "reconcile",
            Some(cache),
            guest_call,
            convert::desired,
            convert::failure,
        )
        .await
    }

    /// [`LoadedPlugin::reconcile`] on the current thread (blocks it for up to the timeout).
    pub fn reconcile_blocking(
        &self,
        ctx: &contract::CallContext,
        object: String,
        children: Vec<String>,
        cache: Arc<dyn CacheReader>,
    ) -> Result<contract::Desired, CallError> {
        let guest_call = reconcile_guest_call(ctx, object, children);
        self.call_in_place(
            "reconcile",
            Some(cache),
            guest_call,
            convert::desired,
            convert::failure,
        )
    }

    /// Lets the plugin clean up before the primary is deleted. `object` and
    /// `children` are compact JSON text, as for [`LoadedPlugin::reconcile`].
    pub async fn finalize(
        &self,
        ctx: &contract::CallContext,
        object: String,
        children: Vec<String>,
        cache: Arc<dyn CacheReader>,
    ) -> Result<contract::Finalized, CallError> {
        let wit_ctx = convert::call_context(ctx);
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, inner: &Inner| {
            (inner.reconciler.load(&mut *store, instance)?)
                .call_finalize(store, &wit_ctx, &object, &children)
        };
        let finalized = |answer: wit::Finalized, _limit: usize| Ok(convert::finalized(answer));
        self.call(
            "finalize",
            Some(cache),
            guest_call,
            finalized,
            convert::failure,
        )
        .await
    }

    /// Upgrades an object last managed by `from_version` so that this version
    /// can reconcile it; returns the whole object to write back. `object` is
    /// its compact JSON text.
    pub async fn upgrade(
        &self,
        ctx: &contract::CallContext,
        object: String,
        from_version: &str,
        cache: Arc<dyn CacheReader>,
    ) -> Result<Value, CallError> {
        let migration = self.migration_indices("upgrade")?;
        let (wit_ctx, from_version) = (convert::call_context(ctx), from_version.to_string());
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, _: &Inner| {
            (migration.load(&mut *store, instance)?).call_upgrade(
                store,
                &wit_ctx,
                &object,
                &from_version,
            )
        };
        self.call(
            "upgrade",
            Some(cache),
            guest_call,
            convert::object,
            migration_refusal,
        )
        .await
    }

    /// Converts an object of the primary kind (its compact JSON text) to
    /// another API version: the CRD conversion webhook answers each
    /// ConversionReview through it (`webhook::server`), and the round-trip
    /// gate checks a new version with it before that version serves
    /// (`webhook::gate`).
    pub async fn convert(&self, object: String, to_api_version: &str) -> Result<Value, CallError> {
        let migration = self.migration_indices("convert")?;
        let to_api_version = to_api_version.to_string();
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, _: &Inner| {
            (migration.load(&mut *store, instance)?).call_convert(store, &object, &to_api_version)
        };
        self.call(
            "convert",
            None,
            guest_call,
            convert::object,
            migration_refusal,
        )
        .await
    }

    /// The backup plan of one primary (its compact JSON text): `backup.plan`
    /// and, when it returns a plan and the component exports
    /// `backup-policy`, `policy` in the same instance. `None` when the
    /// plugin takes no backups of this object. A component without
    /// `backup-policy` (built before it existed) gets a plan whose policy
    /// fields are all `None`. `NotImplemented` when the manifest does not
    /// declare `backup`; the plugin's error is a permanent failure.
    pub async fn backup_plan(
        &self,
        ctx: &contract::CallContext,
        object: String,
        cache: Arc<dyn CacheReader>,
    ) -> Result<Option<contract::BackupPlan>, CallError> {
        let backup = self.backup_indices("plan")?;
        let policy = self.inner.backup_policy.clone();
        let wit_ctx = convert::call_context(ctx);
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, _: &Inner| {
            let plan = match (backup.load(&mut *store, instance)?).call_plan(
                &mut *store,
                &wit_ctx,
                &object,
            )? {
                Ok(Some(plan)) => plan,
                Ok(None) => return Ok(Ok(None)),
                Err(refusal) => return Ok(Err(refusal)),
            };
            let Some(policy) = policy else {
                return Ok(Ok(Some((plan, None))));
            };
            Ok((policy.load(&mut *store, instance)?)
                .call_policy(&mut *store, &wit_ctx, &object)?
                .map(|policy| Some((plan, policy))))
        };
        self.call(
            "backup.plan",
            Some(cache),
            guest_call,
            convert::backup_plan,
            migration_refusal,
        )
        .await
    }

    /// The `batch/v1` Job (a JSON object) that restores `backup` (the
    /// Backup object's compact JSON text) into `object` (the primary's):
    /// `backup.restore`. `NotImplemented` when the manifest does not
    /// declare `backup`; the plugin's error is a permanent failure.
    pub async fn restore_job(
        &self,
        ctx: &contract::CallContext,
        object: String,
        backup: String,
        cache: Arc<dyn CacheReader>,
    ) -> Result<Value, CallError> {
        let indices = self.backup_indices("restore")?;
        let wit_ctx = convert::call_context(ctx);
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, _: &Inner| {
            (indices.load(&mut *store, instance)?).call_restore(store, &wit_ctx, &object, &backup)
        };
        self.call(
            "backup.restore",
            Some(cache),
            guest_call,
            convert::restore_job,
            migration_refusal,
        )
        .await
    }

    /// Which functions of the optional `admission` interface the plugin
    /// implements, as its `admission.implemented` said when it was loaded;
    /// none for a component without the interface.
    pub fn admission_functions(&self) -> contract::AdmissionFunctions {
        self.inner.admission_functions
    }

    /// Whether a request may proceed: `admission.validate`. `object` is
    /// the object's compact JSON text as the request carries it (on delete,
    /// the object being deleted); `old_object` the stored one, on update and
    /// delete. The verdict is passed on as the plugin gave it (its strings
    /// bounded by the output limit; a refusal without a message gets none
    /// invented). `NotImplemented` when the plugin does not implement
    /// `validate`; the plugin's error is a permanent failure.
    pub async fn validate(
        &self,
        ctx: &contract::CallContext,
        operation: contract::AdmissionOperation,
        object: String,
        old_object: Option<String>,
        cache: Arc<dyn CacheReader>,
    ) -> Result<contract::Verdict, CallError> {
        let indices = self.admission_indices("validate")?;
        let wit_ctx = convert::call_context(ctx);
        let operation = convert::admission_operation(operation);
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, _: &Inner| {
            (indices.load(&mut *store, instance)?).call_validate(
                store,
                &wit_ctx,
                operation,
                &object,
                old_object.as_ref(),
            )
        };
        self.call(
            "admission.validate",
            Some(cache),
            guest_call,
            convert::verdict,
            migration_refusal,
        )
        .await
    }

    /// `object` (compact JSON text, as the request carries it) with the
    /// plugin's defaults filled in: `admission.defaults`. The answer must be
    /// a JSON object within the output limit (otherwise `InvalidOutput` or
    /// `OutputTooLarge`); what it may change is the caller's to check.
    /// `NotImplemented` when the plugin does not implement `defaults`; the
    /// plugin's error is a permanent failure.
    pub async fn defaults(
        &self,
        ctx: &contract::CallContext,
        operation: contract::AdmissionOperation,
        object: String,
        cache: Arc<dyn CacheReader>,
    ) -> Result<Value, CallError> {
        let indices = self.admission_indices("defaults")?;
        let wit_ctx = convert::call_context(ctx);
        let operation = convert::admission_operation(operation);
        let guest_call = move |store: &mut Store<HostState>, instance: &Instance, _: &Inner| {
            (indices.load(&mut *store, instance)?)
                .call_defaults(store, &wit_ctx, operation, &object)
        };
        self.call(
            "admission.defaults",
            Some(cache),
            guest_call,
            convert::object,
            migration_refusal,
        )
        .await
    }

    /// Runs one guest call without stalling the async runtime (see
    /// [`blocking`]); otherwise [`LoadedPlugin::call_in_place`].
    async fn call<Answer, Refusal, R: Send + 'static>(
        &self,
        function: &'static str,
        cache: Option<Arc<dyn CacheReader>>,
        guest_call: impl FnOnce(
            &mut Store<HostState>,
            &Instance,
            &Inner,
        ) -> wasmtime::Result<Result<Answer, Refusal>>
        + Send
        + 'static,
        answer: impl FnOnce(Answer, usize) -> Result<R, OutputProblem> + Send + 'static,
        refusal: impl FnOnce(Refusal, usize) -> Result<contract::Failure, OutputProblem>
        + Send
        + 'static,
    ) -> Result<R, CallError> {
        let this = self.clone();
        // Named only if the call's thread fails: no allocation per call.
        let site = {
            let this = self.clone();
            move || this.site(function)
        };
        blocking(site, move || {
            this.call_in_place(function, cache, guest_call, answer, refusal)
        })
        .await
    }

    /// Runs one guest call on the current thread: `guest_call` loads the
    /// guest's interface and calls `function`; the plugin's answer is checked
    /// and converted by `answer`, its own failure by `refusal` (both get the
    /// output limit in bytes). Everything else about the call is
    /// [`LoadedPlugin::execute`]'s.
    fn call_in_place<Answer, Refusal, R>(
        &self,
        function: &'static str,
        cache: Option<Arc<dyn CacheReader>>,
        guest_call: impl FnOnce(
            &mut Store<HostState>,
            &Instance,
            &Inner,
        ) -> wasmtime::Result<Result<Answer, Refusal>>,
        answer: impl FnOnce(Answer, usize) -> Result<R, OutputProblem>,
        refusal: impl FnOnce(Refusal, usize) -> Result<contract::Failure, OutputProblem>,
    ) -> Result<R, CallError> {
        let limit = self.limits.output_bytes;
        self.execute(function, cache, |store, instance, inner| match guest_call(
            store, instance, inner,
        )
        .map_err(Fault::Wasm)?
        {
            Ok(output) => Ok(answer(output, limit)?),
            Err(failure) => Err(Fault::Failed(refusal(failure, limit)?)),
        })
    }

    fn migration_indices(&self, function: &str) -> Result<migration::GuestIndices, CallError> {
        let implements = &self.inner.manifest.implements;
        let declared = match function {
            "convert" => implements.convert,
            "upgrade" => implements.upgrade,
            _ => implements.migration,
        };
        match (&self.inner.migration, declared) {
            (Some(indices), true) => Ok(indices.clone()),
            _ => Err(self.call_error(
                &format!("migration.{function}"),
                CallFailure::NotImplemented,
            )),
        }
    }

    fn admission_indices(&self, function: &str) -> Result<admission::GuestIndices, CallError> {
        let functions = self.inner.admission_functions;
        let implemented = match function {
            "validate" => functions.validate,
            _ => functions.defaults,
        };
        match (&self.inner.admission, implemented) {
            (Some(indices), true) => Ok(indices.clone()),
            _ => Err(self.call_error(
                &format!("admission.{function}"),
                CallFailure::NotImplemented,
            )),
        }
    }

    fn backup_indices(&self, function: &str) -> Result<backup::GuestIndices, CallError> {
        match (&self.inner.backup, self.inner.manifest.implements.backup) {
            (Some(indices), true) => Ok(indices.clone()),
            _ => Err(self.call_error(&format!("backup.{function}"), CallFailure::NotImplemented)),
        }
    }

    /// Whether the component exports `backup-policy` (components built
    /// before it existed do not: their plans get the host's defaults).
    pub fn exports_backup_policy(&self) -> bool {
        self.inner.backup_policy.is_some()
    }

    /// Runs one call in a fresh store and instance and classifies its end.
    fn execute<R>(
        &self,
        function: &'static str,
        cache: Option<Arc<dyn CacheReader>>,
        body: impl FnOnce(&mut Store<HostState>, &Instance, &Inner) -> Result<R, Fault>,
    ) -> Result<R, CallError> {
        let started = Instant::now();
        let inner = &*self.inner;
        let manifest = (function != "manifest").then(|| inner.manifest.clone());
        let state = HostState::new(
            inner.name.clone(),
            inner.version.clone(),
            manifest,
            cache,
            self.limits.memory_bytes,
            self.limits.log_bytes,
            self.clock,
        );
        let mut store = Store::new(&inner.engine.inner.wasmtime, state);
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(deadline_ticks(self.limits.timeout));
        store.epoch_deadline_trap();
        let instantiated = inner.pre.instantiate(&mut store);
        let instantiation = started.elapsed();
        let outcome = match instantiated {
            Ok(instance) => body(&mut store, &instance, inner),
            Err(e) if e.is::<Trap>() || store.data().limiter.exceeded => Err(Fault::Wasm(e)),
            Err(e) if e.is::<wasmtime::PoolConcurrencyLimitError>() => Err(Fault::PoolFull),
            Err(e) => Err(Fault::Instantiate(e)),
        };
        store.data_mut().flush_stdio(function);
        let state = store.data();
        let result = match (state.denied.first(), state.denied_namespaces.first()) {
            // Reported even when the plugin swallowed the refusal and answered.
            (Some(kind), _) => Err(self.call_error(
                function,
                CallFailure::CapabilityDenied { kind: kind.clone() },
            )),
            (None, Some(denial)) => Err(self.call_error(
                function,
                CallFailure::NamespaceDenied(Box::new(NamespaceDenial {
                    kind: denial.kind.clone(),
                    namespace: denial.namespace.clone(),
                    granted: denial.granted.clone(),
                })),
            )),
            (None, None) => outcome.map_err(|fault| self.classify(function, fault, state)),
        };
        let call = ObservedCall {
            function,
            duration: started.elapsed(),
            instantiation,
            memory_bytes: state.limiter.memory_bytes,
            outcome: result.as_ref().map_or_else(CallError::reason, |_| "Ok"),
            log_bytes: state.log.emitted,
            log_dropped: state.log.dropped,
        };
        if inner.named {
            inner.observe(&call);
        } else {
            *crate::util::lock(&inner.unnamed_call) = Some(call);
        }
        result
    }

    /// Where a call of `function` of this plugin version is.
    fn site(&self, function: &str) -> CallSite {
        CallSite {
            plugin: self.inner.name.to_string(),
            version: self.inner.version.to_string(),
            function: function.to_string(),
        }
    }

    fn call_error(&self, function: &str, failure: CallFailure) -> CallError {
        CallError {
            site: self.site(function),
            failure,
        }
    }

    fn classify(&self, function: &str, fault: Fault, state: &HostState) -> CallError {
        self.call_error(function, self.failure(function, fault, state))
    }

    /// What a call's `fault` means, in the terms of the contract.
    fn failure(&self, function: &str, fault: Fault, state: &HostState) -> CallFailure {
        let limits = self.limits;
        match fault {
            Fault::Failed(failure) => CallFailure::Failed(failure),
            Fault::Output(OutputProblem::TooLarge { size }) => CallFailure::OutputTooLarge {
                size,
                limit: limits.output_bytes,
            },
            Fault::Output(OutputProblem::Invalid(problem)) => {
                CallFailure::InvalidOutput { problem }
            }
            Fault::PoolFull => CallFailure::InstancePoolFull {
                // Only a pool can be full.
                max_instances: (self.inner.engine.inner.config.allocation)
                    .max_instances()
                    .unwrap_or_default(),
            },
            Fault::Instantiate(e) => CallFailure::Internal(format!(
                "cannot instantiate plugin {} {}: {e:#}",
                self.inner.name, self.inner.version
            )),
            Fault::Wasm(_) if state.limiter.exceeded => CallFailure::MemoryExceeded {
                limit: limits.memory_bytes,
            },
            Fault::Wasm(e) if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) => {
                CallFailure::Timeout {
                    timeout: limits.timeout,
                }
            }
            Fault::Wasm(e) => {
                // A Rust panic prints its message and location to stderr
                // before it aborts: that is what a person needs on the
                // object. The backtrace, long, goes to the host log.
                let message = trap::panic_line(&state.stderr.contents().0)
                    .unwrap_or_else(|| trap::trap_line(&e));
                tracing::warn!(
                    target: "plugin", plugin = %self.inner.name, version = %self.inner.version, function,
                    "plugin trapped: {message}\n{}", trap::backtrace(&e)
                );
                CallFailure::Trap { message }
            }
        }
    }
}

/// The guest call of `reconcile`, shared by the async and the blocking entry.
fn reconcile_guest_call(
    ctx: &contract::CallContext,
    object: String,
    children: Vec<String>,
) -> impl FnOnce(
    &mut Store<HostState>,
    &Instance,
    &Inner,
) -> wasmtime::Result<Result<wit::Desired, wit::Failure>>
+ Send
+ 'static {
    let wit_ctx = convert::call_context(ctx);
    move |store, instance, inner| {
        (inner.reconciler.load(&mut *store, instance)?)
            .call_reconcile(store, &wit_ctx, &object, &children)
    }
}

/// A migration, backup or admission function's error
/// (`result<_, string>`): the plugin refuses the object for good.
fn migration_refusal(message: String, _limit: usize) -> Result<contract::Failure, OutputProblem> {
    Ok(contract::Failure::Permanent(message))
}

/// Runs a call without stalling the async runtime: on a multi-threaded
/// runtime the worker hands its other tasks off and runs the call in place
/// (`block_in_place`: no hop to another thread and back, which cost about
/// as much as the call itself in the benchmark); elsewhere (current-thread
/// runtimes, where `block_in_place` is not allowed) on tokio's blocking pool.
async fn blocking<R: Send + 'static>(
    site: impl FnOnce() -> CallSite,
    f: impl FnOnce() -> Result<R, CallError> + Send + 'static,
) -> Result<R, CallError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    if Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread) {
        return tokio::task::block_in_place(f);
    }
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| {
        Err(CallError {
            site: site(),
            failure: CallFailure::Internal(format!("the plugin call's thread failed: {e}")),
        })
    })
}

/// Stands in for the manifest while `manifest` itself is being called: it
/// declares no readable kinds beyond an impossible one.
fn placeholder_manifest() -> contract::Manifest {
    let none = contract::ResourceKind {
        group: String::new(),
        version: String::new(),
        kind: String::new(),
        plural: String::new(),
        scope: contract::Scope::Namespaced,
    };
    contract::Manifest {
        name: String::new(),
        version: String::new(),
        description: String::new(),
        primary: none,
        owns: Vec::new(),
        watches: Vec::new(),
        finalizer: false,
        implements: Default::default(),
        min_compatible_version: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_rounds_up() {
        assert_eq!(deadline_ticks(Duration::from_millis(10)), 2);
        assert_eq!(deadline_ticks(Duration::from_millis(11)), 3);
        assert_eq!(deadline_ticks(Duration::from_secs(1)), 101);
    }
}
