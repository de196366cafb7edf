//! JSON in, JSON out: the one code path between the contract's strings and a
//! [`Reconciler`]. The wasm export glue calls these functions, and native
//! benchmarks call them directly to run exactly the same logic.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::error::Category;

use crate::admission::merge_typed;
use crate::desired::json_text;
use crate::{
    BackupPlan, Children, Context, DesiredJson, Failure, Finalized, Operation, Reconciler, Verdict,
};

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

/// Runs `R::validate` on the host's JSON. An object that does not fit
/// `R::Object` is refused on create and update, naming the serde error, and
/// allowed with a warning on delete and connect (the plugin cannot judge
/// it, and refusing would keep it from going); an old object that does not
/// fit is passed as `None`, with a warning. On delete an `object` of
/// `null` (the request carries none) stands for the old object. Text that
/// is not JSON is an error (the host's).
pub fn validate_json<R: Reconciler>(
    ctx: &Context,
    operation: Operation,
    object: &str,
    old_object: Option<&str>,
) -> Result<Verdict, String> {
    let object = match old_object {
        Some(old) if object.trim() == "null" => old,
        _ => object,
    };
    let mut warnings = Vec::new();
    let old = match old_object.map(parse_typed::<R::Object>).transpose()? {
        Some(Err(e)) => {
            warnings.push(format!(
                "the stored {} does not fit the plugin's type ({e}): it was validated without it",
                describe(old_object.unwrap_or_default())
            ));
            None
        }
        Some(Ok(old)) => Some(old),
        None => None,
    };
    let typed = match parse_typed::<R::Object>(object)? {
        Ok(typed) => typed,
        Err(e) => {
            let problem = format!("{} is invalid: {e}", describe(object));
            let verdict = if operation.writes() {
                Verdict::refuse(problem)
            } else {
                Verdict::allow().warn(format!("not validated: {problem}"))
            };
            return Ok(warnings.into_iter().fold(verdict, Verdict::warn));
        }
    };
    let mut verdict = R::validate(ctx, operation, typed, old)?;
    verdict.warnings.splice(0..0, warnings);
    Ok(verdict)
}

/// Runs `R::defaults` on the host's JSON and writes the typed answer over
/// the object passed (see [`Reconciler::defaults`]): fields `R::Object`
/// does not know survive. On delete and connect the object comes back
/// unchanged, without calling the plugin. An object that does not fit
/// `R::Object`, or text that is not JSON, is an error.
pub fn defaults_json<R: Reconciler>(
    ctx: &Context,
    operation: Operation,
    object: &str,
) -> Result<String, String>
where
    R::Object: Serialize,
{
    let mut original: Value =
        serde_json::from_str(object).map_err(|e| format!("the object is not JSON: {e}"))?;
    if !operation.writes() {
        return Ok(object.to_owned());
    }
    let typed = R::Object::deserialize(&original)
        .map_err(|e| format!("{} is invalid: {e}", describe(object)))?;
    let defaulted = R::defaults(ctx, operation, typed)?;
    let defaulted = serde_json::to_value(&defaulted)
        .map_err(|e| format!("the defaulted object cannot be serialized: {e}"))?;
    merge_typed(&mut original, defaulted);
    Ok(json_text(&original))
}

/// `object` as `T`: `Ok(Err(_))` when it is JSON that does not fit `T`
/// (the error without a text position, for people), `Err` when it is not
/// JSON at all.
fn parse_typed<T: DeserializeOwned>(object: &str) -> Result<Result<T, serde_json::Error>, String> {
    let value: Value =
        serde_json::from_str(object).map_err(|e| format!("the object is not JSON: {e}"))?;
    Ok(T::deserialize(&value))
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
