//! The trait a plugin implements.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{BackupPlan, Children, Context, Crd, Desired, Failure, Finalized, Manifest};

/// A plugin's logic, written against typed objects.
///
/// Only [`manifest`](Reconciler::manifest) and
/// [`reconcile`](Reconciler::reconcile) are required. The optional interfaces
/// (`upgrade`/`convert`, `plan`/`restore`) answer "not implemented" by default;
/// declare real ones in the manifest with
/// [`Manifest::implements_convert`], [`Manifest::implements_upgrade`] (both:
/// [`Manifest::implements_migration`]) and [`Manifest::implements_backup`], since
/// the host only calls what the manifest declares.
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
}

fn not_implemented(function: &str, detail: &str) -> String {
    format!(
        "this plugin does not implement {function} ({detail} requested); \
         its manifest does not declare that interface, so the host should not call it"
    )
}
