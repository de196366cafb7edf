//! The verification policy (`WasmPlugin` `spec.verification`, or the
//! host-wide policy file of `run` and `plugin verify --policy`), and its
//! preparation: keys and trust roots parsed once, before any registry is
//! asked.
//!
//! # Shape
//! ```yaml
//! rules:                      # every rule must pass
//! - publicKey:
//!     name: release           # optional, for messages and the report
//!     key: |
//!       -----BEGIN PUBLIC KEY-----
//!       ...
//!     annotations:            # optional: must be in the signed payload
//!       team: platform
//! - certificate:
//!     issuer: https://accounts.example.com
//!     subject: release@example.com    # or subjectPrefix: https://ci.example.com/
//!     trustRoot: |            # PEM, the root (and intermediates) to chain to
//!       -----BEGIN CERTIFICATE-----
//!       ...
//! - anyOf:
//!     minimumMatches: 2       # default 1
//!     rules: [ {publicKey: …}, {certificate: …} ]
//! - allOf: [ {publicKey: …}, {publicKey: …} ]
//! ```
//!
//! The top-level list is a conjunction: every rule must be satisfied.
//! `allOf` and `anyOf` hold signer rules (`publicKey`, `certificate`) only,
//! one level deep: the CRD schema cannot be recursive, and Kubewarden's
//! and cosign's policies need no more. Annotations belong to a signer rule
//! (as in Kubewarden): required annotations are only meaningful on a
//! signature that rule verified, since anyone can attach an unsigned one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::crypto::{PublicKey, parse_public_key};
use super::pem;

/// Largest policy file read (1 MiB).
const MAX_POLICY_FILE_BYTES: u64 = 1 << 20;

/// Which signatures a plugin must carry. Every rule of `rules` must pass.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerificationPolicy {
    /// The rules, all of which must be satisfied (in order; every failure
    /// is reported). At least one.
    #[schemars(length(min = 1))]
    pub rules: Vec<Rule>,
}

/// One rule of a policy: a signer, or a combination of signers.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub enum Rule {
    /// A signature made with this key.
    PublicKey(KeyRule),
    /// A signature made with a certificate of this identity, chained to
    /// this trust root.
    Certificate(CertificateRule),
    /// Every one of these signer rules.
    AllOf(Vec<SignerRule>),
    /// At least `minimumMatches` of these signer rules.
    AnyOf(AnyOfRule),
}

/// A rule satisfied by one signature: inside `allOf` and `anyOf`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub enum SignerRule {
    /// A signature made with this key.
    PublicKey(KeyRule),
    /// A signature made with a certificate of this identity.
    Certificate(CertificateRule),
}

impl From<SignerRule> for Rule {
    /// The signer rule as a top-level rule (a policy of one signer).
    fn from(rule: SignerRule) -> Rule {
        match rule {
            SignerRule::PublicKey(key) => Rule::PublicKey(key),
            SignerRule::Certificate(certificate) => Rule::Certificate(certificate),
        }
    }
}

/// `publicKey`: a signature that verifies with this key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyRule {
    /// The public key, PEM (`-----BEGIN PUBLIC KEY-----`, as in cosign.pub):
    /// ECDSA P-256/P-384, Ed25519 or RSA.
    #[schemars(length(min = 1))]
    pub key: String,
    /// A name for messages and the verification report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Annotations the signed payload must carry with exactly these values
    /// (`cosign sign -a KEY=VALUE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// `certificate`: a signature made with a certificate that chains to
/// `trustRoot` and names this issuer and subject.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CertificateRule {
    /// The OIDC issuer in the certificate (Fulcio extension
    /// 1.3.6.1.4.1.57264.1.8, or the older .1.1), compared exactly.
    #[schemars(length(min = 1))]
    pub issuer: String,
    /// The subject (email or URI subject alternative name), exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// A prefix of the subject (e.g. a CI workflow URL without its ref).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject_prefix: Option<String>,
    /// The trust root, PEM: the root certificate(s), with intermediates if
    /// signatures do not carry them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_root: Option<String>,
    /// A PEM file holding the trust root, relative to the policy file. Only
    /// in a host-wide policy file, never in a WasmPlugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trust_root_file: Option<String>,
    /// A name for messages and the verification report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Annotations the signed payload must carry with exactly these values.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// `anyOf`: at least `minimumMatches` of `rules`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnyOfRule {
    /// How many of `rules` must be satisfied (default 1, at most their number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub minimum_matches: Option<u32>,
    /// The signer rules.
    #[schemars(length(min = 1))]
    pub rules: Vec<SignerRule>,
}

/// Why a policy cannot be used. Names the rule (`rules[1].anyOf.rules[0]`)
/// and what to write instead.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file cannot be read.
    #[error("cannot read the verification policy {}: {source}; check the path", path.display())]
    Read {
        /// The policy file.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The policy text does not parse.
    #[error(
        "the verification policy{origin} does not parse: {message}; expected `rules:` with publicKey, certificate, allOf or anyOf entries"
    )]
    Parse {
        /// ` PATH` when it came from a file.
        origin: String,
        /// The parser's message.
        message: String,
    },
    /// A rule is unusable.
    #[error("verification policy {rule}: {reason}")]
    Rule {
        /// Where the rule is: `rules[0].publicKey`.
        rule: String,
        /// What is wrong and what to write instead.
        reason: String,
    },
}

impl VerificationPolicy {
    /// Parses a policy from YAML or JSON text.
    ///
    /// # Errors
    /// [`PolicyError::Parse`] when the text is not a policy. The rules are
    /// checked by [`VerificationPolicy::check`], not here.
    pub fn from_yaml(text: &str) -> Result<VerificationPolicy, PolicyError> {
        parse(text, "")
    }

    /// Reads a host-wide policy file (YAML or JSON, at most 1 MiB): every
    /// `trustRootFile` is read (relative to the file's directory) into
    /// `trustRoot`, then the policy is [checked](Self::check).
    ///
    /// # Errors
    /// [`PolicyError::Read`] for an unreadable file (policy or trust root),
    /// [`PolicyError::Parse`] or [`PolicyError::Rule`] for an unusable
    /// policy.
    pub fn from_file(path: &Path) -> Result<VerificationPolicy, PolicyError> {
        let text = read_bounded(path)?;
        let mut policy = parse(&text, &format!(" {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for rule in policy.certificate_rules_mut() {
            if let Some(file) = rule.trust_root_file.take() {
                let file = base.join(file);
                rule.trust_root = Some(read_bounded(&file)?);
            }
        }
        policy.check()?;
        Ok(policy)
    }

    /// Checks every rule: keys and trust roots parse, each certificate rule
    /// has exactly one of `subject`/`subjectPrefix`, `minimumMatches` is
    /// reachable, and no `trustRootFile` is left (a WasmPlugin cannot make
    /// the host read its files).
    ///
    /// # Errors
    /// [`PolicyError::Rule`] naming the first unusable rule.
    pub fn check(&self) -> Result<(), PolicyError> {
        self.prepare().map(|_| ())
    }

    /// The policy with keys and trust roots parsed.
    pub(crate) fn prepare(&self) -> Result<Prepared, PolicyError> {
        if self.rules.is_empty() {
            return Err(PolicyError::Rule {
                rule: "rules".into(),
                reason: "the list is empty; a policy must name at least one signer (an empty policy would accept anything)".into(),
            });
        }
        let mut rules = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            let path = format!("rules[{i}]");
            rules.push(match rule {
                Rule::PublicKey(key) => PreparedRule::One(prepare_key(&path, key)?),
                Rule::Certificate(cert) => PreparedRule::One(prepare_cert(&path, cert)?),
                Rule::AllOf(list) => {
                    PreparedRule::AllOf(prepare_list(&format!("{path}.allOf"), list)?)
                }
                Rule::AnyOf(any) => {
                    let list = prepare_list(&format!("{path}.anyOf.rules"), &any.rules)?;
                    let minimum = any.minimum_matches.unwrap_or(1) as usize;
                    if minimum == 0 || minimum > list.len() {
                        return Err(PolicyError::Rule {
                            rule: format!("{path}.anyOf.minimumMatches"),
                            reason: format!(
                                "{minimum} cannot be met by {} rule(s); write 1 to {}",
                                list.len(),
                                list.len()
                            ),
                        });
                    }
                    PreparedRule::AnyOf {
                        minimum,
                        rules: list,
                    }
                }
            });
        }
        Ok(Prepared { rules })
    }

    fn certificate_rules_mut(&mut self) -> Vec<&mut CertificateRule> {
        let mut out = Vec::new();
        for rule in &mut self.rules {
            match rule {
                Rule::Certificate(c) => out.push(c),
                Rule::PublicKey(_) => {}
                Rule::AllOf(list) | Rule::AnyOf(AnyOfRule { rules: list, .. }) => {
                    for signer in list {
                        if let SignerRule::Certificate(c) = signer {
                            out.push(c);
                        }
                    }
                }
            }
        }
        out
    }
}

/// YAML (or JSON) through a JSON value: serde_yaml 0.9 reads enums only
/// as `!tags`, while the policy's rules are one-key maps, as in the CRD.
fn parse(text: &str, origin: &str) -> Result<VerificationPolicy, PolicyError> {
    let error = |message: String| PolicyError::Parse {
        origin: origin.to_string(),
        message,
    };
    let value: serde_json::Value = serde_yaml::from_str(text).map_err(|e| error(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| error(e.to_string()))
}

fn read_bounded(path: &Path) -> Result<String, PolicyError> {
    use std::io::Read as _;
    let read_error = |source| PolicyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut text = String::new();
    file.take(MAX_POLICY_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_POLICY_FILE_BYTES {
        return Err(read_error(std::io::Error::other(format!(
            "larger than {MAX_POLICY_FILE_BYTES} bytes"
        ))));
    }
    Ok(text)
}

/// A policy ready to evaluate.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) rules: Vec<PreparedRule>,
}

/// A top-level rule, prepared.
#[derive(Debug, Clone)]
pub(crate) enum PreparedRule {
    One(Leaf),
    AllOf(Vec<Leaf>),
    AnyOf { minimum: usize, rules: Vec<Leaf> },
}

/// A signer rule, prepared.
#[derive(Debug, Clone)]
pub(crate) struct Leaf {
    /// `rules[0].publicKey "release" (sha256:…)`: what messages call it.
    pub(crate) label: String,
    pub(crate) check: LeafCheck,
    pub(crate) annotations: BTreeMap<String, String>,
    pub(crate) name: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum LeafCheck {
    Key(PublicKey),
    Certificate {
        issuer: String,
        subject: SubjectMatch,
        /// DER certificates of the trust root.
        roots: Vec<Vec<u8>>,
    },
}

#[derive(Debug, Clone)]
pub(crate) enum SubjectMatch {
    Exact(String),
    Prefix(String),
}

fn prepare_list(path: &str, list: &[SignerRule]) -> Result<Vec<Leaf>, PolicyError> {
    if list.is_empty() {
        return Err(PolicyError::Rule {
            rule: path.to_string(),
            reason: "the list is empty; name at least one publicKey or certificate".into(),
        });
    }
    list.iter()
        .enumerate()
        .map(|(i, signer)| {
            let path = format!("{path}[{i}]");
            match signer {
                SignerRule::PublicKey(key) => prepare_key(&path, key),
                SignerRule::Certificate(cert) => prepare_cert(&path, cert),
            }
        })
        .collect()
}

fn prepare_key(path: &str, rule: &KeyRule) -> Result<Leaf, PolicyError> {
    let rule_path = format!("{path}.publicKey");
    let key = parse_public_key(rule.key.as_bytes()).map_err(|reason| PolicyError::Rule {
        rule: rule_path.clone(),
        reason: format!("{reason}; paste the PEM of cosign.pub (-----BEGIN PUBLIC KEY-----)"),
    })?;
    let name = rule
        .name
        .as_ref()
        .map(|n| format!(" {n:?}"))
        .unwrap_or_default();
    Ok(Leaf {
        label: format!("{rule_path}{name} ({})", key.fingerprint()),
        check: LeafCheck::Key(key),
        annotations: rule.annotations.clone().unwrap_or_default(),
        name: rule.name.clone(),
    })
}

fn prepare_cert(path: &str, rule: &CertificateRule) -> Result<Leaf, PolicyError> {
    let rule_path = format!("{path}.certificate");
    let error = |reason: String| PolicyError::Rule {
        rule: rule_path.clone(),
        reason,
    };
    let subject = match (&rule.subject, &rule.subject_prefix) {
        (Some(s), None) if !s.is_empty() => SubjectMatch::Exact(s.clone()),
        (None, Some(p)) if !p.is_empty() => SubjectMatch::Prefix(p.clone()),
        _ => {
            return Err(error(
                "write exactly one of subject (exact) or subjectPrefix, not empty".into(),
            ));
        }
    };
    if rule.issuer.is_empty() {
        return Err(error(
            "issuer is empty; write the OIDC issuer URL the certificate names".into(),
        ));
    }
    if rule.trust_root_file.is_some() {
        return Err(error(
            "trustRootFile is only read from a host-wide policy file; inline the PEM as trustRoot"
                .into(),
        ));
    }
    let Some(trust_root) = &rule.trust_root else {
        return Err(error(
            "trustRoot is missing; give the PEM of the CA the certificates chain to".into(),
        ));
    };
    let roots = pem::certificates(trust_root.as_bytes())
        .map_err(|reason| error(format!("trustRoot: {reason}")))?;
    if roots.is_empty() {
        return Err(error(
            "trustRoot holds no -----BEGIN CERTIFICATE----- block".into(),
        ));
    }
    for (i, root) in roots.iter().enumerate() {
        x509_parser::parse_x509_certificate(root)
            .map_err(|e| error(format!("trustRoot certificate {i} does not parse: {e}")))?;
    }
    let shown = match &subject {
        SubjectMatch::Exact(s) => format!("subject {s:?}"),
        SubjectMatch::Prefix(p) => format!("subject prefix {p:?}"),
    };
    let name = rule
        .name
        .as_ref()
        .map(|n| format!(" {n:?}"))
        .unwrap_or_default();
    Ok(Leaf {
        label: format!("{rule_path}{name} (issuer {:?}, {shown})", rule.issuer),
        check: LeafCheck::Certificate {
            issuer: rule.issuer.clone(),
            subject,
            roots,
        },
        annotations: rule.annotations.clone().unwrap_or_default(),
        name: rule.name.clone(),
    })
}
