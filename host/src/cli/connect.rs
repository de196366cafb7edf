//! Building a `kube::Client` the way kubectl does: `--kubeconfig` and
//! `--context` when given, otherwise `$KUBECONFIG` / `~/.kube/config`, then the
//! in-cluster service account.

use std::path::{Path, PathBuf};

use kube::config::{Config, KubeConfigOptions, Kubeconfig};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The `--kubeconfig` file cannot be read or parsed.
    #[error("cannot read kubeconfig {}: {source}; check the --kubeconfig path", path.display())]
    Read {
        /// The `--kubeconfig` path.
        path: PathBuf,
        /// What kube said about the file.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The `--kubeconfig` file was read but yields no usable configuration
    /// (unknown context, bad certificates...).
    #[error("kubeconfig {} cannot be used{}: {source}", path.display(), context_note(context))]
    Load {
        /// The `--kubeconfig` path.
        path: PathBuf,
        /// The `--context`, when one was given.
        context: Option<String>,
        /// What kube said about the configuration.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The `--context` cannot be used from the default kubeconfig
    /// (`$KUBECONFIG` or `~/.kube/config`).
    #[error(
        "no kubeconfig context {context}: {source}; list contexts with `kubectl config get-contexts`"
    )]
    Context {
        /// The `--context`.
        context: String,
        /// What kube said about the context.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither flag was given and there is no default kubeconfig nor an
    /// in-cluster service account.
    #[error(
        "cannot find cluster credentials: {0}; pass --kubeconfig, set $KUBECONFIG, or run inside a pod with a service account"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The configuration was found but no client can be built from it
    /// (TLS setup, proxy...).
    #[error("cannot build a Kubernetes client: {0}")]
    Client(#[source] kube::Error),
}

fn context_note(context: &Option<String>) -> String {
    match context {
        Some(context) => format!(" with context {context}"),
        None => String::new(),
    }
}

/// A client for the cluster selected by `kubeconfig` and `context`.
pub async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<kube::Client, ConnectError> {
    connect_with_url(kubeconfig, context)
        .await
        .map(|(client, _)| client)
}

/// [`connect`], with the API server's URL (for messages that must name it).
pub async fn connect_with_url(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> Result<(kube::Client, String), ConnectError> {
    let options = KubeConfigOptions {
        context: context.map(str::to_string),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let file = Kubeconfig::read_from(path).map_err(|source| ConnectError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            Config::from_custom_kubeconfig(file, &options)
                .await
                .map_err(|source| ConnectError::Load {
                    path: path.to_path_buf(),
                    context: options.context.clone(),
                    source,
                })?
        }
        (None, Some(context)) => {
            Config::from_kubeconfig(&options)
                .await
                .map_err(|source| ConnectError::Context {
                    context: context.to_string(),
                    source,
                })?
        }
        (None, None) => Config::infer().await.map_err(ConnectError::Infer)?,
    };
    let url = config.cluster_url.to_string();
    let client = kube::Client::try_from(config).map_err(ConnectError::Client)?;
    Ok((client, url))
}
