//! distributedkv 1.0.0: the DistributedKV operator of the stateful-operator
//! reference as a plugin. A `DistributedKV` (`kv.example.com`, served as
//! `v1alpha1` and `v1beta1`, stored as `v1beta1`) becomes a StatefulSet, a
//! headless Service and a PodDisruptionBudget; `convert` translates between
//! the two API versions without losing a field (see [`logic::convert`]).
//! With `spec.backup` it takes scheduled backups through the host: its
//! [`logic::plan`] and [`logic::restore`] give the backup and restore Jobs.
//! Its admission [`logic::validate`] refuses updates that shrink below the
//! quorum or shrink the volumes.
//!
//! The logic lives in [`logic`], a plain module that also compiles natively
//! for its unit tests; the exercise builds (`distributedkv-lossy`,
//! `distributedkv-trap`) include it by path.

pub mod logic;

use serde_json::Value;
use wasm_operator_sdk::{BackupPlan, Children, Context, Desired, Failure, Manifest, Operation, Reconciler, Verdict};

/// The plugin.
pub struct DistributedKv;

impl Reconciler for DistributedKv {
    type Object = Value;

    fn manifest() -> Manifest {
        logic::manifest_with_backup(env!("CARGO_PKG_VERSION")).implements_validate()
    }

    fn reconcile(_ctx: &Context, object: Value, children: &Children) -> Result<Desired, Failure> {
        logic::reconcile(object, children)
    }

    fn convert(object: Value, to_api_version: &str) -> Result<Value, String> {
        logic::convert(object, to_api_version)
    }

    fn upgrade(_ctx: &Context, object: Value, _from_plugin_version: &str) -> Result<Value, String> {
        // Every 1.x version reads every object 1.0.0 wrote: nothing to upgrade.
        Ok(object)
    }

    fn plan(_ctx: &Context, object: Value) -> Result<Option<BackupPlan>, String> {
        logic::plan(&object)
    }

    fn restore(_ctx: &Context, object: Value, backup: Value) -> Result<Value, String> {
        logic::restore(&object, &backup)
    }

    fn validate(_ctx: &Context, operation: Operation, object: Value, old: Option<Value>) -> Result<Verdict, String> {
        Ok(logic::validate(operation, &object, old.as_ref()))
    }
}

wasm_operator_sdk::export_plugin!(DistributedKv);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_validates_but_has_no_defaults() {
        let manifest = DistributedKv::manifest();
        assert!(manifest.implements_validate && !manifest.implements_defaults);
        assert!(manifest.implements_backup && manifest.converts() && manifest.upgrades());
    }
}
