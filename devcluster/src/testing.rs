//! A cluster for end-to-end tests of the whole project.
//!
//! [`test_cluster`] uses the kubeconfig named by the environment variable
//! `WASM_OPERATOR_TEST_KUBECONFIG` when it is set (a real cluster, e.g. kind),
//! and otherwise starts an in-memory [`DevCluster`] on a free port. Tests that
//! need fault injection call [`TestCluster::faults`], which is `None` on a real cluster
//! (skip the fault part there).

use crate::{DevCluster, DevClusterError, DevClusterOptions, Faults};

/// Environment variable naming a kubeconfig of a real cluster for the tests.
pub const TEST_KUBECONFIG_ENV: &str = "WASM_OPERATOR_TEST_KUBECONFIG";

/// A cluster for a test: a real one from `WASM_OPERATOR_TEST_KUBECONFIG` or a devcluster.
pub struct TestCluster {
    client: kube::Client,
    dev: Option<DevCluster>,
}

impl TestCluster {
    /// A client for the cluster.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// The devcluster behind this test cluster, `None` on a real cluster.
    pub fn dev(&self) -> Option<&DevCluster> {
        self.dev.as_ref()
    }

    /// Mutable access to the devcluster (for `stop`/`restart`), `None` on a real cluster.
    pub fn dev_mut(&mut self) -> Option<&mut DevCluster> {
        self.dev.as_mut()
    }

    /// Fault injection, `None` on a real cluster.
    pub fn faults(&self) -> Option<Faults> {
        self.dev.as_ref().map(DevCluster::faults)
    }
}

/// Starts a cluster for a test; see the module docs.
pub async fn try_test_cluster() -> Result<TestCluster, DevClusterError> {
    if let Ok(path) = std::env::var(TEST_KUBECONFIG_ENV)
        && !path.is_empty()
    {
        let path = std::path::PathBuf::from(path);
        let client = crate::kubeconfig::client(&path, "kubeconfig").await?;
        return Ok(TestCluster { client, dev: None });
    }
    let dev = DevCluster::start(DevClusterOptions::default()).await?;
    Ok(TestCluster {
        client: dev.client(),
        dev: Some(dev),
    })
}

/// Like [`try_test_cluster`], panicking with the reason when no cluster can be had
/// (meant for `#[tokio::test]` bodies only).
pub async fn test_cluster() -> TestCluster {
    match try_test_cluster().await {
        Ok(c) => c,
        Err(e) => panic!("cannot start a test cluster: {e}"),
    }
}
