//! Writing the primary's `.status` through the status subresource, and
//! noticing what the API server pruned from it (`StatusPruned`).

use kube::ResourceExt;
use kube::api::{DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use super::pruned::{self, pruned_paths};
use super::writer::{AnswerMeta, Writer};
use super::{ApplyError, WRITING_STATUS};
use crate::contract::Reason;

/// A status write's answer: the metadata, and the status as stored (what
/// the schema kept of the write).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct StatusAnswer {
    #[serde(default)]
    pub(super) metadata: AnswerMeta,
    #[serde(default)]
    pub(super) status: Value,
}

/// Writes a status merge patch (from [`crate::plan::build_status`]) to the
/// primary `name` in `namespace`. Returns the write's answer, `None` when
/// the object was deleted meanwhile: there is no status left to write.
pub(super) async fn write(
    writer: &Writer<'_>,
    namespace: Option<&str>,
    name: &str,
    target: &str,
    body: &Value,
) -> Result<Option<StatusAnswer>, ApplyError> {
    match writer
        .patch_as::<StatusAnswer>(
            writer.primary,
            namespace,
            Some("status"),
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": body })),
        )
        .await
    {
        Ok(answer) => Ok(Some(answer)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(e) => Err(ApplyError::api(WRITING_STATUS, target, e)),
    }
}

/// Compares the status written (`body`) with the server's `answer` and,
/// the first time fields of `obj` are missing, records a Warning
/// `StatusPruned` naming them. The primary's own conditions are left as
/// the plugin said: they may be what was pruned.
pub(super) async fn report_pruned(
    writer: &Writer<'_>,
    obj: &DynamicObject,
    body: &Value,
    answer: &StatusAnswer,
) {
    let paths = pruned_paths(body, &answer.status);
    if paths.is_empty() {
        return;
    }
    let uid = answer
        .metadata
        .uid
        .clone()
        .or_else(|| obj.uid())
        .unwrap_or_else(|| obj.name_any());
    if !writer.events.first_pruned(&uid, &paths) {
        return;
    }
    let message = pruned::message(&writer.primary.kind, writer.plugin, &paths);
    tracing::warn!(plugin = writer.plugin, object = %obj.name_any(), fields = %paths.join(", "), "the API server pruned status fields the host wrote");
    writer
        .events
        .publish(
            writer.primary,
            obj,
            true,
            Reason::StatusPruned.as_str(),
            &message,
            "Reconcile",
        )
        .await;
}
