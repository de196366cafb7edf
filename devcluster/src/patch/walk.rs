//! Walks over objects with the list/map semantics of [`super::schema`]: the
//! field set a value owns, the difference between two values, the
//! server-side-apply merge, and removal of owned paths.
//!
//! These mirror structured-merge-diff's `ToFieldSet`, `Compare`, `Merge` and
//! `RemoveItems` over an untyped object.

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, Pe};
use super::schema::{ListKind, atomic_items, is_atomic_map, list_kind};

/// Where a value sits, which decides its merge semantics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Ctx<'a> {
    /// The field holding this value (for a list item: the list's field).
    holder: Option<&'a str>,
    /// The field holding the object that contains `holder`.
    parent: Option<&'a str>,
    /// This value is an item of a list whose items are atomic.
    atomic_item: bool,
}

impl<'a> Ctx<'a> {
    /// The root object.
    pub(crate) fn root() -> Ctx<'a> {
        Ctx::default()
    }

    fn field(&self, name: &'a str) -> Ctx<'a> {
        Ctx {
            holder: Some(name),
            parent: self.holder,
            atomic_item: false,
        }
    }

    fn item(&self) -> Ctx<'a> {
        Ctx {
            atomic_item: self.holder.is_some_and(atomic_items),
            ..*self
        }
    }
}

/// The shape a value has in its context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Scalars, atomic lists and atomic maps: compared and owned as a whole.
    Leaf,
    /// An object whose fields are owned one by one.
    Map,
    /// A list of objects identified by a key field.
    Assoc(&'static str),
    /// A list of distinct scalars.
    Set,
}

fn classify(v: &Value, ctx: Ctx<'_>) -> Kind {
    match v {
        Value::Object(_) if ctx.atomic_item || ctx.holder.is_some_and(is_atomic_map) => Kind::Leaf,
        Value::Object(_) => Kind::Map,
        Value::Array(items) => match ctx.holder.map(|h| list_kind(ctx.parent, h)) {
            Some(ListKind::Map(key)) if assoc_keys(items, key).is_some() => Kind::Assoc(key),
            Some(ListKind::Set) if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                Kind::Set
            }
            _ => Kind::Leaf,
        },
        _ => Kind::Leaf,
    }
}

/// The key values of an associative list; None when an item is not an object,
/// lacks the key, or repeats a key (then the list can only be atomic).
fn assoc_keys<'v>(items: &'v [Value], key: &str) -> Option<Vec<&'v Value>> {
    let mut keys: Vec<&Value> = Vec::with_capacity(items.len());
    for item in items {
        let k = item.as_object()?.get(key)?;
        if keys.contains(&k) {
            return None;
        }
        keys.push(k);
    }
    Some(keys)
}

/// The paths `v` sets, as server-side apply owns them: leaves, atomic values,
/// and items of associative lists (which also get a `.` marker).
pub(crate) fn to_field_set(v: &Value) -> FieldSet {
    let mut set = FieldSet::new();
    let mut path = Vec::new();
    field_set_into(v, Ctx::root(), &mut path, &mut set);
    set
}

fn field_set_into<'a>(v: &'a Value, ctx: Ctx<'a>, path: &mut Vec<Pe>, set: &mut FieldSet) {
    match (classify(v, ctx), v) {
        (Kind::Map, Value::Object(m)) => {
            for (k, child) in m {
                if child.is_null() {
                    continue;
                }
                path.push(Pe::field(k));
                field_set_into(child, ctx.field(k), path, set);
                path.pop();
            }
        }
        (Kind::Assoc(key), Value::Array(items)) => {
            for item in items {
                let Some(k) = item.get(key) else { continue };
                path.push(Pe::key(key, k));
                set.insert(path);
                field_set_into(item, ctx.item(), path, set);
                path.pop();
            }
        }
        (Kind::Set, Value::Array(items)) => {
            for item in items {
                path.push(Pe::value(item));
                set.insert(path);
                path.pop();
            }
        }
        _ => {
            if !path.is_empty() {
                set.insert(path);
            }
        }
    }
}

/// How `new` differs from `old`, path by path (structured-merge-diff's Comparison).
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    /// Paths present only in `new` (including maps and lists themselves).
    pub(crate) added: FieldSet,
    /// Leaf paths whose value changed.
    pub(crate) modified: FieldSet,
    /// Paths present only in `old`.
    pub(crate) removed: FieldSet,
}

impl Comparison {
    /// Added or modified paths: what a write took over.
    pub(crate) fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }

    /// Whether the values were equal.
    pub(crate) fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }
}

/// Compares two objects.
pub(crate) fn compare(old: &Value, new: &Value) -> Comparison {
    let mut cmp = Comparison::default();
    let mut path = Vec::new();
    compare_into(Some(old), Some(new), Ctx::root(), &mut path, &mut cmp);
    cmp
}

fn compare_into<'a>(
    old: Option<&'a Value>,
    new: Option<&'a Value>,
    ctx: Ctx<'a>,
    path: &mut Vec<Pe>,
    cmp: &mut Comparison,
) {
    let kind = match (old.map(|v| classify(v, ctx)), new.map(|v| classify(v, ctx))) {
        (Some(a), Some(b)) if a == b => a,
        (Some(_), Some(_)) | (None, None) => Kind::Leaf,
        (Some(k), None) | (None, Some(k)) => k,
    };
    match kind {
        Kind::Leaf => {
            if old != new && !path.is_empty() {
                match (old, new) {
                    (None, _) => cmp.added.insert(path),
                    (_, None) => cmp.removed.insert(path),
                    _ => cmp.modified.insert(path),
                }
            }
            return;
        }
        Kind::Map => {
            let empty = Map::new();
            let om = old.and_then(Value::as_object).unwrap_or(&empty);
            let nm = new.and_then(Value::as_object).unwrap_or(&empty);
            for (k, ov) in om {
                path.push(Pe::field(k));
                compare_into(Some(ov), nm.get(k), ctx.field(k), path, cmp);
                path.pop();
            }
            for (k, nv) in nm {
                if !om.contains_key(k) {
                    path.push(Pe::field(k));
                    compare_into(None, Some(nv), ctx.field(k), path, cmp);
                    path.pop();
                }
            }
        }
        Kind::Assoc(key) => {
            let oi = old
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let ni = new
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let find = |items: &'a [Value], k: &Value| items.iter().find(|i| i.get(key) == Some(k));
            for item in oi {
                let Some(k) = item.get(key) else { continue };
                path.push(Pe::key(key, k));
                compare_into(Some(item), find(ni, k), ctx.item(), path, cmp);
                path.pop();
            }
            for item in ni {
                let Some(k) = item.get(key) else { continue };
                if find(oi, k).is_none() {
                    path.push(Pe::key(key, k));
                    compare_into(None, Some(item), ctx.item(), path, cmp);
                    path.pop();
                }
            }
        }
        Kind::Set => {
            let oi = old
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            let ni = new
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            for v in oi.iter().filter(|v| !ni.contains(v)) {
                path.push(Pe::value(v));
                cmp.removed.insert(path);
                path.pop();
            }
            for v in ni.iter().filter(|v| !oi.contains(v)) {
                path.push(Pe::value(v));
                cmp.added.insert(path);
                path.pop();
            }
        }
    }
    if !path.is_empty() {
        match (old, new) {
            (None, Some(_)) => cmp.added.insert(path),
            (Some(_), None) => cmp.removed.insert(path),
            _ => {}
        }
    }
}

/// Merges an applied configuration into the live object: maps merge field by
/// field, associative lists item by item, sets by union; everything else is
/// replaced by the applied value. `null` fields of `applied` are skipped.
pub(crate) fn merge(live: Option<&Value>, applied: &Value) -> Value {
    merge_in(live, applied, Ctx::root())
}

fn merge_in<'a>(live: Option<&'a Value>, applied: &'a Value, ctx: Ctx<'a>) -> Value {
    let kind = classify(applied, ctx);
    let live = live.filter(|l| classify(l, ctx) == kind);
    match (kind, applied) {
        (Kind::Map, Value::Object(am)) => {
            let mut out = live.and_then(Value::as_object).cloned().unwrap_or_default();
            for (k, av) in am {
                if av.is_null() {
                    continue;
                }
                let merged = merge_in(out.get(k), av, ctx.field(k));
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Kind::Assoc(key), Value::Array(ai)) => {
            let mut out = live.and_then(Value::as_array).cloned().unwrap_or_default();
            for item in ai {
                let k = item.get(key);
                match out.iter().position(|i| i.get(key) == k) {
                    Some(pos) => {
                        let merged = merge_in(Some(&out[pos]), item, ctx.item());
                        out[pos] = merged;
                    }
                    None => out.push(merge_in(None, item, ctx.item())),
                }
            }
            Value::Array(out)
        }
        (Kind::Set, Value::Array(ai)) => {
            let mut out = live.and_then(Value::as_array).cloned().unwrap_or_default();
            for v in ai {
                if !out.contains(v) {
                    out.push(v.clone());
                }
            }
            Value::Array(out)
        }
        _ => applied.clone(),
    }
}

/// Removes every member path of `set` from `v`. Maps and lists that become
/// empty because of the removal are removed too, as the API server's typed
/// encoding drops them.
pub(crate) fn remove_paths(v: &mut Value, set: &FieldSet) {
    for (pe, child) in set.children() {
        let emptied = match v {
            Value::Object(m) => {
                let Some(name) = pe.as_field() else { continue };
                if child.is_member() {
                    m.remove(name);
                    continue;
                }
                let Some(cv) = m.get_mut(name) else { continue };
                let was_empty = is_empty_container(cv);
                remove_paths(cv, child);
                (!was_empty && is_empty_container(cv)).then(|| name.to_string())
            }
            Value::Array(items) => {
                let pos = if let Some(key) = pe.as_key() {
                    items
                        .iter()
                        .position(|i| key.iter().all(|(k, kv)| i.get(k) == Some(kv)))
                } else if let Some(val) = pe.as_value() {
                    items.iter().position(|i| *i == val)
                } else {
                    None
                };
                let Some(pos) = pos else { continue };
                if child.is_member() {
                    items.remove(pos);
                } else {
                    remove_paths(&mut items[pos], child);
                }
                None
            }
            _ => None,
        };
        if let (Some(name), Value::Object(m)) = (emptied, &mut *v) {
            m.remove(&name);
        }
    }
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}
