//! `wasm-operator plugin new --lang python|typescript`: the Python and
//! TypeScript projects, next to the Rust crate `plugin_new` writes. Each
//! builds as it is, outside this repository: the app (the same reconcile as
//! the Rust template: one child per owned kind, a status and a `Ready`
//! condition), the SDK vendored from this repository, `wit/plugin.wit`, a
//! `build.sh` with the toolchain versions `scripts/install-lang-tools.sh`
//! pins, and a hand-written `crd.yaml` (these SDKs derive no CRD). The
//! golden fixture and the sample are the Rust template's, passed in by the
//! caller with the other shared values. Templates are under
//! `host/templates/plugin-python/` and `host/templates/plugin-typescript/`.

use std::path::PathBuf;

use clap::ValueEnum;

/// The language of the plugin `plugin new` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// A Rust crate on the `wasm-operator-sdk` crate (cargo).
    Rust,
    /// A Python module on the vendored Python SDK (componentize-py).
    #[value(alias = "py")]
    Python,
    /// A TypeScript module on the vendored TypeScript SDK (jco).
    #[value(alias = "ts")]
    Typescript,
}

impl Lang {
    /// The language's name for people.
    pub fn name(self) -> &'static str {
        match self {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Typescript => "TypeScript",
        }
    }
}

/// Why a Python or TypeScript project cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum LangError {
    /// `scripts/install-lang-tools.sh`, compiled in, lost a pin: a defect of
    /// this binary's build, not of the arguments.
    #[error(
        "this wasm-operator binary was built without the pinned {0} version (scripts/install-lang-tools.sh has no `{0}=` line); rebuild it from a complete checkout"
    )]
    Pin(&'static str),
}

/// The toolchain pins, compiled in from the script that installs the
/// repository's own toolchains, so a scaffold builds with what CI builds.
const INSTALL_LANG_TOOLS: &str = include_str!("../../../scripts/install-lang-tools.sh");

/// The WIT contract, as the repository has it.
const PLUGIN_WIT: &str = include_str!("../../../wit/plugin.wit");

/// The Python SDK, vendored into every Python project.
const SDK_PY: &str = include_str!("../../../sdk-py/wasm_operator/__init__.py");

/// The TypeScript SDK and its WIT types, vendored into every TypeScript
/// project under `sdk-ts/` (the layout the SDK's relative imports expect).
const SDK_TS: [(&str, &str); 6] = [
    (
        "sdk-ts/src/index.ts",
        include_str!("../../../sdk-ts/src/index.ts"),
    ),
    (
        "sdk-ts/types/reconciler-plugin.d.ts",
        include_str!("../../../sdk-ts/types/reconciler-plugin.d.ts"),
    ),
    (
        "sdk-ts/types/interfaces/wasm-operator-plugin-cache.d.ts",
        include_str!("../../../sdk-ts/types/interfaces/wasm-operator-plugin-cache.d.ts"),
    ),
    (
        "sdk-ts/types/interfaces/wasm-operator-plugin-log.d.ts",
        include_str!("../../../sdk-ts/types/interfaces/wasm-operator-plugin-log.d.ts"),
    ),
    (
        "sdk-ts/types/interfaces/wasm-operator-plugin-reconciler.d.ts",
        include_str!("../../../sdk-ts/types/interfaces/wasm-operator-plugin-reconciler.d.ts"),
    ),
    (
        "sdk-ts/types/interfaces/wasm-operator-plugin-types.d.ts",
        include_str!("../../../sdk-ts/types/interfaces/wasm-operator-plugin-types.d.ts"),
    ),
];

/// A child kind in Python's and TypeScript's terms.
struct LangChild {
    kind: &'static str,
    /// The SDK's constant for the kind (the same name in both SDKs).
    constant: &'static str,
    /// The call adding the child in `reconcile`, Python.
    py_call: &'static str,
    /// The function building it, Python.
    py_function: &'static str,
    /// The call adding the child in `reconcile`, TypeScript.
    ts_call: &'static str,
    /// The function building it, TypeScript.
    ts_function: &'static str,
}

const LANG_CHILDREN: [LangChild; 3] = [
    LangChild {
        kind: "Deployment",
        constant: "DEPLOYMENT",
        py_call: "desired.child(deployment(meta, spec))",
        py_function: include_str!("../../templates/plugin-python/deployment.py.tmpl"),
        ts_call: "desired.child(deployment(meta, spec));",
        ts_function: include_str!("../../templates/plugin-typescript/deployment.ts.tmpl"),
    },
    LangChild {
        kind: "Service",
        constant: "SERVICE",
        py_call: "desired.child(service(meta, spec))",
        py_function: include_str!("../../templates/plugin-python/service.py.tmpl"),
        ts_call: "desired.child(service(meta, spec));",
        ts_function: include_str!("../../templates/plugin-typescript/service.ts.tmpl"),
    },
    LangChild {
        kind: "ConfigMap",
        constant: "CONFIG_MAP",
        py_call: "desired.child(config_map(meta, spec))",
        py_function: include_str!("../../templates/plugin-python/configmap.py.tmpl"),
        ts_call: "desired.child(configMap(meta, spec));",
        ts_function: include_str!("../../templates/plugin-typescript/configmap.ts.tmpl"),
    },
];

/// The version `scripts/install-lang-tools.sh` pins as `variable=VERSION`.
fn pin(variable: &'static str) -> Result<String, LangError> {
    INSTALL_LANG_TOOLS
        .lines()
        .find_map(|line| line.trim().strip_prefix(variable)?.strip_prefix('='))
        .map(|version| version.trim().to_string())
        .filter(|version| !version.is_empty())
        .ok_or(LangError::Pin(variable))
}

/// The files of a Python or TypeScript project for the owned kinds `owns`
/// (as validated by the caller, in the order given), filled from `values`:
/// the placeholders every language shares (`name`, `group`, `kind`,
/// `version`, `plural`, `owns_sentence`). Path relative to the project's
/// root, and contents. `Lang::Rust` has none here: its crate is
/// `plugin_new`'s.
///
/// # Errors
///
/// [`LangError::Pin`] when this binary lacks a toolchain pin.
pub fn files(
    lang: Lang,
    owns: &[&str],
    values: &[(&str, String)],
) -> Result<Vec<(PathBuf, String)>, LangError> {
    let children: Vec<&LangChild> = owns
        .iter()
        .filter_map(|kind| LANG_CHILDREN.iter().find(|c| c.kind == *kind))
        .collect();
    let with_deployment = owns.contains(&"Deployment");
    let kind = values
        .iter()
        .find(|(key, _)| *key == "kind")
        .map(|(_, kind)| kind.to_ascii_lowercase())
        .unwrap_or_default();
    let mut values = values.to_vec();
    values.push(("singular", kind));
    let mut files = vec![
        ("wit/plugin.wit".to_string(), PLUGIN_WIT.to_string()),
        (
            "crd.yaml".to_string(),
            fill(
                include_str!("../../templates/plugin/crd.yaml.tmpl"),
                &values,
            ),
        ),
    ];
    match lang {
        Lang::Rust => return Ok(Vec::new()),
        Lang::Python => {
            values.extend(python_values(&children, with_deployment)?);
            let template = |text: &str| fill(text, &values);
            files.extend([
                (
                    "app.py".to_string(),
                    template(include_str!("../../templates/plugin-python/app.py.tmpl")),
                ),
                ("wasm_operator/__init__.py".to_string(), SDK_PY.to_string()),
                (
                    "build.sh".to_string(),
                    template(include_str!("../../templates/plugin-python/build.sh.tmpl")),
                ),
                (
                    ".gitignore".to_string(),
                    template(include_str!("../../templates/plugin-python/gitignore.tmpl")),
                ),
                (
                    "README.md".to_string(),
                    template(include_str!("../../templates/plugin-python/README.md.tmpl")),
                ),
            ]);
        }
        Lang::Typescript => {
            values.extend(typescript_values(&children, with_deployment)?);
            let template = |text: &str| fill(text, &values);
            files.extend(SDK_TS.iter().map(|(p, t)| (p.to_string(), t.to_string())));
            files.extend([
                (
                    "app.ts".to_string(),
                    template(include_str!(
                        "../../templates/plugin-typescript/app.ts.tmpl"
                    )),
                ),
                (
                    "package.json".to_string(),
                    template(include_str!(
                        "../../templates/plugin-typescript/package.json.tmpl"
                    )),
                ),
                (
                    "tsconfig.check.json".to_string(),
                    template(include_str!(
                        "../../templates/plugin-typescript/tsconfig.check.json.tmpl"
                    )),
                ),
                (
                    "build.sh".to_string(),
                    template(include_str!(
                        "../../templates/plugin-typescript/build.sh.tmpl"
                    )),
                ),
                (
                    ".gitignore".to_string(),
                    template(include_str!(
                        "../../templates/plugin-typescript/gitignore.tmpl"
                    )),
                ),
                (
                    "README.md".to_string(),
                    template(include_str!(
                        "../../templates/plugin-typescript/README.md.tmpl"
                    )),
                ),
            ]);
        }
    }
    Ok(files
        .into_iter()
        .map(|(path, text)| (PathBuf::from(path), text))
        .collect())
}

/// The placeholders both languages fill alike, from one language's column
/// of [`LANG_CHILDREN`]: the SDK imports (the children's constants, sorted,
/// then `base_imports`), the owned kinds, the calls adding the children in
/// `reconcile` (`call`), and the functions building them (`function`)
/// followed by the readiness function (`ready_deployment` when a Deployment
/// is owned, else `ready_children`).
struct CodeValues {
    imports: String,
    owns: String,
    calls: String,
    functions: String,
}

impl CodeValues {
    fn of(
        children: &[&LangChild],
        base_imports: &[&str],
        call: fn(&LangChild) -> &'static str,
        function: fn(&LangChild) -> &'static str,
        ready: (&str, &str),
        with_deployment: bool,
    ) -> CodeValues {
        let mut imports: Vec<&str> = children.iter().map(|c| c.constant).collect();
        imports.sort_unstable();
        imports.extend(base_imports);
        let mut functions: String = children.iter().map(|c| function(c)).collect();
        functions.push_str(if with_deployment { ready.0 } else { ready.1 });
        CodeValues {
            imports: imports.join(", "),
            owns: constants(children),
            calls: children
                .iter()
                .map(|c| format!("    {}\n", call(c)))
                .collect(),
            functions,
        }
    }
}

/// The Python placeholders: imports, owned kinds, the calls adding the
/// children, the functions building them, the toolchain pin.
fn python_values(
    children: &[&LangChild],
    with_deployment: bool,
) -> Result<Vec<(&'static str, String)>, LangError> {
    let code = CodeValues::of(
        children,
        &[
            "Children",
            "Condition",
            "Desired",
            "Failure",
            "Kind",
            "Plugin",
        ],
        |c| c.py_call,
        |c| c.py_function,
        (
            include_str!("../../templates/plugin-python/ready_deployment.py.tmpl"),
            include_str!("../../templates/plugin-python/ready_children.py.tmpl"),
        ),
        with_deployment,
    );
    Ok(vec![
        ("py_imports", code.imports),
        ("py_owns", code.owns),
        ("py_children", code.calls),
        ("py_functions", code.functions),
        ("componentize_py_version", pin("componentize_py_version")?),
    ])
}

/// The TypeScript placeholders: imports, owned kinds, the calls adding the
/// children, the functions building them, the toolchain pins.
fn typescript_values(
    children: &[&LangChild],
    with_deployment: bool,
) -> Result<Vec<(&'static str, String)>, LangError> {
    let code = CodeValues::of(
        children,
        &[
            "Children",
            "Condition",
            "Desired",
            "Failure",
            "KubeObject",
            "namespaced",
            "plugin",
            "ready",
        ],
        |c| c.ts_call,
        |c| c.ts_function,
        (
            include_str!("../../templates/plugin-typescript/ready_deployment.ts.tmpl"),
            include_str!("../../templates/plugin-typescript/ready_children.ts.tmpl"),
        ),
        with_deployment,
    );
    Ok(vec![
        ("ts_imports", code.imports),
        ("ts_owns", code.owns),
        ("ts_children", code.calls),
        ("ts_functions", code.functions),
        ("jco_version", pin("jco_version")?),
        ("componentize_js_version", pin("componentize_js_version")?),
        ("typescript_version", pin("typescript_version")?),
        ("preview2_shim_version", pin("preview2_shim_version")?),
    ])
}

/// `DEPLOYMENT, SERVICE`: the SDK constants of the owned kinds, in order.
fn constants(children: &[&LangChild]) -> String {
    children
        .iter()
        .map(|c| c.constant)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What to run next in a new project of `lang` written to `dir`, one
/// command a line (with a comment); Rust's are `plugin_new`'s.
pub fn next_steps(lang: Lang, dir: &str, name: &str) -> Vec<String> {
    let built = match lang {
        Lang::Rust => return Vec::new(),
        Lang::Python => "componentize-py is installed into .venv on the first run",
        Lang::Typescript => "jco and tsc are installed into node_modules on the first run",
    };
    vec![
        format!("cd {dir}"),
        format!("./build.sh                 # {name}.wasm; {built}"),
        format!("wasm-operator plugin test {name}.wasm fixtures"),
        "kubectl apply -f crd.yaml  # the CRD, written by hand".to_string(),
        format!("wasm-operator run --plugin {name}.wasm"),
    ]
}

/// `template` with every `{{key}}` of `values` replaced. Two passes: the
/// code and fixture snippets filled in hold placeholders themselves.
pub fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for _ in 0..2 {
        for (key, value) in values {
            out = out.replace(&format!("{{{{{key}}}}}"), value);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values() -> Vec<(&'static str, String)> {
        vec![
            ("name", "web-site".to_string()),
            ("group", "acme.io".to_string()),
            ("kind", "WebSite".to_string()),
            ("version", "v1alpha1".to_string()),
            ("plural", "websites".to_string()),
            ("owns_sentence", "a Deployment and a Service".to_string()),
        ]
    }

    fn file(files: &[(PathBuf, String)], name: &str) -> String {
        files
            .iter()
            .find(|(p, _)| p == &PathBuf::from(name))
            .map_or_else(|| panic!("no {name}"), |(_, t)| t.clone())
    }

    #[test]
    fn every_pin_of_the_install_script_is_found() {
        for variable in [
            "componentize_py_version",
            "jco_version",
            "componentize_js_version",
            "typescript_version",
            "preview2_shim_version",
        ] {
            let version = pin(variable).unwrap();
            assert!(
                version.chars().next().is_some_and(|c| c.is_ascii_digit()),
                "{variable}={version}"
            );
        }
        assert!(matches!(pin("no_such_version"), Err(LangError::Pin(_))));
    }

    #[test]
    fn python_and_typescript_projects_hold_their_children_and_no_placeholder() {
        for lang in [Lang::Python, Lang::Typescript] {
            let files = files(lang, &["Service", "Deployment"], &values()).unwrap();
            for (path, text) in &files {
                assert!(
                    !text.contains("{{") || path.starts_with("sdk-ts"),
                    "{lang:?}: {} keeps a placeholder",
                    path.display()
                );
            }
            let crd: serde_json::Value = serde_yaml::from_str(&file(&files, "crd.yaml")).unwrap();
            assert_eq!(crd["metadata"]["name"], "websites.acme.io");
            assert_eq!(crd["spec"]["names"]["singular"], "website");
            assert_eq!(file(&files, "wit/plugin.wit"), PLUGIN_WIT);
            let build = file(&files, "build.sh");
            assert!(build.contains("web-site.wasm"), "{build}");
            let app = match lang {
                Lang::Python => {
                    assert_eq!(file(&files, "wasm_operator/__init__.py"), SDK_PY);
                    assert!(build.contains(&pin("componentize_py_version").unwrap()));
                    file(&files, "app.py")
                }
                _ => {
                    let package: serde_json::Value =
                        serde_json::from_str(&file(&files, "package.json")).unwrap();
                    assert_eq!(
                        package["devDependencies"]["@bytecodealliance/jco"],
                        pin("jco_version").unwrap()
                    );
                    file(&files, "app.ts")
                }
            };
            assert!(app.contains("SERVICE, DEPLOYMENT"), "{app}");
            assert!(app.contains("ReplicasNotReady") && !app.contains("ChildrenApplied"));
            assert!(!app.contains("config_map(") && !app.contains("configMap("));
        }
        assert!(
            files(Lang::Rust, &["Service"], &values())
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn without_a_deployment_the_children_are_ready_once_applied() {
        let files = files(Lang::Python, &["ConfigMap"], &values()).unwrap();
        let app = file(&files, "app.py");
        assert!(app.contains("ChildrenApplied") && !app.contains("DEPLOYMENT"));
        assert!(app.contains("from wasm_operator import CONFIG_MAP, Children"));
    }
}
