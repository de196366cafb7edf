//! Writes the kubeconfig a devcluster hands to clients, and builds a `kube::Client` from it.

use std::path::Path;

use crate::DevClusterError;

/// Writes a kubeconfig with cluster, user (with the bearer token, if any) and
/// context `devcluster`, set as the current context.
pub fn write(path: &Path, url: &str, token: Option<&str>) -> Result<(), DevClusterError> {
    let user = match token {
        Some(t) => serde_json::json!({ "token": t }),
        None => serde_json::json!({}),
    };
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "devcluster", "cluster": { "server": url } }],
        "users": [{ "name": "devcluster", "user": user }],
        "contexts": [{ "name": "devcluster", "context": { "cluster": "devcluster", "user": "devcluster", "namespace": "default" } }],
        "current-context": "devcluster",
        "preferences": {},
    });
    let err = |message: String| DevClusterError::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let text = serde_yaml::to_string(&doc).map_err(|e| err(e.to_string()))?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|e| err(e.to_string()))?;
    }
    std::fs::write(path, text).map_err(|e| err(e.to_string()))
}

/// Builds a `kube::Client` from the kubeconfig at `path` (the way any user would).
pub async fn client(path: &Path, url: &str) -> Result<kube::Client, DevClusterError> {
    let kubeconfig =
        kube::config::Kubeconfig::read_from(path).map_err(|e| DevClusterError::Kubeconfig {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .map_err(|e| DevClusterError::Client {
        url: url.to_string(),
        message: e.to_string(),
    })?;
    kube::Client::try_from(config).map_err(|e| DevClusterError::Client {
        url: url.to_string(),
        message: e.to_string(),
    })
}
