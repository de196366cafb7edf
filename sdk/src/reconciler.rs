//! The trait a plugin implements.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{
    BackupPlan, Children, Context, Crd, Desired, Failure, Finalized, Manifest, Operation, Verdict,
};

/// A plugin's logic, written against typed objects.
///
/// Only [`manifest`](Reconciler::manifest) and
/// [`reconcile`](Reconciler::reconcile) are required. The optional interfaces
/// (`upgrade`/`convert`, `plan`/`restore`, `validate`/`defaults`) answer "not
/// implemented" by default; declare real ones in the manifest with
/// [`Manifest::implements_convert`], [`Manifest::implements_upgrade`] (both:
/// [`Manifest::implements_migration`]), [`Manifest::implements_backup`],
/// [`Manifest::implements_validate`] and [`Manifest::implements_defaults`],
/// since the host only calls what the manifest declares.
pub trait Reconciler {
    /// The primary object (the author's CRD struct). A primary that does not
    /// deserialize into it fails the call permanently with `spec is invalid: …`.
    type Object: DeserializeOwned;

    /// What this plugin is and may touch. Must be pure: the host calls it once
    /// per loaded version.
    fn manifest() -> Manifest;

    /// The CRD of the primary kind, when the plugin carries it: usually
    /// `Some(Crd::of::<MySpec, MyStatus>(&Self::manifest()))`. The host
    /// prints it with `wasm-operator plugin crd`. Must be pure like
    /// [`manifest`](Reconciler::manifest). The default carries none.
    fn crd() -> Option<Crd> {
        None
    }

    /// The desired state of one primary, given the children it owns now.
    fn reconcile(
        ctx: &Context,
        object: Self::Object,
        children: &Children,
    ) -> Result<Desired, Failure>;

    /// Clean-up before the primary is deleted; only called when the manifest
    /// asks for a finalizer. The default has nothing to clean up.
    fn finalize(
        _ctx: &Context,
        _object: Self::Object,
        _children: &Children,
    ) -> Result<Finalized, Failure> {
        Ok(Finalized::Done)
    }

    /// Upgrades an object last managed by `from_plugin_version`. Works on raw
    /// JSON because an old object may not fit [`Self::Object`].
    fn upgrade(_ctx: &Context, _object: Value, from_plugin_version: &str) -> Result<Value, String> {
        Err(not_implemented(
            "migration.upgrade",
            &format!("from version {from_plugin_version}"),
        ))
    }

    /// Converts an object of the primary kind to `to_api_version` (CRD
    /// conversion webhook).
    fn convert(_object: Value, to_api_version: &str) -> Result<Value, String> {
        Err(not_implemented(
            "migration.convert",
            &format!("to {to_api_version}"),
        ))
    }

    /// How to back this object up, if at all: a [`BackupPlan`] (build it
    /// with [`BackupPlan::new`]), or `None` to take no backups of it. Must
    /// be pure: the host may call it twice for the same object (`backup.plan`
    /// and `backup-policy.policy`).
    fn plan(_ctx: &Context, _object: Self::Object) -> Result<Option<BackupPlan>, String> {
        Err(not_implemented("backup.plan", "for this object"))
    }

    /// A `batch/v1` Job that restores `backup` (the `Backup` object, whose
    /// `status.location` is what the backup Job reported) into `object`.
    fn restore(_ctx: &Context, _object: Self::Object, _backup: Value) -> Result<Value, String> {
        Err(not_implemented("backup.restore", "for this object"))
    }

    /// Admission: whether a request on a primary may proceed. `object` is
    /// the object as the request carries it (on delete, the object being
    /// deleted); `old` the stored object, on update and delete. Answer a
    /// [`Verdict`]: [`Verdict::allow`], or [`Verdict::refuse`] with a
    /// message naming the field and its value, and
    /// [`field`](Verdict::field)s; [`warn`](Verdict::warn) either way. The
    /// cache may be read as in `reconcile` (rules across objects). Must be
    /// quick: the API server waits for it.
    ///
    /// An `object` that does not deserialize into [`Self::Object`] is
    /// refused on create and update with the serde error (and allowed with
    /// a warning on delete and connect, without calling this); an `old`
    /// that does not is passed as `None`, with a warning. An `Err` means
    /// the plugin could not decide: the host applies the deployment's
    /// failure policy.
    fn validate(
        _ctx: &Context,
        operation: Operation,
        _object: Self::Object,
        _old: Option<Self::Object>,
    ) -> Result<Verdict, String> {
        Err(not_implemented(
            "admission.validate",
            &format!("for {operation}"),
        ))
    }

    /// Admission: `object` with this plugin's defaults filled in, on
    /// create and update (on delete and connect the SDK passes the object
    /// back unchanged without calling this). Return the whole object; the SDK
    /// writes it over the object the host passed, so fields
    /// [`Self::Object`] does not know survive, and the host turns the
    /// difference into a patch. Fields your type fills when it
    /// deserializes (`#[serde(default)]`) are written too: they *are* your
    /// defaults. A `None` your type serializes as `null` never clears a
    /// field. Defaults may change the object's fields, labels and
    /// annotations; the host refuses defaults that change `apiVersion`,
    /// `kind`, `status` or other metadata.
    ///
    /// An `object` that does not deserialize into [`Self::Object`], and an
    /// `Err`, get the deployment's failure policy.
    fn defaults(
        _ctx: &Context,
        operation: Operation,
        _object: Self::Object,
    ) -> Result<Self::Object, String>
    where
        Self::Object: Serialize,
    {
        Err(not_implemented(
            "admission.defaults",
            &format!("for {operation}"),
        ))
    }
}

fn not_implemented(function: &str, detail: &str) -> String {
    format!(
        "this plugin does not implement {function} ({detail} requested); \
         its manifest does not declare that interface, so the host should not call it"
    )
}
