//! Writing the primary's `.status` through the status subresource.

use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

use super::writer::{Answer, Writer};
use super::{ApplyError, WRITING_STATUS};

/// Writes a status merge patch (from [`crate::plan::build_status`]) to the
/// primary `name` in `namespace`. Returns the write's answer, `None` when
/// the object was deleted meanwhile: there is no status left to write.
pub(super) async fn write(
    writer: &Writer<'_>,
    namespace: Option<&str>,
    name: &str,
    target: &str,
    body: &Value,
) -> Result<Option<Answer>, ApplyError> {
    match writer
        .patch(
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
