//! The API server of a chaos run and the faults it takes: restarts (the
//! devcluster killed and started again on its data file and port;
//! kube-apiserver restarted by `realcluster up` on SIGUSR1), and on the
//! devcluster latency and 5xx/429 bursts through its admin API.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use kube::Client;
use tokio::process::Command;

use bench_scale::cluster::Cluster;

/// The backend's API server.
pub struct ApiServer {
    cluster: Option<Cluster>,
    /// The devcluster binary (dev only), to start it again.
    devcluster: Option<PathBuf>,
    dir: PathBuf,
    n: usize,
    port: u16,
    extra: Vec<String>,
    kubeconfig: PathBuf,
    audit: PathBuf,
}

/// The audit policy for kube-apiserver: every write at Metadata level,
/// nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
";

impl ApiServer {
    /// A devcluster on a free port, its data in `dir/data.sqlite` (so a
    /// restart keeps it) and its audit log in `dir/audit.log`.
    ///
    /// # Errors
    /// When it does not start.
    pub async fn dev(devcluster: &Path, dir: &Path, n: usize) -> anyhow::Result<ApiServer> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let audit = dir.join("audit.log");
        let extra = vec![
            "--data".to_owned(),
            dir.join("data.sqlite").display().to_string(),
            "--audit-log".to_owned(),
            audit.display().to_string(),
        ];
        let cluster = Cluster::dev(devcluster, dir, n, port, &extra).await?;
        Ok(ApiServer {
            kubeconfig: cluster.kubeconfig().to_owned(),
            cluster: Some(cluster),
            devcluster: Some(devcluster.to_owned()),
            dir: dir.to_owned(),
            n,
            port,
            extra,
            audit,
        })
    }

    /// `realcluster up` in `dir`, kube-apiserver writing its audit log to `dir/audit.log`.
    ///
    /// # Errors
    /// When it is not ready in time.
    pub async fn real(
        realcluster: &Path,
        dir: &Path,
        controllers: &str,
        log: &Path,
    ) -> anyhow::Result<ApiServer> {
        let audit = dir.join("audit.log");
        let policy = dir.join("audit-policy.yaml");
        std::fs::write(&policy, AUDIT_POLICY)?;
        // realcluster up wants an empty --dir: the cluster's state lives below.
        let state = dir.join("cluster");
        std::fs::create_dir_all(&state)?;
        let flags = vec![
            format!("--audit-log-path={}", audit.display()),
            format!("--audit-policy-file={}", policy.display()),
            "--audit-log-maxsize=0".to_owned(),
        ];
        let cluster = Cluster::real(realcluster, &state, controllers, &flags, log).await?;
        Ok(ApiServer {
            kubeconfig: cluster.kubeconfig().to_owned(),
            cluster: Some(cluster),
            devcluster: None,
            dir: dir.to_owned(),
            n: 0,
            port: 0,
            extra: Vec::new(),
            audit,
        })
    }

    /// Whether it is the devcluster.
    pub fn is_dev(&self) -> bool {
        self.devcluster.is_some()
    }

    /// The admin kubeconfig.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The audit log.
    pub fn audit_log(&self) -> &Path {
        &self.audit
    }

    /// The address the proxies forward to (from the kubeconfig's server URL).
    ///
    /// # Errors
    /// When the kubeconfig has no usable server URL.
    pub fn address(&self) -> anyhow::Result<SocketAddr> {
        let text = std::fs::read_to_string(&self.kubeconfig)?;
        let doc: serde_yaml::Value = serde_yaml::from_str(&text)?;
        let server = doc["clusters"][0]["cluster"]["server"]
            .as_str()
            .context("the kubeconfig names no server")?;
        let host_port = server
            .split("://")
            .nth(1)
            .context("server URL without a scheme")?
            .trim_end_matches('/');
        host_port
            .parse()
            .with_context(|| format!("server {server} is not an IP address and port"))
    }

    /// A kubeconfig like the admin one, reaching the server at 127.0.0.1:`port` (a proxy).
    ///
    /// # Errors
    /// When the kubeconfig cannot be read or written.
    pub fn kubeconfig_via(&self, port: u16, path: &Path) -> anyhow::Result<()> {
        let text = std::fs::read_to_string(&self.kubeconfig)?;
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&text)?;
        let address = self.address()?;
        if let Some(clusters) = doc["clusters"].as_sequence_mut() {
            for cluster in clusters {
                let server = cluster["cluster"]["server"].as_str().unwrap_or_default();
                let replaced = server.replace(&address.to_string(), &format!("127.0.0.1:{port}"));
                cluster["cluster"]["server"] = serde_yaml::Value::String(replaced);
            }
        }
        std::fs::write(path, serde_yaml::to_string(&doc)?)?;
        Ok(())
    }

    /// Restarts the API server; returns how long until it answered again.
    ///
    /// # Errors
    /// When it does not come back within two minutes.
    pub async fn restart(&mut self, client: &Client) -> anyhow::Result<Duration> {
        let started = Instant::now();
        match (&self.devcluster, self.cluster.take()) {
            (Some(devcluster), Some(cluster)) => {
                cluster.stop().await;
                let next =
                    Cluster::dev(devcluster, &self.dir, self.n, self.port, &self.extra).await;
                self.cluster = Some(next?);
            }
            (None, Some(cluster)) => {
                let pid = match &cluster {
                    Cluster::Real { proc_, .. } => proc_.pid()?,
                    Cluster::Dev { .. } => bail!("not a real control plane"),
                };
                self.cluster = Some(cluster);
                let status = Command::new("kill")
                    .args(["-USR1", &pid.to_string()])
                    .status()
                    .await?;
                if !status.success() {
                    bail!("kill -USR1 {pid} failed");
                }
                // Let it go down before polling for it to come back.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            (_, None) => bail!("the API server is not running"),
        }
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if client.apiserver_version().await.is_ok() {
                return Ok(started.elapsed());
            }
            if Instant::now() > deadline {
                bail!("the API server did not answer within 120 s of its restart");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Devcluster only: `POST /_devcluster/faults/<action>` with `body`.
    ///
    /// # Errors
    /// When the admin request fails.
    pub async fn fault(
        &self,
        client: &Client,
        action: &str,
        body: serde_json::Value,
    ) -> anyhow::Result<()> {
        let request = http::Request::post(format!("/_devcluster/faults/{action}"))
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body)?)?;
        client
            .request_text(request)
            .await
            .with_context(|| format!("devcluster fault {action}"))?;
        Ok(())
    }

    /// Stops it.
    pub async fn stop(mut self) {
        if let Some(cluster) = self.cluster.take() {
            cluster.stop().await;
        }
    }
}
