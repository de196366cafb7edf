//! The deploy/ manifests (deploy/wasm-operator.yaml, the Helm chart's
//! rendering) run two replicas with leader election, with the environment
//! and RBAC it needs, and every flag they pass is one the binary accepts.

use clap::Parser;
use serde_json::Value;

use crate::support;

fn documents(relative: &str) -> Vec<Value> {
    let path = support::workspace().join(relative);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| serde::Deserialize::deserialize(doc).expect("valid YAML"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

#[test]
fn the_deployment_runs_two_replicas_with_leader_election() {
    let docs = documents("deploy/wasm-operator.yaml");
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .expect("a Deployment in deploy/wasm-operator.yaml");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    let env: Vec<&str> = container["env"]
        .as_array()
        .expect("env")
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert!(
        env.contains(&"POD_NAME") && env.contains(&"POD_NAMESPACE"),
        "{env:?}"
    );
    // The binary accepts exactly these arguments.
    let cli = std::iter::once("wasm-operator").chain(args.iter().copied());
    if let Err(error) = wasm_operator::cli::Cli::try_parse_from(cli) {
        panic!("deploy/wasm-operator.yaml passes arguments the binary refuses: {error}");
    }
    // Draining and releasing fit in the pod's grace period.
    let grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .unwrap_or(30);
    let shutdown = args
        .iter()
        .find_map(|a| a.strip_prefix("--shutdown-grace="))
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(20);
    assert!(
        shutdown < grace,
        "--shutdown-grace {shutdown} must stay below {grace}"
    );
}

#[test]
fn the_rbac_lets_the_host_hold_leases_and_record_their_events() {
    let docs = documents("deploy/wasm-operator.yaml");
    let allows = |group: &str, resource: &str, verb: &str| {
        docs.iter()
            .filter(|d| d["kind"] == "Role" || d["kind"] == "ClusterRole")
            .filter(|d| {
                d["kind"] == "ClusterRole" || d["metadata"]["namespace"] == "wasm-operator-system"
            })
            .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
            .any(|rule| {
                let has = |field: &str, value: &str| {
                    rule[field]
                        .as_array()
                        .is_some_and(|a| a.iter().any(|v| v == value))
                };
                has("apiGroups", group) && has("resources", resource) && has("verbs", verb)
            })
    };
    for verb in [
        "get", "list", "watch", "create", "update", "patch", "delete",
    ] {
        assert!(
            allows("coordination.k8s.io", "leases", verb),
            "leases: {verb}"
        );
    }
    for verb in ["create", "patch"] {
        assert!(allows("events.k8s.io", "events", verb), "events: {verb}");
    }
}

#[test]
fn leader_election_durations_out_of_order_are_refused_before_anything_starts() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args([
            "run",
            "--leader-elect",
            "--lease-duration",
            "5s",
            "--renew-deadline",
            "10s",
        ])
        .args([
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run wasm-operator");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--lease-duration") && stderr.contains("--renew-deadline"),
        "{stderr}"
    );
}

#[test]
fn shards_without_leader_election_are_refused_before_anything_starts() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(["run", "--shards", "4"])
        .args([
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run wasm-operator");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--shards 4 needs --leader-elect"),
        "{stderr}"
    );
}
