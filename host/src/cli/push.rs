//! `wasm-operator plugin push FILE.wasm REGISTRY/REPO:TAG`: publishes a
//! plugin component in the CNCF Wasm OCI layout and prints its digest.

use std::io::Read as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};

use super::CliError;
use crate::oci::{self, DockerConfig, OciError, PushOptions, PushStep};

/// Arguments of `wasm-operator plugin push`.
#[derive(Debug, Args)]
pub struct PushArgs {
    /// The plugin component (.wasm).
    #[arg(value_name = "FILE.wasm")]
    pub file: PathBuf,
    /// Where to publish it: REGISTRY/REPOSITORY:TAG.
    #[arg(value_name = "REGISTRY/REPO:TAG")]
    pub reference: String,
    /// Use plain HTTP for this registry (loopback registries always do).
    #[arg(long)]
    pub insecure: bool,
    /// Registry user name; the password is read from stdin.
    #[arg(long, requires = "password_stdin", conflicts_with = "docker_config")]
    pub username: Option<String>,
    /// Read the password for --username from stdin.
    #[arg(long, requires = "username")]
    pub password_stdin: bool,
    /// A docker config.json / dockerconfigjson file holding the credentials.
    #[arg(long, value_name = "PATH")]
    pub docker_config: Option<PathBuf>,
    /// Sign the pushed digest with this cosign private key (password in
    /// COSIGN_PASSWORD), as `cosign sign --key` does (tag-based format).
    #[arg(long, value_name = "KEY")]
    pub sign: Option<PathBuf>,
}

/// Why `plugin push` failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The component file cannot be read: missing, unreadable, not a
    /// regular file, or larger than a component can be.
    #[error("{source}; check the path")]
    Read {
        /// The component file.
        path: PathBuf,
        /// Why it cannot be read.
        #[source]
        source: crate::wasmplugin::source::FileError,
    },
    /// The `--docker-config` file cannot be read.
    #[error("cannot read the docker config {}: {source}", path.display())]
    DockerConfig {
        /// The `--docker-config` path.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// `--password-stdin` was given but stdin cannot be read.
    #[error("cannot read the password from stdin: {0}")]
    Password(#[source] std::io::Error),
    /// The credentials are unusable or the registry refused the push.
    #[error("cannot push {}: {source}", file.display())]
    Push {
        /// The component file.
        file: PathBuf,
        /// What went wrong with the registry or the credentials.
        #[source]
        source: OciError,
    },
}

/// Runs `wasm-operator plugin push`: the OCI manifest digest goes to
/// stdout (for scripts: `DIGEST=$(wasm-operator plugin push …)`, then
/// `REF@$DIGEST`), everything else, the component digest included, to
/// stderr.
pub async fn push(args: PushArgs) -> Result<(), CliError> {
    let bytes = crate::wasmplugin::source::read_plugin_file(&args.file)
        .await
        .map_err(|source| PushError::Read {
            path: args.file.clone(),
            source,
        })?;
    let signing_key = match &args.sign {
        Some(path) => Some(super::verify::load_signing_key(path)?),
        None => None,
    };
    let options = PushOptions {
        auth: credentials(&args)?,
        insecure: args.insecure,
    };
    let bar = ProgressBar::new(bytes.len() as u64);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner:.cyan} {msg} [{bar:30.cyan/blue}] {bytes}/{total_bytes} ({elapsed})",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    let reporter = bar.clone();
    let mut progress = move |step: PushStep| match step {
        PushStep::Inspecting => reporter.set_message("inspecting component"),
        PushStep::UploadingLayer { .. } => reporter.set_message("uploading component"),
        PushStep::LayerUploaded { bytes } => reporter.set_position(bytes),
        PushStep::UploadingConfig => reporter.set_message("uploading config"),
        PushStep::WritingManifest => reporter.set_message("writing manifest"),
    };
    match oci::push(&bytes, &args.reference, &options, &mut progress).await {
        Ok(pushed) => {
            bar.finish_and_clear();
            if let Some(key) = &signing_key {
                super::verify::sign_pushed(&pushed, key, &options).await?;
            }
            println!("{}", pushed.digest);
            eprintln!("{}", describe_pushed(&pushed));
            Ok(())
        }
        Err(source) => {
            bar.abandon_with_message("push failed");
            Err(PushError::Push {
                file: args.file.clone(),
                source,
            }
            .into())
        }
    }
}

/// What stderr says about a push: where it went and both digests, each
/// with what it is for (they differ: the manifest wraps the component).
fn describe_pushed(pushed: &oci::Pushed) -> String {
    format!(
        "pushed {} {} to {}@{}\n  OCI manifest digest: {} (what REF@sha256: and spec.source.oci.digest pin; status.ociManifestDigest)\n  component digest:    {} (plugin inspect's Digest; status.digest)",
        pushed.plugin,
        pushed.version,
        pushed.reference,
        pushed.digest,
        pushed.digest,
        pushed.layer_digest
    )
}

/// Credentials from `--username/--password-stdin` or `--docker-config`.
fn credentials(args: &PushArgs) -> Result<Option<DockerConfig>, PushError> {
    if let Some(user) = &args.username {
        let mut password = String::new();
        std::io::stdin()
            .read_to_string(&mut password)
            .map_err(PushError::Password)?;
        let registry = args
            .reference
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        return Ok(Some(DockerConfig::basic(
            &registry,
            user,
            password.trim_end_matches(['\n', '\r']),
        )));
    }
    if let Some(path) = &args.docker_config {
        let text = std::fs::read(path).map_err(|source| PushError::DockerConfig {
            path: path.clone(),
            source,
        })?;
        return DockerConfig::from_json(&text)
            .map(Some)
            .map_err(|source| PushError::Push {
                file: args.file.clone(),
                source,
            });
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::describe_pushed;

    #[test]
    fn both_digests_are_named_for_what_they_pin() {
        let text = describe_pushed(&crate::oci::Pushed {
            reference: "r/p:1".into(),
            digest: "sha256:aa".into(),
            layer_digest: "sha256:bb".into(),
            plugin: "webapp".into(),
            version: "1.0.0".into(),
        });
        assert!(
            text.starts_with("pushed webapp 1.0.0 to r/p:1@sha256:aa"),
            "{text}"
        );
        assert!(text.contains("OCI manifest digest: sha256:aa"), "{text}");
        assert!(text.contains("component digest:    sha256:bb"), "{text}");
    }
}
