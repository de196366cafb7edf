//! The real cosign binaries (v2: tag-based `.sig` signatures; v3: Sigstore
//! bundles as OCI referrers), run fully offline against a test registry:
//! no transparency log, no TUF, no Fulcio.
//!
//! Found through `WASM_OPERATOR_COSIGN2` / `WASM_OPERATOR_COSIGN3`, else
//! `target/cosign/cosign2` / `target/cosign/cosign3` (built by
//! `scripts/build-cosign.sh`). A missing binary fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A cosign major version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cosign {
    /// cosign 2: signs into `REPO:sha256-HEX.sig`.
    V2,
    /// cosign 3: signs into a bundle referrer (tag schema on distribution 2.8).
    V3,
}

impl Cosign {
    /// The binary, or a panic saying how to get it.
    pub fn binary(self) -> PathBuf {
        let (env, name) = match self {
            Cosign::V2 => ("WASM_OPERATOR_COSIGN2", "cosign2"),
            Cosign::V3 => ("WASM_OPERATOR_COSIGN3", "cosign3"),
        };
        let path = std::env::var_os(env)
            .map(PathBuf::from)
            .unwrap_or_else(|| super::workspace().join("target/cosign").join(name));
        assert!(
            path.is_file(),
            "{name} not found at {} (set {env} or run scripts/build-cosign.sh)",
            path.display()
        );
        path
    }

    /// Runs cosign with `args` in `dir` (also its HOME, so no
    /// `~/.sigstore` is read or written), the key password `password`.
    pub fn run(self, dir: &Path, password: &str, args: &[&str]) -> Output {
        let binary = self.binary();
        Command::new(&binary)
            .args(args)
            .current_dir(dir)
            .env("HOME", dir)
            .env("COSIGN_PASSWORD", password)
            .env("COSIGN_YES", "true")
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()))
    }

    /// Like [`Cosign::run`], failing the test when cosign fails.
    pub fn ok(self, dir: &Path, password: &str, args: &[&str]) -> Output {
        let out = self.run(dir, password, args);
        assert!(
            out.status.success(),
            "{self:?} {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        out
    }

    /// Signs `reference` (`REPO@sha256:…`) offline with cosign key `key`,
    /// `extra` arguments added (`-a k=v`, `--certificate …`).
    pub fn sign(self, key: &KeyPair, reference: &str, extra: &[&str]) {
        let key_path = key.key.to_string_lossy().to_string();
        let mut args = vec!["sign", "--key", key_path.as_str()];
        if self == Cosign::V3 {
            args.push("--use-signing-config=false");
        }
        args.extend(["--tlog-upload=false", "--allow-http-registry", "-y"]);
        args.extend_from_slice(extra);
        args.push(reference);
        self.ok(key.dir.path(), &key.password, &args);
    }

    /// Whether `cosign verify --key` accepts `reference`, offline.
    pub fn verify_key(self, key: &KeyPair, reference: &str) -> Output {
        let public = key.public.to_string_lossy().to_string();
        self.run(
            key.dir.path(),
            "",
            &[
                "verify",
                "--key",
                &public,
                "--insecure-ignore-tlog=true",
                "--allow-http-registry",
                reference,
            ],
        )
    }
}

/// A cosign key pair in its own directory.
pub struct KeyPair {
    /// The directory holding the files (cosign's working directory).
    pub dir: tempfile::TempDir,
    /// `cosign.key`: ENCRYPTED SIGSTORE PRIVATE KEY.
    pub key: PathBuf,
    /// `cosign.pub`: the public key, PEM.
    pub public: PathBuf,
    /// The key's password.
    pub password: String,
}

impl KeyPair {
    /// `cosign generate-key-pair` with `password`.
    pub fn generate(password: &str) -> KeyPair {
        let dir = tempfile::tempdir().expect("temp dir for a cosign key");
        Cosign::V3.ok(dir.path(), password, &["generate-key-pair"]);
        KeyPair {
            key: dir.path().join("cosign.key"),
            public: dir.path().join("cosign.pub"),
            dir,
            password: password.to_string(),
        }
    }

    /// `cosign import-key-pair` of a PKCS#8 PEM private key (e.g. the key
    /// of a test certificate), with an empty password.
    pub fn import(pkcs8_pem: &str) -> KeyPair {
        let dir = tempfile::tempdir().expect("temp dir for a cosign key");
        std::fs::write(dir.path().join("import.pem"), pkcs8_pem).expect("write the key");
        Cosign::V3.ok(
            dir.path(),
            "",
            &[
                "import-key-pair",
                "--key",
                "import.pem",
                "--output-key-prefix",
                "imported",
            ],
        );
        KeyPair {
            key: dir.path().join("imported.key"),
            public: dir.path().join("imported.pub"),
            dir,
            password: String::new(),
        }
    }

    /// The public key PEM.
    pub fn public_pem(&self) -> String {
        std::fs::read_to_string(&self.public).expect("read cosign.pub")
    }

    /// Writes `content` next to the key and returns its path.
    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, content).expect("write a file next to the key");
        path
    }
}

/// A test CA (root → intermediate) issuing Fulcio-style code-signing
/// certificates: email SAN, OIDC issuer in extensions 1.3.6.1.4.1.57264.1.1
/// (raw) and .1.8 (DER UTF8String).
pub struct TestCa {
    /// The root certificate, PEM (the policy's trust root).
    pub root_pem: String,
    /// The intermediate certificate, PEM.
    pub intermediate_pem: String,
    intermediate: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl TestCa {
    /// A new root and intermediate.
    pub fn new() -> TestCa {
        let mut root_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        root_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        root_params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        root_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "wasm-operator test root CA");
        let root_key = rcgen::KeyPair::generate().unwrap();
        let root = root_params.self_signed(&root_key).unwrap();
        let root_issuer = rcgen::Issuer::new(root_params, root_key);
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(0));
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::CrlSign,
        ];
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            "wasm-operator test intermediate CA",
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let intermediate = params.signed_by(&key, &root_issuer).unwrap();
        TestCa {
            root_pem: root.pem(),
            intermediate_pem: intermediate.pem(),
            intermediate: rcgen::Issuer::new(params, key),
        }
    }

    /// A code-signing certificate for email `subject` from OIDC `issuer`:
    /// (certificate PEM, private key PKCS#8 PEM).
    pub fn leaf(&self, subject: &str, issuer: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(subject.try_into().unwrap())];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        let mut utf8 = vec![0x0c, issuer.len() as u8];
        utf8.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![
            rcgen::CustomExtension::from_oid_content(
                &[1, 3, 6, 1, 4, 1, 57264, 1, 1],
                issuer.as_bytes().to_vec(),
            ),
            rcgen::CustomExtension::from_oid_content(&[1, 3, 6, 1, 4, 1, 57264, 1, 8], utf8),
        ];
        let cert = params.signed_by(&key, &self.intermediate).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// The chain cosign's `--certificate-chain` wants: intermediate, root.
    pub fn chain_pem(&self) -> String {
        format!("{}{}", self.intermediate_pem, self.root_pem)
    }
}
