//! Structural-schema handling for custom resources: validation against
//! `openAPIV3Schema`, defaulting and pruning of unknown fields.
//!
//! The order is kube-apiserver's: unknown fields are pruned, `default`s are
//! applied (and the defaulted values pruned in turn), then the result is
//! validated. Causes carry kube's reasons (`FieldValueInvalid`, …), field
//! paths (`spec.containers[0].name`, `spec.labels[foo]`) and message wording
//! (`Invalid value: 11: spec.replicas in body should be less than or equal to 10`),
//! because kubectl users read them verbatim.

mod defaults;
mod path;
mod prune;
mod structural;
mod validate;

use serde_json::Value;

pub use structural::check_structural;

/// One reason an object is invalid, answered as a `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldCause {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`,
    /// `FieldValueTypeInvalid`, `FieldValueTooLong`, …
    pub reason: String,
    /// Dotted path, e.g. `spec.replicas`.
    pub field: String,
    /// Human message, as kube-apiserver words it, e.g.
    /// `Invalid value: 11: spec.replicas in body should be less than or equal to 10`.
    pub message: String,
}

/// Defaults, prunes and validates `object` (a whole custom resource) in place
/// against `schema` (a version's `schema.openAPIV3Schema`). `apiVersion`, `kind`
/// and `metadata` are never pruned.
///
/// On error the object may already be pruned and defaulted; callers reject the
/// request anyway, so that intermediate state is never stored.
pub fn admit(schema: &Value, object: &mut Value) -> Result<(), Vec<FieldCause>> {
    prune::prune(schema, object, true);
    defaults::apply(schema, object);
    // Defaults may carry fields the schema does not declare; kube prunes them too.
    prune::prune(schema, object, true);
    let causes = validate::validate_root(schema, object);
    if causes.is_empty() {
        Ok(())
    } else {
        Err(causes)
    }
}

/// Helpers shared by the submodules to read schema keywords.
pub(crate) mod keyword {
    use serde_json::Value;

    /// The boolean keyword `name`, false when absent or not a boolean.
    pub fn flag(schema: &Value, name: &str) -> bool {
        schema.get(name).and_then(Value::as_bool).unwrap_or(false)
    }

    /// The `type` keyword, if it is a non-empty string.
    pub fn type_of(schema: &Value) -> Option<&str> {
        schema
            .get("type")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
    }

    /// The schema for members of a map (`additionalProperties` given as a schema).
    pub fn additional_schema(schema: &Value) -> Option<&Value> {
        schema.get("additionalProperties").filter(|v| v.is_object())
    }
}

#[cfg(test)]
mod tests;
