//! End-to-end tests of the devcluster through the real `kube` client over HTTP.
//!
//! One binary with submodules keeps link time down:
//! `cargo test -p wasm-operator-devcluster --test api`.

mod audit;
mod cluster;
mod crd;
mod crud;
mod gc;
mod list;
mod restart;
mod ssa;
mod status;
mod watch;

use std::time::Duration;

use devcluster::{DevCluster, DevClusterOptions};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::core::Status;

/// Starts an in-memory cluster on a free port.
pub async fn start() -> DevCluster {
    DevCluster::start(DevClusterOptions::default())
        .await
        .unwrap()
}

/// The Status of an API error (panics on any other error).
pub fn status(e: kube::Error) -> Box<Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Creates a namespace for one test.
pub async fn namespace(client: &kube::Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// A ConfigMap with labels.
pub fn cm(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into()),
        ..Default::default()
    }
}

/// Polls `check` until it returns true (fails the test after 20 s).
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..200 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for: {what}");
}
