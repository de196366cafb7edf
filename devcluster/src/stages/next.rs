//! What a stage does to an object, computed as values (kwok's
//! `doStageSteps` order: event, finalizers, delete, patches); the driver
//! writes them. Rendering templates and applying patches are pure.

use serde_json::{Value, json};

use super::CompiledStage;
use super::model::{PatchType, StageEvent};
use super::template::Funcs;
use crate::patch::{json_patch, merge_patch, strategic_merge_patch};

/// One write a stage asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Record an event about the object.
    Event(StageEvent),
    /// Set the object's finalizers to this list.
    Finalizers(Vec<String>),
    /// Delete the object.
    Delete,
    /// Replace the object (or its status subresource) by this patched object.
    Update {
        /// `Some("status")` for the status subresource.
        subresource: Option<String>,
        /// The object after the patch.
        object: Value,
    },
}

/// Why a stage cannot be applied to an object.
#[derive(Debug, thiserror::Error)]
#[error("stage {stage:?} on {kind} {name:?}: {message}")]
pub struct ApplyError {
    /// The stage.
    pub stage: String,
    /// The object's kind.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// What failed (a template, a patch).
    pub message: String,
}

fn finalizers_after(obj: &Value, stage: &CompiledStage) -> Option<Vec<String>> {
    let f = stage.stage.spec.next.finalizers.as_ref()?;
    let before: Vec<String> = obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let mut after = if f.empty { Vec::new() } else { before.clone() };
    after.retain(|x| !f.remove.iter().any(|r| &r.value == x));
    for add in &f.add {
        if !after.contains(&add.value) {
            after.push(add.value.clone());
        }
    }
    (after != before).then_some(after)
}

/// The patch type kwok uses when a stage names none: strategic for Pods and Nodes, merge otherwise.
fn default_patch_type(obj: &Value) -> PatchType {
    match (obj["apiVersion"].as_str(), obj["kind"].as_str()) {
        (Some("v1"), Some("Pod" | "Node")) => PatchType::Strategic,
        _ => PatchType::Merge,
    }
}

/// Applies a rendered patch document (already wrapped under its root) to `obj`.
pub fn apply_patch(obj: &Value, patch: &Value, kind: PatchType) -> Result<Value, String> {
    match kind {
        PatchType::Merge => Ok(merge_patch(obj, patch)),
        PatchType::Strategic => strategic_merge_patch(obj, patch).map_err(|e| e.to_string()),
        PatchType::Json => json_patch(obj, patch).map_err(|e| e.to_string()),
    }
}

/// Wraps a rendered document under `root`, as kwok's `wrapMergePatchData` and
/// `wrapJSONPatchData` do.
fn wrap(root: &str, doc: Value, kind: PatchType) -> Value {
    if root.is_empty() {
        return doc;
    }
    match (kind, doc) {
        (PatchType::Json, Value::Array(ops)) => Value::Array(
            ops.into_iter()
                .map(|mut op| {
                    let path = op["path"].as_str().unwrap_or_default().to_string();
                    op["path"] = json!(format!("/{root}{path}"));
                    op
                })
                .collect(),
        ),
        (_, doc) => json!({ root: doc }),
    }
}

/// The effects of `stage` on `obj`; patches are applied one after another,
/// each rendered on the object as the previous one left it.
///
/// # Errors
/// [`ApplyError`] when a template fails or a patch does not apply.
pub fn effects(
    stage: &CompiledStage,
    obj: &Value,
    funcs: &dyn Funcs,
) -> Result<Vec<Effect>, ApplyError> {
    let fail = |message: String| ApplyError {
        stage: stage.name().to_string(),
        kind: obj["kind"].as_str().unwrap_or_default().to_string(),
        name: obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        message,
    };
    let next = &stage.stage.spec.next;
    let mut out = Vec::new();
    if let Some(event) = &next.event {
        out.push(Effect::Event(event.clone()));
    }
    if let Some(f) = finalizers_after(obj, stage) {
        out.push(Effect::Finalizers(f));
    }
    if next.delete {
        out.push(Effect::Delete);
        return Ok(out);
    }
    let mut current = obj.clone();
    for (patch, template) in &stage.patches {
        let doc = template
            .render_json(&current, funcs)
            .map_err(|e| fail(e.to_string()))?;
        let kind = patch.type_.unwrap_or_else(|| default_patch_type(obj));
        let wrapped = wrap(&patch.root, doc, kind);
        let patched = apply_patch(&current, &wrapped, kind).map_err(fail)?;
        if patched != current {
            let subresource = (!patch.subresource.is_empty()).then(|| patch.subresource.clone());
            out.push(Effect::Update {
                subresource,
                object: patched.clone(),
            });
        }
        current = patched;
    }
    Ok(out)
}

/// The core v1 Event a stage's `next.event` records about `obj` at `now`.
pub fn event_object(obj: &Value, event: &StageEvent, now: &str) -> Value {
    let meta = &obj["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let namespace = meta["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or("default");
    json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": format!("{name}."), "namespace": namespace},
        "involvedObject": {
            "apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": name,
            "namespace": meta["namespace"], "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
        },
        "type": if event.type_.is_empty() { "Normal" } else { event.type_.as_str() },
        "reason": event.reason,
        "message": event.message,
        "source": {"component": "devcluster-stages"},
        "reportingComponent": "devcluster-stages",
        "reportingInstance": "devcluster",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    })
}
