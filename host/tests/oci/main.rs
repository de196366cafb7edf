//! OCI loading and publishing against a real registry (Debian's
//! `docker-registry`, started per test on a random loopback port) with the
//! real plugin components from `target/wasm32-wasip2/release/`.
//!
//! Needs `scripts/install-test-deps.sh` and `scripts/build-plugins.sh`.

#[path = "../support/mod.rs"]
mod support;

mod hostile;
mod pull;
mod push;
mod signature;

use oci_client::client::{Config, ImageLayer};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use wasm_operator::oci::{self, OciSource, PushOptions, Pushed};

/// Pushes plugin `name` to `reference` with the library, anonymously.
pub async fn push_plugin(name: &str, reference: &str) -> Pushed {
    let bytes = support::plugin_bytes(name);
    let mut steps = Vec::new();
    let pushed = oci::push(&bytes, reference, &PushOptions::default(), &mut |s| {
        steps.push(s)
    })
    .await
    .unwrap_or_else(|e| panic!("push {name} to {reference}: {e}"));
    assert!(!steps.is_empty(), "push reported no progress");
    pushed
}

/// An anonymous source for `reference`.
pub fn source(reference: &str) -> OciSource {
    OciSource {
        reference: reference.to_string(),
        ..Default::default()
    }
}

/// Pushes `bytes` as a single-layer artifact with the given media types,
/// the way other tools (wasm-to-oci, container builders) do: straight
/// through oci-client, not through our `push`.
pub async fn push_raw(reference: &str, bytes: Vec<u8>, config_type: &str, layer_type: &str) {
    let reference: oci_client::Reference = reference.parse().unwrap();
    let client = raw_client();
    let layers = vec![ImageLayer::new(bytes, layer_type.to_string(), None)];
    let config = Config::new(b"{}".to_vec(), config_type.to_string(), None);
    let manifest = OciImageManifest::build(&layers, &config, None);
    client
        .push(
            &reference,
            &layers,
            config,
            &RegistryAuth::Anonymous,
            Some(manifest),
        )
        .await
        .unwrap_or_else(|e| panic!("raw push to {reference}: {e}"));
}

/// A plain-HTTP oci-client of our own, for writing and reading artifacts
/// without our `oci` module. oci-client is built without a TLS provider:
/// install ring as the process default first, as `oci` does.
pub fn raw_client() -> oci_client::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    oci_client::Client::new(oci_client::client::ClientConfig {
        protocol: oci_client::client::ClientProtocol::Http,
        ..Default::default()
    })
}
