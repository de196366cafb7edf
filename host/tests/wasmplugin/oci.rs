//! The OCI source against a real registry: polling a tag, pinning a digest,
//! a digest mismatch and an unreachable registry.

use serde_json::json;
use wasm_operator::oci::{self, PushOptions};

use crate::support::{self, condition, registry::Registry};
use crate::{Fixture, digest, with_custom_section};

/// Pushes `bytes` to `reference`; the digest of the manifest pushed.
pub(crate) async fn push(bytes: &[u8], reference: &str) -> String {
    oci::push(bytes, reference, &PushOptions::default(), &mut |_| {})
        .await
        .unwrap_or_else(|e| panic!("pushing {reference}: {e}"))
        .digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oci_source_polls_pins_and_rejects_bad_sources() {
    let registry = Registry::start();
    let fx = Fixture::start().await;
    let v1 = support::plugin_bytes("webapp");
    let reference = registry.reference("plugins/webapp:stable");
    let first = push(&v1, &reference).await;

    fx.create(
        "webapp",
        json!({"source": {"oci": {"reference": reference, "pollInterval": "1s"}}}),
    )
    .await;
    let o = fx.wait_serving("webapp", &digest(&v1)).await;
    assert_eq!(o.pointer("/status/sourceKind"), Some(&json!("oci")));
    // Both digests: the component's and the OCI manifest's that pins it.
    assert_eq!(o.pointer("/status/ociManifestDigest"), Some(&json!(first)));
    assert_ne!(first, digest(&v1));
    fx.assert_reconciles("first").await;

    // A new digest pushed to the tag is picked up by polling.
    let v2 = with_custom_section(&v1, "wasm-operator-test", b"oci build 2");
    let second = push(&v2, &reference).await;
    assert_ne!(first, second);
    let o = fx.wait_serving("webapp", &digest(&v2)).await;
    assert_eq!(o.pointer("/status/ociManifestDigest"), Some(&json!(second)));
    let (kind, note) = fx.wait_event("webapp", "Swapped").await;
    assert_eq!(kind, "Normal");
    assert!(note.contains(&digest(&v2)), "{note}");
    fx.assert_reconciles("second").await;

    // Pinned to the first manifest: the tag (now the second) is not accepted.
    fx.patch_spec("webapp", json!({"source": {"oci": {"digest": first}}}))
        .await;
    let o = fx
        .wait_degraded("webapp", "DigestMismatch", &digest(&v2))
        .await;
    let message = condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains(&first), "{message}");
    let (kind, _) = fx.wait_event("webapp", "DigestMismatch").await;
    assert_eq!(kind, "Warning");
    fx.assert_reconciles("after-mismatch").await;

    // Pinned by reference to the first manifest: served.
    let pinned = format!("{}@{first}", registry.reference("plugins/webapp"));
    fx.patch_spec(
        "webapp",
        json!({"source": {"oci": {"reference": pinned, "digest": null, "pollInterval": null}}}),
    )
    .await;
    fx.wait_serving("webapp", &digest(&v1)).await;

    // An unreachable registry: the pinned version keeps serving.
    let unreachable = format!(
        "127.0.0.1:{}/plugins/webapp:stable",
        support::registry::free_port()
    );
    fx.patch_spec(
        "webapp",
        json!({"source": {"oci": {"reference": unreachable}}}),
    )
    .await;
    fx.wait_degraded("webapp", "RegistryUnreachable", &digest(&v1))
        .await;
    let (kind, note) = fx.wait_event("webapp", "RegistryUnreachable").await;
    assert_eq!(kind, "Warning");
    assert!(note.contains("keeps serving"), "{note}");
    fx.assert_reconciles("after-unreachable").await;
}
