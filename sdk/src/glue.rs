//! JSON in, JSON out: the one code path between the contract's strings and a
//! [`Reconciler`]. The wasm export glue calls these functions, and native
//! benchmarks call them directly to run exactly the same logic.

use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::error::Category;

use crate::desired::json_text;
use crate::{BackupPlan, Children, Context, DesiredJson, Failure, Finalized, Reconciler};

/// Runs `R::reconcile` on the host's JSON and returns the JSON answer.
pub fn reconcile_json<R: Reconciler>(
    ctx: &Context,
    object: &str,
    children: &[String],
) -> Result<DesiredJson, Failure> {
    let object = parse_primary::<R::Object>(object)?;
    let children = Children::from_json(children)?;
    R::reconcile(ctx, object, &children).map(crate::Desired::into_json)
}

/// Runs `R::finalize` on the host's JSON.
pub fn finalize_json<R: Reconciler>(
    ctx: &Context,
    object: &str,
    children: &[String],
) -> Result<Finalized, Failure> {
    let object = parse_primary::<R::Object>(object)?;
    let children = Children::from_json(children)?;
    R::finalize(ctx, object, &children)
}

/// Runs `R::upgrade` on the host's JSON.
pub fn upgrade_json<R: Reconciler>(
    ctx: &Context,
    object: &str,
    from_plugin_version: &str,
) -> Result<String, String> {
    let object: Value =
        serde_json::from_str(object).map_err(|e| format!("the object is not JSON: {e}"))?;
    R::upgrade(ctx, object, from_plugin_version).map(|v| json_text(&v))
}

/// Runs `R::convert` on the host's JSON.
pub fn convert_json<R: Reconciler>(object: &str, to_api_version: &str) -> Result<String, String> {
    let object: Value =
        serde_json::from_str(object).map_err(|e| format!("the object is not JSON: {e}"))?;
    R::convert(object, to_api_version).map(|v| json_text(&v))
}

/// Runs `R::plan` on the host's JSON.
pub fn plan_json<R: Reconciler>(ctx: &Context, object: &str) -> Result<Option<BackupPlan>, String> {
    let object = parse_primary::<R::Object>(object).map_err(|f| f.message().to_owned())?;
    R::plan(ctx, object)
}

/// Runs `R::restore` on the host's JSON.
pub fn restore_json<R: Reconciler>(
    ctx: &Context,
    object: &str,
    backup: &str,
) -> Result<String, String> {
    let object = parse_primary::<R::Object>(object).map_err(|f| f.message().to_owned())?;
    let backup: Value =
        serde_json::from_str(backup).map_err(|e| format!("the backup is not JSON: {e}"))?;
    R::restore(ctx, object, backup).map(|v| json_text(&v))
}

/// Parses the primary. JSON that does not fit the author's type is the
/// object's fault (permanent: wait for the user to fix it); text that is not
/// JSON at all is the host's (transient).
fn parse_primary<T: DeserializeOwned>(object: &str) -> Result<T, Failure> {
    serde_json::from_str(object).map_err(|e| match e.classify() {
        Category::Data => Failure::permanent(format!(
            "spec is invalid: {e} (object {}); fix the object",
            describe(object)
        )),
        Category::Syntax | Category::Eof | Category::Io => Failure::transient(format!(
            "the host passed a primary object that is not JSON: {e}"
        )),
    })
}

/// `namespace/name` of a primary for error messages; only runs on failure.
fn describe(object: &str) -> String {
    let value: Value = serde_json::from_str(object).unwrap_or(Value::Null);
    let field = |p: &str| {
        value
            .pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    format!(
        "{} {}/{}",
        field("/kind"),
        field("/metadata/namespace"),
        field("/metadata/name")
    )
}
