//! A cluster for end-to-end tests of the whole project, on one of three backends.
//!
//! [`test_cluster`] picks the backend from the environment ([`Backend::from_env`]):
//!
//! | backend | chosen by | what a test gets |
//! | --- | --- | --- |
//! | devcluster (default) | nothing set, or `WASM_OPERATOR_TEST_BACKEND=dev` | its own in-memory [`DevCluster`] on a free port |
//! | real control plane | `WASM_OPERATOR_TEST_BACKEND=real` | a lease on one of the test process's `realcluster`s (kube-apiserver + etcd + kube-controller-manager built from upstream by `scripts/build-realcluster.sh`), reset to its initial state |
//! | any cluster | `WASM_OPERATOR_TEST_KUBECONFIG=FILE` | a client for that cluster, as is |
//!
//! `WASM_OPERATOR_REALCLUSTER` names the `realcluster` binary (default:
//! `target/realcluster/realcluster` of the workspace, or of `CARGO_TARGET_DIR`).
//!
//! # Sharing the real control plane
//!
//! A real control plane costs about 5–10 s and 600 MB to start, about as much
//! as a whole test's work, so it is not started per test. Each test *process*
//! (one per test binary) keeps a small pool of them (2, or
//! `WASM_OPERATOR_REALCLUSTER_POOL`), started lazily when a test asks for a
//! cluster and none is free, and every test takes an exclusive lease on one
//! for as long as it holds the [`TestCluster`] (the harness's `Host` holds
//! it). So at most two tests of a binary run at a time on the real backend
//! (libtest still starts them on several threads; the lease queues them), and
//! a host a test starts never sees another test's objects, whichever
//! namespaces the tests use: the host needs no namespace confinement for the
//! tests to be isolated, and tests written for the devcluster (most use
//! `default`) run unchanged. Before handing a control plane to the next test
//! the lease resets it: every object created since it started (outside
//! `kube-system`, `kube-public` and `kube-node-lease`) is deleted, with its
//! finalizers removed first (the host that put them there is gone), CRDs and
//! their custom resources included, and the reset waits until they are gone
//! (see [`reset`] for the rules, a pure function with unit tests).
//! Cluster-scoped things the tests install (CRDs) are therefore installed by each
//! test again, as on the devcluster.
//!
//! # Guarantees
//!
//! - The control plane stops when the test process exits, however it exits:
//!   `realcluster up` runs with `--exit-with-parent` (`PR_SET_PDEATHSIG`) from a
//!   dedicated thread that lives as long as the process, so the kernel
//!   signals it when the process dies, and `up` then stops its components and
//!   removes its state directory and the kubeconfig (its reaper does so even
//!   if `up` itself is killed).
//! - A test never sees objects of an earlier test on the real backend.
//!
//! # Errors
//!
//! [`try_test_cluster`] returns [`DevClusterError::RealCluster`] when the
//! binary is missing (run `scripts/build-realcluster.sh`) or does not become
//! ready, with the tail of its log, and [`DevClusterError::Kubeconfig`] /
//! [`DevClusterError::Client`] when a kubeconfig cannot be read.
//!
//! Tests that need something only one backend has (the devcluster's fault
//! injection, stop/restart or request counter) say so in their name
//! (`devcluster_only_…`) and skip on the other backends with
//! [`TestCluster::skip_unless_devcluster`], which prints the reason.

mod real;
pub mod reset;

use std::path::{Path, PathBuf};

use crate::{DevCluster, DevClusterError, DevClusterOptions, Faults};

/// Environment variable naming a kubeconfig of a real cluster for the tests.
pub const TEST_KUBECONFIG_ENV: &str = "WASM_OPERATOR_TEST_KUBECONFIG";

/// Environment variable choosing the backend: `dev` (default) or `real`.
pub const TEST_BACKEND_ENV: &str = "WASM_OPERATOR_TEST_BACKEND";

/// Environment variable naming the `realcluster` binary for the `real` backend.
pub const REALCLUSTER_BIN_ENV: &str = "WASM_OPERATOR_REALCLUSTER";

/// Where the tests' clusters come from; see the module docs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A fresh in-memory devcluster per test.
    Dev,
    /// The test process's shared real control plane, started from this binary.
    Real {
        /// The `realcluster` binary.
        binary: PathBuf,
    },
    /// The cluster of this kubeconfig, used as is.
    Kubeconfig(PathBuf),
}

impl Backend {
    /// The backend the environment asks for.
    ///
    /// # Errors
    ///
    /// An unknown `WASM_OPERATOR_TEST_BACKEND` value, as a message naming it.
    pub fn from_env() -> Result<Backend, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace_root().join("target"));
        Backend::choose(
            var(TEST_BACKEND_ENV).as_deref(),
            var(TEST_KUBECONFIG_ENV).as_deref(),
            var(REALCLUSTER_BIN_ENV).as_deref(),
            &target,
        )
    }

    /// The backend for these settings (the values of [`TEST_BACKEND_ENV`],
    /// [`TEST_KUBECONFIG_ENV`], [`REALCLUSTER_BIN_ENV`] and the cargo target
    /// directory). A kubeconfig wins unless `real` is asked for explicitly.
    pub fn choose(
        backend: Option<&str>,
        kubeconfig: Option<&str>,
        realcluster: Option<&str>,
        target_dir: &Path,
    ) -> Result<Backend, String> {
        match backend {
            Some("real") => Ok(Backend::Real {
                binary: realcluster
                    .map(PathBuf::from)
                    .unwrap_or_else(|| target_dir.join("realcluster").join("realcluster")),
            }),
            None | Some("dev") | Some("devcluster") => Ok(match kubeconfig {
                Some(path) => Backend::Kubeconfig(PathBuf::from(path)),
                None => Backend::Dev,
            }),
            Some(other) => Err(format!(
                "{TEST_BACKEND_ENV}={other:?} is not a test backend; use \"dev\" (the default) or \"real\""
            )),
        }
    }

    /// A short name for messages: `devcluster`, `real control plane`, `kubeconfig`.
    pub fn name(&self) -> &'static str {
        match self {
            Backend::Dev => "devcluster",
            Backend::Real { .. } => "real control plane",
            Backend::Kubeconfig(_) => "kubeconfig cluster",
        }
    }
}

/// The workspace root (parent of `devcluster/`).
fn workspace_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// A cluster for a test: a devcluster, a lease on the shared real control
/// plane, or a kubeconfig's cluster. On the real backend the lease is
/// released when this is dropped.
pub struct TestCluster {
    client: kube::Client,
    kubeconfig: PathBuf,
    backend: Backend,
    dev: Option<DevCluster>,
    _lease: Option<real::Lease>,
}

impl TestCluster {
    /// A client for the cluster.
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// A kubeconfig for the cluster (for processes the test starts).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The backend this cluster comes from.
    pub fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Whether this is a devcluster.
    pub fn is_dev(&self) -> bool {
        self.dev.is_some()
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

    /// For a `devcluster_only_` test: the devcluster, or `None` after printing
    /// why `test` is skipped on this backend (`needs` says what only the
    /// devcluster has). The test returns when this is `None`.
    pub fn skip_unless_devcluster(&self, test: &str, needs: &str) -> Option<&DevCluster> {
        if self.dev.is_none() {
            print_skip(test, self.backend.name(), needs);
        }
        self.dev.as_ref()
    }

    /// Like [`TestCluster::skip_unless_devcluster`], with mutable access.
    pub fn skip_unless_devcluster_mut(
        &mut self,
        test: &str,
        needs: &str,
    ) -> Option<&mut DevCluster> {
        if self.dev.is_none() {
            print_skip(test, self.backend.name(), needs);
        }
        self.dev.as_mut()
    }
}

fn print_skip(test: &str, backend: &str, needs: &str) {
    // Printed (not silent): libtest shows it with --nocapture, and
    // scripts/test.sh counts the lines.
    println!("SKIPPED {test} on the {backend}: it needs {needs}, which only the devcluster has");
}

/// For a `devcluster_only_` test that starts its devcluster itself: whether
/// the tests run on the devcluster backend; otherwise prints why `test` is
/// skipped (`needs` says what only the devcluster has) and returns `false`.
pub fn devcluster_backend(test: &str, needs: &str) -> bool {
    match Backend::from_env() {
        Ok(Backend::Dev) => true,
        Ok(other) => {
            print_skip(test, other.name(), needs);
            false
        }
        Err(e) => panic!("{e}"),
    }
}

/// For a test that does not use the backend's cluster (it uses none — a
/// build, an in-process call — or starts a devcluster of its own, as
/// `wasm-operator dev` does): whether it runs on this backend. It runs in
/// the devcluster pass only, so a run that repeats the suites on the real
/// control plane does not do the same work twice; on another backend this
/// prints why `test` is skipped and returns `false`.
pub fn once_per_run(test: &str) -> bool {
    match Backend::from_env() {
        Ok(Backend::Dev) => true,
        Ok(other) => {
            println!(
                "SKIPPED {test} on the {}: it does not use this backend's cluster (none, or a devcluster of its own), and the devcluster pass ran it",
                other.name()
            );
            false
        }
        Err(e) => panic!("{e}"),
    }
}

/// For a `real_only_` test: whether the tests run on the real control plane;
/// otherwise prints why `test` is skipped (`needs` says what only the real
/// control plane has) and returns `false`.
pub fn real_backend(test: &str, needs: &str) -> bool {
    match Backend::from_env() {
        Ok(Backend::Real { .. }) => true,
        Ok(other) => {
            println!(
                "SKIPPED {test} on the {}: it needs {needs}, which only the real control plane has",
                other.name()
            );
            false
        }
        Err(e) => panic!("{e}"),
    }
}

/// Starts (or leases) a cluster for a test; see the module docs.
pub async fn try_test_cluster() -> Result<TestCluster, DevClusterError> {
    try_test_cluster_with(DevClusterOptions::default()).await
}

/// Like [`try_test_cluster`], with workloads that run: on the devcluster its
/// workload simulation is on ([`DevClusterOptions::simulate_workloads`]); on
/// the real control plane (kube-scheduler and kwok) the fake Nodes take Pods.
/// Without it they carry a `NoSchedule` taint and Pods stay Pending, as on
/// a devcluster without simulation ([`reset::set_workloads`]).
pub async fn try_test_cluster_simulating_workloads() -> Result<TestCluster, DevClusterError> {
    try_test_cluster_with(DevClusterOptions {
        simulate_workloads: true,
        ..DevClusterOptions::default()
    })
    .await
}

/// Like [`try_test_cluster_simulating_workloads`], panicking with the reason
/// when no cluster can be had (meant for `#[tokio::test]` bodies only).
pub async fn test_cluster_simulating_workloads() -> TestCluster {
    match try_test_cluster_simulating_workloads().await {
        Ok(c) => c,
        Err(e) => panic!("cannot start a test cluster: {e}"),
    }
}

/// [`try_test_cluster`] with `dev_options` for the devcluster backend.
async fn try_test_cluster_with(
    dev_options: DevClusterOptions,
) -> Result<TestCluster, DevClusterError> {
    let backend =
        Backend::from_env().map_err(|message| DevClusterError::TestBackend { message })?;
    match &backend {
        Backend::Kubeconfig(path) => {
            let client = crate::kubeconfig::client(path, "kubeconfig").await?;
            Ok(TestCluster {
                client,
                kubeconfig: path.clone(),
                backend,
                dev: None,
                _lease: None,
            })
        }
        Backend::Real { binary } => {
            let lease = real::lease(binary, dev_options.simulate_workloads).await?;
            Ok(TestCluster {
                client: lease.client(),
                kubeconfig: lease.kubeconfig().to_path_buf(),
                backend,
                dev: None,
                _lease: Some(lease),
            })
        }
        Backend::Dev => {
            let dev = DevCluster::start(dev_options).await?;
            Ok(TestCluster {
                client: dev.client(),
                kubeconfig: dev.kubeconfig_path().to_path_buf(),
                backend,
                dev: Some(dev),
                _lease: None,
            })
        }
    }
}

/// Like [`try_test_cluster`], panicking with the reason when no cluster can be had
/// (meant for `#[tokio::test]` bodies only).
pub async fn test_cluster() -> TestCluster {
    match try_test_cluster().await {
        Ok(c) => c,
        Err(e) => panic!("cannot start a test cluster: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_devcluster_is_the_default() {
        let t = Path::new("/t");
        assert_eq!(Backend::choose(None, None, None, t), Ok(Backend::Dev));
        assert_eq!(
            Backend::choose(Some("dev"), None, None, t),
            Ok(Backend::Dev)
        );
    }

    #[test]
    fn a_kubeconfig_is_used_unless_real_is_asked_for() {
        let t = Path::new("/t");
        assert_eq!(
            Backend::choose(None, Some("/k"), None, t),
            Ok(Backend::Kubeconfig("/k".into()))
        );
        assert_eq!(
            Backend::choose(Some("real"), Some("/k"), None, t),
            Ok(Backend::Real {
                binary: "/t/realcluster/realcluster".into()
            })
        );
    }

    #[test]
    fn the_real_binary_can_be_named() {
        assert_eq!(
            Backend::choose(Some("real"), None, Some("/bin/rc"), Path::new("/t")),
            Ok(Backend::Real {
                binary: "/bin/rc".into()
            })
        );
    }

    #[test]
    fn an_unknown_backend_is_refused_by_name() {
        let err = Backend::choose(Some("kind"), None, None, Path::new("/t")).unwrap_err();
        assert!(
            err.contains("\"kind\"") && err.contains("\"real\""),
            "{err}"
        );
    }
}
