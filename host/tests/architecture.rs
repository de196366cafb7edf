//! The host's module graph follows the data flow: watch → queue → plugin
//! call → plan → write → status. Each module of `host/src` has a rank, and a
//! module may only import (`crate::…`) modules of a lower rank. That rules
//! out both an import "backwards" in the chain and two modules importing
//! each other. A new module must be given its rank here, with the reason.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The modules, lowest first. A module may import only the ones before it.
const LAYERS: &[(&str, &str)] = &[
    (
        "util",
        "helpers with no host state (a poison-tolerant lock, text cut to a limit)",
    ),
    (
        "contract",
        "the host's types of the WIT contract: what everything else speaks",
    ),
    (
        "engine",
        "wasmtime: compiling, sandboxing and calling one plugin version",
    ),
    (
        "telemetry",
        "metrics and logs: a sink every later stage reports to (observes engine calls)",
    ),
    (
        "lease",
        "leader election: the Lease, the write gate every writer consults (reports to telemetry)",
    ),
    (
        "cache",
        "watch: shared reflectors and their indexes; answers the engine's cache reads",
    ),
    (
        "oci",
        "fetching plugin components from registries (no host state)",
    ),
    (
        "registry",
        "plugin versions: prepare a candidate, activate it, version sets",
    ),
    (
        "plan",
        "pure: a plugin's answer plus observed state becomes a plan of writes",
    ),
    (
        "apply",
        "write: executes a plan (SSA, prune, status, events, finalizers)",
    ),
    (
        "migration",
        "the upgrade walk: an upgrade call, its plan and its write",
    ),
    (
        "webhook",
        "CRD conversion: serves ConversionReviews from the registry's stable versions, the round-trip gate the WasmPlugin controller runs",
    ),
    (
        "controller",
        "queue: one kube-runtime Controller per plugin, calling → planning → writing",
    ),
    (
        "wasmplugin",
        "the WasmPlugin controller: sources, loads into the registry, status",
    ),
    (
        "manager",
        "the composition root: what runs on every replica, what only where it may write",
    ),
    (
        "dev",
        "`wasm-operator dev`: the embedded devcluster around a manager",
    ),
    ("cli", "the command line: parses arguments, calls the above"),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `host/src` belongs to (`None` for lib.rs
/// and main.rs).
fn module_of(file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src_dir()).ok()?;
    let mut parts = relative.components();
    let first = parts.next()?.as_os_str().to_str()?.to_string();
    if parts.next().is_some() {
        return Some(first);
    }
    let stem = first.strip_suffix(".rs")?;
    (!matches!(stem, "lib" | "main")).then(|| stem.to_string())
}

/// Every `crate::<module>` named in code (comments are skipped, so rustdoc
/// links to later modules are allowed).
fn imports(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn modules_import_only_earlier_stages() {
    let rank: BTreeMap<&str, usize> = LAYERS
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (*name, i))
        .collect();
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    assert!(
        !files.is_empty(),
        "no sources under {}",
        src_dir().display()
    );
    let mut problems = Vec::new();
    for file in &files {
        let Some(module) = module_of(file) else {
            continue;
        };
        let Some(&own) = rank.get(module.as_str()) else {
            problems.push(format!(
                "module `{module}` ({}) has no place in LAYERS of tests/architecture.rs: give it one",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for imported in imports(&text) {
            if imported == module {
                continue;
            }
            match rank.get(imported.as_str()) {
                Some(&other) if other < own => {}
                Some(_) => problems.push(format!(
                    "{} imports crate::{imported}, which comes later in the chain than `{module}`",
                    file.display()
                )),
                None => problems.push(format!(
                    "{} imports crate::{imported}, a module with no place in LAYERS",
                    file.display()
                )),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_layer_exists() {
    let src = src_dir();
    let missing: Vec<&str> = LAYERS
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !src.join(name).is_dir() && !src.join(format!("{name}.rs")).is_file())
        .collect();
    assert!(
        missing.is_empty(),
        "LAYERS names modules that do not exist: {missing:?}"
    );
}
