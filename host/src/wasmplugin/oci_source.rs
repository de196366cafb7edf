//! The OCI source of a WasmPlugin: reading the pull secret, pulling and
//! resolving a tag's digest for polling, on top of [`crate::oci`].

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::spec::{OciSpec, SecretRef};
use crate::contract::Reason;
use crate::oci::signature::{SignatureError, SignerRule, VerificationPolicy, Verified};
use crate::oci::{self, DockerConfig, OciError, OciSource};

/// The key of a `kubernetes.io/dockerconfigjson` Secret.
const DOCKER_CONFIG_KEY: &str = ".dockerconfigjson";

/// A pulled component.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The component.
    pub bytes: Vec<u8>,
    /// The manifest digest pulled.
    pub digest: String,
    /// Its verified signature, when a verification policy applied.
    pub signature: Option<Verified>,
}

/// Why an OCI source could not provide a component.
#[derive(Debug, thiserror::Error)]
pub enum OciSourceError {
    /// The pull secret does not exist or cannot be read.
    #[error(
        "cannot read pull secret {namespace}/{name}: {message}; create a kubernetes.io/dockerconfigjson Secret (`kubectl create secret docker-registry {name} -n {namespace} ...`) or fix spec.source.oci.pullSecret"
    )]
    Secret {
        namespace: String,
        name: String,
        message: String,
    },
    /// The registry operation failed.
    #[error(transparent)]
    Registry(#[from] OciError),
    /// The manifest's signatures do not satisfy the verification policy
    /// (or the policy, or the registry while reading them, failed).
    #[error(transparent)]
    Signature(#[from] SignatureError),
}

impl OciSourceError {
    /// The condition/event reason.
    pub fn reason(&self) -> &'static str {
        match self {
            OciSourceError::Secret { .. } => Reason::InvalidPullSecret.as_str(),
            OciSourceError::Signature(error) => match error {
                SignatureError::Registry(error) => registry_reason(error),
                SignatureError::Policy(_) => Reason::InvalidSpec.as_str(),
                _ => Reason::SignatureNotVerified.as_str(),
            },
            OciSourceError::Registry(error) => registry_reason(error),
        }
    }
}

/// The reason of a registry failure.
fn registry_reason(error: &OciError) -> &'static str {
    match error {
        OciError::DigestMismatch { .. }
        | OciError::LayerDigestMismatch { .. }
        | OciError::BlobTooLarge { .. } => Reason::DigestMismatch.as_str(),
        OciError::Unreachable { .. } => Reason::RegistryUnreachable.as_str(),
        OciError::NotFound { .. } => Reason::SourceNotFound.as_str(),
        OciError::Unauthorized { .. } => Reason::RegistryUnauthorized.as_str(),
        OciError::NotWasm { .. }
        | OciError::InvalidComponent { .. }
        | OciError::ManifestTooLarge { .. } => Reason::InvalidComponent.as_str(),
        OciError::InvalidReference { .. } | OciError::InvalidDigest { .. } => {
            Reason::InvalidSpec.as_str()
        }
        OciError::InvalidDockerConfig(_) => Reason::InvalidPullSecret.as_str(),
        _ => Reason::PullFailed.as_str(),
    }
}

/// Pulls the component `spec` names (the pin, if any, is enforced) and,
/// under `verification`, verifies the signatures of exactly the manifest
/// digest pulled: nothing unverified is returned.
///
/// # Errors
/// [`OciSourceError::Signature`] when the signatures do not satisfy
/// `verification`; the registry's and the pull secret's failures otherwise.
pub async fn pull(
    client: &kube::Client,
    spec: &OciSpec,
    verification: Option<&VerificationPolicy>,
) -> Result<Pulled, OciSourceError> {
    let pull_secret = pull_secret(client, spec).await?;
    let pulled = oci::pull(&OciSource {
        reference: spec.reference.clone(),
        digest: spec.digest.clone(),
        pull_secret: pull_secret.clone(),
    })
    .await?;
    let signature = match verification {
        Some(policy) => Some(
            oci::signature::verify(
                &spec.reference,
                &pulled.digest,
                pull_secret.as_ref(),
                policy,
            )
            .await?,
        ),
        None => None,
    };
    Ok(Pulled {
        bytes: pulled.bytes,
        digest: pulled.digest,
        signature,
    })
}

/// Verifies that manifest `digest` of `spec`'s repository carries a
/// signature satisfying `rule` alone (a canary's `requireSigner`).
///
/// # Errors
/// [`OciSourceError::Signature`] naming the rule when it is not so signed;
/// the pull secret's and the registry's failures otherwise.
pub async fn signed_by(
    client: &kube::Client,
    spec: &OciSpec,
    digest: &str,
    rule: &SignerRule,
) -> Result<Verified, OciSourceError> {
    let pull_secret = pull_secret(client, spec).await?;
    let policy = VerificationPolicy {
        rules: vec![rule.clone().into()],
    };
    Ok(oci::signature::verify(&spec.reference, digest, pull_secret.as_ref(), &policy).await?)
}

/// The manifest digest the tag points to now (for polling).
pub async fn resolve(client: &kube::Client, spec: &OciSpec) -> Result<String, OciSourceError> {
    let pull_secret = pull_secret(client, spec).await?;
    Ok(oci::resolve_digest(&spec.reference, pull_secret.as_ref()).await?)
}

/// The docker config of `spec`'s pull secret, if it names one.
async fn pull_secret(
    client: &kube::Client,
    spec: &OciSpec,
) -> Result<Option<DockerConfig>, OciSourceError> {
    match &spec.pull_secret {
        Some(secret) => Ok(Some(read_secret(client, secret).await?)),
        None => Ok(None),
    }
}

async fn read_secret(
    client: &kube::Client,
    secret: &SecretRef,
) -> Result<DockerConfig, OciSourceError> {
    let error = |message: String| OciSourceError::Secret {
        namespace: secret.namespace.clone(),
        name: secret.name.clone(),
        message,
    };
    let api: Api<Secret> = Api::namespaced(client.clone(), &secret.namespace);
    let found = api
        .get_opt(&secret.name)
        .await
        .map_err(|e| error(e.to_string()))?
        .ok_or_else(|| error("it does not exist".to_string()))?;
    let data = found
        .data
        .as_ref()
        .and_then(|d| d.get(DOCKER_CONFIG_KEY))
        .ok_or_else(|| error(format!("it has no {DOCKER_CONFIG_KEY} key")))?;
    DockerConfig::from_json(&data.0).map_err(|e| error(e.to_string()))
}
