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

fn canary_phase(o: &serde_json::Value) -> Option<&str> {
    o.pointer("/status/canary/phase")
        .and_then(serde_json::Value::as_str)
}

/// A Shadow canary of `reference` that promotes itself after one agreeing
/// comparison, if signed by `release`.
fn signed_canary(reference: &str, release: &KeyPair) -> serde_json::Value {
    let pem = std::fs::read_to_string(&release.public).expect("the public key");
    json!({"canary": {
        "source": {"oci": {"reference": reference}},
        "mode": "Shadow", "promotion": "Auto", "skipDryRun": true,
        "analysis": {"interval": "1s", "minCalls": 1},
        "requireSigner": {"publicKey": {"key": pem, "name": "release"}},
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_signed_by_the_wrong_identity_shadows_but_is_promoted_only_when_signed_right() {
    let registry = Registry::start();
    let fx = Fixture::start().await;
    let release = KeyPair::generate("");
    let stranger = KeyPair::generate("");
    let stable = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    std::fs::write(&path, &stable).expect("write the plugin");
    fx.create(
        "webapp",
        json!({"source": {"file": {"path": path.display().to_string()}}}),
    )
    .await;
    fx.wait_serving("webapp", &digest(&stable)).await;
    fx.assert_reconciles("app-1").await;

    // webapp 1.1.0 (identical answers) signed by a stranger: it shadows
    // and passes analysis, but its automatic promotion is refused.
    let next = support::plugin_bytes("webapp_next");
    let repository = registry.reference("plugins/webapp");
    let wrong = registry.reference("plugins/webapp:next-wrong");
    let pushed = push(&next, &wrong).await;
    Cosign::V3.sign(&stranger, &format!("{repository}@{pushed}"), &[]);
    fx.patch_spec("webapp", signed_canary(&wrong, &release))
        .await;
    fx.wait_for("webapp", "shadowing unsigned by release", |o| {
        matches!(canary_phase(o), Some("Shadowing" | "Paused"))
    })
    .await;
    // A reconcile for the shadow to compare (the analysis needs one).
    fx.assert_reconciles("app-2").await;
    let (kind, note) = fx.wait_event("webapp", "CanaryPromotionRefused").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("requireSigner"), "{note}");
    let o = fx
        .wait_for("webapp", "paused, promotion refused", |o| {
            canary_phase(o) == Some("Paused")
                && condition(o, "CanaryProgressing").and_then(|c| c.get("reason"))
                    == Some(&json!("CanaryPromotionRefused"))
        })
        .await;
    assert_eq!(o["status"]["digest"], json!(digest(&stable)), "{o}");
    assert!(
        o.pointer("/status/canary/candidate/signer").is_none(),
        "{o}"
    );

    // The same logic signed by the release key (cosign 2): promoted.
    let right = registry.reference("plugins/webapp:next-right");
    let next_right = with_custom_section(&next, "wasm-operator-test", b"release");
    let pushed = push(&next_right, &right).await;
    Cosign::V2.sign(&release, &format!("{repository}@{pushed}"), &[]);
    fx.patch_spec("webapp", signed_canary(&right, &release))
        .await;
    fx.wait_for("webapp", "the signed candidate shadowing", |o| {
        o.pointer("/status/canary/candidate/digest") == Some(&json!(digest(&next_right)))
    })
    .await;
    fx.assert_reconciles("app-3").await;
    let o = fx
        .wait_for("webapp", "promoted", |o| {
            canary_phase(o) == Some("Promoted")
        })
        .await;
    let signer = o
        .pointer("/status/canary/candidate/signer")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    assert!(signer.contains("(release)"), "{o}");
}
