//! `meta.k8s.io/v1` Table output (what `kubectl get` asks for), with a CRD
//! version's additionalPrinterColumns evaluated as simple JSONPath.

use serde_json::{Value, json};

use crate::registry::ResourceType;

/// The representation a client asked for in its Accept header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Output {
    /// The objects themselves.
    Full,
    /// A `meta.k8s.io/v1` Table; the `includeObject` policy.
    Table(String),
    /// `PartialObjectMetadata` (kube's metadata-only watches and lists).
    Metadata,
}

impl Output {
    /// Chooses from the first media type of `accept` (clients list their preference first).
    pub(super) fn from_accept(accept: &str, include_object: Option<&str>) -> Output {
        let first = accept.split(',').next().unwrap_or_default();
        if first.contains("as=Table") {
            Output::Table(include_object.unwrap_or("Metadata").to_string())
        } else if first.contains("as=PartialObjectMetadata") {
            Output::Metadata
        } else {
            Output::Full
        }
    }

    /// Renders one object (a single-row Table in Table mode).
    pub(super) fn one(&self, rt: &ResourceType, obj: Value) -> Value {
        match self {
            Output::Full => obj,
            Output::Metadata => metadata_only(obj),
            Output::Table(include) => {
                let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                table(rt, &[obj], include, meta)
            }
        }
    }

    /// Renders a list.
    pub(super) fn list(&self, rt: &ResourceType, items: Vec<Value>, meta: Value) -> Value {
        match self {
            Output::Full => {
                json!({"kind": rt.list_kind, "apiVersion": rt.api_version(), "metadata": meta, "items": items})
            }
            Output::Metadata => {
                let items: Vec<Value> = items.into_iter().map(metadata_only).collect();
                json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": items})
            }
            Output::Table(include) => table(rt, &items, include, meta),
        }
    }
}

fn metadata_only(obj: Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

/// Evaluates `.a.b[0].c` and `.a[?(@.type=="Ready")].status` against `obj`.
pub fn jsonpath<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let path = path.strip_prefix('$').unwrap_or(path);
    let mut cur = obj;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let (field, tail) = r.split_at(end);
            if !field.is_empty() {
                cur = cur.get(field)?;
            }
            rest = tail;
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']')?;
            let inner = &r[..end];
            rest = &r[end + 1..];
            if let Some(filter) = inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (k, v) = filter.split_once("==")?;
                let v = v.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = cur.as_array()?.iter().find(|e| {
                    jsonpath(e, &format!(".{}", k.trim())).and_then(Value::as_str) == Some(v)
                })?;
            } else {
                cur = cur.get(inner.parse::<usize>().ok()?)?;
            }
        } else {
            return None;
        }
    }
    Some(cur)
}

/// kube's HumanDuration for the Age column.
pub fn human_age(created: Option<&str>) -> String {
    let Some(t) = created.and_then(|c| chrono::DateTime::parse_from_rfc3339(c).ok()) else {
        return "<unknown>".into();
    };
    let s = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match s {
        _ if s < 120 => format!("{s}s"),
        _ if m < 10 => format!("{m}m{}s", s % 60),
        _ if h < 3 => format!("{m}m"),
        _ if h < 8 => format!("{h}h{}m", m % 60),
        _ if h < 48 => format!("{h}h"),
        _ if d < 8 => format!("{d}d{}h", h % 24),
        _ => format!("{d}d"),
    }
}

fn columns(rt: &ResourceType) -> (Vec<Value>, Vec<Value>) {
    if is_event(rt) {
        return (event_columns(), Vec::new());
    }
    let name = json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0});
    let age = json!({"name": "Age", "type": "string", "format": "", "description": "CreationTimestamp", "priority": 0});
    let printer = rt
        .crd
        .as_ref()
        .map(|c| c.printer_columns.clone())
        .unwrap_or_default();
    let mut defs = vec![name];
    if printer.is_empty() {
        for (name, ty) in builtin_columns(&rt.group, &rt.plural) {
            defs.push(
                json!({"name": name, "type": ty, "format": "", "description": "", "priority": 0}),
            );
        }
        defs.push(age);
    } else {
        for c in &printer {
            defs.push(json!({"name": c["name"], "type": c["type"], "format": c["format"].as_str().unwrap_or_default(),
                             "description": c["description"].as_str().unwrap_or_default(), "priority": c["priority"].as_i64().unwrap_or(0)}));
        }
    }
    (defs, printer)
}

/// Extra columns kubectl shows for common built-ins (between Name and Age).
fn builtin_columns(group: &str, plural: &str) -> &'static [(&'static str, &'static str)] {
    match (group, plural) {
        ("", "namespaces") => &[("Status", "string")],
        ("", "pods") => &[
            ("Ready", "string"),
            ("Status", "string"),
            ("Restarts", "integer"),
        ],
        ("", "configmaps") => &[("Data", "integer")],
        ("", "secrets") => &[("Type", "string"), ("Data", "integer")],
        ("apps", "deployments") => &[
            ("Ready", "string"),
            ("Up-to-date", "integer"),
            ("Available", "integer"),
        ],
        ("apps", "statefulsets") => &[("Ready", "string")],
        ("apps", "replicasets") => &[
            ("Desired", "integer"),
            ("Current", "integer"),
            ("Ready", "integer"),
        ],
        ("coordination.k8s.io", "leases") => &[("Holder", "string")],
        ("", "nodes") => &[
            ("Status", "string"),
            ("Roles", "string"),
            ("Version", "string"),
        ],
        ("batch", "jobs") => &[("Status", "string"), ("Completions", "string")],
        _ => &[],
    }
}

fn builtin_cells(group: &str, plural: &str, o: &Value) -> Vec<Value> {
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let count = |v: &Value| v.as_object().map(|m| m.len()).unwrap_or(0);
    match (group, plural) {
        ("", "namespaces") => vec![o["status"]["phase"].clone()],
        ("", "pods") => {
            let statuses = o["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let total = o["spec"]["containers"]
                .as_array()
                .map(Vec::len)
                .unwrap_or(0);
            let ready = statuses
                .iter()
                .filter(|c| c["ready"].as_bool() == Some(true))
                .count();
            let restarts: i64 = statuses.iter().map(|c| int(&c["restartCount"])).sum();
            let phase = if o["metadata"]["deletionTimestamp"].is_string() {
                "Terminating".to_string()
            } else {
                o["status"]["phase"]
                    .as_str()
                    .unwrap_or("Pending")
                    .to_string()
            };
            vec![
                json!(format!("{ready}/{total}")),
                json!(phase),
                json!(restarts),
            ]
        }
        ("", "configmaps") => vec![json!(count(&o["data"]) + count(&o["binaryData"]))],
        ("", "secrets") => vec![
            json!(o["type"].as_str().unwrap_or("Opaque")),
            json!(count(&o["data"])),
        ],
        ("apps", "deployments") => vec![
            json!(format!(
                "{}/{}",
                int(&o["status"]["readyReplicas"]),
                o["spec"]["replicas"].as_i64().unwrap_or(1)
            )),
            json!(int(&o["status"]["updatedReplicas"])),
            json!(int(&o["status"]["availableReplicas"])),
        ],
        ("apps", "statefulsets") => {
            vec![json!(format!(
                "{}/{}",
                int(&o["status"]["readyReplicas"]),
                o["spec"]["replicas"].as_i64().unwrap_or(1)
            ))]
        }
        ("apps", "replicasets") => vec![
            json!(o["spec"]["replicas"].as_i64().unwrap_or(1)),
            json!(int(&o["status"]["replicas"])),
            json!(int(&o["status"]["readyReplicas"])),
        ],
        ("coordination.k8s.io", "leases") => vec![o["spec"]["holderIdentity"].clone()],
        ("", "nodes") => node_cells(o),
        ("batch", "jobs") => job_cells(o),
        _ => Vec::new(),
    }
}

/// The status of a condition of `obj` (`"True"`, `"False"`), if present.
fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a str> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)?["status"]
        .as_str()
}

/// A Node's row as kubectl prints it: Ready or NotReady, roles from its
/// `node-role.kubernetes.io/*` labels, the kubelet's version.
fn node_cells(o: &Value) -> Vec<Value> {
    let status = if condition(o, "Ready") == Some("True") {
        "Ready"
    } else {
        "NotReady"
    };
    let roles: Vec<&str> = o["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
        .collect();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    vec![
        json!(status),
        json!(roles),
        o["status"]["nodeInfo"]["kubeletVersion"].clone(),
    ]
}

/// A Job's row as kubectl prints it: Complete, Failed, Suspended or Running,
/// and `succeeded/completions`.
fn job_cells(o: &Value) -> Vec<Value> {
    let status = if condition(o, "Complete") == Some("True") {
        "Complete"
    } else if condition(o, "Failed") == Some("True") {
        "Failed"
    } else if o["spec"]["suspend"] == true {
        "Suspended"
    } else {
        "Running"
    };
    let completions = o["spec"]["completions"].as_i64().unwrap_or(1);
    let succeeded = o["status"]["succeeded"].as_i64().unwrap_or(0);
    vec![json!(status), json!(format!("{succeeded}/{completions}"))]
}

fn cells(rt: &ResourceType, printer: &[Value], obj: &Value) -> Vec<Value> {
    if is_event(rt) {
        return event_cells(obj);
    }
    let mut out = vec![obj["metadata"]["name"].clone()];
    if printer.is_empty() {
        out.extend(builtin_cells(&rt.group, &rt.plural, obj));
        out.push(json!(human_age(
            obj["metadata"]["creationTimestamp"].as_str()
        )));
        return out;
    }
    for c in printer {
        let path = c["jsonPath"].as_str().unwrap_or_default();
        let v = jsonpath(obj, path).cloned().unwrap_or(Value::Null);
        let v = match (c["type"].as_str(), &v) {
            (Some("date"), Value::String(s)) => json!(human_age(Some(s))),
            (_, Value::Object(_) | Value::Array(_)) => json!(v.to_string()),
            _ => v,
        };
        out.push(v);
    }
    out
}

/// Core v1 or events.k8s.io/v1 Events, which kube-apiserver prints alike.
fn is_event(rt: &ResourceType) -> bool {
    rt.plural == "events" && (rt.group.is_empty() || rt.group == "events.k8s.io")
}

/// kube-apiserver's Event columns (pkg/printers/internalversion `eventColumnDefinitions`);
/// kubectl shows the priority 0 ones unless asked for `-o wide`.
fn event_columns() -> Vec<Value> {
    let columns = [
        ("Last Seen", 0),
        ("Type", 0),
        ("Reason", 0),
        ("Object", 0),
        ("Subobject", 1),
        ("Source", 1),
        ("Message", 0),
        ("First Seen", 1),
        ("Count", 1),
        ("Name", 1),
    ];
    columns
        .iter()
        .map(|(name, priority)| {
            let format = if *name == "Name" { "name" } else { "" };
            json!({"name": name, "type": "string", "format": format, "description": "", "priority": priority})
        })
        .collect()
}

/// One Event's cells as kube-apiserver's `printEvent` computes them, from either
/// API's field names (core v1 or events.k8s.io/v1).
fn event_cells(o: &Value) -> Vec<Value> {
    let text = |core: &str, events: &str| -> String {
        o[core]
            .as_str()
            .or(o[events].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let age = |v: &Value| v.as_str().map(|t| human_age(Some(t)));
    let regarding = if o["involvedObject"].is_object() {
        &o["involvedObject"]
    } else {
        &o["regarding"]
    };
    let first = age(&o["firstTimestamp"])
        .or(age(&o["deprecatedFirstTimestamp"]))
        .unwrap_or_else(|| human_age(o["eventTime"].as_str()));
    let mut last = age(&o["lastTimestamp"])
        .or(age(&o["deprecatedLastTimestamp"]))
        .unwrap_or_else(|| first.clone());
    let mut count = o["count"]
        .as_i64()
        .or(o["deprecatedCount"].as_i64())
        .unwrap_or(0);
    if o["series"].is_object() {
        last = human_age(o["series"]["lastObservedTime"].as_str());
        count = o["series"]["count"].as_i64().unwrap_or(0);
    } else if count == 0 {
        // Singleton events have no count in the events.k8s.io API.
        count = 1;
    }
    let kind = regarding["kind"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    let target = match regarding["name"].as_str().filter(|n| !n.is_empty()) {
        Some(name) => format!("{kind}/{name}"),
        None => kind,
    };
    let source = if o["source"].is_object() {
        &o["source"]
    } else {
        &o["deprecatedSource"]
    };
    let first_non_empty = |a: &Value, b: String| {
        a.as_str()
            .filter(|s| !s.is_empty())
            .map(String::from)
            .unwrap_or(b)
    };
    let component = first_non_empty(
        &source["component"],
        text("reportingComponent", "reportingController"),
    );
    let instance = first_non_empty(
        &source["host"],
        text("reportingInstance", "reportingInstance"),
    );
    let source = if instance.is_empty() {
        component
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(text("type", "type")),
        json!(text("reason", "reason")),
        json!(target),
        regarding["fieldPath"].clone(),
        json!(source),
        json!(text("message", "note").trim()),
        json!(first),
        json!(count),
        o["metadata"]["name"].clone(),
    ]
}

/// A Table of `objects` (`include` = `None`, `Metadata` (default) or `Object`).
pub(super) fn table(
    rt: &ResourceType,
    objects: &[Value],
    include: &str,
    list_meta: Value,
) -> Value {
    let (defs, printer) = columns(rt);
    let rows: Vec<Value> = objects
        .iter()
        .map(|o| {
            let mut row = json!({"cells": cells(rt, &printer, o)});
            match include {
                "None" => {}
                "Object" => row["object"] = o.clone(),
                _ => {
                    row["object"] = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]})
                }
            }
            row
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": list_meta, "columnDefinitions": defs, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_print_as_kube_apiserver_prints_them_through_either_api() {
        let rt = |group: &str| {
            crate::registry::builtins()
                .into_iter()
                .find(|r| r.group == group && r.plural == "events")
                .unwrap()
        };
        let core = json!({"metadata": {"name": "web.1"}, "involvedObject": {"kind": "WasmPlugin", "name": "web"},
            "reason": "Loaded", "message": "version 1 ", "type": "Normal", "source": {},
            "reportingComponent": "wasm-operator", "reportingInstance": "host-0"});
        let events = json!({"metadata": {"name": "web.1"}, "regarding": {"kind": "WasmPlugin", "name": "web"},
            "reason": "Loaded", "note": "version 1 ", "type": "Normal",
            "reportingController": "wasm-operator", "reportingInstance": "host-0"});
        for (group, obj) in [("", core), ("events.k8s.io", events)] {
            let t = table(&rt(group), &[obj], "None", json!({}));
            let names: Vec<&Value> = t["columnDefinitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| &c["name"])
                .collect();
            assert_eq!(
                names[..4],
                [
                    &json!("Last Seen"),
                    &json!("Type"),
                    &json!("Reason"),
                    &json!("Object")
                ]
            );
            let cells = &t["rows"][0]["cells"];
            assert_eq!(cells[1], "Normal", "{t}");
            assert_eq!(cells[2], "Loaded", "{t}");
            assert_eq!(cells[3], "wasmplugin/web", "{t}");
            assert_eq!(cells[5], "wasm-operator, host-0", "{t}");
            assert_eq!(cells[6], "version 1", "{t}");
            assert_eq!(cells[8], 1, "{t}");
            assert_eq!(cells[9], "web.1", "{t}");
        }
    }

    #[test]
    fn evaluates_jsonpath() {
        let o = json!({"status": {"replicas": 3, "conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(jsonpath(&o, ".status.replicas"), Some(&json!(3)));
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            Some(&json!("True"))
        );
        assert_eq!(
            jsonpath(&o, ".status.conditions[0].type"),
            Some(&json!("A"))
        );
        assert_eq!(jsonpath(&o, ".spec.missing"), None);
    }

    #[test]
    fn nodes_and_jobs_print_as_kubectl_prints_them() {
        let node = json!({"metadata": {"labels": {"node-role.kubernetes.io/agent": ""}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}], "nodeInfo": {"kubeletVersion": "v1"}}});
        assert_eq!(
            builtin_cells("", "nodes", &node),
            [json!("Ready"), json!("agent"), json!("v1")]
        );
        assert_eq!(
            builtin_cells("", "nodes", &json!({}))[..2],
            [json!("NotReady"), json!("<none>")]
        );
        let job = json!({"spec": {"completions": 2}, "status": {"succeeded": 2,
            "conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(
            builtin_cells("batch", "jobs", &job),
            [json!("Complete"), json!("2/2")]
        );
        let failed = json!({"status": {"conditions": [{"type": "Failed", "status": "True"}]}});
        assert_eq!(builtin_cells("batch", "jobs", &failed)[0], "Failed");
        assert_eq!(builtin_cells("batch", "jobs", &json!({}))[0], "Running");
    }
}
