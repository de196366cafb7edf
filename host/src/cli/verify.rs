//! `wasm-operator plugin verify REF --policy FILE`: checks a plugin's
//! signatures in its registry against a verification policy, as a host
//! would before loading it; and the `--sign KEY` step of `plugin push`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use super::{CliError, OutputFormat};
use crate::oci::signature::{self, SignatureError, SigningKey, VerificationPolicy, Verified};
use crate::oci::{self, DockerConfig, OciError, PushOptions, Pushed};

/// Arguments of `wasm-operator plugin verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// The plugin: REGISTRY/REPO:TAG (the digest the tag points to now is
    /// verified) or REGISTRY/REPO@sha256:HEX.
    #[arg(value_name = "REGISTRY/REPO[:TAG|@DIGEST]")]
    pub reference: String,
    /// The verification policy, YAML or JSON (`rules:` of publicKey,
    /// certificate, allOf, anyOf; see docs for the format).
    #[arg(long, value_name = "FILE")]
    pub policy: PathBuf,
    /// A docker config.json / dockerconfigjson file holding the credentials.
    #[arg(long, value_name = "PATH")]
    pub docker_config: Option<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Why `plugin verify` (or `plugin push --sign`) failed.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The signatures do not satisfy the policy, the policy is unusable,
    /// or the registry could not be read.
    #[error(transparent)]
    Signature(#[from] SignatureError),
    /// The digest could not be resolved, or the credentials are unusable.
    #[error(transparent)]
    Registry(#[from] OciError),
    /// The `--docker-config` file cannot be read.
    #[error("cannot read the docker config {}: {source}", path.display())]
    DockerConfig {
        /// The `--docker-config` path.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The report could not be rendered.
    #[error("cannot render the verification report: {0}")]
    Render(String),
}

impl From<VerifyError> for CliError {
    fn from(error: VerifyError) -> Self {
        CliError::Verify(Box::new(error))
    }
}

/// The report `-o json|yaml` prints.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report<'a> {
    verified: bool,
    reference: &'a str,
    digest: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Verified>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failures: Vec<signature::RuleFailure>,
}

/// Runs `wasm-operator plugin verify`: prints the digest, the format and
/// the signer(s); a refusal is printed too (`-o json|yaml`) and returned
/// as an error, so the exit status is 1.
pub async fn verify(args: VerifyArgs) -> Result<(), CliError> {
    let policy = VerificationPolicy::from_file(&args.policy)
        .map_err(SignatureError::from)
        .map_err(VerifyError::from)?;
    let secret = read_docker_config(args.docker_config.as_ref())?;
    let digest = match args.reference.split_once('@') {
        Some((_, digest)) => digest.to_string(),
        None => oci::resolve_digest(&args.reference, secret.as_ref())
            .await
            .map_err(VerifyError::from)?,
    };
    let outcome = signature::verify(&args.reference, &digest, secret.as_ref(), &policy).await;
    let (verified, failures) = match &outcome {
        Ok(verified) => (Some(verified), Vec::new()),
        Err(SignatureError::NotVerified(refused)) => (None, refused.failures.clone()),
        Err(_) => (None, Vec::new()),
    };
    let report = Report {
        verified: verified.is_some(),
        reference: &args.reference,
        digest: &digest,
        result: verified,
        failures,
    };
    let printable = outcome.is_ok() || matches!(outcome, Err(SignatureError::NotVerified(_)));
    match args.output {
        OutputFormat::Json if printable => println!(
            "{}",
            serde_json::to_string_pretty(&report)
                .map_err(|e| VerifyError::Render(e.to_string()))?
        ),
        OutputFormat::Yaml if printable => print!(
            "{}",
            serde_yaml::to_string(&report).map_err(|e| VerifyError::Render(e.to_string()))?
        ),
        OutputFormat::Text => {
            if let Some(verified) = verified {
                print!("{}", render_text(verified));
            }
        }
        _ => {}
    }
    outcome.map(|_| ()).map_err(|e| VerifyError::from(e).into())
}

/// The text report of a verified plugin.
fn render_text(verified: &Verified) -> String {
    let mut out = format!(
        "verified {}@{}\n  format: {}\n  signer: {}\n",
        verified
            .reference
            .split('@')
            .next()
            .unwrap_or(&verified.reference),
        verified.digest,
        verified.format,
        verified.signer
    );
    for m in &verified.matches {
        out.push_str(&format!(
            "  rule {}: {} ({}, {})\n",
            m.rule, m.signer, m.format, m.origin
        ));
    }
    out
}

fn read_docker_config(path: Option<&PathBuf>) -> Result<Option<DockerConfig>, VerifyError> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read(path).map_err(|source| VerifyError::DockerConfig {
        path: path.clone(),
        source,
    })?;
    Ok(Some(DockerConfig::from_json(&text)?))
}

/// `plugin push --sign KEY`: the key, read (and its password checked)
/// before anything is pushed.
pub(crate) fn load_signing_key(path: &std::path::Path) -> Result<SigningKey, CliError> {
    SigningKey::from_file(path).map_err(|e| VerifyError::from(e).into())
}

/// `plugin push --sign KEY`: signs the pushed manifest digest and says so
/// on stderr (stdout stays the digest alone).
pub(crate) async fn sign_pushed(
    pushed: &Pushed,
    key: &SigningKey,
    options: &PushOptions,
) -> Result<(), CliError> {
    let signed = signature::sign(
        &pushed.reference,
        &pushed.digest,
        key,
        &BTreeMap::new(),
        options,
    )
    .await
    .map_err(VerifyError::from)?;
    eprintln!(
        "signed {} with key {} (cosign format: {})",
        signed.digest, signed.fingerprint, signed.signature_reference
    );
    Ok(())
}
