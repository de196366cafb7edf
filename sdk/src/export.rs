//! Implements the generated `Guest` traits for any [`Reconciler`], converting
//! between the WIT records and the SDK's types. Used by
//! [`export_plugin!`](crate::export_plugin); compiled natively too so the
//! conversions are type-checked and testable everywhere.

use std::marker::PhantomData;

use serde::Serialize;

use crate::bindings::exports::wasm_operator::plugin::{
    admission, backup, backup_policy, migration, migration_functions, reconciler, schema,
};
use crate::bindings::wasm_operator::plugin::types as wit;
use crate::glue;
use crate::{
    BackupPlan, Condition, Context, DesiredJson, Event, Failure, Kind, Manifest, Operation,
    Reconciler, Scope, Verdict,
};

/// The exported component: `Glue<MyPlugin, D>` implements every exported
/// interface by calling `MyPlugin`'s [`Reconciler`] methods; `D` runs
/// `defaults` (see [`DefaultsHook`]).
pub struct Glue<R, D = Opaque>(PhantomData<(R, D)>);

/// How the export glue runs `admission.defaults`, which must serialize the
/// plugin's typed object. [`Reconciler::Object`] need not be `Serialize`
/// (plugins without defaults never serialize it), and the generic glue
/// cannot tell whether it is: [`export_plugin!`](crate::export_plugin),
/// where the plugin type is concrete, picks [`glue::defaults_json`] when it
/// is ([`SerializableObject`]) and an error when not ([`OpaqueObject`]).
pub trait DefaultsHook {
    /// `admission.defaults` on the host's JSON.
    fn defaults_json(ctx: &Context, operation: Operation, object: &str) -> Result<String, String>;
}

/// The [`DefaultsHook`] of a plugin whose object type does not serialize.
pub struct Opaque;

impl DefaultsHook for Opaque {
    fn defaults_json(_: &Context, _: Operation, _: &str) -> Result<String, String> {
        Err(not_serializable())
    }
}

fn not_serializable() -> String {
    "this plugin cannot answer admission.defaults: its Reconciler::Object type does not \
     implement serde::Serialize (derive it to return defaults)"
        .to_owned()
}

/// The signature of [`glue::defaults_json`].
pub type DefaultsFn = fn(&Context, Operation, &str) -> Result<String, String>;

/// Asks, for a concrete plugin type `R`, whether its object serializes
/// (autoref specialization): `(&&Probe::<R>::new()).defaults_fn()` is
/// [`SerializableObject::defaults_fn`] when it does and
/// [`OpaqueObject::defaults_fn`] when not.
pub struct Probe<R>(PhantomData<R>);

impl<R> Probe<R> {
    /// The probe of `R`.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Probe(PhantomData)
    }
}

/// Picked for plugins whose object serializes: runs their `defaults`.
pub trait SerializableObject {
    /// [`glue::defaults_json`] of the plugin.
    fn defaults_fn(&self) -> DefaultsFn;
}

impl<R: Reconciler> SerializableObject for &Probe<R>
where
    R::Object: Serialize,
{
    fn defaults_fn(&self) -> DefaultsFn {
        glue::defaults_json::<R>
    }
}

/// Picked for plugins whose object does not serialize.
pub trait OpaqueObject {
    /// An answer saying why the plugin has no defaults.
    fn defaults_fn(&self) -> DefaultsFn;
}

impl<R: Reconciler> OpaqueObject for Probe<R> {
    fn defaults_fn(&self) -> DefaultsFn {
        Opaque::defaults_json
    }
}

impl<R: Reconciler, D> reconciler::Guest for Glue<R, D> {
    fn manifest() -> wit::Manifest {
        manifest_to_wit(R::manifest())
    }

    fn reconcile(
        ctx: wit::CallContext,
        object: String,
        children: Vec<String>,
    ) -> Result<wit::Desired, wit::Failure> {
        glue::reconcile_json::<R>(&context_from_wit(ctx), &object, &children)
            .map(desired_to_wit)
            .map_err(failure_to_wit)
    }

    fn finalize(
        ctx: wit::CallContext,
        object: String,
        children: Vec<String>,
    ) -> Result<wit::Finalized, wit::Failure> {
        glue::finalize_json::<R>(&context_from_wit(ctx), &object, &children)
            .map(|f| match f.wait_ms() {
                None => wit::Finalized::Done,
                Some(ms) => wit::Finalized::Wait(ms),
            })
            .map_err(failure_to_wit)
    }
}

impl<R: Reconciler, D> migration::Guest for Glue<R, D> {
    fn convert(object: String, to_api_version: String) -> Result<String, String> {
        glue::convert_json::<R>(&object, &to_api_version)
    }

    fn upgrade(
        ctx: wit::CallContext,
        object: String,
        from_plugin_version: String,
    ) -> Result<String, String> {
        glue::upgrade_json::<R>(&context_from_wit(ctx), &object, &from_plugin_version)
    }
}

impl<R: Reconciler, D> migration_functions::Guest for Glue<R, D> {
    fn implemented() -> migration_functions::ImplementedFunctions {
        migration_functions_to_wit(&R::manifest())
    }
}

fn migration_functions_to_wit(m: &Manifest) -> migration_functions::ImplementedFunctions {
    let mut implemented = migration_functions::ImplementedFunctions::empty();
    if m.converts() {
        implemented |= migration_functions::ImplementedFunctions::CONVERT;
    }
    if m.upgrades() {
        implemented |= migration_functions::ImplementedFunctions::UPGRADE;
    }
    implemented
}

impl<R: Reconciler, D> schema::Guest for Glue<R, D> {
    fn crd() -> Option<String> {
        R::crd().map(|crd| crd.to_json().to_string())
    }
}

impl<R: Reconciler, D> backup::Guest for Glue<R, D> {
    fn plan(ctx: wit::CallContext, object: String) -> Result<Option<wit::BackupPlan>, String> {
        glue::plan_json::<R>(&context_from_wit(ctx), &object).map(|plan| plan.map(plan_to_wit))
    }

    fn restore(ctx: wit::CallContext, object: String, backup: String) -> Result<String, String> {
        glue::restore_json::<R>(&context_from_wit(ctx), &object, &backup)
    }
}

/// The host calls `policy` right after `plan` with the same object: the
/// plugin's `plan` runs again (plugins are pure) and its policy fields are
/// returned.
impl<R: Reconciler, D> backup_policy::Guest for Glue<R, D> {
    fn policy(
        ctx: wit::CallContext,
        object: String,
    ) -> Result<Option<backup_policy::PlanPolicy>, String> {
        glue::plan_json::<R>(&context_from_wit(ctx), &object)
            .map(|plan| plan.as_ref().map(policy_to_wit))
    }
}

impl<R: Reconciler, D: DefaultsHook> admission::Guest for Glue<R, D> {
    fn implemented() -> admission::ImplementedFunctions {
        admission_functions_to_wit(&R::manifest())
    }

    fn validate(
        ctx: wit::CallContext,
        operation: admission::Operation,
        object: String,
        old_object: Option<String>,
    ) -> Result<admission::Verdict, String> {
        glue::validate_json::<R>(
            &context_from_wit(ctx),
            operation_from_wit(operation),
            &object,
            old_object.as_deref(),
        )
        .map(verdict_to_wit)
    }

    fn defaults(
        ctx: wit::CallContext,
        operation: admission::Operation,
        object: String,
    ) -> Result<String, String> {
        D::defaults_json(
            &context_from_wit(ctx),
            operation_from_wit(operation),
            &object,
        )
    }
}

fn admission_functions_to_wit(m: &Manifest) -> admission::ImplementedFunctions {
    let mut implemented = admission::ImplementedFunctions::empty();
    if m.implements_validate {
        implemented |= admission::ImplementedFunctions::VALIDATE;
    }
    if m.implements_defaults {
        implemented |= admission::ImplementedFunctions::DEFAULTS;
    }
    implemented
}

fn operation_from_wit(operation: admission::Operation) -> Operation {
    match operation {
        admission::Operation::Create => Operation::Create,
        admission::Operation::Update => Operation::Update,
        admission::Operation::Delete => Operation::Delete,
        admission::Operation::Connect => Operation::Connect,
    }
}

fn verdict_to_wit(v: Verdict) -> admission::Verdict {
    admission::Verdict {
        allowed: v.allowed,
        message: v.message,
        fields: v
            .fields
            .into_iter()
            .map(|f| admission::FieldError {
                path: f.path,
                message: f.message,
            })
            .collect(),
        warnings: v.warnings,
    }
}

/// The WIT `backup-plan` part of a plan.
fn plan_to_wit(p: BackupPlan) -> wit::BackupPlan {
    wit::BackupPlan {
        schedule: p.schedule,
        job: crate::desired::json_text(&p.job),
        retain: p.retain,
        backup_on_delete: p.backup_on_delete,
    }
}

/// The `backup-policy` part of a plan.
fn policy_to_wit(p: &BackupPlan) -> backup_policy::PlanPolicy {
    backup_policy::PlanPolicy {
        time_zone: p.time_zone.clone(),
        keep_failed: p.keep_failed,
        always_keep_completed: p.always_keep_completed,
        job_deadline_seconds: p.job_deadline_seconds,
        starting_deadline_seconds: p.starting_deadline_seconds,
        restore_deadline_seconds: p.restore_deadline_seconds,
    }
}

fn context_from_wit(ctx: wit::CallContext) -> Context {
    Context {
        plugin_version: ctx.plugin_version,
        attempt: ctx.attempt,
        managed_by_version: ctx.managed_by_version,
        config_json: ctx.config,
    }
}

fn kind_to_wit(kind: Kind) -> wit::ResourceKind {
    wit::ResourceKind {
        group: kind.group,
        version: kind.version,
        kind: kind.kind,
        plural: kind.plural,
        scope: match kind.scope {
            Scope::Namespaced => wit::Scope::Namespaced,
            Scope::Cluster => wit::Scope::Cluster,
        },
    }
}

fn manifest_to_wit(m: Manifest) -> wit::Manifest {
    let mut implements = wit::OptionalInterfaces::empty();
    if m.converts() || m.upgrades() {
        implements |= wit::OptionalInterfaces::MIGRATION;
    }
    if m.implements_backup {
        implements |= wit::OptionalInterfaces::BACKUP;
    }
    wit::Manifest {
        name: m.name,
        version: m.version,
        description: m.description,
        primary: kind_to_wit(m.primary),
        owns: m.owns.into_iter().map(kind_to_wit).collect(),
        watches: m.watches.into_iter().map(kind_to_wit).collect(),
        finalizer: m.finalizer,
        implements,
        min_compatible_version: m.min_compatible_version,
    }
}

fn desired_to_wit(d: DesiredJson) -> wit::Desired {
    wit::Desired {
        children: d.children,
        status: d.status,
        conditions: d.conditions.into_iter().map(condition_to_wit).collect(),
        events: d.events.into_iter().map(event_to_wit).collect(),
        requeue_after_ms: d.requeue_after_ms,
    }
}

fn condition_to_wit(c: Condition) -> wit::Condition {
    wit::Condition {
        kind: c.kind,
        status: c.status,
        reason: c.reason,
        message: c.message,
    }
}

fn event_to_wit(e: Event) -> wit::Event {
    wit::Event {
        warning: e.warning,
        reason: e.reason,
        message: e.message,
    }
}

fn failure_to_wit(f: Failure) -> wit::Failure {
    match f {
        Failure::Transient(m) => wit::Failure::Transient(m),
        Failure::Permanent(m) => wit::Failure::Permanent(m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn manifest_converts_flags_and_kinds() {
        let m = Manifest::new("p", "1.2.3")
            .primary(Kind::namespaced("example.com", "v1", "WebApp", "webapps"))
            .owns::<ConfigMap>()
            .implements_backup()
            .min_compatible_version("1.0.0");
        let w = manifest_to_wit(m);
        assert_eq!(w.implements, wit::OptionalInterfaces::BACKUP);
        assert_eq!(w.owns[0].plural, "configmaps");
        assert_eq!(w.owns[0].group, "");
        assert!(matches!(w.primary.scope, wit::Scope::Namespaced));
        assert_eq!(w.min_compatible_version.as_deref(), Some("1.0.0"));
    }

    #[test]
    fn convert_and_upgrade_are_declared_apart() {
        let kind = Kind::namespaced("example.com", "v1", "WebApp", "webapps");
        let convert_only = Manifest::new("p", "1.0.0")
            .primary(kind.clone())
            .implements_convert();
        assert_eq!(
            migration_functions_to_wit(&convert_only),
            migration_functions::ImplementedFunctions::CONVERT
        );
        assert_eq!(
            manifest_to_wit(convert_only).implements,
            wit::OptionalInterfaces::MIGRATION
        );
        let both = Manifest::new("p", "1.0.0")
            .primary(kind)
            .implements_migration();
        assert_eq!(
            migration_functions_to_wit(&both),
            migration_functions::ImplementedFunctions::CONVERT
                | migration_functions::ImplementedFunctions::UPGRADE
        );
        let neither = Manifest::new("p", "1.0.0");
        assert!(migration_functions_to_wit(&neither).is_empty());
        assert!(manifest_to_wit(neither).implements.is_empty());
    }

    #[test]
    fn a_plan_splits_into_the_wit_plan_and_its_policy() {
        let plan = BackupPlan::new("0 3 * * *", serde_json::json!({"kind": "Job"}))
            .retain(3)
            .backup_on_delete(true)
            .time_zone("Europe/Berlin")
            .keep_failed(2)
            .always_keep_completed(4)
            .job_deadline_seconds(60)
            .starting_deadline_seconds(120)
            .restore_deadline_seconds(180);
        let policy = policy_to_wit(&plan);
        assert_eq!(policy.time_zone.as_deref(), Some("Europe/Berlin"));
        assert_eq!(
            (policy.keep_failed, policy.always_keep_completed),
            (Some(2), Some(4))
        );
        assert_eq!(
            (
                policy.job_deadline_seconds,
                policy.starting_deadline_seconds,
                policy.restore_deadline_seconds
            ),
            (Some(60), Some(120), Some(180))
        );
        let wit_plan = plan_to_wit(plan);
        assert_eq!(wit_plan.schedule, "0 3 * * *");
        assert_eq!(wit_plan.job, r#"{"kind":"Job"}"#);
        assert_eq!((wit_plan.retain, wit_plan.backup_on_delete), (3, true));
        let defaults = policy_to_wit(&BackupPlan::new("@daily", serde_json::json!({})));
        assert!(defaults.time_zone.is_none() && defaults.keep_failed.is_none());
        assert!(defaults.job_deadline_seconds.is_none());
    }

    #[test]
    fn admission_functions_follow_the_manifest() {
        let m = Manifest::new("p", "1.0.0");
        assert!(admission_functions_to_wit(&m).is_empty());
        assert_eq!(
            admission_functions_to_wit(&m.clone().implements_validate()),
            admission::ImplementedFunctions::VALIDATE
        );
        assert_eq!(
            admission_functions_to_wit(&m.implements_validate().implements_defaults()),
            admission::ImplementedFunctions::VALIDATE | admission::ImplementedFunctions::DEFAULTS
        );
        let v = verdict_to_wit(Verdict::refuse("no").field("spec.a", "bad").warn("w"));
        assert!(!v.allowed);
        assert_eq!((v.fields[0].path.as_str(), v.warnings.len()), ("spec.a", 1));
        assert_eq!(
            operation_from_wit(admission::Operation::Connect),
            Operation::Connect
        );
    }

    #[test]
    fn failure_and_desired_convert() {
        assert!(
            matches!(failure_to_wit(Failure::permanent("x")), wit::Failure::Permanent(m) if m == "x")
        );
        let d = desired_to_wit(DesiredJson {
            children: vec!["{}".into()],
            status: None,
            conditions: vec![Condition::ready(false, "Waiting", "m")],
            events: vec![Event::warning("Bad", "m")],
            requeue_after_ms: Some(5),
        });
        assert_eq!(d.conditions[0].status, "False");
        assert!(d.events[0].warning);
        assert_eq!(d.requeue_after_ms, Some(5));
    }
}
