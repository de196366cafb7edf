//! `wasm-operator backup create KIND/NAME`: takes one backup of a primary
//! now, by creating a Backup the host's runner takes (the same as `kubectl
//! create` of a Backup by hand, with a name that says when it was asked
//! for); with `--wait`, follows it to `Completed` or `Failed`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::{Discovery, Scope};
use serde_json::json;

use super::OutputFormat;
use crate::backup::resources::{self, Backup};

/// `wasm-operator backup ...`
#[derive(Debug, Subcommand)]
pub enum BackupCommand {
    /// Take one backup of a primary now (KIND/NAME, e.g.
    /// `distributedkv/orders`): creates a Backup that the host runs with
    /// the primary's plan.
    Create(CreateArgs),
}

/// Arguments of `backup create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// The primary, as KIND/NAME: the kind in any case
    /// (`distributedkv`), its plural (`distributedkvs`) or plural.group
    /// (`distributedkvs.kv.example.com`).
    pub object: String,
    /// Namespace of the primary.
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    pub namespace: String,
    /// Wait until the backup completes or fails, showing its progress.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Output format of the Backup.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

/// Why `backup create` failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupCliError {
    /// Not KIND/NAME.
    #[error(
        "{0:?} is not KIND/NAME; e.g. `wasm-operator backup create distributedkv/orders -n shop`"
    )]
    Syntax(String),
    /// No served kind matches.
    #[error(
        "the cluster serves no namespaced kind {0:?}; give the kind, its plural or plural.group as `kubectl api-resources` lists them"
    )]
    UnknownKind(String),
    /// The primary does not exist.
    #[error("{kind} {namespace}/{name} not found; check the name and -n")]
    NotFound {
        /// The kind.
        kind: String,
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
    },
    /// A Backup of that name exists (two requests in one second).
    #[error(
        "Backup {namespace}/{name} already exists (another backup was asked for in the same second); try again"
    )]
    Exists {
        /// The namespace.
        namespace: String,
        /// The Backup's name.
        name: String,
    },
    /// The backup failed (with `--wait`).
    #[error("Backup {namespace}/{name} failed ({reason}): {message}")]
    Failed {
        /// The namespace.
        namespace: String,
        /// The Backup's name.
        name: String,
        /// Its reason.
        reason: String,
        /// Its message.
        message: String,
    },
    /// `--wait` gave up.
    #[error(
        "Backup {namespace}/{name} did not finish within {seconds} s (phase {phase}); follow it with `kubectl get backup -n {namespace} {name} -w`; is a wasm-operator host serving its plugin?"
    )]
    Timeout {
        /// The namespace.
        namespace: String,
        /// The Backup's name.
        name: String,
        /// The timeout.
        seconds: u64,
        /// Its last phase.
        phase: String,
    },
    /// The API server refused.
    #[error("cannot {what}: {source}")]
    Api {
        /// What was tried.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl From<BackupCliError> for super::CliError {
    fn from(error: BackupCliError) -> super::CliError {
        super::CliError::Backup(error)
    }
}

/// Runs a `backup` subcommand.
pub async fn execute(command: BackupCommand) -> Result<(), super::CliError> {
    let BackupCommand::Create(args) = command;
    let client =
        super::connect::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let backup = create(&client, &args).await?;
    let backup = if args.wait {
        wait(&client, &args, backup).await?
    } else {
        backup
    };
    let text = match args.output {
        OutputFormat::Text => {
            let status = backup.status.clone().unwrap_or_default();
            match status.phase.as_deref() {
                Some("Completed") => format!(
                    "backup.wasm-operator.dev/{} completed: {}",
                    kube::ResourceExt::name_any(&backup),
                    status.location.unwrap_or_default()
                ),
                _ => format!(
                    "backup.wasm-operator.dev/{} created",
                    kube::ResourceExt::name_any(&backup)
                ),
            }
        }
        OutputFormat::Yaml => serde_yaml::to_string(&backup).unwrap_or_default(),
        OutputFormat::Json => serde_json::to_string_pretty(&backup).unwrap_or_default(),
    };
    println!("{}", text.trim_end());
    Ok(())
}

/// Resolves KIND/NAME and creates the Backup.
///
/// # Errors
///
/// [`BackupCliError`] naming what was wrong and what to do.
pub async fn create(client: &kube::Client, args: &CreateArgs) -> Result<Backup, BackupCliError> {
    let (kind, name) = args
        .object
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        .ok_or_else(|| BackupCliError::Syntax(args.object.clone()))?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(|source| BackupCliError::Api {
            what: "discover the cluster's kinds".into(),
            source,
        })?;
    let wanted = kind.to_ascii_lowercase();
    let resource = discovery
        .groups()
        .flat_map(kube::discovery::ApiGroup::recommended_resources)
        .find(|(ar, caps)| {
            caps.scope == Scope::Namespaced
                && (ar.kind.to_ascii_lowercase() == wanted
                    || ar.plural == wanted
                    || format!("{}.{}", ar.plural, ar.group) == wanted)
        })
        .map(|(ar, _)| ar)
        .ok_or_else(|| BackupCliError::UnknownKind(kind.to_string()))?;
    let primaries: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &args.namespace, &resource);
    if primaries
        .get_opt(name)
        .await
        .map_err(|source| BackupCliError::Api {
            what: format!("read {} {}/{name}", resource.kind, args.namespace),
            source,
        })?
        .is_none()
    {
        return Err(BackupCliError::NotFound {
            kind: resource.kind.clone(),
            namespace: args.namespace.clone(),
            name: name.to_string(),
        });
    }
    let backup_name = crate::backup::manual_backup_name(name, chrono::Utc::now());
    let backup: Backup = serde_json::from_value(json!({
        "apiVersion": format!("{}/{}", resources::GROUP, resources::VERSION),
        "kind": "Backup",
        "metadata": {"name": backup_name, "namespace": args.namespace},
        "spec": {"primary": {"apiVersion": resource.api_version, "kind": resource.kind, "name": name}},
    }))
    .map_err(|error| BackupCliError::Syntax(error.to_string()))?;
    let api: Api<Backup> = Api::namespaced(client.clone(), &args.namespace);
    api.create(&PostParams::default(), &backup)
        .await
        .map_err(|source| match &source {
            kube::Error::Api(response) if response.reason == "AlreadyExists" => {
                BackupCliError::Exists {
                    namespace: args.namespace.clone(),
                    name: backup_name.clone(),
                }
            }
            _ => BackupCliError::Api {
                what: format!("create Backup {}/{backup_name}", args.namespace),
                source,
            },
        })
}

/// Follows `backup` until it finishes, printing each new phase on stderr.
async fn wait(
    client: &kube::Client,
    args: &CreateArgs,
    backup: Backup,
) -> Result<Backup, BackupCliError> {
    let name = kube::ResourceExt::name_any(&backup);
    let api: Api<Backup> = Api::namespaced(client.clone(), &args.namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout);
    let mut shown = String::new();
    loop {
        let current = api.get(&name).await.map_err(|source| BackupCliError::Api {
            what: format!("read Backup {}/{name}", args.namespace),
            source,
        })?;
        let status = current.status.clone().unwrap_or_default();
        let phase = status.phase.clone().unwrap_or_else(|| "New".into());
        if phase != shown {
            eprintln!("Backup {}/{name}: {phase}", args.namespace);
            shown = phase.clone();
        }
        match phase.as_str() {
            "Completed" => return Ok(current),
            "Failed" => {
                return Err(BackupCliError::Failed {
                    namespace: args.namespace.clone(),
                    name,
                    reason: status.reason.unwrap_or_default(),
                    message: status.message.unwrap_or_default(),
                });
            }
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(BackupCliError::Timeout {
                namespace: args.namespace.clone(),
                name,
                seconds: args.timeout,
                phase,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
