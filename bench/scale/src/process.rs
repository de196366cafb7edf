//! Child processes of a benchmark run (killed on drop, output to a log
//! file) and the admin client of its API server.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, bail};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, PostParams};
use tokio::process::{Child, Command};

/// A child process killed when dropped, whatever path the run leaves by.
pub struct Proc {
    /// The process.
    pub child: Child,
    /// What it is, for messages.
    pub what: String,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl Proc {
    /// Its process id.
    ///
    /// # Errors
    /// When it has exited (naming its log).
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .id()
            .with_context(|| format!("{} has exited; see {}", self.what, self.log.display()))
    }

    /// Fails when the process has exited (with the tail of its log).
    ///
    /// # Errors
    /// The exit status and the last lines of its log.
    pub fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Ok(Some(status)) = self.child.try_wait() {
            bail!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.what,
                self.log.display(),
                tail(&self.log, 15)
            );
        }
        Ok(())
    }

    /// Kills it (SIGKILL) and reaps it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The last `lines` lines of the file at `path` (empty when unreadable).
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Spawns `cmd` with stdout and stderr appended to `log`, killed on drop.
///
/// # Errors
/// When the log cannot be opened or the program cannot start.
pub fn spawn(mut cmd: Command, what: &str, log: &Path) -> anyhow::Result<Proc> {
    // Appended, so that a restarted process keeps the earlier lines.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {}", log.display()))?;
    let err = file.try_clone()?;
    cmd.stdout(Stdio::from(file))
        .stderr(Stdio::from(err))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .with_context(|| format!("starting {what} ({:?})", cmd.as_std().get_program()))?;
    Ok(Proc {
        child,
        what: what.to_owned(),
        log: log.to_owned(),
    })
}

/// A client of the API server `kubeconfig` names.
///
/// # Errors
/// When the kubeconfig cannot be read or used.
pub async fn client(kubeconfig: &Path) -> anyhow::Result<Client> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(Client::try_from(config)?)
}

/// The [`ApiResource`] of `group/version` `kind` (`plural`); the core group is `""`.
pub fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// The cluster's CustomResourceDefinitions.
pub fn crds(client: &Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
    )
}

/// Creates the namespace `name` unless it exists.
///
/// # Errors
/// When the API server refuses it for another reason than its existence.
pub async fn ensure_namespace(client: &Client, name: &str) -> anyhow::Result<()> {
    let namespaces = Api::<DynamicObject>::all_with(
        client.clone(),
        &resource("", "v1", "Namespace", "namespaces"),
    );
    let ns: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating namespace {name}")),
    }
}
