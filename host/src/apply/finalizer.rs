//! Writing a finalizer entry: one JSON patch that `test`s what it saw first.
//!
//! Generic over the resource type, so every controller of the host uses the
//! same two writes: the plugin controllers for [`crate::plan::FINALIZER`] on
//! primaries (see [`crate::plan::finalizer`] for that contract) and the
//! WasmPlugin controller for its own finalizer.
//!
//! # Guarantees
//!
//! - [`add`] never adds a second copy and never drops someone else's entry:
//!   it tests the whole list it saw (like kube-runtime's `finalizer`), so a
//!   concurrent change fails the write instead of being overwritten.
//! - [`remove`] removes only `name`: it tests the entry at the index it saw.
//!
//! # Caveats
//!
//! - An object without any finalizer gets its list created without a `test`
//!   (an absent path cannot be tested portably): a first entry another
//!   controller adds in the same instant is overwritten, and that controller
//!   adds it again on its next reconcile.
//!
//! # Errors
//!
//! The API server's answer as a [`kube::Error`]: a failed `test` (the list
//! changed since `obj` was read) comes back as a 4xx/5xx API error like any
//! other refused patch. Retrying on the newer object is always safe.

use std::fmt::Debug;

use json_patch::jsonptr::{PointerBuf, Token};
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What a finalizer write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinalizerWrite {
    /// The patch was sent and accepted.
    Written,
    /// The object already was as asked; nothing was sent.
    Unchanged,
    /// The object no longer exists (only from [`remove`]: the entry was the
    /// last thing holding it).
    Gone,
}

fn finalizers_path() -> PointerBuf {
    PointerBuf::from_tokens(["metadata", "finalizers"])
}

/// The JSON patch operations that add finalizer `name` to the list
/// `finalizers` as observed; `None` when it is listed already.
///
/// The whole observed list is tested first, so a concurrent change fails the
/// patch instead of being overwritten; an empty list cannot be tested (see
/// the module's Caveats).
pub(crate) fn add_operations(finalizers: &[String], name: &str) -> Option<Vec<PatchOperation>> {
    if finalizers.iter().any(|f| f == name) {
        return None;
    }
    Some(if finalizers.is_empty() {
        // No list to test: servers disagree on testing an absent path
        // against null, so the first entry goes in untested (see Caveats).
        vec![PatchOperation::Add(AddOperation {
            path: finalizers_path(),
            value: Value::from(vec![name]),
        })]
    } else {
        vec![
            PatchOperation::Test(TestOperation {
                path: finalizers_path(),
                value: Value::from(finalizers.to_vec()),
            }),
            PatchOperation::Add(AddOperation {
                path: PointerBuf::from_tokens(["metadata", "finalizers", "-"]),
                value: Value::from(name),
            }),
        ]
    })
}

/// Adds finalizer `name` to `obj` unless it is listed already.
///
/// # Errors
///
/// The API server's refusal, including a failed `test` when the list changed
/// since `obj` was read; see the [module docs](self).
pub async fn add<K>(api: &Api<K>, obj: &K, name: &str) -> kube::Result<FinalizerWrite>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(operations) = add_operations(obj.finalizers(), name) else {
        return Ok(FinalizerWrite::Unchanged);
    };
    api.patch(
        &obj.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(json_patch::Patch(operations)),
    )
    .await?;
    Ok(FinalizerWrite::Written)
}

/// Removes finalizer `name` from `obj`, if listed.
///
/// # Errors
///
/// The API server's refusal, including a failed `test` when the entry moved
/// since `obj` was read; an object already gone is [`FinalizerWrite::Gone`],
/// not an error.
pub async fn remove<K>(api: &Api<K>, obj: &K, name: &str) -> kube::Result<FinalizerWrite>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let Some(index) = obj.finalizers().iter().position(|f| f == name) else {
        return Ok(FinalizerWrite::Unchanged);
    };
    let path = || {
        PointerBuf::from_tokens([
            Token::from("metadata"),
            Token::from("finalizers"),
            Token::from(index),
        ])
    };
    let operations = vec![
        // Entries are addressed by index: the test makes sure it still is ours.
        PatchOperation::Test(TestOperation {
            path: path(),
            value: Value::from(name),
        }),
        PatchOperation::Remove(RemoveOperation { path: path() }),
    ];
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::<()>::Json(json_patch::Patch(operations)),
        )
        .await
    {
        Ok(_) => Ok(FinalizerWrite::Written),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(FinalizerWrite::Gone),
        Err(e) => Err(e),
    }
}
