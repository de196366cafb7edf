//! Evaluating a policy over the signatures found for a digest: pure (the
//! signatures and the time are given), so every rule can be tested
//! without a registry.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::Serialize;

use super::VerificationPolicy;
use super::crypto::{self, PublicKey};
use super::error::{RuleFailure, SignatureError, SignatureNotVerified};
use super::found::{Format, FoundSignature};
use super::payload::{self, Claims};
use super::policy::{Leaf, LeafCheck, Prepared, PreparedRule, SubjectMatch};

/// Who made a signature that satisfied a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Signer {
    /// A key: `sha256:<hex>` of its SubjectPublicKeyInfo DER.
    Key {
        /// `sha256:<hex>` of the public key's DER.
        fingerprint: String,
        /// The rule's name for it, when given.
        #[serde(skip_serializing_if = "Option::is_none")]
        name: Option<String>,
    },
    /// A certificate identity.
    Identity {
        /// The OIDC issuer the certificate names.
        issuer: String,
        /// The subject (email or URI) that matched.
        subject: String,
    },
}

impl std::fmt::Display for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signer::Key {
                fingerprint,
                name: Some(name),
            } => write!(f, "key {fingerprint} ({name})"),
            Signer::Key { fingerprint, .. } => write!(f, "key {fingerprint}"),
            Signer::Identity { issuer, subject } => write!(f, "{subject} (issuer {issuer})"),
        }
    }
}

/// A signer rule and the signature that satisfied it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleMatch {
    /// The rule, as failures name it.
    pub rule: String,
    /// Who signed.
    pub signer: Signer,
    /// Where the signature was.
    pub format: Format,
    /// Which signature it was.
    pub origin: String,
}

/// The policy is satisfied for this digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verified {
    /// The reference as given.
    pub reference: String,
    /// The manifest digest the signatures name.
    pub digest: String,
    /// The signer of the first satisfied rule.
    pub signer: Signer,
    /// The format of that signature.
    pub format: Format,
    /// Every satisfied signer rule, in policy order.
    pub matches: Vec<RuleMatch>,
}

/// Evaluates `policy` over `signatures` of manifest `digest` at `now`.
///
/// # Guarantees
/// `Ok` only when every top-level rule is satisfied; a signer rule is
/// satisfied by a signature whose payload names `digest`, that verifies
/// with the rule's key (or with a certificate chaining to the rule's trust
/// root at `now`, for code signing, naming the rule's issuer and subject),
/// and whose signed annotations include the rule's.
///
/// # Errors
/// [`SignatureError::Policy`] for an unusable policy,
/// [`SignatureError::NotVerified`] naming every failed rule otherwise.
pub fn evaluate(
    policy: &VerificationPolicy,
    reference: &str,
    digest: &str,
    signatures: &[FoundSignature],
    now: SystemTime,
) -> Result<Verified, SignatureError> {
    let prepared = policy.prepare()?;
    let discovered = super::Discovered {
        signatures: signatures.to_vec(),
        notes: Vec::new(),
    };
    evaluate_prepared(&prepared, reference, digest, &discovered, now)
        .map_err(SignatureError::NotVerified)
}

/// `sha256:<hex>` of the DER of the PEM public key `pem` (what
/// [`Signer::Key`] reports).
///
/// # Errors
/// What is wrong with the PEM, as text.
pub fn key_fingerprint(pem: &str) -> Result<String, String> {
    crypto::parse_public_key(pem.as_bytes()).map(|k| k.fingerprint())
}

/// [`evaluate`] with the policy prepared, and discovery's notes (things
/// found but unreadable) added to the reasons.
pub(crate) fn evaluate_prepared(
    prepared: &Prepared,
    reference: &str,
    digest: &str,
    discovered: &super::Discovered,
    now: SystemTime,
) -> Result<Verified, SignatureNotVerified> {
    let signatures: Vec<(&FoundSignature, Result<Claims, String>)> = discovered
        .signatures
        .iter()
        .map(|s| (s, payload::claims(&s.envelope, digest)))
        .collect();
    let context = Context {
        signatures: &signatures,
        notes: &discovered.notes,
        now,
    };
    let mut matches = Vec::new();
    let mut failures = Vec::new();
    for rule in &prepared.rules {
        match rule {
            PreparedRule::One(leaf) => match context.leaf(leaf) {
                Ok(m) => matches.push(m),
                Err(f) => failures.push(f),
            },
            PreparedRule::AllOf(leaves) => {
                for leaf in leaves {
                    match context.leaf(leaf) {
                        Ok(m) => matches.push(m),
                        Err(f) => failures.push(f),
                    }
                }
            }
            PreparedRule::AnyOf { minimum, rules } => {
                let (ok, failed): (Vec<_>, Vec<_>) = rules
                    .iter()
                    .map(|l| context.leaf(l))
                    .partition(Result::is_ok);
                if ok.len() >= *minimum {
                    matches.extend(ok.into_iter().filter_map(Result::ok));
                } else {
                    let path = rules
                        .first()
                        .and_then(|l| l.label.split(".anyOf").next())
                        .unwrap_or("rules");
                    let reasons: Vec<String> = failed
                        .into_iter()
                        .filter_map(Result::err)
                        .map(|f| format!("{}: {}", f.rule, f.reason))
                        .collect();
                    failures.push(RuleFailure {
                        rule: format!("{path}.anyOf (minimumMatches {minimum})"),
                        reason: format!(
                            "{} of {} rules matched, {minimum} needed; {}",
                            ok.len(),
                            rules.len(),
                            reasons.join("; ")
                        ),
                    });
                }
            }
        }
    }
    if failures.is_empty()
        && let Some(first) = matches.first()
    {
        return Ok(Verified {
            reference: reference.to_string(),
            digest: digest.to_string(),
            signer: first.signer.clone(),
            format: first.format,
            matches,
        });
    }
    Err(SignatureNotVerified {
        reference: reference.to_string(),
        reference_base: base_of(reference),
        digest: digest.to_string(),
        signatures: discovered.signatures.len(),
        failures,
    })
}

/// `REGISTRY/REPOSITORY` of a reference (tag and digest cut).
fn base_of(reference: &str) -> String {
    let without_digest = reference.split('@').next().unwrap_or(reference);
    match without_digest.rsplit_once(':') {
        Some((base, tag)) if !tag.contains('/') => base.to_string(),
        _ => without_digest.to_string(),
    }
}

struct Context<'a> {
    signatures: &'a [(&'a FoundSignature, Result<Claims, String>)],
    notes: &'a [String],
    now: SystemTime,
}

/// How much of one rule's reasons is kept (a registry may hold many
/// signatures; the message stays readable).
const MAX_REASON_CHARS: usize = 2000;

impl Context<'_> {
    /// The first signature satisfying `leaf`, or why none does.
    fn leaf(&self, leaf: &Leaf) -> Result<RuleMatch, RuleFailure> {
        let mut reasons = Vec::new();
        for (signature, claims) in self.signatures {
            let outcome = claims
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|claims| self.check(leaf, signature, claims));
            match outcome {
                Ok(signer) => {
                    return Ok(RuleMatch {
                        rule: leaf.label.clone(),
                        signer,
                        format: signature.format,
                        origin: signature.origin.clone(),
                    });
                }
                Err(reason) => reasons.push(format!("{}: {reason}", signature.origin)),
            }
        }
        let mut reason = if self.signatures.is_empty() {
            "no signature of this digest was found (neither a bundle referrer nor a sha256-HEX.sig tag)".to_string()
        } else {
            format!(
                "none of the {} signature(s) satisfies it: {}",
                self.signatures.len(),
                reasons.join("; ")
            )
        };
        if !self.notes.is_empty() {
            reason.push_str(&format!(
                " (also found, unreadable: {})",
                self.notes.join("; ")
            ));
        }
        if reason.len() > MAX_REASON_CHARS {
            let cut = (0..=MAX_REASON_CHARS)
                .rev()
                .find(|i| reason.is_char_boundary(*i))
                .unwrap_or(0);
            reason.truncate(cut);
            reason.push('…');
        }
        Err(RuleFailure {
            rule: leaf.label.clone(),
            reason,
        })
    }

    /// Whether `signature` satisfies `leaf`.
    fn check(
        &self,
        leaf: &Leaf,
        signature: &FoundSignature,
        claims: &Claims,
    ) -> Result<Signer, String> {
        let signer = match &leaf.check {
            LeafCheck::Key(key) => {
                key.verify(&claims.signed, &signature.signature)?;
                Signer::Key {
                    fingerprint: key.fingerprint(),
                    name: leaf.name.clone(),
                }
            }
            LeafCheck::Certificate {
                issuer,
                subject,
                roots,
            } => self.check_certificate(signature, claims, issuer, subject, roots)?,
        };
        check_annotations(&leaf.annotations, &claims.annotations)?;
        Ok(signer)
    }

    fn check_certificate(
        &self,
        signature: &FoundSignature,
        claims: &Claims,
        issuer: &str,
        subject: &SubjectMatch,
        roots: &[Vec<u8>],
    ) -> Result<Signer, String> {
        let Some((leaf, chain)) = signature.certificates.split_first() else {
            return Err("it carries no certificate (signed with a bare key)".into());
        };
        let identity = crypto::cert_identity(leaf)?;
        crypto::verify_chain(leaf, chain, roots, self.now)?;
        if !identity.code_signing {
            return Err(
                "its certificate is not for code signing (no extended key usage 1.3.6.1.5.5.7.3.3)"
                    .into(),
            );
        }
        let found_issuer = identity.issuer.as_deref().unwrap_or_default();
        if found_issuer != issuer {
            return Err(match &identity.issuer {
                Some(other) => format!("its certificate's issuer is {other:?}, not {issuer:?}"),
                None => "its certificate names no OIDC issuer (extension 1.3.6.1.4.1.57264.1.8)"
                    .to_string(),
            });
        }
        let matched = identity.subjects.iter().find(|s| match subject {
            SubjectMatch::Exact(want) => *s == want,
            SubjectMatch::Prefix(prefix) => s.starts_with(prefix.as_str()),
        });
        let Some(matched) = matched else {
            return Err(format!(
                "its certificate's subject(s) {:?} do not match",
                identity.subjects
            ));
        };
        verify_with(&identity.key, claims, signature)?;
        Ok(Signer::Identity {
            issuer: issuer.to_string(),
            subject: matched.clone(),
        })
    }
}

fn verify_with(key: &PublicKey, claims: &Claims, signature: &FoundSignature) -> Result<(), String> {
    key.verify(&claims.signed, &signature.signature)
        .map_err(|_| "the signature does not verify with its certificate's key".to_string())
}

fn check_annotations(
    wanted: &BTreeMap<String, String>,
    signed: &BTreeMap<String, String>,
) -> Result<(), String> {
    let missing: Vec<String> = wanted
        .iter()
        .filter(|(k, v)| signed.get(*k) != Some(*v))
        .map(|(k, v)| match signed.get(k) {
            Some(other) => format!("{k}={v:?} (signed: {other:?})"),
            None => format!("{k}={v:?} (absent)"),
        })
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "it verifies, but its signed annotations lack {}",
            missing.join(", ")
        ))
    }
}

#[cfg(test)]
#[path = "evaluate_tests.rs"]
mod tests;
