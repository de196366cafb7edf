//! A hostile registry: the attacker controls the registry, so it serves a
//! manifest whose layer descriptor is a small real plugin and, for that
//! layer, a gigabyte of zeros (streamed, never allocated by the server).
//! The pull stops at the descriptor's size with a message naming both sizes
//! and the digest, and the host's peak memory stays near its idle figure.

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use kube::api::{Api, DynamicObject, PostParams};
use sha2::{Digest as _, Sha256};
use wasm_operator::oci::{
    self, CNCF_WASM_CONFIG_MEDIA_TYPE, Excess, OciError, WASM_LAYER_MEDIA_TYPE,
};

use super::source;
use super::support;
use super::support::peak::{mb, start_measured};
use super::support::plugin_bytes;
use super::support::registry::free_port;

/// What the hostile registry sends for the layer blob.
const ZEROS: u64 = 1 << 30;
const CHUNK: usize = 64 << 10;
static ZERO_CHUNK: [u8; CHUNK] = [0; CHUNK];

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

#[derive(Clone)]
struct Served {
    /// The real plugin the manifest describes.
    plugin: Bytes,
    plugin_digest: String,
}

/// Starts the registry on a free loopback port. Repositories:
/// `zeros/*` answers the layer with 1 GiB of zeros and no length,
/// `announced/*` the same with a `Content-Length` of 1 GiB, `honest/*` with
/// the plugin itself; a tag named `missing` is not found.
async fn start_hostile_registry() -> (SocketAddr, Served) {
    let plugin = Bytes::from(plugin_bytes("webapp"));
    let served = Served {
        plugin_digest: sha256(&plugin),
        plugin,
    };
    let app = Router::new()
        .route("/v2/", axum::routing::get(|| async { "{}" }))
        .route("/v2/{*rest}", axum::routing::get(answer))
        .with_state(served.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, served)
}

async fn answer(State(served): State<Served>, Path(rest): Path<String>) -> Response {
    if let Some((repo, tag)) = rest.split_once("/manifests/") {
        if repo.starts_with("hugemanifest/") {
            return zeros();
        }
        if tag == "missing" {
            return (
                StatusCode::NOT_FOUND,
                "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\",\"message\":\"no such tag\"}]}",
            )
                .into_response();
        }
        let config = b"{}";
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": CNCF_WASM_CONFIG_MEDIA_TYPE, "digest": sha256(config), "size": config.len()},
            "layers": [{"mediaType": WASM_LAYER_MEDIA_TYPE, "digest": served.plugin_digest, "size": served.plugin.len()}],
        });
        return (
            [(
                header::CONTENT_TYPE,
                "application/vnd.oci.image.manifest.v1+json",
            )],
            manifest.to_string(),
        )
            .into_response();
    }
    if rest.starts_with("honest/") {
        return served.plugin.into_response();
    }
    let mut response = zeros();
    if rest.starts_with("announced/") {
        response
            .headers_mut()
            .insert(header::CONTENT_LENGTH, ZEROS.into());
    }
    response
}

/// 1 GiB of zeros, streamed without a length.
fn zeros() -> Response {
    let zeros = futures::stream::iter(
        (0..ZEROS / CHUNK as u64).map(|_| Ok::<_, std::io::Error>(Bytes::from_static(&ZERO_CHUNK))),
    );
    Body::from_stream(zeros).into_response()
}

/// A manifest of 1 GiB: refused at 4 MiB by a pull and by tag polling
/// (the registry sends no `Docker-Content-Digest`, so polling reads the
/// manifest, under the same bound).
#[tokio::test]
async fn a_gigabyte_manifest_is_refused_at_the_manifest_bound() {
    let (addr, _served) = start_hostile_registry().await;
    let reference = format!("{addr}/hugemanifest/webapp:1.0.0");
    let pulled = oci::pull(&source(&reference)).await.unwrap_err();
    let polled = oci::resolve_digest(&reference, None).await.unwrap_err();
    for err in [pulled, polled] {
        match &err {
            OciError::ManifestTooLarge { limit, sent, .. } => {
                assert_eq!(*limit, oci::MAX_MANIFEST_BYTES);
                assert_eq!(*sent, Excess::MoreThan(oci::MAX_MANIFEST_BYTES));
            }
            other => panic!("expected ManifestTooLarge, got {other:?}"),
        }
        let message = err.to_string();
        assert!(message.contains(&reference), "{message}");
        assert!(
            message.contains("sent more than 4194304 bytes"),
            "{message}"
        );
        assert!(message.contains("nothing was parsed"), "{message}");
    }
}

#[tokio::test]
async fn a_layer_swapped_for_a_gigabyte_of_zeros_is_refused_at_the_descriptor_size() {
    let (addr, served) = start_hostile_registry().await;
    let size = served.plugin.len() as u64;
    for (repo, expected) in [
        ("zeros", Excess::MoreThan(size)),
        ("announced", Excess::Announced(ZEROS)),
    ] {
        let reference = format!("{addr}/{repo}/webapp:1.0.0");
        let err = oci::pull(&source(&reference)).await.unwrap_err();
        match &err {
            OciError::BlobTooLarge {
                reference: named,
                digest,
                size: described,
                sent,
            } => {
                assert_eq!(named, &reference);
                assert_eq!(digest, &served.plugin_digest);
                assert_eq!(*described, size);
                assert_eq!(*sent, expected);
            }
            other => panic!("{repo}: expected BlobTooLarge, got {other:?}"),
        }
        let message = err.to_string();
        for part in [
            reference.as_str(),
            served.plugin_digest.as_str(),
            &format!("is {size} bytes"),
            &expected.to_string(),
            "nothing was loaded",
        ] {
            assert!(message.contains(part), "{part:?} missing from: {message}");
        }
    }
    // The same server with the real layer: the pull itself works.
    let honest = oci::pull(&source(&format!("{addr}/honest/webapp:1.0.0")))
        .await
        .unwrap();
    assert_eq!(honest.bytes, served.plugin);
}

/// `plugin inspect --oci` (the real binary) reports the refusal as a
/// person reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_inspect_reports_the_oversized_layer() {
    let (addr, served) = start_hostile_registry().await;
    let reference = format!("{addr}/zeros/webapp:1.0.0");
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
            .args(["plugin", "inspect", "--oci", &reference])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(stderr.contains(&served.plugin_digest), "{stderr}");
    assert!(
        stderr.contains("the download was stopped there and nothing was loaded"),
        "{stderr}"
    );
}

/// The real host (`wasm-operator run`) deploying a WasmPlugin from the
/// hostile registry: its peak resident memory once the pull has been
/// refused (`DigestMismatch`) stays within 100 MB of the same host whose
/// WasmPlugin names a missing tag (`SourceNotFound`: the idle figure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_memory_stays_near_idle_while_a_registry_sends_a_gigabyte() {
    let (addr, _served) = start_hostile_registry().await;
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    support::install_crd(&client, &support::example_crd("wasmplugin")).await;
    let plugins: Api<DynamicObject> =
        Api::all_with(client.clone(), &wasm_operator::wasmplugin::api_resource());
    let dir = tempfile::tempdir().unwrap();
    let mut peaks = Vec::new();
    for (name, tag, reason) in [
        ("idle", "missing", "SourceNotFound"),
        ("attacked", "1.0.0", "DigestMismatch"),
    ] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"));
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .args(["--metrics-addr", &format!("127.0.0.1:{}", free_port())])
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .env("RUST_LOG", "info")
            .env_remove("POD_NAMESPACE");
        let running = start_measured(command, &dir.path().join(format!("{name}.log")));
        let plugin = format!("hostile-registry-{name}");
        let object: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": plugin},
            "spec": {"source": {"oci": {"reference": format!("{addr}/zeros/webapp:{tag}")}}},
        }))
        .unwrap();
        plugins
            .create(&PostParams::default(), &object)
            .await
            .unwrap();
        let log = dir.path().join(format!("{name}.log"));
        support::wait_until(
            &format!("WasmPlugin {plugin} reporting {reason}"),
            Duration::from_secs(120),
            || {
                let plugins = plugins.clone();
                let plugin = plugin.clone();
                let log = log.clone();
                async move {
                    let status = plugins
                        .get(&plugin)
                        .await
                        .map_err(|e| e.to_string())?
                        .data
                        .get("status")
                        .map(ToString::to_string)
                        .unwrap_or_default();
                    if status.contains(reason) {
                        Ok(())
                    } else {
                        Err(format!(
                            "status {status}; log: {}",
                            std::fs::read_to_string(&log).unwrap_or_default()
                        ))
                    }
                }
            },
        )
        .await;
        let measured = tokio::task::spawn_blocking(move || running.stop())
            .await
            .unwrap();
        peaks.push(measured.peak_bytes);
    }
    let (idle, attacked) = (peaks[0], peaks[1]);
    println!(
        "peak RSS of the host: idle {:.1} MB, after the 1 GiB blob {:.1} MB",
        mb(idle),
        mb(attacked)
    );
    assert!(
        attacked < idle + 100_000_000,
        "peak {:.1} MB under the attack, idle {:.1} MB",
        mb(attacked),
        mb(idle)
    );
}
