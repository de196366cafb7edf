//! `wasm-operator plugin inspect` on the real webapp plugin and on junk.

use crate::common::{plugin_wasm, run_binary};

fn stdout(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "inspect failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn check_inspection(value: &serde_json::Value) {
    assert_eq!(value["manifest"]["name"], "webapp");
    assert_eq!(value["manifest"]["primary"]["kind"], "WebApp");
    assert_eq!(value["manifest"]["primary"]["group"], "example.com");
    let world = serde_json::to_string(&value["world"]).unwrap();
    assert!(
        world.contains("wasm-operator:plugin/reconciler"),
        "world does not mention the reconciler interface: {world}"
    );
    assert!(value["digest"].as_str().unwrap().starts_with("sha256:"));
}

#[test]
fn inspect_prints_manifest_as_json() {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&["plugin", "inspect", wasm.to_str().unwrap(), "-o", "json"]);
    let value: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    check_inspection(&value);
}

#[test]
fn inspect_prints_manifest_as_yaml() {
    let wasm = plugin_wasm("webapp");
    let output = run_binary(&[
        "plugin",
        "inspect",
        wasm.to_str().unwrap(),
        "--output",
        "yaml",
    ]);
    let value: serde_json::Value = serde_yaml::from_str(&stdout(&output)).unwrap();
    check_inspection(&value);
}

#[test]
fn inspect_text_is_a_summary_then_the_world() {
    let wasm = plugin_wasm("webapp");
    let text = stdout(&run_binary(&["plugin", "inspect", wasm.to_str().unwrap()]));
    assert!(text.contains("Name:           webapp"), "{text}");
    assert!(
        text.contains("Primary kind:   WebApp (example.com/v1, webapps)"),
        "{text}"
    );
    assert!(text.contains("Deployment (apps/v1, deployments)"), "{text}");
    let world = text.find("World:").expect("a World section");
    assert!(
        text[world..].contains("wasm-operator:plugin/reconciler"),
        "{text}"
    );
}

#[test]
fn inspect_rejects_a_file_that_is_not_a_component() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("notes.wasm");
    std::fs::write(&junk, b"this is not WebAssembly").unwrap();
    let output = run_binary(&["plugin", "inspect", junk.to_str().unwrap()]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("notes.wasm"), "{stderr}");
    assert!(stderr.contains("is not a wasm-operator plugin"), "{stderr}");
}

#[test]
fn inspect_names_a_missing_file() {
    let output = run_binary(&["plugin", "inspect", "/nonexistent/plugin.wasm"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot read plugin file /nonexistent/plugin.wasm"),
        "{stderr}"
    );
}
