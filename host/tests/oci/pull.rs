//! Pulling: both accepted layouts, pinning, refusals, unreachable
//! registries, pull secrets and tag polling.

use sha2::{Digest as _, Sha256};
use wasm_operator::oci::{
    self, DockerConfig, LEGACY_WASM_CONFIG_MEDIA_TYPE, LEGACY_WASM_LAYER_MEDIA_TYPE, OciError,
    OciSource, PushOptions,
};

use super::support::plugin_bytes;
use super::support::registry::{Registry, free_port};
use super::{push_plugin, push_raw, source};

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[tokio::test]
async fn pull_by_tag_returns_the_pushed_bytes_and_digest() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/webapp:1.0.0");
    let pushed = push_plugin("webapp", &reference).await;

    let pulled = oci::pull(&source(&reference)).await.unwrap();
    let bytes = plugin_bytes("webapp");
    assert_eq!(pulled.bytes, bytes, "pulled bytes differ from webapp.wasm");
    assert_eq!(pulled.digest, pushed.digest);
    assert_eq!(pulled.layer_digest, sha256(&bytes));
    assert_eq!(pulled.layer_digest, pushed.layer_digest);
    assert_eq!(pulled.version.as_deref(), Some(pushed.version.as_str()));
    assert_eq!(pushed.plugin, "webapp");
}

#[tokio::test]
async fn pull_pinned_by_digest() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/webapp:pinned");
    let pushed = push_plugin("webapp", &reference).await;

    // Pinned in the reference, without a tag.
    let by_digest = registry.reference(&format!("plugins/webapp@{}", pushed.digest));
    let pulled = oci::pull(&source(&by_digest)).await.unwrap();
    assert_eq!(pulled.digest, pushed.digest);
    assert_eq!(pulled.bytes, plugin_bytes("webapp"));

    // Pinned with the separate digest field next to the tag.
    let pulled = oci::pull(&OciSource {
        reference: reference.clone(),
        digest: Some(pushed.digest.clone()),
        pull_secret: None,
    })
    .await
    .unwrap();
    assert_eq!(pulled.digest, pushed.digest);
}

#[tokio::test]
async fn pull_pinned_to_another_digest_is_a_mismatch() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/webapp:1.0.0");
    let pushed = push_plugin("webapp", &reference).await;
    let wrong = sha256(b"some other manifest");

    let err = oci::pull(&OciSource {
        reference: reference.clone(),
        digest: Some(wrong.clone()),
        pull_secret: None,
    })
    .await
    .unwrap_err();
    match &err {
        OciError::DigestMismatch {
            expected, actual, ..
        } => {
            assert_eq!(expected, &wrong);
            assert_eq!(actual, &pushed.digest);
        }
        other => panic!("expected DigestMismatch, got {other:?}"),
    }
    assert!(err.to_string().contains(&reference), "{err}");

    // tag@digest in the reference: same rule.
    let err = oci::pull(&source(&format!("{reference}@{wrong}")))
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::DigestMismatch { .. }), "{err:?}");
}

#[tokio::test]
async fn pull_accepts_the_older_wasm_to_oci_media_types() {
    let registry = Registry::start();
    let reference = registry.reference("legacy/webapp:v1");
    let bytes = plugin_bytes("webapp");
    push_raw(
        &reference,
        bytes.clone(),
        LEGACY_WASM_CONFIG_MEDIA_TYPE,
        LEGACY_WASM_LAYER_MEDIA_TYPE,
    )
    .await;

    let pulled = oci::pull(&source(&reference)).await.unwrap();
    assert_eq!(pulled.bytes, bytes);
    assert_eq!(pulled.layer_digest, sha256(&bytes));
    assert_eq!(
        pulled.version, None,
        "wasm-to-oci writes no version annotation"
    );
}

#[tokio::test]
async fn pull_refuses_a_non_wasm_layer() {
    let registry = Registry::start();
    let reference = registry.reference("images/not-a-plugin:latest");
    push_raw(
        &reference,
        b"not a tarball either".to_vec(),
        "application/vnd.oci.image.config.v1+json",
        "application/vnd.oci.image.layer.v1.tar",
    )
    .await;

    let err = oci::pull(&source(&reference)).await.unwrap_err();
    assert!(matches!(err, OciError::NotWasm { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not a Wasm plugin artifact"),
        "{err}"
    );

    // The right config type does not make a tar layer acceptable.
    let reference = registry.reference("images/tar-layer:latest");
    push_raw(
        &reference,
        plugin_bytes("webapp"),
        oci::CNCF_WASM_CONFIG_MEDIA_TYPE,
        "application/vnd.oci.image.layer.v1.tar",
    )
    .await;
    let err = oci::pull(&source(&reference)).await.unwrap_err();
    assert!(err.to_string().contains("layer media type"), "{err}");
}

#[tokio::test]
async fn pull_from_a_closed_port_is_unreachable() {
    let port = free_port();
    let reference = format!("127.0.0.1:{port}/plugins/webapp:1.0.0");
    let err = oci::pull(&source(&reference)).await.unwrap_err();
    match &err {
        OciError::Unreachable { address, .. } => assert_eq!(address, &format!("127.0.0.1:{port}")),
        other => panic!("expected Unreachable, got {other:?}"),
    }
    assert!(err.is_transient());
    let err = oci::resolve_digest(&reference, None).await.unwrap_err();
    assert!(matches!(err, OciError::Unreachable { .. }), "{err:?}");
}

#[tokio::test]
async fn pull_of_a_missing_tag_is_not_found() {
    let registry = Registry::start();
    let err = oci::pull(&source(&registry.reference("plugins/none:1.0.0")))
        .await
        .unwrap_err();
    assert!(matches!(err, OciError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn resolve_digest_follows_the_tag() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/moving:stable");
    let first = push_plugin("webapp", &reference).await;
    assert_eq!(
        oci::resolve_digest(&reference, None).await.unwrap(),
        first.digest
    );

    let second = push_plugin("faulty", &reference).await;
    assert_ne!(first.digest, second.digest);
    let resolved = oci::resolve_digest(&reference, None).await.unwrap();
    assert_eq!(resolved, second.digest, "the tag now points at faulty");
    let pulled = oci::pull(&source(&reference)).await.unwrap();
    assert_eq!(pulled.digest, resolved);
    assert_eq!(pulled.bytes, plugin_bytes("faulty"));
}

#[tokio::test]
async fn pull_secret_authenticates_against_a_registry_with_basic_auth() {
    let registry = Registry::start_with_auth("deployer", "s3cr3t-pw");
    let reference = registry.reference("private/webapp:1.0.0");
    let config = DockerConfig::from_json(
        serde_json::json!({"auths": {registry.host(): {"auth": base64_auth("deployer", "s3cr3t-pw")}}})
            .to_string()
            .as_bytes(),
    )
    .unwrap();
    let pushed = oci::push(
        &plugin_bytes("webapp"),
        &reference,
        &PushOptions {
            auth: Some(config.clone()),
            insecure: false,
        },
        &mut |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\nregistry log:\n{}", registry.log_text()));

    let pulled = oci::pull(&OciSource {
        reference: reference.clone(),
        digest: None,
        pull_secret: Some(config.clone()),
    })
    .await
    .unwrap();
    assert_eq!(pulled.digest, pushed.digest);
    assert_eq!(
        oci::resolve_digest(&reference, Some(&config))
            .await
            .unwrap(),
        pushed.digest
    );

    let err = oci::pull(&source(&reference)).await.unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err:?}");
    let wrong = DockerConfig::basic(&registry.host(), "deployer", "wrong");
    let err = oci::pull(&OciSource {
        reference,
        digest: None,
        pull_secret: Some(wrong),
    })
    .await
    .unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err:?}");
}

fn base64_auth(user: &str, pass: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"))
}
