//! `wasm-operator plugin new` and `wasm-operator dev` inside the crate it
//! writes, as a plugin author runs them: scaffold into a clean temporary
//! directory, build it offline against the workspace's SDK, serve it with
//! `dev` (the CRD it carries installed, its sample reconciled), then edit
//! its source and see the rebuilt plugin swapped in. The Python and
//! TypeScript scaffolds (`--lang`) are built with their own build.sh and
//! their golden fixture run by `plugin test`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use serde_json::Value;
use wasm_operator::cli::connect::connect;

use crate::common::{ChildGuard, binary, eventually, run_binary, workspace};
use crate::support;

const GROUP: &str = "scaffold.example.com";

/// The target directory scaffolded crates build into: shared across test
/// runs so only the first build compiles the dependencies.
fn scaffold_target() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
        .join("scaffold")
}

#[test]
fn plugin_new_refuses_names_people_must_fix() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("p");
    let target = target.to_str().unwrap();
    for (args, says) in [
        (
            [
                "bad", "--group", "example", "--kind", "Greeter", "--owns", "Service",
            ],
            "at least one dot",
        ),
        (
            [
                "bad",
                "--group",
                "example.com",
                "--kind",
                "greeter",
                "--owns",
                "Service",
            ],
            "CamelCase",
        ),
        (
            [
                "Bad_Name",
                "--group",
                "example.com",
                "--kind",
                "Greeter",
                "--owns",
                "Service",
            ],
            "lowercase letters",
        ),
        (
            [
                "bad",
                "--group",
                "example.com",
                "--kind",
                "Greeter",
                "--owns",
                "CronJob",
            ],
            "Deployment, Service, ConfigMap",
        ),
    ] {
        let output =
            run_binary(&[&["plugin", "new"][..], &args[..], &["--dir", target][..]].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!Path::new(target).exists(), "{args:?} wrote files");
    }
}

/// `--sdk` names the Rust SDK crate: refused, with the reason, for a
/// Python or TypeScript plugin.
#[test]
fn plugin_new_refuses_the_rust_sdk_flags_for_other_languages() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("p");
    let target = target.to_str().unwrap();
    for (lang, flag, value) in [
        ("python", "--sdk", "/sdk"),
        ("typescript", "--sdk-version", "1.0.0"),
    ] {
        let output = run_binary(&[
            "plugin", "new", "bad", "--lang", lang, "--group", GROUP, "--kind", "Greeter", flag,
            value, "--dir", target,
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{lang} {flag} was accepted");
        assert!(
            stderr.contains(&format!("{flag} chooses the Rust SDK crate")),
            "{lang}: {stderr}"
        );
        assert!(!Path::new(target).exists(), "{lang} {flag} wrote files");
    }
}

/// Where `scripts/install-lang-tools.sh` put the Python and TypeScript
/// toolchains (scripts/test.sh runs it before the tests).
fn lang_tools() -> PathBuf {
    std::env::var_os("WASM_OPERATOR_LANG_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target").join("lang-tools"))
}

/// Scaffolds a `greeter` in `lang` owning all three kinds into a temporary
/// directory outside the workspace, builds it with the `build.sh` it wrote
/// (the repository's pinned toolchain named by `tool_env`, the override the
/// script offers, so nothing is downloaded), and runs the golden fixture it
/// wrote against the component through `plugin test`.
fn scaffold_build_and_test(lang: &str, tool_env: &str, tool: &Path) {
    assert!(
        tool.is_file(),
        "{} is missing: run scripts/install-lang-tools.sh (scripts/test.sh does)",
        tool.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("greeter");
    let output = run_binary(&[
        "plugin",
        "new",
        "greeter",
        "--lang",
        lang,
        "--group",
        GROUP,
        "--kind",
        "Greeter",
        "--owns",
        "Deployment,Service,ConfigMap",
        "--dir",
        project.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "plugin new --lang {lang} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("./build.sh"), "{stdout}");

    // The hand-written CRD is one the API server takes, of this kind.
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&std::fs::read_to_string(project.join("crd.yaml")).unwrap()).unwrap();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some(format!("greeters.{GROUP}").as_str())
    );
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    let properties = &schema["openAPIV3Schema"]["properties"];
    for field in ["image", "replicas", "port", "message"] {
        assert!(
            properties["spec"]["properties"][field].is_object(),
            "{field}: {schema}"
        );
    }

    let started = Instant::now();
    let build = Command::new(project.join("build.sh"))
        .current_dir(&project)
        .env(tool_env, tool)
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "the scaffolded {lang} plugin does not build: {}{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    let wasm = project.join("greeter.wasm");
    eprintln!(
        "scaffolded {lang} plugin built in {:?}; greeter.wasm is {} bytes",
        started.elapsed(),
        std::fs::metadata(&wasm).unwrap().len()
    );

    assert_fixture_passes(&wasm, &project.join("fixtures"), lang);
}

/// `plugin test` of the one golden fixture a scaffold writes passes against
/// the component it built (the production engine, in process).
fn assert_fixture_passes(wasm: &Path, fixtures: &Path, lang: &str) {
    let tested = run_binary(&[
        "plugin",
        "test",
        wasm.to_str().unwrap(),
        fixtures.to_str().unwrap(),
    ]);
    let report = String::from_utf8_lossy(&tested.stdout);
    assert!(
        tested.status.success() && report.contains("1 passed, 0 failed"),
        "plugin test of the {lang} scaffold's fixtures: {report}{}",
        String::from_utf8_lossy(&tested.stderr)
    );
}

#[test]
fn a_scaffolded_python_plugin_builds_outside_the_repository_and_passes_its_fixture() {
    if !support::once_per_run(
        "a_scaffolded_python_plugin_builds_outside_the_repository_and_passes_its_fixture",
    ) {
        return;
    }
    scaffold_build_and_test(
        "python",
        "COMPONENTIZE_PY",
        &lang_tools().join("py/bin/componentize-py"),
    );
}

#[test]
fn a_scaffolded_typescript_plugin_builds_outside_the_repository_and_passes_its_fixture() {
    if !support::once_per_run(
        "a_scaffolded_typescript_plugin_builds_outside_the_repository_and_passes_its_fixture",
    ) {
        return;
    }
    scaffold_build_and_test(
        "typescript",
        "JCO",
        &lang_tools().join("node_modules/.bin/jco"),
    );
}

/// Scaffolds `greeter` owning all three kinds into `dir` and builds it
/// offline; returns the crate's directory.
fn scaffold_and_build(dir: &Path) -> PathBuf {
    let crate_dir = dir.join("greeter");
    let output = run_binary(&[
        "plugin",
        "new",
        "greeter",
        "--group",
        GROUP,
        "--kind",
        "Greeter",
        "--owns",
        "Deployment,Service,ConfigMap",
        "--dir",
        crate_dir.to_str().unwrap(),
        "--sdk",
        workspace().join("sdk").to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "plugin new failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("cargo build --release --target wasm32-wasip2"),
        "{stdout}"
    );
    // The workspace's lock file pins versions every dependency is cached at.
    std::fs::copy(workspace().join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
    let started = Instant::now();
    let build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args([
            "build",
            "--offline",
            "--release",
            "--target",
            "wasm32-wasip2",
        ])
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", scaffold_target())
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "the scaffolded crate does not build: {}",
        String::from_utf8_lossy(&build.stderr)
    );
    let wasm = scaffold_target().join("wasm32-wasip2/release/greeter.wasm");
    let bytes = std::fs::read(&wasm).unwrap();
    eprintln!(
        "scaffolded crate built in {:?}; greeter.wasm is {} bytes",
        started.elapsed(),
        bytes.len()
    );
    // The crate's build.rs gave the component's main module 2 MiB of
    // initial memory (32 pages), as the workspace's plugins have.
    assert!(
        core_memories(&bytes).contains(&32),
        "greeter.wasm's initial memory is not 2 MiB: {:?} pages",
        core_memories(&bytes)
    );
    crate_dir
}

/// An unsigned LEB128 at `at`: the value and the offset after it.
fn leb(bytes: &[u8], mut at: usize) -> (usize, usize) {
    let (mut value, mut shift) = (0usize, 0);
    loop {
        let byte = bytes[at];
        at += 1;
        value |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte < 0x80 {
            return (value, at);
        }
    }
}

/// The initial page counts of every memory of every core module of a
/// component (component section 1 holds a core module; its section 5 the
/// memories).
fn core_memories(component: &[u8]) -> Vec<usize> {
    let sections = |bytes: &[u8]| {
        let mut out = Vec::new();
        let mut at = 8;
        while at < bytes.len() {
            let id = bytes[at];
            let (size, start) = leb(bytes, at + 1);
            out.push((id, start..start + size));
            at = start + size;
        }
        out
    };
    let mut pages = Vec::new();
    for (_, module) in sections(component).into_iter().filter(|(id, _)| *id == 1) {
        let module = &component[module];
        for (_, memories) in sections(module).into_iter().filter(|(id, _)| *id == 5) {
            let body = &module[memories];
            let (count, mut at) = leb(body, 0);
            for _ in 0..count {
                let flags = body[at];
                let (min, next) = leb(body, at + 1);
                pages.push(min);
                // Bit 0 of the flags: a maximum follows.
                at = if flags & 1 == 1 {
                    leb(body, next).1
                } else {
                    next
                };
            }
        }
    }
    pages
}

/// Reads `dev`'s stdout until the kubectl hint; returns the banner.
fn banner(lines: &mpsc::Receiver<String>) -> Vec<String> {
    let mut banner = Vec::new();
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(600))
            .expect("dev printed no banner");
        let done = line.starts_with("Save a file");
        banner.push(line);
        if done {
            return banner;
        }
    }
}

/// True when every field of `expected` is in `actual` with the same value
/// (lists element by element): the API server adds defaults and owners.
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, v)| a.get(k).is_some_and(|av| contains(av, v))),
        (Value::Array(a), Value::Array(e)) => {
            a.len() == e.len() && a.iter().zip(e).all(|(av, ev)| contains(av, ev))
        }
        _ => actual == expected,
    }
}

fn spawn_lines<R: std::io::Read + Send + 'static>(from: R, echo: bool) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines().map_while(Result::ok) {
            if echo {
                eprintln!("dev: {line}");
            }
            if tx.send(line).is_err() && !echo {
                break;
            }
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scaffolded_plugin_builds_offline_and_dev_serves_and_hot_swaps_it() {
    if !support::once_per_run("a_scaffolded_plugin_builds_offline_and_dev_serves_and_hot_swaps_it")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let crate_dir = scaffold_and_build(dir.path());

    // The golden fixture the scaffold wrote passes against the component
    // it built, through `plugin test` (the production engine, in process).
    let wasm = scaffold_target().join("wasm32-wasip2/release/greeter.wasm");
    assert_fixture_passes(&wasm, &crate_dir.join("fixtures"), "Rust");

    let mut child = Command::new(binary())
        .args(["dev", "--port", "0", "--debounce-ms", "200"])
        .current_dir(&crate_dir)
        .env("CARGO_TARGET_DIR", scaffold_target())
        .env("CARGO_NET_OFFLINE", "true")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = spawn_lines(child.stdout.take().unwrap(), false);
    let stderr = spawn_lines(child.stderr.take().unwrap(), true);
    let child = ChildGuard(Some(child));

    let banner = tokio::task::spawn_blocking(move || banner(&stdout))
        .await
        .unwrap()
        .join("\n");
    let kubeconfig = banner
        .lines()
        .find_map(|l| l.trim().strip_prefix("kubeconfig: "))
        .unwrap_or_else(|| panic!("no kubeconfig line: {banner}"))
        .to_string();
    assert!(banner.contains("plugin greeter 0.1.0"), "{banner}");
    assert!(
        banner.contains(&format!(
            "kubectl --kubeconfig {kubeconfig} get greeters,deployments,services,configmaps -A"
        )),
        "{banner}"
    );
    assert!(banner.contains("wasm-operator plugin test"), "{banner}");

    let client = connect(Some(Path::new(&kubeconfig)), None).await.unwrap();
    // The CRD came from the plugin: its spec schema is the author's type.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get(&format!("greeters.{GROUP}")).await.unwrap();
    let crd = serde_json::to_value(crd).unwrap();
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
    assert!(schema["spec"]["properties"]["image"].is_object(), "{crd}");
    // Installed by the host (permissions.crds), not by dev.
    let managers: Vec<&str> = crd["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert!(managers.contains(&"wasm-operator/crds"), "{managers:?}");
    assert!(
        schema["status"]["properties"]["conditions"].is_object(),
        "{crd}"
    );

    // The sample is reconciled: the children of the golden fixture exist
    // as the fixture says, and the status turns Ready once the simulated
    // Deployment is.
    let expected: Value = serde_yaml::from_str(
        &std::fs::read_to_string(crate_dir.join("fixtures/basic/expected.yaml")).unwrap(),
    )
    .unwrap();
    for child in expected["children"].as_array().unwrap() {
        let api_version = child["apiVersion"].as_str().unwrap();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, child["kind"].as_str().unwrap());
        let plural = format!("{}s", gvk.kind.to_ascii_lowercase());
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            "default",
            &ApiResource::from_gvk_with_plural(&gvk, &plural),
        );
        let what = format!("{} sample as fixtures/basic/expected.yaml has it", gvk.kind);
        eventually(Duration::from_secs(180), &what, || {
            let api = api.clone();
            async move {
                let found = api.get_opt("sample").await.ok()??;
                let found = serde_json::to_value(found).ok()?;
                contains(&found, child).then_some(())
            }
        })
        .await;
    }
    let greeters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, "v1alpha1", "Greeter"),
            "greeters",
        ),
    );
    eventually(Duration::from_secs(180), "Greeter sample Ready", || {
        let greeters = greeters.clone();
        async move {
            let greeter = greeters.get("sample").await.ok()?;
            let ready = greeter.data["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            (ready && greeter.data["status"]["phase"] == "Running").then_some(())
        }
    })
    .await;

    // A build that fails prints the compiler's error and keeps serving.
    let lib = crate_dir.join("src/lib.rs");
    let source = std::fs::read_to_string(&lib).unwrap();
    std::fs::write(&lib, format!("{source}\nfn broken( {{\n")).unwrap();
    let reported = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            if let Ok(line) = stderr.recv_timeout(Duration::from_secs(5))
                && line.contains("keeps serving")
            {
                return (true, stderr);
            }
        }
        (false, stderr)
    })
    .await
    .unwrap();
    let (failed_reported, _stderr) = reported;
    assert!(failed_reported, "dev did not report the failed build");
    let greeter = greeters.get("sample").await.unwrap();
    assert_eq!(greeter.data["status"]["phase"], "Running");

    // A fixed edit (a new label on every child) is rebuilt and swapped in.
    let edited = source.replace(
        "    let mut labels = selector(name);\n",
        "    let mut labels = selector(name);\n    labels.insert(\"edited\".to_owned(), \"yes\".to_owned());\n",
    );
    assert_ne!(edited, source, "the labels function moved in the template");
    std::fs::write(&lib, edited).unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually(
        Duration::from_secs(300),
        "the rebuilt plugin's label on Deployment sample",
        || {
            let deployments = deployments.clone();
            async move {
                let deployment = deployments.get("sample").await.ok()?;
                let labels = deployment.metadata.labels?;
                (labels.get("edited").map(String::as_str) == Some("yes")).then_some(())
            }
        },
    )
    .await;
    assert!(child.terminate(), "dev did not stop cleanly");
}
