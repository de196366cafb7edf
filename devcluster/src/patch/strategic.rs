//! Strategic merge patch (`application/strategic-merge-patch+json`): a JSON
//! merge patch whose lists follow the merge keys of [`super::schema`], plus
//! the patch directives kubectl and controllers send (`$patch`,
//! `$retainKeys`, `$setElementOrder/<field>`, `$deleteFromPrimitiveList/<field>`).

use serde_json::{Map, Value};

use super::PatchError;
use super::schema::{ListKind, list_kind};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// What a `$patch` directive asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

fn directive(obj: &Map<String, Value>) -> Result<Directive, PatchError> {
    match obj.get(PATCH) {
        None => Ok(Directive::Merge),
        Some(Value::String(s)) if s == "merge" => Ok(Directive::Merge),
        Some(Value::String(s)) if s == "replace" => Ok(Directive::Replace),
        Some(Value::String(s)) if s == "delete" => Ok(Directive::Delete),
        Some(other) => Err(PatchError::Malformed(format!(
            "unknown patch directive $patch: {other}; use merge, replace or delete"
        ))),
    }
}

fn is_directive_key(key: &str) -> bool {
    key == PATCH || key == RETAIN_KEYS || key.starts_with(SET_ORDER) || key.starts_with(DELETE_FROM)
}

/// Applies `patch` (a JSON object) to `target`.
pub(crate) fn apply(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let orig = target.as_object();
    match merge_object(orig, patch, None)? {
        Some(map) => Ok(Value::Object(map)),
        None => Err(PatchError::NotApplicable(
            "a top-level $patch: delete would delete the whole object; use DELETE instead".into(),
        )),
    }
}

/// Merges `patch` into the object `orig` (None: absent). `field` is the name of
/// the field holding this object, used to look up merge keys of its lists.
/// Returns None when the patch deletes the object (`$patch: delete`).
fn merge_object(
    orig: Option<&Map<String, Value>>,
    patch: &Map<String, Value>,
    field: Option<&str>,
) -> Result<Option<Map<String, Value>>, PatchError> {
    match directive(patch)? {
        Directive::Delete => return Ok(None),
        // Replace: the patch (without directives) is the new object.
        Directive::Replace => return merge_object(None, &without_patch_key(patch), field),
        Directive::Merge => {}
    }
    let mut out = orig.cloned().unwrap_or_default();

    // Deletions from primitive lists apply to the original list, before merging.
    for (key, values) in patch {
        if let Some(list_field) = key.strip_prefix(DELETE_FROM) {
            let Value::Array(values) = values else {
                return Err(PatchError::Malformed(format!(
                    "{key} must be a list of values"
                )));
            };
            if let Some(Value::Array(items)) = out.get_mut(list_field) {
                items.retain(|item| !values.contains(item));
            }
        }
    }

    for (key, pv) in patch {
        if is_directive_key(key) {
            continue;
        }
        if pv.is_null() {
            out.remove(key);
            continue;
        }
        match merge_field(out.get(key), pv, field, key)? {
            Some(v) => {
                out.insert(key.clone(), v);
            }
            None => {
                out.remove(key);
            }
        }
    }

    for (key, order) in patch {
        if let Some(list_field) = key.strip_prefix(SET_ORDER) {
            let Value::Array(order) = order else {
                return Err(PatchError::Malformed(format!("{key} must be a list")));
            };
            let merge_key = match list_kind(field, list_field) {
                ListKind::Map(k) => Some(k),
                _ => None,
            };
            if let Some(Value::Array(items)) = out.get_mut(list_field) {
                reorder(items, order, merge_key);
            }
        }
    }

    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keys = retain
            .as_array()
            .and_then(|keys| keys.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| {
                PatchError::Malformed("$retainKeys must be a list of field names".into())
            })?;
        out.retain(|k, _| keys.contains(&k.as_str()));
    }
    Ok(Some(out))
}

fn without_patch_key(patch: &Map<String, Value>) -> Map<String, Value> {
    let mut p = patch.clone();
    p.remove(PATCH);
    p
}

/// Merges the patch value `pv` of field `key` (inside an object held by
/// `parent`) into its original value. None removes the field.
fn merge_field(
    orig: Option<&Value>,
    pv: &Value,
    parent: Option<&str>,
    key: &str,
) -> Result<Option<Value>, PatchError> {
    match pv {
        Value::Object(p) => {
            let o = orig.and_then(Value::as_object);
            Ok(merge_object(o, p, Some(key))?.map(Value::Object))
        }
        Value::Array(p) => {
            let o: &[Value] = orig
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            match list_kind(parent, key) {
                ListKind::Map(merge_key) => merge_keyed_list(o, p, merge_key, key),
                ListKind::Set => merge_set(o, p, key),
                ListKind::Atomic => Ok(Some(pv.clone())),
            }
        }
        _ => Ok(Some(pv.clone())),
    }
}

/// A list-level directive element such as `{"$patch": "replace"}` (no merge key).
fn list_directive(el: &Value, merge_key: Option<&str>) -> Result<Option<Directive>, PatchError> {
    let Value::Object(obj) = el else {
        return Ok(None);
    };
    if !obj.contains_key(PATCH) || merge_key.is_some_and(|k| obj.contains_key(k)) {
        return Ok(None);
    }
    directive(obj).map(Some)
}

fn merge_keyed_list(
    orig: &[Value],
    patch: &[Value],
    merge_key: &str,
    field: &str,
) -> Result<Option<Value>, PatchError> {
    let mut replace = false;
    for el in patch {
        match list_directive(el, Some(merge_key))? {
            Some(Directive::Replace) => replace = true,
            // `$patch: delete` without a key deletes the whole list.
            Some(Directive::Delete) => return Ok(None),
            Some(Directive::Merge) | None => {}
        }
    }
    let mut out: Vec<Value> = if replace { Vec::new() } else { orig.to_vec() };
    for (i, el) in patch.iter().enumerate() {
        if list_directive(el, Some(merge_key))?.is_some() {
            continue;
        }
        let Value::Object(p) = el else {
            return Err(PatchError::Malformed(format!(
                "list {field} merges by key {merge_key:?}, but element {i} is not an object"
            )));
        };
        let Some(kv) = p.get(merge_key) else {
            return Err(PatchError::Malformed(format!(
                "element {i} of list {field} does not contain the declared merge key {merge_key:?}"
            )));
        };
        let pos = out.iter().position(|item| item.get(merge_key) == Some(kv));
        let existing = pos.and_then(|i| out[i].as_object());
        match (merge_object(existing, p, Some(field))?, pos) {
            (Some(m), Some(i)) => out[i] = Value::Object(m),
            (Some(m), None) => {
                // `$patch: delete` of an absent element is a no-op, handled by merge_object returning None.
                out.push(Value::Object(m))
            }
            (None, Some(i)) => {
                out.remove(i);
            }
            (None, None) => {}
        }
    }
    Ok(Some(Value::Array(out)))
}

fn merge_set(orig: &[Value], patch: &[Value], field: &str) -> Result<Option<Value>, PatchError> {
    let mut out: Vec<Value> = orig.to_vec();
    for el in patch {
        match list_directive(el, None)? {
            Some(Directive::Replace) => {
                let items = patch.iter().filter(|e| !e.is_object()).cloned().collect();
                return Ok(Some(Value::Array(items)));
            }
            Some(Directive::Delete) => return Ok(None),
            Some(Directive::Merge) => continue,
            None => {}
        }
        if el.is_object() || el.is_array() {
            return Err(PatchError::Malformed(format!(
                "list {field} is a set of scalars, got {el}"
            )));
        }
        if !out.contains(el) {
            out.push(el.clone());
        }
    }
    Ok(Some(Value::Array(out)))
}

/// `$setElementOrder`: items named in `order` come first in that order, the
/// rest keep their relative order after them.
fn reorder(items: &mut Vec<Value>, order: &[Value], merge_key: Option<&str>) {
    let mut rest: Vec<Option<Value>> = items.drain(..).map(Some).collect();
    let mut sorted = Vec::with_capacity(rest.len());
    for wanted in order {
        let wanted_key = match merge_key {
            Some(k) => wanted.get(k),
            None => Some(wanted),
        };
        let Some(wanted_key) = wanted_key else {
            continue;
        };
        let found = rest.iter_mut().find(|slot| {
            slot.as_ref().is_some_and(|item| match merge_key {
                Some(k) => item.get(k) == Some(wanted_key),
                None => item == wanted_key,
            })
        });
        if let Some(slot) = found {
            sorted.extend(slot.take());
        }
    }
    sorted.extend(rest.into_iter().flatten());
    *items = sorted;
}
