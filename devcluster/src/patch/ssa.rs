//! Server-side apply: field ownership (`metadata.managedFields`, FieldsV1),
//! conflicts between managers, and removal of fields a manager stops applying.
//!
//! Modelled on structured-merge-diff as kube-apiserver runs it: an apply
//! merges the configuration into the live object, prunes what the manager
//! applied last time but no longer applies (unless someone else owns it), and
//! refuses to change fields other managers own unless forced. Updates
//! (create, PUT, patches) take over the fields they change.

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, display_path};
use super::managed::{self, APPLY, Entry, UPDATE};
use super::walk;

/// One field another manager owns with a different value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager that owns the field, e.g. `kubectl`.
    pub manager: String,
    /// The field path in the API server's notation, e.g. `.spec.replicas`.
    pub field: String,
}

/// Why an apply was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// 409 Conflict: fields owned by other managers; retry with `force=true` to take them.
    #[error("Apply failed with {} conflict(s)", .0.len())]
    Conflicts(Vec<Conflict>),
    /// 400/422: the applied configuration is not a valid object.
    #[error("invalid apply configuration: {0}")]
    Invalid(String),
}

/// What a write is doing to an object, for field-ownership bookkeeping.
#[derive(Debug, Clone, Copy)]
pub struct WriteInfo<'a> {
    /// The field manager (`fieldManager` query parameter, or derived from the user agent).
    pub manager: &'a str,
    /// The object's `apiVersion` as written.
    pub api_version: &'a str,
    /// `Some("status")` for writes to the status subresource.
    pub subresource: Option<&'a str>,
    /// RFC 3339 timestamp recorded in the managedFields entry.
    pub now: &'a str,
}

/// The manager kube-apiserver assigns the fields of an object that has no
/// managedFields when it is first applied to.
pub const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// Metadata the server sets; never owned and never taken from an apply.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// Server-side applies `applied` (the manager's complete intent) on top of `live`
/// (None when the object does not exist yet) and returns the merged object with
/// its `metadata.managedFields` updated.
///
/// With `info.subresource == Some("status")` only `.status` of `applied` is
/// used; otherwise `.status` of `applied` is ignored, as kube-apiserver resets
/// it on main-resource writes. When the apply changes nothing (same values, same ownership) the
/// result equals `live` exactly, so the caller can skip the write as the real
/// server does. Fields owned by other managers with a different value are
/// [`ApplyError::Conflicts`] unless `force`, which transfers their ownership.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    info: WriteInfo<'_>,
    force: bool,
) -> Result<Value, ApplyError> {
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "the applied configuration must be an object".into(),
        ));
    }
    if applied
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|f| !f.is_null())
    {
        return Err(ApplyError::Invalid(
            "metadata.managedFields must be nil; remove it from the applied configuration".into(),
        ));
    }
    let status_only = is_status(info.subresource);
    if status_only && live.is_none() {
        return Err(ApplyError::Invalid(
            "the status subresource of an object that does not exist cannot be applied; apply the object first".into(),
        ));
    }
    // Lists whose items lack the table's merge key, or repeat it, are treated
    // as atomic rather than refused: a custom resource may use the same field
    // names with other shapes, and its CRD (not our table) would decide.
    let config = applied_config(applied, status_only);

    let mut merged = walk::merge(live, &config);
    if let (Some(live), Some(_)) = (live, merged.get("metadata")) {
        // Keep the server-set metadata of the live object whatever the merge did.
        restore_server_metadata(live, &mut merged);
    }

    let mut entries = match live {
        Some(live) if managed::read(live).is_empty() => before_first_apply(live, info),
        Some(live) => managed::read(live),
        None => Vec::new(),
    };
    let before = entries.clone();
    let own_pos = entries
        .iter()
        .position(|e| e.is(info.manager, APPLY, info.subresource));
    let last = own_pos
        .map(|i| entries[i].fields.clone())
        .unwrap_or_default();
    let applied_set = walk::to_field_set(&ownership_view(&config, info.subresource));

    // Prune: what this manager applied last time and no longer applies,
    // unless another manager owns it (or something below it).
    let others = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != own_pos)
        .fold(FieldSet::new(), |acc, (_, e)| acc.union(&e.fields));
    let owned = applied_set.union(&others);
    let stale = last
        .difference(&owned)
        .filter(|p| !owned.contains_prefix(p));
    walk::remove_paths(&mut merged, &stale);

    if let Some(live) = live {
        let cmp = walk::compare(
            &ownership_view(live, info.subresource),
            &ownership_view(&merged, info.subresource),
        );
        let changed = cmp.changed();
        let mut conflicts = Vec::new();
        for (i, entry) in entries.iter().enumerate() {
            if Some(i) == own_pos {
                continue;
            }
            for path in entry.fields.intersection(&changed).paths() {
                let c = Conflict {
                    manager: entry.manager.clone(),
                    field: display_path(&path),
                };
                if !conflicts.contains(&c) {
                    conflicts.push(c);
                }
            }
        }
        if !conflicts.is_empty() && !force {
            conflicts.sort_by(|a, b| a.manager.cmp(&b.manager));
            return Err(ApplyError::Conflicts(conflicts));
        }
        for (i, entry) in entries.iter_mut().enumerate() {
            if Some(i) != own_pos {
                entry.fields = entry.fields.difference(&changed).difference(&cmp.removed);
            }
        }
        if cmp.is_empty() && same_ownership(&before, &entries, own_pos, &applied_set) {
            return Ok(live.clone());
        }
    }

    let entry = Entry {
        manager: info.manager.to_string(),
        operation: APPLY.to_string(),
        api_version: info.api_version.to_string(),
        time: Some(info.now.to_string()),
        subresource: info.subresource.map(str::to_string),
        fields: applied_set,
    };
    match own_pos {
        Some(i) => entries[i] = entry,
        None => entries.push(entry),
    }
    managed::write(&mut merged, entries);
    Ok(merged)
}

/// Records in `new.metadata.managedFields` that `info.manager` set the fields a
/// non-apply write (create, update, patch) changed relative to `old`.
///
/// The managedFields written are those `new` carries when it has the field
/// (a client may send them; `[]` resets them), else those of `old`. Changed
/// and added fields move to the manager's Update entry; removed fields leave
/// every entry; empty entries disappear.
pub fn record_update(old: Option<&Value>, new: &mut Value, info: WriteInfo<'_>) {
    let mut entries = match old {
        _ if managed::has_managed_fields(new) => managed::read(new),
        Some(old) => managed::read(old),
        None => Vec::new(),
    };
    let new_view = ownership_view(new, info.subresource);
    let old_view = match old {
        Some(old) => ownership_view(old, info.subresource),
        None => creation_base(&new_view, info.api_version),
    };
    let cmp = walk::compare(&old_view, &new_view);
    if !cmp.is_empty() {
        let changed = cmp.changed();
        let own_pos = entries
            .iter()
            .position(|e| e.is(info.manager, UPDATE, info.subresource));
        for (i, entry) in entries.iter_mut().enumerate() {
            if Some(i) != own_pos {
                entry.fields = entry.fields.difference(&changed).difference(&cmp.removed);
            }
        }
        let previous = own_pos
            .map(|i| entries[i].fields.clone())
            .unwrap_or_default();
        let entry = Entry {
            manager: info.manager.to_string(),
            operation: UPDATE.to_string(),
            api_version: info.api_version.to_string(),
            time: Some(info.now.to_string()),
            subresource: info.subresource.map(str::to_string),
            fields: previous.union(&changed).difference(&cmp.removed),
        };
        match own_pos {
            Some(i) => entries[i] = entry,
            None => entries.push(entry),
        }
    }
    managed::write(new, entries);
}

/// Kube's message for a 409 apply conflict, e.g.
/// `Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas`, or
/// for several: `Apply failed with 2 conflicts: conflicts with "kubectl":\n- .spec.replicas\n- .spec.paused`
/// (managers sorted, one block per manager).
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            quote(&only.manager),
            only.field
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort_unstable();
    managers.dedup();
    let mut lines = Vec::new();
    for manager in managers {
        lines.push(format!("conflicts with {}:", quote(manager)));
        lines.extend(
            conflicts
                .iter()
                .filter(|c| c.manager == manager)
                .map(|c| format!("- {}", c.field)),
        );
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// The `message` of the `FieldManagerConflict` cause kube puts in the 409
/// Status for each conflict (its `field` is [`Conflict::field`]), e.g.
/// `conflict with "kubectl"`.
pub fn conflict_cause_message(conflict: &Conflict) -> String {
    format!("conflict with {}", quote(&conflict.manager))
}

/// Go's `%q` for ordinary strings: JSON string quoting.
fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

fn is_status(subresource: Option<&str>) -> bool {
    subresource == Some("status")
}

/// The part of an applied configuration that is merged: without server-set
/// metadata; only `.status` for the status subresource, everything but
/// `.status` for the main resource.
fn applied_config(applied: &Value, status_only: bool) -> Value {
    if status_only {
        let mut m = Map::new();
        if let Some(status) = applied.get("status").filter(|s| !s.is_null()) {
            m.insert("status".into(), status.clone());
        }
        return Value::Object(m);
    }
    let mut config = applied.clone();
    // kube-apiserver resets `.status` on writes to the main resource (the
    // status subresource owns it), so an applied status is neither merged nor owned.
    if let Value::Object(root) = &mut config {
        root.remove("status");
    }
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        for f in SERVER_METADATA
            .iter()
            .filter(|f| !matches!(**f, "name" | "namespace"))
        {
            meta.remove(*f);
        }
    }
    config
}

fn restore_server_metadata(live: &Value, merged: &mut Value) {
    let (Some(live_meta), Some(Value::Object(meta))) =
        (live.get("metadata"), merged.get_mut("metadata"))
    else {
        return;
    };
    for f in SERVER_METADATA {
        match live_meta.get(*f) {
            Some(v) => meta.insert((*f).to_string(), v.clone()),
            None => meta.remove(*f),
        };
    }
}

/// The fields ownership is tracked for: everything but apiVersion, kind and
/// server-set metadata; only `.status` for the status subresource.
fn ownership_view(obj: &Value, subresource: Option<&str>) -> Value {
    let mut view = Map::new();
    let Value::Object(root) = obj else {
        return Value::Object(view);
    };
    for (k, v) in root {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if is_status(subresource) => {
                view.insert(k.clone(), v.clone());
            }
            _ if is_status(subresource) => {}
            "metadata" => {
                let mut meta = v.clone();
                if let Value::Object(m) = &mut meta {
                    for f in SERVER_METADATA {
                        m.remove(*f);
                    }
                }
                view.insert(k.clone(), meta);
            }
            _ => {
                view.insert(k.clone(), v.clone());
            }
        }
    }
    Value::Object(view)
}

/// What a created object is compared against: the zero value of its type.
/// For built-in kinds `metadata`, `spec` and `status` are non-pointer structs
/// that exist empty, so they get no `.` marker while maps such as `data` or
/// `labels` are added with one; for custom resources only `metadata` exists.
fn creation_base(view: &Value, api_version: &str) -> Value {
    let structs: &[&str] = if is_builtin(api_version) {
        &["metadata", "spec", "status"]
    } else {
        &["metadata"]
    };
    let mut base = Map::new();
    if let Value::Object(root) = view {
        for (k, v) in root {
            if v.is_object() && structs.contains(&k.as_str()) {
                base.insert(k.clone(), Value::Object(Map::new()));
            }
        }
    }
    Value::Object(base)
}

/// Whether `apiVersion` names a built-in group (`v1`, `apps/v1`, `*.k8s.io/…`).
fn is_builtin(api_version: &str) -> bool {
    match api_version.split_once('/') {
        None => true,
        Some((group, _)) => !group.contains('.') || group.ends_with(".k8s.io"),
    }
}

/// kube-apiserver gives an object without managedFields to
/// `before-first-apply` when it is first applied to.
fn before_first_apply(live: &Value, info: WriteInfo<'_>) -> Vec<Entry> {
    let view = ownership_view(live, None);
    let api_version = live
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or(info.api_version);
    let fields = walk::compare(&creation_base(&view, api_version), &view).changed();
    if fields.is_empty() {
        return Vec::new();
    }
    vec![Entry {
        manager: BEFORE_FIRST_APPLY.to_string(),
        operation: UPDATE.to_string(),
        api_version: live
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or(info.api_version)
            .to_string(),
        time: Some(info.now.to_string()),
        subresource: None,
        fields,
    }]
}

/// Whether an apply left every entry's ownership as it was.
fn same_ownership(
    before: &[Entry],
    after: &[Entry],
    own_pos: Option<usize>,
    applied: &FieldSet,
) -> bool {
    let Some(i) = own_pos else {
        return applied.is_empty();
    };
    before.len() == after.len()
        && before.iter().zip(after).all(|(b, a)| b.fields == a.fields)
        && before[i].fields == *applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const T1: &str = "2026-01-01T00:00:00Z";
    const T2: &str = "2026-01-01T00:01:00Z";

    fn info<'a>(manager: &'a str, now: &'a str) -> WriteInfo<'a> {
        WriteInfo {
            manager,
            api_version: "apps/v1",
            subresource: None,
            now,
        }
    }

    fn deploy(replicas: i64, labels: Value, image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": image, "ports": [{"containerPort": 80}]}]}
                }
            }
        })
    }

    fn stored(v: &Value) -> Value {
        // What the server would store: add server metadata.
        let mut v = v.clone();
        v["metadata"]["uid"] = json!("u-1");
        v["metadata"]["resourceVersion"] = json!("1");
        v
    }

    fn entry<'a>(obj: &'a Value, manager: &str, operation: &str) -> Option<&'a Value> {
        obj["metadata"]["managedFields"]
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == operation)
    }

    #[test]
    fn create_by_apply_records_the_real_fields_v1() {
        let applied = deploy(2, json!({"app": "web"}), "nginx:1");
        let out = apply(None, &applied, info("kubectl", T1), false).unwrap();
        let e = entry(&out, "kubectl", "Apply").unwrap();
        assert_eq!(e["apiVersion"], "apps/v1");
        assert_eq!(e["time"], T1);
        assert_eq!(e["fieldsType"], "FieldsV1");
        assert_eq!(
            e["fieldsV1"],
            json!({
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:selector": {},
                    "f:template": {
                        "f:metadata": {"f:labels": {"f:app": {}}},
                        "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {
                            ".": {},
                            "f:image": {},
                            "f:name": {},
                            "f:ports": {"k:{\"containerPort\":80}": {".": {}, "f:containerPort": {}}}
                        }}}
                    }
                }
            })
        );
        assert!(e.get("subresource").is_none());
        assert_eq!(out["spec"], applied["spec"]);
    }

    #[test]
    fn two_managers_share_a_deployment_and_conflict_on_differing_values() {
        let live = stored(
            &apply(
                None,
                &deploy(2, json!({"app": "web"}), "nginx:1"),
                info("kubectl", T1),
                false,
            )
            .unwrap(),
        );
        // The operator applies the same image (shared, no conflict) plus its own label.
        let mut op = deploy(
            2,
            json!({"app": "web", "managed-by": "wasm-operator"}),
            "nginx:1",
        );
        op["spec"].as_object_mut().unwrap().remove("replicas");
        let live =
            stored(&apply(Some(&live), &op, info("wasm-operator/webapp", T2), false).unwrap());
        assert_eq!(live["metadata"]["labels"]["managed-by"], "wasm-operator");
        assert!(
            entry(&live, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"]["f:template"]
                .is_object()
        );

        // Now it wants 3 replicas and a new image: both owned by kubectl.
        let mut op2 = deploy(
            3,
            json!({"app": "web", "managed-by": "wasm-operator"}),
            "nginx:2",
        );
        op2["spec"]["paused"] = json!(false);
        let err = apply(Some(&live), &op2, info("wasm-operator/webapp", T2), false).unwrap_err();
        let ApplyError::Conflicts(conflicts) = err else {
            panic!("expected conflicts")
        };
        assert_eq!(
            conflicts,
            vec![
                Conflict {
                    manager: "kubectl".into(),
                    field: ".spec.replicas".into()
                },
                Conflict {
                    manager: "kubectl".into(),
                    field: ".spec.template.spec.containers[name=\"web\"].image".into()
                },
            ]
        );
        assert_eq!(
            conflict_message(&conflicts),
            "Apply failed with 2 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n- .spec.template.spec.containers[name=\"web\"].image"
        );
    }

    #[test]
    fn force_takes_ownership_from_the_other_manager() {
        let live = stored(
            &apply(
                None,
                &deploy(2, json!({"app": "web"}), "nginx:1"),
                info("kubectl", T1),
                false,
            )
            .unwrap(),
        );
        let op = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}, "spec": {"replicas": 5}});
        let out = apply(Some(&live), &op, info("wasm-operator/webapp", T2), true).unwrap();
        assert_eq!(out["spec"]["replicas"], 5);
        let kubectl = entry(&out, "kubectl", "Apply").unwrap();
        assert!(kubectl["fieldsV1"]["f:spec"].get("f:replicas").is_none());
        assert!(kubectl["fieldsV1"]["f:spec"].get("f:selector").is_some());
        let op_entry = entry(&out, "wasm-operator/webapp", "Apply").unwrap();
        assert_eq!(op_entry["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        // Everything else is untouched.
        assert_eq!(out["spec"]["template"], live["spec"]["template"]);
        assert_eq!(out["metadata"]["uid"], "u-1");
    }

    #[test]
    fn dropping_a_label_from_the_apply_removes_it_unless_shared() {
        let first = deploy(
            1,
            json!({"app": "web", "tier": "front", "shared": "x"}),
            "nginx:1",
        );
        let live = stored(&apply(None, &first, info("ctl", T1), false).unwrap());
        // Another manager also applies `shared` with the same value.
        let other = json!({"metadata": {"name": "web", "labels": {"shared": "x"}}});
        let live = stored(&apply(Some(&live), &other, info("other", T1), false).unwrap());

        let second = deploy(1, json!({"app": "web"}), "nginx:1");
        let out = apply(Some(&live), &second, info("ctl", T2), false).unwrap();
        assert_eq!(
            out["metadata"]["labels"],
            json!({"app": "web", "shared": "x"})
        );
        let ctl = entry(&out, "ctl", "Apply").unwrap();
        assert_eq!(
            ctl["fieldsV1"]["f:metadata"],
            json!({"f:labels": {"f:app": {}}})
        );
        assert_eq!(
            entry(&out, "other", "Apply").unwrap()["fieldsV1"],
            json!({"f:metadata": {"f:labels": {"f:shared": {}}}})
        );
    }

    #[test]
    fn dropping_a_container_removes_it_and_empty_maps_disappear() {
        let mut two = deploy(1, json!({"app": "web"}), "nginx:1");
        two["spec"]["template"]["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "sidecar", "image": "envoy"}));
        let live = stored(&apply(None, &two, info("ctl", T1), false).unwrap());
        let mut one = deploy(1, json!({"app": "web"}), "nginx:1");
        one["metadata"].as_object_mut().unwrap().remove("labels");
        let out = apply(Some(&live), &one, info("ctl", T2), false).unwrap();
        let names: Vec<&Value> = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["name"])
            .collect();
        assert_eq!(names, vec!["web"]);
        assert!(
            out["metadata"].get("labels").is_none(),
            "{}",
            out["metadata"]
        );
    }

    #[test]
    fn reapplying_the_same_configuration_is_a_no_op() {
        let cfg = deploy(2, json!({"app": "web"}), "nginx:1");
        let live = stored(&apply(None, &cfg, info("kubectl", T1), false).unwrap());
        let again = apply(Some(&live), &cfg, info("kubectl", T2), false).unwrap();
        assert_eq!(again, live);
    }

    #[test]
    fn update_takes_fields_over_and_apply_then_conflicts_with_it() {
        let live = stored(
            &apply(
                None,
                &deploy(2, json!({"app": "web"}), "nginx:1"),
                info("kubectl", T1),
                false,
            )
            .unwrap(),
        );
        // `kubectl scale`-like update by another manager.
        let mut new = live.clone();
        new["spec"]["replicas"] = json!(4);
        record_update(Some(&live), &mut new, info("kube-controller-manager", T2));
        let upd = entry(&new, "kube-controller-manager", "Update").unwrap();
        assert_eq!(upd["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(upd["time"], T2);
        assert!(
            entry(&new, "kubectl", "Apply").unwrap()["fieldsV1"]["f:spec"]
                .get("f:replicas")
                .is_none()
        );

        // kubectl re-applies 2 replicas: conflict with the updater.
        let err = apply(
            Some(&new),
            &deploy(2, json!({"app": "web"}), "nginx:1"),
            info("kubectl", T2),
            false,
        )
        .unwrap_err();
        let ApplyError::Conflicts(c) = err else {
            panic!("expected conflicts")
        };
        assert_eq!(
            conflict_message(&c),
            "Apply failed with 1 conflict: conflict with \"kube-controller-manager\": .spec.replicas"
        );
        // Applying the current value shares the field instead.
        let out = apply(
            Some(&new),
            &deploy(4, json!({"app": "web"}), "nginx:1"),
            info("kubectl", T2),
            false,
        )
        .unwrap();
        assert_eq!(out["spec"]["replicas"], 4);
        assert!(entry(&out, "kube-controller-manager", "Update").is_some());
    }

    #[test]
    fn record_update_on_create_owns_everything_with_dot_markers() {
        let mut obj = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "d", "uid": "u", "labels": {"a": "b"}},
            "data": {"k": "v"}
        });
        record_update(
            None,
            &mut obj,
            WriteInfo {
                manager: "kubectl-create",
                api_version: "v1",
                subresource: None,
                now: T1,
            },
        );
        let e = entry(&obj, "kubectl-create", "Update").unwrap();
        assert_eq!(
            e["fieldsV1"],
            json!({"f:data": {".": {}, "f:k": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
        );
        assert_eq!(e["apiVersion"], "v1");

        let mut cr = json!({"apiVersion": "example.dev/v1", "kind": "WebApp", "metadata": {"name": "w"},
                            "spec": {"replicas": 1}});
        let ci = WriteInfo {
            manager: "m",
            api_version: "example.dev/v1",
            subresource: None,
            now: T1,
        };
        record_update(None, &mut cr, ci);
        assert_eq!(
            entry(&cr, "m", "Update").unwrap()["fieldsV1"],
            json!({"f:spec": {".": {}, "f:replicas": {}}})
        );
        let mut dep = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                             "spec": {"replicas": 1}});
        let di = WriteInfo {
            manager: "m",
            api_version: "apps/v1",
            subresource: None,
            now: T1,
        };
        record_update(None, &mut dep, di);
        assert_eq!(
            entry(&dep, "m", "Update").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:replicas": {}}})
        );
    }

    #[test]
    fn record_update_drops_removed_fields_and_empty_entries() {
        let mut obj = json!({"metadata": {"name": "c"}, "data": {"k": "v", "j": "w"}});
        record_update(
            None,
            &mut obj,
            WriteInfo {
                manager: "a",
                api_version: "v1",
                subresource: None,
                now: T1,
            },
        );
        let old = obj.clone();
        let mut new = old.clone();
        new["data"]["k"] = json!("changed");
        record_update(
            Some(&old),
            &mut new,
            WriteInfo {
                manager: "b",
                api_version: "v1",
                subresource: None,
                now: T2,
            },
        );
        // `a` created the `data` map itself (`.`) and keeps `j`.
        assert_eq!(
            entry(&new, "a", "Update").unwrap()["fieldsV1"],
            json!({"f:data": {".": {}, "f:j": {}}})
        );
        assert_eq!(
            entry(&new, "b", "Update").unwrap()["fieldsV1"],
            json!({"f:data": {"f:k": {}}})
        );

        let old = new.clone();
        new["data"].as_object_mut().unwrap().remove("j");
        record_update(
            Some(&old),
            &mut new,
            WriteInfo {
                manager: "b",
                api_version: "v1",
                subresource: None,
                now: T2,
            },
        );
        assert_eq!(
            entry(&new, "a", "Update").unwrap()["fieldsV1"],
            json!({"f:data": {}})
        );
        // Removing the map drops the last field `a` owned, and with it the entry.
        let old = new.clone();
        new.as_object_mut().unwrap().remove("data");
        let bi = WriteInfo {
            manager: "b",
            api_version: "v1",
            subresource: None,
            now: T2,
        };
        record_update(Some(&old), &mut new, bi);
        assert!(entry(&new, "a", "Update").is_none());
        assert!(entry(&new, "b", "Update").is_none());
        // A write that changes nothing leaves managedFields alone.
        let old = new.clone();
        record_update(
            Some(&old),
            &mut new,
            WriteInfo {
                manager: "c",
                api_version: "v1",
                subresource: None,
                now: T2,
            },
        );
        assert_eq!(new, old);
        // A client sending `managedFields: []` resets them.
        let mut reset = old.clone();
        reset["metadata"]["managedFields"] = json!([]);
        record_update(
            Some(&old),
            &mut reset,
            WriteInfo {
                manager: "c",
                api_version: "v1",
                subresource: None,
                now: T2,
            },
        );
        assert!(reset["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn finalizers_are_owned_per_value() {
        let a = json!({"metadata": {"name": "x", "finalizers": ["a.dev/f"]}});
        let live = stored(&apply(None, &a, info("a", T1), false).unwrap());
        let b = json!({"metadata": {"name": "x", "finalizers": ["b.dev/f"]}});
        let live = stored(&apply(Some(&live), &b, info("b", T1), false).unwrap());
        assert_eq!(
            live["metadata"]["finalizers"],
            json!(["a.dev/f", "b.dev/f"])
        );
        assert_eq!(
            entry(&live, "b", "Apply").unwrap()["fieldsV1"],
            json!({"f:metadata": {"f:finalizers": {"v:\"b.dev/f\"": {}}}})
        );
        // `a` stops applying its finalizer: only that value goes.
        let none = json!({"metadata": {"name": "x"}});
        let out = apply(Some(&live), &none, info("a", T2), false).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b.dev/f"]));
        assert!(entry(&out, "a", "Apply").is_none());
    }

    #[test]
    fn status_subresource_only_touches_status() {
        let live = stored(&json!({"apiVersion": "example.dev/v1", "kind": "WebApp",
            "metadata": {"name": "w"}, "spec": {"replicas": 1}}));
        let applied = json!({"apiVersion": "example.dev/v1", "kind": "WebApp", "metadata": {"name": "w"},
            "spec": {"replicas": 9},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "observedGeneration": 1}});
        let si = WriteInfo {
            manager: "op",
            api_version: "example.dev/v1",
            subresource: Some("status"),
            now: T1,
        };
        let out = apply(Some(&live), &applied, si, false).unwrap();
        assert_eq!(out["spec"]["replicas"], 1);
        assert_eq!(out["status"]["observedGeneration"], 1);
        let e = entry(&out, "op", "Apply").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {".": {}, "f:status": {}, "f:type": {}}},
                                 "f:observedGeneration": {}}})
        );
        // The object had no managedFields: its fields went to before-first-apply.
        let before = entry(&out, BEFORE_FIRST_APPLY, "Update").unwrap();
        assert_eq!(
            before["fieldsV1"],
            json!({"f:spec": {".": {}, "f:replicas": {}}})
        );
    }

    #[test]
    fn invalid_apply_configurations() {
        let cases = [
            json!("not an object"),
            json!({"metadata": {"name": "x", "managedFields": [{"manager": "m"}]}}),
        ];
        for applied in cases {
            assert!(
                matches!(
                    apply(None, &applied, info("m", T1), false),
                    Err(ApplyError::Invalid(_))
                ),
                "{applied}"
            );
        }
        let status = WriteInfo {
            manager: "m",
            api_version: "v1",
            subresource: Some("status"),
            now: T1,
        };
        let err = apply(None, &json!({"status": {"a": 1}}), status, false);
        assert!(matches!(err, Err(ApplyError::Invalid(_))));
    }

    #[test]
    fn lists_that_do_not_fit_the_key_table_are_atomic() {
        // A custom resource with `ports` as plain numbers and duplicate-named containers.
        let cfg = json!({"metadata": {"name": "x"}, "spec": {"ports": [8080, 9090],
                         "containers": [{"name": "a"}, {"name": "a", "image": "i"}]}});
        let out = apply(None, &cfg, info("op", T1), false).unwrap();
        assert_eq!(
            entry(&out, "op", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:containers": {}, "f:ports": {}}})
        );
        let live = stored(&out);
        let cfg2 = json!({"metadata": {"name": "x"}, "spec": {"ports": [8080]}});
        let out = apply(Some(&live), &cfg2, info("op", T2), false).unwrap();
        assert_eq!(out["spec"], json!({"ports": [8080]}));
    }

    #[test]
    fn conflict_messages_match_kube_wording() {
        let one = [Conflict {
            manager: "kubectl".into(),
            field: ".spec.replicas".into(),
        }];
        assert_eq!(
            conflict_message(&one),
            "Apply failed with 1 conflict: conflict with \"kubectl\": .spec.replicas"
        );
        let many = [
            Conflict {
                manager: "z".into(),
                field: ".a".into(),
            },
            Conflict {
                manager: "kubectl".into(),
                field: ".spec.replicas".into(),
            },
            Conflict {
                manager: "kubectl".into(),
                field: ".spec.paused".into(),
            },
        ];
        assert_eq!(
            conflict_message(&many),
            "Apply failed with 3 conflicts: conflicts with \"kubectl\":\n- .spec.replicas\n- .spec.paused\nconflicts with \"z\":\n- .a"
        );
    }

    #[test]
    fn force_takes_fields_from_an_update_manager() {
        let mut live = deploy(2, json!({"app": "web"}), "nginx:1");
        record_update(None, &mut live, info("kubectl-create", T1));
        let live = stored(&live);
        let cfg = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3, "paused": true}});
        let Err(ApplyError::Conflicts(c)) = apply(Some(&live), &cfg, info("op", T2), false) else {
            panic!("expected a conflict on replicas")
        };
        assert_eq!(
            c,
            vec![Conflict {
                manager: "kubectl-create".into(),
                field: ".spec.replicas".into()
            }]
        );
        assert_eq!(
            conflict_cause_message(&c[0]),
            "conflict with \"kubectl-create\""
        );
        let out = apply(Some(&live), &cfg, info("op", T2), true).unwrap();
        assert_eq!(out["spec"]["replicas"], 3);
        assert_eq!(out["spec"]["paused"], true);
        let creator = entry(&out, "kubectl-create", "Update").unwrap();
        assert!(creator["fieldsV1"]["f:spec"].get("f:replicas").is_none());
        assert!(creator["fieldsV1"]["f:spec"].get("f:template").is_some());
        // Apply entries sort before Update entries, as the API server writes them.
        assert_eq!(out["metadata"]["managedFields"][0]["operation"], "Apply");
    }

    #[test]
    fn record_update_on_the_status_subresource() {
        let old = stored(
            &json!({"metadata": {"name": "w"}, "spec": {"a": 1}, "status": {"phase": "Pending"}}),
        );
        let mut new = old.clone();
        new["status"]["phase"] = json!("Running");
        new["spec"]["a"] = json!(2); // ignored: not part of the status subresource
        let si = WriteInfo {
            manager: "op",
            api_version: "v1",
            subresource: Some("status"),
            now: T1,
        };
        record_update(Some(&old), &mut new, si);
        let e = entry(&new, "op", "Update").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
    }

    #[test]
    fn conditions_merge_by_type_across_managers() {
        let live = stored(&json!({"metadata": {"name": "w"}, "status": {}}));
        let si = |m| WriteInfo {
            manager: m,
            api_version: "v1",
            subresource: Some("status"),
            now: T1,
        };
        let a = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        let live = stored(&apply(Some(&live), &a, si("a"), false).unwrap());
        let b = json!({"status": {"conditions": [{"type": "Synced", "status": "False"}]}});
        let live = stored(&apply(Some(&live), &b, si("b"), false).unwrap());
        assert_eq!(live["status"]["conditions"].as_array().unwrap().len(), 2);
        let b2 = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let Err(ApplyError::Conflicts(c)) = apply(Some(&live), &b2, si("b"), false) else {
            panic!("expected a conflict on Ready")
        };
        assert_eq!(c[0].field, ".status.conditions[type=\"Ready\"].status");
        // `b` dropping Synced removes only its own condition.
        let b3 = json!({"status": {"conditions": []}});
        let out = apply(Some(&live), &b3, si("b"), false).unwrap();
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Ready", "status": "True"}])
        );
    }

    #[test]
    fn main_resource_apply_ignores_status() {
        let live = stored(
            &json!({"metadata": {"name": "w"}, "spec": {"a": 1}, "status": {"phase": "Running"}}),
        );
        let mut live = live;
        record_update(
            None,
            &mut live,
            WriteInfo {
                manager: "ctrl",
                api_version: "v1",
                subresource: None,
                now: T1,
            },
        );
        let cfg =
            json!({"metadata": {"name": "w"}, "spec": {"a": 1}, "status": {"phase": "Pending"}});
        let out = apply(Some(&live), &cfg, info("kubectl", T2), false).unwrap();
        assert_eq!(out["status"]["phase"], "Running");
        assert_eq!(
            entry(&out, "kubectl", "Apply").unwrap()["fieldsV1"],
            json!({"f:spec": {"f:a": {}}})
        );
    }

    #[test]
    fn owner_references_and_atomic_lists() {
        let cfg = json!({"metadata": {"name": "x", "ownerReferences": [{"uid": "u1", "name": "p", "kind": "WebApp"}]},
                         "spec": {"tolerations": [{"key": "a"}], "ports": [{"port": 80}]}});
        let out = apply(None, &cfg, info("op", T1), false).unwrap();
        assert_eq!(
            entry(&out, "op", "Apply").unwrap()["fieldsV1"],
            json!({"f:metadata": {"f:ownerReferences": {"k:{\"uid\":\"u1\"}": {}}},
                   "f:spec": {"f:ports": {"k:{\"port\":80}": {".": {}, "f:port": {}}}, "f:tolerations": {}}})
        );
    }
}
