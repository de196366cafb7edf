//! Noticing status fields the API server dropped: a CRD whose status schema
//! lacks them (a Helm chart's `crds/` never upgraded, a hand-written
//! `status: {type: object}`) prunes them silently. The host compares what
//! it wrote with what the server answered and says so once per object and
//! set of fields (`StatusPruned`).

use std::collections::{HashSet, VecDeque};

use serde_json::Value;

/// How many (object, fields) pairs are remembered as already told; the
/// oldest is forgotten first, so memory stays bounded however many
/// objects a plugin serves (a forgotten pair is told again, once).
const REMEMBERED: usize = 4096;

/// The JSON paths (`.status.a.b`, `[]` for array items) of the fields in
/// `written` (the status the host wrote) that are missing from `returned`
/// (the status the API server answered), sorted and without repeats. A
/// `null` in `written` is a merge patch's deletion, not a field.
pub fn pruned_paths(written: &Value, returned: &Value) -> Vec<String> {
    let mut out = Vec::new();
    // A status dropped whole: name each field written, as a partial prune would.
    let empty = Value::Object(serde_json::Map::new());
    let returned = if written.is_object() && !returned.is_object() {
        &empty
    } else {
        returned
    };
    walk(".status", written, Some(returned), &mut out);
    out.sort();
    out.dedup();
    out
}

fn walk(path: &str, written: &Value, returned: Option<&Value>, out: &mut Vec<String>) {
    match (written, returned) {
        (Value::Null, _) => {}
        (_, None | Some(Value::Null)) => out.push(path.to_string()),
        (Value::Object(fields), Some(Value::Object(back))) => {
            for (key, value) in fields {
                walk(&format!("{path}.{key}"), value, back.get(key), out);
            }
        }
        (Value::Array(items), Some(Value::Array(back))) => {
            let item_path = format!("{path}[]");
            for (i, item) in items.iter().enumerate() {
                walk(&item_path, item, back.get(i), out);
            }
        }
        // A scalar that came back different was defaulted or coerced by
        // the schema, not pruned.
        _ => {}
    }
}

/// The (object UID, pruned fields) pairs already told, bounded to
/// [`REMEMBERED`].
#[derive(Debug, Default)]
pub struct PrunedMemory {
    told: HashSet<(String, Vec<String>)>,
    order: VecDeque<(String, Vec<String>)>,
}

impl PrunedMemory {
    /// True the first time `paths` are reported pruned on object `uid`
    /// (then it remembers them), false after.
    pub fn first_time(&mut self, uid: &str, paths: &[String]) -> bool {
        let key = (uid.to_string(), paths.to_vec());
        if self.told.contains(&key) {
            return false;
        }
        if self.order.len() >= REMEMBERED
            && let Some(oldest) = self.order.pop_front()
        {
            self.told.remove(&oldest);
        }
        self.told.insert(key.clone());
        self.order.push_back(key);
        true
    }
}

/// The `StatusPruned` message: the fields, and the fix.
pub fn message(kind: &str, plugin: &str, paths: &[String]) -> String {
    format!(
        "the API server dropped status field(s) {} that plugin {plugin} wrote on this {kind}: the CRD's status schema does not hold them, so they are pruned on every write. Add them to the CRD's status schema (or x-kubernetes-preserve-unknown-fields), or let the plugin carry its CRD (the SDK's Crd::of) and grant the WasmPlugin permissions.crds so the host installs it",
        paths.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_missing_from_the_answer_are_named_by_path() {
        let written = json!({
            "observedGeneration": 3,
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}],
            "gone": null,
        });
        assert_eq!(
            pruned_paths(&written, &json!({})),
            [
                ".status.conditions",
                ".status.observedGeneration",
                ".status.phase"
            ]
        );
        // Items whose schema lacks a field: the field, once for all items.
        let back = json!({
            "observedGeneration": 3, "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        });
        assert_eq!(
            pruned_paths(&written, &back),
            [".status.conditions[].reason"]
        );
        // Everything kept (and a value the server changed is no pruning).
        let kept = json!({
            "observedGeneration": 3, "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Reconciled"}],
        });
        assert!(pruned_paths(&written, &kept).is_empty());
        // A status the server dropped whole.
        assert_eq!(
            pruned_paths(&json!({"phase": "Running"}), &Value::Null),
            [".status.phase"]
        );
    }

    #[test]
    fn each_object_and_field_set_is_told_once_and_memory_is_bounded() {
        let mut memory = PrunedMemory::default();
        let paths = vec![".status.phase".to_string()];
        assert!(memory.first_time("uid-1", &paths));
        assert!(!memory.first_time("uid-1", &paths));
        assert!(memory.first_time("uid-2", &paths));
        let more = vec![".status.phase".to_string(), ".status.url".to_string()];
        assert!(memory.first_time("uid-1", &more));
        for i in 0..REMEMBERED + 10 {
            memory.first_time(&format!("other-{i}"), &paths);
        }
        assert!(memory.order.len() <= REMEMBERED && memory.told.len() <= REMEMBERED);
        // Forgotten, so told again.
        assert!(memory.first_time("uid-1", &paths));
    }

    #[test]
    fn the_message_names_the_fields_and_the_fix() {
        let m = message("WebApp", "webapp", &[".status.conditions".into()]);
        assert!(m.contains(".status.conditions"), "{m}");
        assert!(m.contains("permissions.crds"), "{m}");
        assert!(m.contains("Crd::of"), "{m}");
    }
}
