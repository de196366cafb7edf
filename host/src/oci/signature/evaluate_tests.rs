//! Policy evaluation over hand-made signatures: keys from ring, a test CA
//! and signing certificates from rcgen, payloads as cosign writes them.

use std::time::{Duration, SystemTime};

use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair};

use super::super::found::Envelope;
use super::super::payload::{IN_TOTO_PAYLOAD_TYPE, pae};
use super::super::pem;
use super::super::{AnyOfRule, CertificateRule, KeyRule, Rule, SignerRule};
use super::*;
use rcgen::PublicKeyData as _;

const ISSUER: &str = "https://issuer.example.com";
const SUBJECT: &str = "release@example.com";

fn digest() -> String {
    format!("sha256:{}", "a".repeat(64))
}

struct Key {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
}

impl Key {
    fn new() -> Key {
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Key {
            pair,
            pkcs8: pkcs8.as_ref().to_vec(),
        }
    }

    fn pem(&self) -> String {
        let spki = rcgen::KeyPair::try_from(self.pkcs8.as_slice())
            .unwrap()
            .subject_public_key_info();
        pem::encode("PUBLIC KEY", &spki)
    }

    fn sign(&self, message: &[u8]) -> Vec<u8> {
        let rng = ring::rand::SystemRandom::new();
        self.pair.sign(&rng, message).unwrap().as_ref().to_vec()
    }

    /// A tag-based signature of `digest` with signed `annotations`.
    fn tag(&self, digest: &str, annotations: &[(&str, &str)]) -> FoundSignature {
        let optional: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
            .collect();
        let payload = serde_json::to_vec(&serde_json::json!({
            "critical": {"identity": {"docker-reference": "r:1/p"}, "image": {"docker-manifest-digest": digest}, "type": "cosign container image signature"},
            "optional": optional,
        }))
        .unwrap();
        FoundSignature {
            format: Format::Tag,
            signature: self.sign(&payload),
            envelope: Envelope::SimpleSigning { payload },
            certificates: Vec::new(),
            origin: "tag layer 0".into(),
        }
    }

    /// A bundle (DSSE) signature of `digest`.
    fn bundle(&self, digest: &str) -> FoundSignature {
        let hex = digest.trim_start_matches("sha256:");
        let payload = format!(
            r#"{{"_type":"https://in-toto.io/Statement/v1","subject":[{{"digest":{{"sha256":"{hex}"}}}}],"predicateType":"https://sigstore.dev/cosign/sign/v1","predicate":{{}}}}"#
        )
        .into_bytes();
        FoundSignature {
            format: Format::Bundle,
            signature: self.sign(&pae(IN_TOTO_PAYLOAD_TYPE, &payload)),
            envelope: Envelope::Dsse {
                payload_type: IN_TOTO_PAYLOAD_TYPE.into(),
                payload,
            },
            certificates: Vec::new(),
            origin: "referrer sha256:b".into(),
        }
    }
}

fn key_rule(key: &Key) -> KeyRule {
    KeyRule {
        key: key.pem(),
        name: None,
        annotations: None,
    }
}

fn policy(rules: Vec<Rule>) -> VerificationPolicy {
    VerificationPolicy { rules }
}

fn run(
    policy: &VerificationPolicy,
    signatures: &[FoundSignature],
) -> Result<Verified, SignatureError> {
    evaluate(
        policy,
        "r:1/p:1.0",
        &digest(),
        signatures,
        SystemTime::now(),
    )
}

fn refusal(result: Result<Verified, SignatureError>) -> SignatureNotVerified {
    match result {
        Err(SignatureError::NotVerified(refused)) => refused,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_key_rule_accepts_tag_and_bundle_signatures_and_names_the_key() {
    let key = Key::new();
    let policy = policy(vec![Rule::PublicKey(key_rule(&key))]);
    let fingerprint = key_fingerprint(&key.pem()).unwrap();
    for signature in [key.tag(&digest(), &[]), key.bundle(&digest())] {
        let format = signature.format;
        let verified = run(&policy, &[signature]).unwrap();
        assert_eq!(verified.digest, digest());
        assert_eq!(verified.format, format);
        assert_eq!(
            verified.signer,
            Signer::Key {
                fingerprint: fingerprint.clone(),
                name: None
            }
        );
    }
}

#[test]
fn unsigned_other_key_and_other_digest_are_refused_naming_the_rule() {
    let key = Key::new();
    let other = Key::new();
    let policy = policy(vec![Rule::PublicKey(KeyRule {
        name: Some("release".into()),
        ..key_rule(&key)
    })]);
    let refused = refusal(run(&policy, &[]));
    assert_eq!(refused.digest, digest());
    assert_eq!(refused.signatures, 0);
    assert!(
        refused.failures[0]
            .rule
            .starts_with("rules[0].publicKey \"release\""),
        "{refused:?}"
    );
    assert!(
        refused.failures[0].reason.contains("no signature"),
        "{refused:?}"
    );
    let text = refused.to_string();
    assert!(
        text.contains("r:1/p:1.0") && text.contains(&digest()),
        "{text}"
    );

    let refused = refusal(run(&policy, &[other.tag(&digest(), &[])]));
    assert!(
        refused.failures[0].reason.contains("does not verify"),
        "{refused:?}"
    );

    let elsewhere = format!("sha256:{}", "c".repeat(64));
    let refused = refusal(run(
        &policy,
        &[key.tag(&elsewhere, &[]), key.bundle(&elsewhere)],
    ));
    assert!(
        refused.failures[0].reason.contains("not sha256:aaa"),
        "{refused:?}"
    );
    assert!(
        refused.failures[0].reason.contains("no subject"),
        "{refused:?}"
    );
}

#[test]
fn a_tampered_payload_is_refused() {
    let key = Key::new();
    let mut signature = key.tag(&digest(), &[]);
    if let Envelope::SimpleSigning { payload } = &mut signature.envelope {
        payload.push(b' ');
    }
    let refused = refusal(run(
        &policy(vec![Rule::PublicKey(key_rule(&key))]),
        &[signature],
    ));
    assert!(
        refused.failures[0].reason.contains("does not verify"),
        "{refused:?}"
    );
}

#[test]
fn required_annotations_must_be_signed() {
    let key = Key::new();
    let rule = KeyRule {
        annotations: Some([("team".to_string(), "platform".to_string())].into()),
        ..key_rule(&key)
    };
    let policy = policy(vec![Rule::PublicKey(rule)]);
    assert!(run(&policy, &[key.tag(&digest(), &[("team", "platform")])]).is_ok());
    let refused = refusal(run(&policy, &[key.tag(&digest(), &[("team", "other")])]));
    assert!(
        refused.failures[0].reason.contains("team=\"platform\""),
        "{refused:?}"
    );
    let refused = refusal(run(&policy, &[key.tag(&digest(), &[])]));
    assert!(refused.failures[0].reason.contains("absent"), "{refused:?}");
}

#[test]
fn any_of_counts_matches_and_all_of_needs_every_signer() {
    let (a, b, c) = (Key::new(), Key::new(), Key::new());
    let any = |minimum| {
        policy(vec![Rule::AnyOf(AnyOfRule {
            minimum_matches: Some(minimum),
            rules: vec![
                SignerRule::PublicKey(key_rule(&a)),
                SignerRule::PublicKey(key_rule(&b)),
                SignerRule::PublicKey(key_rule(&c)),
            ],
        })])
    };
    assert!(run(&any(1), &[b.tag(&digest(), &[])]).is_ok());
    let refused = refusal(run(&any(2), &[b.tag(&digest(), &[])]));
    assert!(
        refused.failures[0]
            .rule
            .contains("rules[0].anyOf (minimumMatches 2)"),
        "{refused:?}"
    );
    assert!(
        refused.failures[0]
            .reason
            .starts_with("1 of 3 rules matched"),
        "{refused:?}"
    );
    let verified = run(&any(2), &[b.tag(&digest(), &[]), c.bundle(&digest())]).unwrap();
    assert_eq!(verified.matches.len(), 2);

    let all = policy(vec![Rule::AllOf(vec![
        SignerRule::PublicKey(key_rule(&a)),
        SignerRule::PublicKey(key_rule(&b)),
    ])]);
    let refused = refusal(run(&all, &[a.tag(&digest(), &[])]));
    assert_eq!(refused.failures.len(), 1);
    assert!(
        refused.failures[0]
            .rule
            .starts_with("rules[0].allOf[1].publicKey"),
        "{refused:?}"
    );
    assert!(run(&all, &[a.tag(&digest(), &[]), b.bundle(&digest())]).is_ok());
}

/// A test CA and a code-signing certificate for `subject` from `issuer`.
struct Ca {
    root_pem: String,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            root_pem: cert.pem(),
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A signing key and its certificate (DER).
    fn leaf(&self, subject: &str, issuer: &str, code_signing: bool) -> (Key, Vec<u8>) {
        let key = Key::new();
        let key_pair = rcgen::KeyPair::try_from(key.pkcs8.as_slice()).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(subject.try_into().unwrap())];
        if code_signing {
            params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        }
        let mut issuer_der = vec![0x0c, issuer.len() as u8];
        issuer_der.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            issuer_der,
        )];
        let cert = params.signed_by(&key_pair, &self.issuer).unwrap();
        (key, cert.der().to_vec())
    }
}

fn cert_rule(ca: &Ca, subject: Option<&str>, prefix: Option<&str>) -> CertificateRule {
    CertificateRule {
        issuer: ISSUER.into(),
        subject: subject.map(str::to_string),
        subject_prefix: prefix.map(str::to_string),
        trust_root: Some(ca.root_pem.clone()),
        trust_root_file: None,
        name: None,
        annotations: None,
    }
}

fn with_cert(mut signature: FoundSignature, cert: Vec<u8>) -> FoundSignature {
    signature.certificates = vec![cert];
    signature
}

#[test]
fn a_certificate_rule_checks_chain_issuer_and_subject() {
    let ca = Ca::new();
    let (key, cert) = ca.leaf(SUBJECT, ISSUER, true);
    let signature = with_cert(key.bundle(&digest()), cert.clone());
    let exact = policy(vec![Rule::Certificate(cert_rule(&ca, Some(SUBJECT), None))]);
    let verified = run(&exact, std::slice::from_ref(&signature)).unwrap();
    assert_eq!(
        verified.signer,
        Signer::Identity {
            issuer: ISSUER.into(),
            subject: SUBJECT.into()
        }
    );
    let prefix = policy(vec![Rule::Certificate(cert_rule(
        &ca,
        None,
        Some("release@"),
    ))]);
    assert!(run(&prefix, std::slice::from_ref(&signature)).is_ok());
    let tag = with_cert(key.tag(&digest(), &[]), cert);
    assert!(run(&exact, &[tag]).is_ok());

    let wrong_subject = policy(vec![Rule::Certificate(cert_rule(
        &ca,
        Some("x@example.com"),
        None,
    ))]);
    let refused = refusal(run(&wrong_subject, std::slice::from_ref(&signature)));
    assert!(
        refused.failures[0].reason.contains("subject"),
        "{refused:?}"
    );

    let (other_key, other_issuer_cert) = ca.leaf(SUBJECT, "https://elsewhere", true);
    let refused = refusal(run(
        &exact,
        &[with_cert(other_key.bundle(&digest()), other_issuer_cert)],
    ));
    assert!(
        refused.failures[0].reason.contains("https://elsewhere"),
        "{refused:?}"
    );

    let stranger = Ca::new();
    let (stranger_key, stranger_cert) = stranger.leaf(SUBJECT, ISSUER, true);
    let refused = refusal(run(
        &exact,
        &[with_cert(stranger_key.bundle(&digest()), stranger_cert)],
    ));
    assert!(
        refused.failures[0].reason.contains("does not chain"),
        "{refused:?}"
    );

    let (plain_key, plain_cert) = ca.leaf(SUBJECT, ISSUER, false);
    let refused = refusal(run(
        &exact,
        &[with_cert(plain_key.bundle(&digest()), plain_cert)],
    ));
    assert!(
        refused.failures[0].reason.contains("not for code signing"),
        "{refused:?}"
    );

    let later = SystemTime::now() + Duration::from_secs(100 * 365 * 24 * 3600);
    let result = evaluate(
        &exact,
        "r:1/p",
        &digest(),
        std::slice::from_ref(&signature),
        later,
    );
    assert!(
        refusal(result).failures[0]
            .reason
            .contains("does not chain")
    );

    // Signed by another key than the certificate's.
    let mut forged = signature.clone();
    forged.signature = Key::new().sign(b"anything");
    let refused = refusal(run(&exact, &[forged]));
    assert!(
        refused.failures[0].reason.contains("certificate's key"),
        "{refused:?}"
    );

    let bare = policy(vec![Rule::Certificate(cert_rule(&ca, Some(SUBJECT), None))]);
    let refused = refusal(run(&bare, &[key.tag(&digest(), &[])]));
    assert!(
        refused.failures[0].reason.contains("no certificate"),
        "{refused:?}"
    );
}

#[test]
fn unusable_policies_are_refused_before_any_registry() {
    let key = Key::new();
    let ca = Ca::new();
    let check = |p: VerificationPolicy| p.check().unwrap_err().to_string();
    assert!(check(policy(vec![])).contains("empty"));
    let bad_key = KeyRule {
        key: "not a key".into(),
        name: None,
        annotations: None,
    };
    assert!(check(policy(vec![Rule::PublicKey(bad_key)])).contains("rules[0].publicKey"));
    let both = cert_rule(&ca, Some(SUBJECT), Some("r"));
    assert!(check(policy(vec![Rule::Certificate(both)])).contains("exactly one"));
    let file = CertificateRule {
        trust_root: None,
        trust_root_file: Some("/etc/ca.pem".into()),
        ..cert_rule(&ca, Some(SUBJECT), None)
    };
    assert!(check(policy(vec![Rule::Certificate(file)])).contains("host-wide policy file"));
    let too_many = AnyOfRule {
        minimum_matches: Some(2),
        rules: vec![SignerRule::PublicKey(key_rule(&key))],
    };
    let err = check(policy(vec![Rule::AnyOf(too_many)]));
    assert!(err.contains("rules[0].anyOf.minimumMatches"), "{err}");
}

#[test]
fn policies_parse_from_yaml_and_files_and_their_schema_is_not_recursive() {
    let key = Key::new();
    let ca = Ca::new();
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    std::fs::write(dir.join("root.pem"), &ca.root_pem).unwrap();
    let indent = |text: &str| {
        text.lines()
            .map(|l| format!("        {l}\n"))
            .collect::<String>()
    };
    let yaml = format!(
        "rules:\n- publicKey:\n    name: release\n    key: |\n{}- anyOf:\n    minimumMatches: 1\n    rules:\n    - certificate:\n        issuer: {ISSUER}\n        subject: {SUBJECT}\n        trustRootFile: root.pem\n",
        indent(&key.pem()).replace("        ", "      ")
    );
    let path = dir.join("policy.yaml");
    std::fs::write(&path, &yaml).unwrap();
    let policy = VerificationPolicy::from_file(&path).unwrap();
    assert_eq!(policy.rules.len(), 2);
    let Rule::AnyOf(any) = &policy.rules[1] else {
        panic!("{policy:?}")
    };
    let SignerRule::Certificate(cert) = &any.rules[0] else {
        panic!("{policy:?}")
    };
    assert_eq!(cert.trust_root.as_deref(), Some(ca.root_pem.as_str()));
    assert!(cert.trust_root_file.is_none());
    // The same text in a WasmPlugin (no file): trustRootFile is refused.
    let inline = VerificationPolicy::from_yaml(&yaml).unwrap();
    assert!(inline.check().is_err());
    let json = serde_json::to_string(&policy).unwrap();
    assert_eq!(VerificationPolicy::from_yaml(&json).unwrap(), policy);

    let settings =
        schemars::generate::SchemaSettings::openapi3().with(|s| s.inline_subschemas = true);
    let schema = settings
        .into_generator()
        .into_root_schema_for::<VerificationPolicy>();
    let text = serde_json::to_string(&schema).unwrap();
    assert!(!text.contains("$ref"), "{text}");
}
