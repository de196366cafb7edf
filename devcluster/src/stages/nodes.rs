//! The fake Nodes of the simulation and the built-in binding step that stands
//! in for kube-scheduler: an unscheduled Pod goes to the fake node with the
//! fewest Pods (ties: the first by name). Pure: the driver writes the results.

use serde_json::{Value, json};

/// How many fake nodes the simulation creates.
pub const NODE_COUNT: usize = 3;

/// The name of fake node `i`: `kwok-node-0`, `kwok-node-1`, `kwok-node-2`.
pub fn node_name(i: usize) -> String {
    format!("kwok-node-{i}")
}

/// Fake node `name` as created (kwok's node stages then make it Ready):
/// annotation `kwok.x-k8s.io/node: fake`, label `type: kwok`, and the
/// generous capacity of the shared contract.
pub fn fake_node(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
            },
            "labels": {
                "type": "kwok",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
            },
        },
        "spec": {
            "taints": [],
        },
    })
}

/// The status a fake node starts with (capacity and allocatable).
pub fn fake_node_capacity() -> Value {
    let resources = json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
    json!({"allocatable": resources, "capacity": resources})
}

/// Whether `node` is one of the simulation's fake nodes.
pub fn is_fake(node: &Value) -> bool {
    node["metadata"]["annotations"]["kwok.x-k8s.io/node"].as_str() == Some("fake")
}

/// Whether `pod` waits for a node: no `spec.nodeName`, not being deleted.
pub fn unscheduled(pod: &Value) -> bool {
    pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty)
        && !pod["metadata"]["deletionTimestamp"].is_string()
}

/// The node an unscheduled Pod is bound to: the fake node (from `nodes`)
/// with the fewest of `pods` on it, the first by name on a tie; `None`
/// when there is no fake node.
pub fn choose_node(nodes: &[Value], pods: &[Value]) -> Option<String> {
    let mut names: Vec<&str> = nodes
        .iter()
        .filter(|n| is_fake(n) && !n["metadata"]["deletionTimestamp"].is_string())
        .filter_map(|n| n["metadata"]["name"].as_str())
        .collect();
    names.sort_unstable();
    names
        .into_iter()
        .min_by_key(|name| {
            pods.iter()
                .filter(|p| p["spec"]["nodeName"].as_str() == Some(name))
                .count()
        })
        .map(String::from)
}

/// `pod` bound to `node`: `spec.nodeName` set (what the binding subresource writes).
pub fn bound(pod: &Value, node: &str) -> Value {
    let mut out = pod.clone();
    out["spec"]["nodeName"] = json!(node);
    out
}

/// `pod`'s status with the `PodScheduled` condition the scheduler adds.
pub fn scheduled_status(pod: &Value, now: &str) -> Value {
    let mut out = pod.clone();
    if !out["status"].is_object() {
        out["status"] = json!({});
    }
    if out["status"]["phase"].is_null() {
        out["status"]["phase"] = json!("Pending");
    }
    let mut conditions: Vec<Value> = out["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    conditions.retain(|c| c["type"] != "PodScheduled");
    conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now}));
    out["status"]["conditions"] = Value::Array(conditions);
    out
}
