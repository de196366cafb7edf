//! Publishing: the artifact `plugin push` writes, read back by skopeo (a
//! tool we did not write) and by oci-client; the CLI's output.

use std::process::Command;

use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use serde_json::Value;
use sha2::{Digest as _, Sha256};
use wasm_operator::oci::{self, OciError, PushOptions};

use super::support::registry::Registry;
use super::support::{plugin_bytes, plugin_wasm};
use super::{push_plugin, raw_client};

fn skopeo(args: &[&str]) -> Value {
    let out = Command::new("skopeo")
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("skopeo is not installed ({e}): run scripts/install-test-deps.sh")
        });
    assert!(
        out.status.success(),
        "skopeo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "skopeo {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[tokio::test]
async fn skopeo_reads_what_push_wrote() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/webapp:1.0.0");
    let pushed = push_plugin("webapp", &reference).await;
    let url = format!("docker://{reference}");

    // The raw manifest as skopeo fetches it hashes to the digest we printed.
    let raw = Command::new("skopeo")
        .args(["inspect", "--raw", "--tls-verify=false", &url])
        .output()
        .expect("run skopeo");
    assert!(
        raw.status.success(),
        "{}",
        String::from_utf8_lossy(&raw.stderr)
    );
    let raw_digest = format!("sha256:{}", hex::encode(Sha256::digest(&raw.stdout)));
    assert_eq!(raw_digest, pushed.digest);
    let manifest: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(
        manifest["config"]["mediaType"],
        oci::CNCF_WASM_CONFIG_MEDIA_TYPE
    );
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    assert_eq!(
        manifest["layers"][0]["digest"],
        pushed.layer_digest.as_str()
    );
    assert_eq!(
        manifest["layers"][0]["size"],
        plugin_bytes("webapp").len() as u64
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.version"],
        pushed.version.as_str()
    );
    assert_eq!(
        manifest["annotations"]["org.opencontainers.image.title"],
        "webapp"
    );

    // The config blob through skopeo: the CNCF Wasm fields.
    let config = skopeo(&["inspect", "--config", "--raw", "--tls-verify=false", &url]);
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(config["layerDigests"][0], pushed.layer_digest.as_str());
    let exports: Vec<&str> = config["component"]["exports"]
        .as_array()
        .expect("component.exports")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        exports
            .iter()
            .any(|e| e.starts_with("wasm-operator:plugin/reconciler")),
        "exports: {exports:?}"
    );
    let imports = config["component"]["imports"]
        .as_array()
        .expect("component.imports");
    assert!(
        imports.iter().any(|i| i
            .as_str()
            .is_some_and(|i| i.starts_with("wasm-operator:plugin/"))),
        "imports: {imports:?}"
    );
    assert!(
        chrono::DateTime::parse_from_rfc3339(config["created"].as_str().unwrap_or_default())
            .is_ok(),
        "created: {}",
        config["created"]
    );

    // Tag listing through skopeo.
    let tags = skopeo(&[
        "list-tags",
        "--tls-verify=false",
        &format!("docker://{}", registry.reference("plugins/webapp")),
    ]);
    assert_eq!(tags["Tags"], serde_json::json!(["1.0.0"]));
}

#[tokio::test]
async fn pushed_manifest_parses_with_oci_client() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/faulty:dev");
    let pushed = push_plugin("faulty", &reference).await;
    let client = raw_client();
    let (manifest, digest) = client
        .pull_image_manifest(&reference.parse().unwrap(), &RegistryAuth::Anonymous)
        .await
        .unwrap();
    let manifest: OciImageManifest = manifest;
    assert_eq!(digest, pushed.digest);
    assert_eq!(manifest.layers[0].digest, pushed.layer_digest);
    assert_eq!(pushed.plugin, "faulty");
}

#[tokio::test]
async fn push_refuses_a_file_that_is_not_a_plugin() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/garbage:1");
    let err = oci::push(
        b"not wasm at all",
        &reference,
        &PushOptions::default(),
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(matches!(err, OciError::InvalidComponent { .. }), "{err:?}");
    // Nothing was written under the tag.
    let err = oci::resolve_digest(&reference, None).await.unwrap_err();
    assert!(matches!(err, OciError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn plugin_push_binary_prints_the_digest() {
    let registry = Registry::start();
    let reference = registry.reference("cli/webapp:1.0.0");
    let wasm = plugin_wasm("webapp");
    let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(["plugin", "push"])
        .arg(&wasm)
        .arg(&reference)
        .output()
        .expect("run wasm-operator");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "plugin push failed:\n{stderr}");
    let digest = stdout.trim();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "stdout is not a digest: {stdout:?}"
    );
    assert!(
        stderr.contains("pushed webapp ") && stderr.contains(&format!("to {reference}@{digest}")),
        "stderr: {stderr}"
    );
    assert_eq!(oci::resolve_digest(&reference, None).await.unwrap(), digest);
    // Both digests, named: the manifest's (stdout) and the component's.
    let component = format!(
        "sha256:{}",
        hex::encode(Sha256::digest(std::fs::read(&wasm).unwrap()))
    );
    assert!(
        stderr.contains(&format!("OCI manifest digest: {digest}"))
            && stderr.contains(&format!("component digest:    {component}"))
            && component != digest,
        "stderr: {stderr}"
    );

    // A closed registry: a non-zero exit and a message naming the address.
    drop(registry);
    let out = Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(["plugin", "push"])
        .arg(&wasm)
        .arg(&reference)
        .output()
        .expect("run wasm-operator");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unreachable"), "stderr: {stderr}");
}
