//! `wasm-operator plugin new`: writes a plugin crate that builds as it is,
//! outside this repository: typed spec and status, the manifest, the CRD
//! derived from the types, a reconcile producing the owned kinds, a unit
//! test, a golden fixture, a sample object, the build settings plugins need
//! and a README. The files are templates under `host/templates/plugin/`,
//! compiled into the binary and filled by named `{{placeholders}}`.
//! `--lang python|typescript` writes a Python or TypeScript project instead
//! (`plugin_new_lang`), with the same golden fixture and sample.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::Args;

use super::CliError;
use super::plugin_new_lang::{self, Lang, LangError, fill};

/// Arguments of `wasm-operator plugin new`.
#[derive(Debug, Args)]
pub struct PluginNewArgs {
    /// The plugin's name: the crate's, the manifest's and the directory's
    /// (a DNS-1123 label, e.g. `greeter`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// API group of the primary kind; needs a dot (e.g. `example.com`).
    #[arg(long, value_name = "GROUP")]
    pub group: String,
    /// The primary kind, in CamelCase (e.g. `Greeter`).
    #[arg(long, value_name = "KIND")]
    pub kind: String,
    /// API version of the primary kind.
    #[arg(long, default_value = "v1alpha1", value_name = "VERSION")]
    pub version: String,
    /// The kinds the plugin owns, one child each, comma-separated
    /// (Deployment, Service, ConfigMap).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "ConfigMap",
        value_name = "KINDS"
    )]
    pub owns: Vec<String>,
    /// Where to write the crate (default: ./NAME); must not exist or be empty.
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// The plugin's language: a Rust crate, or a Python or TypeScript
    /// project (built by its build.sh with componentize-py or jco, the SDK
    /// vendored, the CRD a hand-written crd.yaml).
    #[arg(long, value_enum, default_value_t = Lang::Rust, value_name = "LANG")]
    pub lang: Lang,
    /// Depend on the SDK at this path (a checkout's `sdk/`) instead of the
    /// published crate (Rust only).
    #[arg(long, value_name = "PATH", conflicts_with = "sdk_version")]
    pub sdk: Option<PathBuf>,
    /// The version requirement on the published `wasm-operator-sdk` crate
    /// (default: this binary's version; Rust only).
    #[arg(long, value_name = "VERSION")]
    pub sdk_version: Option<String>,
}

/// Why `plugin new` wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum PluginNewError {
    /// NAME is not a DNS-1123 label.
    #[error(
        "plugin name {0:?} is not valid: use 1-63 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit (e.g. `greeter`); it names the crate, the plugin and its WasmPlugin"
    )]
    Name(String),
    /// The group is not a DNS subdomain with a dot.
    #[error(
        "group {0:?} is not valid: a CRD's group is a lowercase DNS name with at least one dot (e.g. `example.com`, `apps.acme.io`)"
    )]
    Group(String),
    /// The kind is not CamelCase.
    #[error(
        "kind {0:?} is not valid: use CamelCase letters and digits starting with an uppercase letter (e.g. `Greeter`, `WebSite`)"
    )]
    Kind(String),
    /// The version is not a Kubernetes API version.
    #[error(
        "version {0:?} is not valid: use a Kubernetes API version such as v1, v1beta1 or v1alpha1"
    )]
    Version(String),
    /// An owned kind the scaffold cannot write a child for.
    #[error(
        "cannot scaffold a child of kind {kind:?}: the kinds `plugin new --owns` knows are {known}; add other kinds to the crate afterwards (`Manifest::owns`)"
    )]
    Owns {
        /// The unknown kind.
        kind: String,
        /// The kinds it knows, listed.
        known: String,
    },
    /// `--sdk` or `--sdk-version` with a language other than Rust.
    #[error(
        "{flag} chooses the Rust SDK crate; a {lang} plugin vendors its SDK into the project instead, so drop {flag} (or use --lang rust)"
    )]
    SdkFlag {
        /// The flag given.
        flag: &'static str,
        /// The language asked for.
        lang: &'static str,
    },
    /// The Python or TypeScript project cannot be written.
    #[error(transparent)]
    Lang(#[from] LangError),
    /// The target directory is there and not empty.
    #[error(
        "{} already exists and is not empty; pick another NAME or --dir, or remove it",
        .0.display()
    )]
    Exists(PathBuf),
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
}

/// A child kind the scaffold writes code for.
struct ChildKind {
    kind: &'static str,
    /// `use` lines the child's code needs.
    imports: &'static [&'static str],
    /// The manifest line declaring it owned.
    owns: &'static str,
    /// The builder call adding the child in `reconcile`.
    call: &'static str,
    /// The function building it.
    function: &'static str,
    /// The child as the fixture expects it (YAML list item).
    expected: &'static str,
    /// Sort key of the golden fixture: (apiVersion, kind).
    order: (&'static str, &'static str),
}

const CHILD_KINDS: [ChildKind; 3] = [
    ChildKind {
        kind: "Deployment",
        imports: &[
            "use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};",
            "use k8s_openapi::api::core::v1::{Capabilities, Container, ContainerPort, PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile, SecurityContext};",
            "use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;",
        ],
        owns: ".owns::<Deployment>()",
        call: ".child(&deployment(&meta, spec))?",
        function: include_str!("../../templates/plugin/deployment.rs.tmpl"),
        expected: include_str!("../../templates/plugin/expected_deployment.yaml.tmpl"),
        order: ("apps/v1", "Deployment"),
    },
    ChildKind {
        kind: "Service",
        imports: &[
            "use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};",
            "use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;",
        ],
        owns: ".owns::<Service>()",
        call: ".child(&service(&meta, spec))?",
        function: include_str!("../../templates/plugin/service.rs.tmpl"),
        expected: include_str!("../../templates/plugin/expected_service.yaml.tmpl"),
        order: ("v1", "Service"),
    },
    ChildKind {
        kind: "ConfigMap",
        imports: &["use k8s_openapi::api::core::v1::ConfigMap;"],
        owns: ".owns::<ConfigMap>()",
        call: ".child(&config_map(&meta, spec))?",
        function: include_str!("../../templates/plugin/configmap.rs.tmpl"),
        expected: include_str!("../../templates/plugin/expected_configmap.yaml.tmpl"),
        order: ("v1", "ConfigMap"),
    },
];

/// What to scaffold, validated.
#[derive(Debug, Clone)]
pub struct Scaffold {
    name: String,
    group: String,
    kind: String,
    version: String,
    owns: Vec<&'static str>,
    sdk_dependency: String,
    lang: Lang,
}

impl Scaffold {
    /// Validates the arguments: names people can fix from the message.
    ///
    /// # Errors
    ///
    /// [`PluginNewError`] naming the argument that is not valid and why.
    pub fn new(args: &PluginNewArgs) -> Result<Scaffold, PluginNewError> {
        if !is_dns_label(&args.name) {
            return Err(PluginNewError::Name(args.name.clone()));
        }
        if !is_group(&args.group) {
            return Err(PluginNewError::Group(args.group.clone()));
        }
        if !is_kind(&args.kind) {
            return Err(PluginNewError::Kind(args.kind.clone()));
        }
        if !is_api_version(&args.version) {
            return Err(PluginNewError::Version(args.version.clone()));
        }
        let mut owns = Vec::new();
        for wanted in args.owns.iter().map(|k| k.trim()).filter(|k| !k.is_empty()) {
            let Some(known) = CHILD_KINDS
                .iter()
                .find(|c| c.kind.eq_ignore_ascii_case(wanted))
            else {
                return Err(PluginNewError::Owns {
                    kind: wanted.to_string(),
                    known: CHILD_KINDS
                        .iter()
                        .map(|c| c.kind)
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            if !owns.contains(&known.kind) {
                owns.push(known.kind);
            }
        }
        if owns.is_empty() {
            owns.push("ConfigMap");
        }
        if args.lang != Lang::Rust {
            let flag = match (&args.sdk, &args.sdk_version) {
                (Some(_), _) => Some("--sdk"),
                (None, Some(_)) => Some("--sdk-version"),
                (None, None) => None,
            };
            if let Some(flag) = flag {
                return Err(PluginNewError::SdkFlag {
                    flag,
                    lang: args.lang.name(),
                });
            }
        }
        let sdk_dependency = match (&args.sdk, &args.sdk_version) {
            (Some(path), _) => {
                let path = std::path::absolute(path).unwrap_or_else(|_| path.clone());
                format!(
                    "wasm-operator-sdk = {{ path = {} }}",
                    toml_string(&path.display().to_string())
                )
            }
            (None, Some(version)) => {
                format!("wasm-operator-sdk = {}", toml_string(version))
            }
            (None, None) => format!(
                "wasm-operator-sdk = {}",
                toml_string(env!("CARGO_PKG_VERSION"))
            ),
        };
        Ok(Scaffold {
            name: args.name.clone(),
            group: args.group.clone(),
            kind: args.kind.clone(),
            version: args.version.clone(),
            owns,
            sdk_dependency,
            lang: args.lang,
        })
    }

    /// The owned kinds' code and fixture parts, in the order given.
    fn children(&self) -> Vec<&'static ChildKind> {
        self.owns
            .iter()
            .filter_map(|kind| CHILD_KINDS.iter().find(|c| c.kind == *kind))
            .collect()
    }

    /// Every file of the crate (or, with `--lang`, of the Python or
    /// TypeScript project): path relative to its root, and contents.
    ///
    /// # Errors
    ///
    /// [`PluginNewError::Lang`] when a Python or TypeScript project cannot
    /// be written.
    pub fn files(&self) -> Result<Vec<(PathBuf, String)>, PluginNewError> {
        let mut sorted = self.children();
        sorted.sort_by_key(|c| c.order);
        let expected_children: String = sorted.iter().map(|c| c.expected).collect();
        let (expected_status, expected_condition) = if self.owns.contains(&"Deployment") {
            (
                "  readyReplicas: 0\n  phase: Pending\n",
                "  status: \"False\"\n  reason: ReplicasNotReady\n  message: 0/1 replicas ready\n",
            )
        } else {
            (
                "  phase: Running\n",
                "  status: \"True\"\n  reason: ChildrenApplied\n  message: every child is applied\n",
            )
        };
        // The placeholders every language shares.
        let values: Vec<(&str, String)> = vec![
            ("name", self.name.clone()),
            ("group", self.group.clone()),
            ("kind", self.kind.clone()),
            ("version", self.version.clone()),
            ("plural", plural_of(&self.kind)),
            ("owns_sentence", owns_sentence(&self.owns)),
            ("expected_children", expected_children),
            ("expected_status", expected_status.to_string()),
            ("expected_condition", expected_condition.to_string()),
        ];
        let mut files = match self.lang {
            Lang::Rust => self.rust_files(&values),
            lang => plugin_new_lang::files(lang, &self.owns, &values)?,
        };
        let template = |text: &str| fill(text, &values);
        files.extend([
            (
                "fixtures/basic/input.yaml".into(),
                template(include_str!("../../templates/plugin/input.yaml.tmpl")),
            ),
            (
                "fixtures/basic/expected.yaml".into(),
                template(include_str!("../../templates/plugin/expected.yaml.tmpl")),
            ),
            (
                PathBuf::from("samples").join(format!("{}.yaml", self.kind.to_ascii_lowercase())),
                template(include_str!("../../templates/plugin/sample.yaml.tmpl")),
            ),
        ]);
        Ok(files)
    }

    /// The Rust crate's own files, from the shared `values` and the crate's.
    fn rust_files(&self, values: &[(&str, String)]) -> Vec<(PathBuf, String)> {
        let children = self.children();
        let imports: BTreeSet<&str> = children
            .iter()
            .flat_map(|c| c.imports.iter().copied())
            .collect();
        let imports: String = imports.iter().map(|line| format!("{line}\n")).collect();
        let owns: String = children
            .iter()
            .map(|c| format!("            {}\n", c.owns))
            .collect();
        let calls: String = children
            .iter()
            .map(|c| format!("\n            {}", c.call))
            .collect();
        let mut functions: String = children.iter().map(|c| c.function).collect();
        functions.push_str(if self.owns.contains(&"Deployment") {
            include_str!("../../templates/plugin/ready_deployment.rs.tmpl")
        } else {
            include_str!("../../templates/plugin/ready_children.rs.tmpl")
        });
        let kinds_list = children
            .iter()
            .map(|c| format!("{:?}", c.kind))
            .collect::<Vec<_>>()
            .join(", ");
        let mut values = values.to_vec();
        values.extend([
            ("lib_name", self.name.replace('-', "_")),
            ("sdk_dependency", self.sdk_dependency.clone()),
            ("imports", imports),
            ("owns", owns),
            ("children", calls),
            ("functions", functions),
            ("kinds_list", kinds_list),
        ]);
        let template = |text: &str| fill(text, &values);
        vec![
            (
                "Cargo.toml".into(),
                template(include_str!("../../templates/plugin/Cargo.toml.tmpl")),
            ),
            (
                "build.rs".into(),
                template(include_str!("../../templates/plugin/build.rs.tmpl")),
            ),
            (
                ".gitignore".into(),
                template(include_str!("../../templates/plugin/gitignore.tmpl")),
            ),
            (
                "README.md".into(),
                template(include_str!("../../templates/plugin/README.md.tmpl")),
            ),
            (
                "src/lib.rs".into(),
                template(include_str!("../../templates/plugin/lib.rs.tmpl")),
            ),
        ]
    }

    /// Writes the crate (or project) into `dir`, which must not exist or be
    /// empty; `*.sh` files are made executable. Returns the files written.
    ///
    /// # Errors
    ///
    /// [`PluginNewError::Exists`] for a non-empty directory,
    /// [`PluginNewError::Write`] when a file cannot be written,
    /// [`PluginNewError::Lang`] as [`Scaffold::files`].
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, PluginNewError> {
        if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(PluginNewError::Exists(dir.to_path_buf()));
        }
        let files = self.files()?;
        let mut written = Vec::new();
        for (relative, contents) in files {
            let path = dir.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(|source| PluginNewError::Write {
                    path: parent.to_path_buf(),
                    source,
                })?;
            }
            std::fs::write(&path, contents).map_err(|source| PluginNewError::Write {
                path: path.clone(),
                source,
            })?;
            #[cfg(unix)]
            if path.extension().is_some_and(|e| e == "sh") {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(
                    |source| PluginNewError::Write {
                        path: path.clone(),
                        source,
                    },
                )?;
            }
            written.push(path);
        }
        Ok(written)
    }
}

/// Runs `wasm-operator plugin new`.
pub fn plugin_new(args: PluginNewArgs) -> Result<(), CliError> {
    let scaffold = Scaffold::new(&args).map_err(CliError::PluginNew)?;
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let written = scaffold.write(&dir).map_err(CliError::PluginNew)?;
    println!("Created plugin {} in {}:", args.name, dir.display());
    for file in &written {
        let shown = file.strip_prefix(&dir).unwrap_or(file);
        println!("  {}", shown.display());
    }
    println!();
    println!("Next:");
    let shown = dir.display().to_string();
    let next = match args.lang {
        Lang::Rust => vec![
            format!("cd {shown}"),
            "cargo build --release --target wasm32-wasip2".to_string(),
            "wasm-operator dev      # a local cluster serving it, rebuilt on save".to_string(),
        ],
        lang => plugin_new_lang::next_steps(lang, &shown, &args.name),
    };
    for line in next {
        println!("  {line}");
    }
    Ok(())
}

/// "a Deployment and a Service", for docs and descriptions.
fn owns_sentence(owns: &[&str]) -> String {
    let items: Vec<String> = owns.iter().map(|k| format!("a {k}")).collect();
    match items.split_last() {
        None => "nothing".to_string(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

/// The lowercase plural Kubernetes would use for a CRD of `kind`
/// (`Greeter` → `greeters`, `Policy` → `policies`, `Box` → `boxes`).
pub fn plural_of(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    let consonant_y = lower.ends_with('y')
        && !lower
            .chars()
            .rev()
            .nth(1)
            .is_some_and(|c| "aeiou".contains(c));
    if consonant_y {
        format!("{}ies", &lower[..lower.len() - 1])
    } else if ["s", "x", "z", "ch", "sh"]
        .iter()
        .any(|end| lower.ends_with(end))
    {
        format!("{lower}es")
    } else {
        format!("{lower}s")
    }
}

/// A TOML basic string holding `value`.
fn toml_string(value: &str) -> String {
    let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// A DNS-1123 label that is also a valid crate name: lowercase letters,
/// digits and `-`, starting with a letter.
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && !name.ends_with('-')
}

/// A CRD group: a DNS-1123 subdomain with at least one dot.
fn is_group(group: &str) -> bool {
    group.len() <= 253
        && group.contains('.')
        && group.split('.').all(|part| {
            let bytes = part.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= 63
                && bytes[0].is_ascii_alphanumeric()
                && bytes[bytes.len() - 1].is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        })
}

/// A Kind: CamelCase, an uppercase letter first, letters and digits only.
fn is_kind(kind: &str) -> bool {
    kind.len() <= 63
        && kind.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric())
        && kind.chars().any(|c| c.is_ascii_lowercase())
}

/// `v1`, `v2beta3`, `v1alpha1`.
fn is_api_version(version: &str) -> bool {
    let Some(rest) = version.strip_prefix('v') else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    if digits == 0 || rest.starts_with('0') {
        return false;
    }
    let tail = &rest[digits..];
    if tail.is_empty() {
        return true;
    }
    ["alpha", "beta"].iter().any(|stage| {
        tail.strip_prefix(stage).is_some_and(|n| {
            !n.is_empty() && !n.starts_with('0') && n.chars().all(|c| c.is_ascii_digit())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(name: &str, group: &str, kind: &str, owns: &[&str]) -> PluginNewArgs {
        PluginNewArgs {
            name: name.into(),
            group: group.into(),
            kind: kind.into(),
            version: "v1alpha1".into(),
            owns: owns.iter().map(ToString::to_string).collect(),
            dir: None,
            lang: Lang::Rust,
            sdk: Some(PathBuf::from("/sdk")),
            sdk_version: None,
        }
    }

    #[test]
    fn names_are_checked_with_errors_that_say_the_rule() {
        let ok = |a: PluginNewArgs| Scaffold::new(&a).map(|_| ());
        assert!(ok(args("greeter", "example.com", "Greeter", &[])).is_ok());
        let bad_name = ok(args("Greeter_1", "example.com", "Greeter", &[])).unwrap_err();
        assert!(bad_name.to_string().contains("DNS") || bad_name.to_string().contains("lowercase"));
        let bad_group = ok(args("greeter", "example", "Greeter", &[])).unwrap_err();
        assert!(
            bad_group.to_string().contains("at least one dot"),
            "{bad_group}"
        );
        let bad_kind = ok(args("greeter", "example.com", "greeter", &[])).unwrap_err();
        assert!(bad_kind.to_string().contains("CamelCase"), "{bad_kind}");
        let unknown = ok(args("greeter", "example.com", "Greeter", &["StatefulSet"])).unwrap_err();
        assert!(
            unknown
                .to_string()
                .contains("Deployment, Service, ConfigMap"),
            "{unknown}"
        );
        let mut version = args("greeter", "example.com", "Greeter", &[]);
        version.version = "1.0".into();
        assert!(matches!(ok(version), Err(PluginNewError::Version(_))));
        // --sdk names the Rust crate: refused for the other languages.
        let mut python = args("greeter", "example.com", "Greeter", &[]);
        python.lang = Lang::Python;
        let sdk = ok(python).unwrap_err();
        assert!(
            matches!(sdk, PluginNewError::SdkFlag { flag: "--sdk", .. })
                && sdk.to_string().contains("Python plugin vendors its SDK"),
            "{sdk}"
        );
    }

    #[test]
    fn versions_plurals_and_sentences() {
        for good in ["v1", "v2beta3", "v1alpha1", "v10"] {
            assert!(is_api_version(good), "{good}");
        }
        for bad in ["1", "v0", "vbeta1", "v1beta", "v1gamma1", "v1alpha01"] {
            assert!(!is_api_version(bad), "{bad}");
        }
        assert_eq!(plural_of("Greeter"), "greeters");
        assert_eq!(plural_of("Policy"), "policies");
        assert_eq!(plural_of("Gateway"), "gateways");
        assert_eq!(plural_of("Box"), "boxes");
        assert_eq!(owns_sentence(&["Deployment"]), "a Deployment");
        assert_eq!(
            owns_sentence(&["Deployment", "Service", "ConfigMap"]),
            "a Deployment, a Service and a ConfigMap"
        );
    }

    #[test]
    fn every_placeholder_is_filled_and_children_follow_owns() {
        let scaffold = Scaffold::new(&args(
            "web-site",
            "acme.io",
            "WebSite",
            &["service", "Deployment"],
        ))
        .unwrap();
        let files = scaffold.files().unwrap();
        for (path, text) in &files {
            assert!(
                !text.contains("{{"),
                "{} keeps a placeholder",
                path.display()
            );
        }
        let file = |name: &str| {
            files
                .iter()
                .find(|(p, _)| p == Path::new(name))
                .map(|(_, t)| t.clone())
                .unwrap()
        };
        let lib = file("src/lib.rs");
        assert!(lib.contains(".owns::<Service>()") && lib.contains(".owns::<Deployment>()"));
        assert!(!lib.contains("owns::<ConfigMap>") && !lib.contains("ConfigMap {"));
        assert!(
            lib.contains("Kind::namespaced(\"acme.io\", \"v1alpha1\", \"WebSite\", \"websites\")")
        );
        assert!(file("Cargo.toml").contains("wasm-operator-sdk = { path = \"/sdk\" }"));
        // The golden fixture lists the Deployment (apps/v1) before the Service (v1).
        let expected: serde_json::Value =
            serde_yaml::from_str(&file("fixtures/basic/expected.yaml")).unwrap();
        let kinds: Vec<&str> = expected["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["Deployment", "Service"]);
        assert_eq!(expected["conditions"][0]["status"], "False");
        let input: serde_json::Value =
            serde_yaml::from_str(&file("fixtures/basic/input.yaml")).unwrap();
        assert_eq!(input["object"]["apiVersion"], "acme.io/v1alpha1");
        let sample: serde_json::Value =
            serde_yaml::from_str(&file("samples/website.yaml")).unwrap();
        assert_eq!(sample["kind"], "WebSite");
    }

    #[test]
    fn a_non_empty_directory_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "x").unwrap();
        let scaffold = Scaffold::new(&args("greeter", "example.com", "Greeter", &[])).unwrap();
        assert!(matches!(
            scaffold.write(dir.path()),
            Err(PluginNewError::Exists(_))
        ));
        let fresh = dir.path().join("greeter");
        let written = scaffold.write(&fresh).unwrap();
        assert!(written.iter().any(|p| p.ends_with("src/lib.rs")));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keep")).unwrap(),
            "x"
        );
    }
}
