//! Signed plugins against a real registry (distribution 2.8: no referrers
//! API, so cosign 3's bundles are found through the referrers tag schema)
//! and the real cosign 2 and 3, all offline: components pushed by our
//! `push`, signed by cosign, verified by `oci::signature`; and what our
//! signing writes, verified by cosign.

use std::collections::BTreeMap;
use std::process::Command;

use wasm_operator::oci::signature::{
    self, AnyOfRule, CertificateRule, Format, KeyRule, Rule, SignatureError, SignatureNotVerified,
    Signer, SignerRule, SigningKey, VerificationPolicy, Verified,
};
use wasm_operator::oci::{PushOptions, Pushed};

use super::push_plugin;
use super::support::cosign::{Cosign, KeyPair, TestCa};
use super::support::registry::Registry;

const ISSUER: &str = "https://issuer.example.com";
const SUBJECT: &str = "release@example.com";

/// `REPO@DIGEST` of a push: what cosign signs.
fn pinned(pushed: &Pushed) -> String {
    let base = pushed
        .reference
        .rsplit_once(':')
        .map_or(pushed.reference.as_str(), |(b, _)| b);
    format!("{base}@{}", pushed.digest)
}

fn key_rule(key: &KeyPair, name: Option<&str>) -> SignerRule {
    SignerRule::PublicKey(KeyRule {
        key: key.public_pem(),
        name: name.map(str::to_string),
        annotations: None,
    })
}

fn key_policy(key: &KeyPair) -> VerificationPolicy {
    VerificationPolicy {
        rules: vec![Rule::PublicKey(KeyRule {
            key: key.public_pem(),
            name: None,
            annotations: None,
        })],
    }
}

async fn verify(pushed: &Pushed, policy: &VerificationPolicy) -> Result<Verified, SignatureError> {
    signature::verify(&pushed.reference, &pushed.digest, None, policy).await
}

fn refused(result: Result<Verified, SignatureError>) -> SignatureNotVerified {
    match result {
        Err(SignatureError::NotVerified(refusal)) => refusal,
        other => panic!("expected SignatureNotVerified, got {other:?}"),
    }
}

fn fingerprint(key: &KeyPair) -> String {
    signature::key_fingerprint(&key.public_pem()).expect("cosign.pub parses")
}

#[tokio::test]
async fn cosign3_bundles_and_cosign2_tags_verify_under_a_key_policy() {
    let registry = Registry::start();
    let key = KeyPair::generate("");
    for (cosign, repo, format) in [
        (Cosign::V3, "plugins/bundled:1.0.0", Format::Bundle),
        (Cosign::V2, "plugins/tagged:1.0.0", Format::Tag),
    ] {
        let pushed = push_plugin("webapp", &registry.reference(repo)).await;
        cosign.sign(&key, &pinned(&pushed), &[]);
        let verified = verify(&pushed, &key_policy(&key))
            .await
            .unwrap_or_else(|e| panic!("{cosign:?}: {e}\n{}", registry.log_text()));
        assert_eq!(verified.digest, pushed.digest);
        assert_eq!(verified.format, format, "{cosign:?}");
        assert_eq!(
            verified.signer,
            Signer::Key {
                fingerprint: fingerprint(&key),
                name: None
            }
        );
    }
}

#[tokio::test]
async fn unsigned_and_other_key_and_other_digest_are_refused() {
    let registry = Registry::start();
    let pushed = push_plugin("webapp", &registry.reference("plugins/webapp:1.0.0")).await;
    let key = KeyPair::generate("");
    let refusal = refused(verify(&pushed, &key_policy(&key)).await);
    assert_eq!(refusal.signatures, 0);
    let text = refusal.to_string();
    assert!(
        text.contains(&pushed.reference) && text.contains(&pushed.digest),
        "{text}"
    );
    assert!(
        text.contains("no signature of this digest was found"),
        "{text}"
    );

    // Signed, by someone else (both formats).
    let other = KeyPair::generate("");
    Cosign::V3.sign(&other, &pinned(&pushed), &[]);
    Cosign::V2.sign(&other, &pinned(&pushed), &[]);
    let policy = VerificationPolicy {
        rules: vec![Rule::AllOf(vec![key_rule(&key, Some("release"))])],
    };
    let refusal = refused(verify(&pushed, &policy).await);
    assert_eq!(refusal.signatures, 2, "{refusal:?}");
    assert!(
        refusal.failures[0]
            .rule
            .starts_with("rules[0].allOf[0].publicKey \"release\""),
        "{refusal:?}"
    );
    assert!(
        refusal.failures[0].reason.contains("does not verify"),
        "{refusal:?}"
    );

    // A signature of this digest does not sign another push of the repo.
    let next = push_plugin("webapp_v2", &registry.reference("plugins/webapp:2.0.0")).await;
    assert_ne!(next.digest, pushed.digest);
    Cosign::V2.sign(&key, &pinned(&pushed), &[]);
    assert!(verify(&pushed, &key_policy(&key)).await.is_ok());
    let refusal = refused(verify(&next, &key_policy(&key)).await);
    assert_eq!(refusal.signatures, 0, "{refusal:?}");
}

fn cert_policy(ca: &TestCa, subject: Option<&str>, prefix: Option<&str>) -> VerificationPolicy {
    VerificationPolicy {
        rules: vec![Rule::Certificate(CertificateRule {
            issuer: ISSUER.into(),
            subject: subject.map(str::to_string),
            subject_prefix: prefix.map(str::to_string),
            trust_root: Some(ca.root_pem.clone()),
            trust_root_file: None,
            name: None,
            annotations: None,
        })],
    }
}

#[tokio::test]
async fn certificate_identities_from_a_test_ca_verify_in_both_formats() {
    let registry = Registry::start();
    let ca = TestCa::new();
    let (cert, private) = ca.leaf(SUBJECT, ISSUER);
    let key = KeyPair::import(&private);
    let cert_path = key.write("leaf.pem", &cert);
    let chain_path = key.write("chain.pem", &ca.chain_pem());
    let (cert_arg, chain_arg) = (cert_path.to_string_lossy(), chain_path.to_string_lossy());
    for (cosign, repo, format) in [
        (Cosign::V3, "plugins/cert3:1.0.0", Format::Bundle),
        (Cosign::V2, "plugins/cert2:1.0.0", Format::Tag),
    ] {
        let pushed = push_plugin("webapp", &registry.reference(repo)).await;
        let extra = [
            "--certificate",
            &*cert_arg,
            "--certificate-chain",
            &*chain_arg,
        ];
        cosign.sign(&key, &pinned(&pushed), &extra);
        let verified = verify(&pushed, &cert_policy(&ca, Some(SUBJECT), None))
            .await
            .unwrap_or_else(|e| panic!("{cosign:?}: {e}"));
        assert_eq!(verified.format, format);
        assert_eq!(
            verified.signer,
            Signer::Identity {
                issuer: ISSUER.into(),
                subject: SUBJECT.into()
            }
        );
        assert!(
            verify(&pushed, &cert_policy(&ca, None, Some("release@")))
                .await
                .is_ok()
        );
        let refusal =
            refused(verify(&pushed, &cert_policy(&ca, Some("other@example.com"), None)).await);
        assert!(
            refusal.failures[0].rule.contains("rules[0].certificate"),
            "{refusal:?}"
        );
        assert!(
            refusal.failures[0].reason.contains("subject"),
            "{refusal:?}"
        );
        // The same identity from another CA is not trusted.
        let stranger = TestCa::new();
        let refusal = refused(verify(&pushed, &cert_policy(&stranger, Some(SUBJECT), None)).await);
        assert!(
            refusal.failures[0].reason.contains("does not chain"),
            "{refusal:?}"
        );
        // A key policy does not accept a certificate's key by accident.
        let refusal = refused(verify(&pushed, &key_policy(&KeyPair::generate(""))).await);
        assert!(
            refusal.failures[0].reason.contains("does not verify"),
            "{refusal:?}"
        );
    }
    // Without --certificate-chain the policy's root alone does not reach
    // the leaf (its intermediate is missing): refused, not guessed.
    let pushed = push_plugin("webapp", &registry.reference("plugins/nochain:1.0.0")).await;
    Cosign::V3.sign(&key, &pinned(&pushed), &["--certificate", &*cert_arg]);
    let refusal = refused(verify(&pushed, &cert_policy(&ca, Some(SUBJECT), None)).await);
    assert!(
        refusal.failures[0].reason.contains("does not chain"),
        "{refusal:?}"
    );
    let mut with_intermediate = cert_policy(&ca, Some(SUBJECT), None);
    if let Rule::Certificate(rule) = &mut with_intermediate.rules[0] {
        rule.trust_root = Some(ca.chain_pem());
    }
    assert!(verify(&pushed, &with_intermediate).await.is_ok());
}

#[tokio::test]
async fn signed_annotations_are_required_by_the_rule() {
    let registry = Registry::start();
    let key = KeyPair::generate("");
    let policy = |team: &str| VerificationPolicy {
        rules: vec![Rule::PublicKey(KeyRule {
            key: key.public_pem(),
            name: Some("release".into()),
            annotations: Some(BTreeMap::from([("team".to_string(), team.to_string())])),
        })],
    };
    for (cosign, repo) in [(Cosign::V3, "plugins/a3:1"), (Cosign::V2, "plugins/a2:1")] {
        let pushed = push_plugin("webapp", &registry.reference(repo)).await;
        cosign.sign(
            &key,
            &pinned(&pushed),
            &["-a", "team=platform", "-a", "build=42"],
        );
        verify(&pushed, &policy("platform"))
            .await
            .unwrap_or_else(|e| panic!("{cosign:?}: {e}"));
        let refusal = refused(verify(&pushed, &policy("storage")).await);
        assert!(
            refusal.failures[0].reason.contains("team=\"storage\""),
            "{refusal:?}"
        );
    }
}

#[tokio::test]
async fn any_of_counts_distinct_signers_across_formats() {
    let registry = Registry::start();
    let pushed = push_plugin("webapp", &registry.reference("plugins/webapp:1.0.0")).await;
    let (a, b, c) = (
        KeyPair::generate(""),
        KeyPair::generate(""),
        KeyPair::generate(""),
    );
    let policy = |minimum| VerificationPolicy {
        rules: vec![Rule::AnyOf(AnyOfRule {
            minimum_matches: Some(minimum),
            rules: vec![
                key_rule(&a, Some("a")),
                key_rule(&b, Some("b")),
                key_rule(&c, Some("c")),
            ],
        })],
    };
    Cosign::V3.sign(&a, &pinned(&pushed), &[]);
    assert!(verify(&pushed, &policy(1)).await.is_ok());
    let refusal = refused(verify(&pushed, &policy(2)).await);
    assert!(
        refusal.failures[0]
            .rule
            .contains("anyOf (minimumMatches 2)"),
        "{refusal:?}"
    );
    assert!(
        refusal.failures[0]
            .reason
            .starts_with("1 of 3 rules matched"),
        "{refusal:?}"
    );
    Cosign::V2.sign(&c, &pinned(&pushed), &[]);
    let verified = verify(&pushed, &policy(2)).await.unwrap();
    let formats: Vec<Format> = verified.matches.iter().map(|m| m.format).collect();
    assert_eq!(formats, [Format::Bundle, Format::Tag]);
    assert!(verify(&pushed, &policy(3)).await.is_err());
}

#[tokio::test]
async fn our_signatures_are_accepted_by_cosign_2_and_3() {
    let registry = Registry::start();
    let pushed = push_plugin("webapp", &registry.reference("plugins/webapp:1.0.0")).await;
    let key = KeyPair::generate("a password");
    let pem = std::fs::read(&key.key).unwrap();
    assert!(SigningKey::from_cosign_pem(&pem, b"wrong").is_err());
    let signing = SigningKey::from_cosign_pem(&pem, b"a password").unwrap();
    assert_eq!(signing.fingerprint(), fingerprint(&key));
    // A signature already there (cosign's) is kept next to ours.
    let other = KeyPair::generate("");
    Cosign::V2.sign(&other, &pinned(&pushed), &[]);
    let signed = signature::sign(
        &pushed.reference,
        &pushed.digest,
        &signing,
        &BTreeMap::new(),
        &PushOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(signed.fingerprint, fingerprint(&key));
    for cosign in [Cosign::V2, Cosign::V3] {
        for k in [&key, &other] {
            let out = cosign.verify_key(k, &pinned(&pushed));
            assert!(
                out.status.success(),
                "{cosign:?} verify rejected our .sig: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let verified = verify(&pushed, &key_policy(&key)).await.unwrap();
    assert_eq!(verified.format, Format::Tag);
}

#[tokio::test]
async fn plugin_push_sign_and_plugin_verify_from_the_command_line() {
    let registry = Registry::start();
    let reference = registry.reference("plugins/cli:1.0.0");
    let key = KeyPair::generate("pw");
    let binary = env!("CARGO_BIN_EXE_wasm-operator");
    let wasm = super::support::plugin_wasm("webapp");
    let push = Command::new(binary)
        .args(["plugin", "push"])
        .arg(&wasm)
        .arg(&reference)
        .arg("--sign")
        .arg(&key.key)
        .env("COSIGN_PASSWORD", "pw")
        .output()
        .unwrap();
    assert!(
        push.status.success(),
        "{}",
        String::from_utf8_lossy(&push.stderr)
    );
    let digest = String::from_utf8_lossy(&push.stdout).trim().to_string();
    let stderr = String::from_utf8_lossy(&push.stderr);
    assert!(stderr.contains(&fingerprint(&key)), "{stderr}");
    let pem = key
        .public_pem()
        .lines()
        .map(|l| format!("      {l}\n"))
        .collect::<String>();
    let policy = key.write(
        "policy.yaml",
        &format!("rules:\n- publicKey:\n    name: release\n    key: |\n{pem}"),
    );
    let run_verify = |target: &str, output: &str| {
        Command::new(binary)
            .args(["plugin", "verify", target, "--policy"])
            .arg(&policy)
            .args(["-o", output])
            .output()
            .unwrap()
    };
    let out = run_verify(&reference, "json");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], true);
    assert_eq!(report["digest"], digest.as_str());
    assert_eq!(report["result"]["format"], "tag");
    assert_eq!(
        report["result"]["signer"]["key"]["fingerprint"],
        fingerprint(&key).as_str()
    );
    let out = run_verify(
        &format!("{}@{digest}", registry.reference("plugins/cli")),
        "text",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("format: tag"));

    // Unsigned: exit 1, the refusal names the rule.
    let unsigned = registry.reference("plugins/unsigned:1.0.0");
    push_plugin("webapp", &unsigned).await;
    let out = run_verify(&unsigned, "yaml");
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_yaml::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("rules[0].publicKey \"release\""),
        "{stderr}"
    );

    // A wrong password stops the push before anything is written.
    let push = Command::new(binary)
        .args(["plugin", "push"])
        .arg(&wasm)
        .arg(registry.reference("plugins/never:1.0.0"))
        .arg("--sign")
        .arg(&key.key)
        .env("COSIGN_PASSWORD", "wrong")
        .output()
        .unwrap();
    assert!(!push.status.success());
    assert!(String::from_utf8_lossy(&push.stderr).contains("wrong password"));
}
