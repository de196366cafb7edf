//! Signed plugins through a WasmPlugin (issue 31): a real registry, real
//! cosign 3 (bundles as referrers) and cosign 2 (tag-based `.sig`)
//! signatures, and the host verifying them at every fetch: the first load,
//! every moved tag, under `spec.verification`.

use serde_json::json;

use crate::oci::push;
use crate::support::cosign::{Cosign, KeyPair};
use crate::support::{self, condition, registry::Registry};
use crate::{Fixture, digest, with_custom_section};

/// `spec.verification` trusting the key `key`.
fn key_policy(key: &KeyPair, name: &str) -> serde_json::Value {
    let pem = std::fs::read_to_string(&key.public).expect("the public key");
    json!({"rules": [{"publicKey": {"key": pem, "name": name}}]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_versions_signed_by_the_trusted_key_load_in_either_format() {
    let registry = Registry::start();
    let fx = Fixture::start().await;
    let release = KeyPair::generate("");
    let stranger = KeyPair::generate("");
    let reference = registry.reference("plugins/webapp:stable");
    let repository = registry.reference("plugins/webapp");

    // Version 1, signed by cosign 3 (a bundle, found by referrers or the
    // tag schema), loads under a key policy; status names the signer.
    let v1 = support::plugin_bytes("webapp");
    let first = push(&v1, &reference).await;
    Cosign::V3.sign(&release, &format!("{repository}@{first}"), &[]);
    fx.create(
        "webapp",
        json!({
            "source": {"oci": {"reference": reference, "pollInterval": "1s"}},
            "verification": key_policy(&release, "release"),
        }),
    )
    .await;
    let o = fx.wait_serving("webapp", &digest(&v1)).await;
    let signature = &o["status"]["signature"];
    assert_eq!(signature["digest"], json!(first), "{o}");
    assert_eq!(signature["format"], json!("bundle"), "{o}");
    let signer = signature["signer"].as_str().unwrap_or_default();
    assert!(
        signer.starts_with("key sha256:") && signer.contains("(release)"),
        "{o}"
    );
    assert!(signature["verifiedAt"].is_string(), "{o}");

    // The tag moved to an unsigned digest: refused, version 1 serves on.
    let v2 = with_custom_section(&v1, "wasm-operator-test", b"unsigned");
    let unsigned = push(&v2, &reference).await;
    let o = fx
        .wait_degraded("webapp", "SignatureNotVerified", &digest(&v1))
        .await;
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(message.contains(&unsigned), "{message}");
    assert!(
        message.contains("release"),
        "names the failed rule: {message}"
    );
    let (kind, _) = fx.wait_event("webapp", "SignatureNotVerified").await;
    assert_eq!(kind, "Warning");
    fx.assert_reconciles("app-v1").await;

    // Signed by another key: still refused, still version 1.
    Cosign::V3.sign(&stranger, &format!("{repository}@{unsigned}"), &[]);
    let o = fx
        .wait_degraded("webapp", "SignatureNotVerified", &digest(&v1))
        .await;
    assert_eq!(o["status"]["signature"]["digest"], json!(first), "{o}");

    // Version 3, signed by cosign 2 (`sha256-<hex>.sig`) with the trusted
    // key: loads, even though the tag moved before it was signed (the
    // refusal is retried).
    let v3 = with_custom_section(&v1, "wasm-operator-test", b"cosign 2");
    let third = push(&v3, &reference).await;
    Cosign::V2.sign(&release, &format!("{repository}@{third}"), &[]);
    let o = fx.wait_serving("webapp", &digest(&v3)).await;
    assert_eq!(o["status"]["signature"]["digest"], json!(third), "{o}");
    assert_eq!(o["status"]["signature"]["format"], json!("tag"), "{o}");
    fx.assert_reconciles("app-v3").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_plugin_never_loads_and_verification_needs_an_oci_source() {
    let registry = Registry::start();
    let fx = Fixture::start().await;
    let release = KeyPair::generate("");
    let reference = registry.reference("plugins/webapp:unsigned");
    push(&support::plugin_bytes("webapp"), &reference).await;
    fx.create(
        "webapp",
        json!({
            "source": {"oci": {"reference": reference}},
            "verification": key_policy(&release, "release"),
        }),
    )
    .await;
    let (o, message) = fx.wait_refused("webapp", "SignatureNotVerified").await;
    assert!(o["status"]["digest"].is_null(), "nothing serves: {o}");
    assert!(message.contains(&reference), "{message}");

    let path = fx.dir.path().join("webapp.wasm");
    std::fs::write(&path, support::plugin_bytes("webapp")).expect("write the plugin");
    fx.create(
        "local",
        json!({
            "source": {"file": {"path": path.display().to_string()}},
            "verification": key_policy(&release, "release"),
        }),
    )
    .await;
    let (_, message) = fx.wait_refused("local", "InvalidSpec").await;
    assert!(message.contains("OCI sources only"), "{message}");
}
