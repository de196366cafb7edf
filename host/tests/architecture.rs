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
        "backup",
        "Backup and Restore: pure schedules, names, retention and Jobs; the runner beside each plugin's controller that writes them",
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

/// The code of `text` without `//` comments (rustdoc links may name anything).
fn code_only(text: &str) -> String {
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `code` names `name` as a whole path segment right after `prefix`
/// (`super::name`, `crate::cache::name`), or inside a `prefix{…}` group.
fn names_after(code: &str, prefix: &str, name: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        // `super::` must not be the tail of a longer path (`super::super::`
        // is checked by its own prefix).
        let before_ok = prefix.starts_with("crate")
            || rest[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !is_word(c) && c != ':');
        rest = &rest[at + prefix.len()..];
        if !before_ok {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            if inner
                .split(|c: char| !is_word(c))
                .any(|segment| segment == name)
            {
                return true;
            }
            continue;
        }
        let segment: String = rest.chars().take_while(|c| is_word(*c)).collect();
        if segment == name {
            return true;
        }
    }
    false
}

/// The files and subfolders of one folder of `host/src` (its `mod.rs`, the
/// folder's root, left out) with the code each contains.
fn siblings(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if path.is_dir() {
            let mut files = Vec::new();
            rust_files(&path, &mut files);
            // The subfolder's own mod.rs reaches its siblings through
            // `super::`, its other files through `super::super::`: say
            // both the second way.
            let code = files
                .iter()
                .map(|f| {
                    let code = code_only(&std::fs::read_to_string(f).unwrap_or_default());
                    if f.parent() == Some(path.as_path()) && f.ends_with("mod.rs") {
                        code.replace("super::", "super::super::")
                    } else {
                        code
                    }
                })
                .collect::<Vec<_>>()
                .join("\n");
            out.push((name, code));
        } else if path.extension().is_some_and(|e| e == "rs") && name != "mod" {
            out.push((
                name,
                code_only(&std::fs::read_to_string(&path).unwrap_or_default()),
            ));
        }
    }
    out.sort();
    out
}

/// Two files of one folder never import each other, directly or through
/// others: shared types live in the folder's `mod.rs` or in a leaf file both
/// import. (`mod.rs` declares its files, so it is not part of the check.)
#[test]
fn files_of_a_folder_import_each_other_in_one_direction() {
    let mut dirs = vec![src_dir()];
    let mut problems = Vec::new();
    while let Some(dir) = dirs.pop() {
        let module_path = dir
            .strip_prefix(src_dir())
            .unwrap_or(&dir)
            .components()
            .filter_map(|c| c.as_os_str().to_str())
            .collect::<Vec<_>>()
            .join("::");
        let files = siblings(&dir);
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, code) in &files {
            // A subfolder's files reach their parent's files through
            // `super::super::`.
            let up = if dir.join(name).is_dir() {
                "super::super::"
            } else {
                "super::"
            };
            for other in &names {
                if other == name {
                    continue;
                }
                let through_crate = !module_path.is_empty()
                    && names_after(code, &format!("crate::{module_path}::"), other);
                if names_after(code, up, other) || through_crate {
                    edges.entry(name.as_str()).or_default().push(other);
                }
            }
        }
        // Any cycle: a depth-first search with colours.
        fn visit<'a>(
            node: &'a str,
            edges: &BTreeMap<&'a str, Vec<&'a str>>,
            state: &mut BTreeMap<&'a str, u8>,
            stack: &mut Vec<&'a str>,
            found: &mut Vec<String>,
        ) {
            state.insert(node, 1);
            stack.push(node);
            for &next in edges.get(node).into_iter().flatten() {
                match state.get(next).copied().unwrap_or(0) {
                    0 => visit(next, edges, state, stack, found),
                    1 => {
                        let from = stack.iter().position(|n| *n == next).unwrap_or(0);
                        found.push(format!("{} -> {next}", stack[from..].join(" -> ")));
                    }
                    _ => {}
                }
            }
            stack.pop();
            state.insert(node, 2);
        }
        let mut state = BTreeMap::new();
        let mut found = Vec::new();
        for name in &names {
            if !state.contains_key(name) {
                visit(name, &edges, &mut state, &mut Vec::new(), &mut found);
            }
        }
        for cycle in found {
            problems.push(format!("{}: {cycle}", dir.display()));
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
        }
    }
    assert!(
        problems.is_empty(),
        "files of one folder import each other (move what both need to the folder's mod.rs or a leaf file):\n{}",
        problems.join("\n")
    );
}

/// Lines of `host/src` files that are not tests: a file past this is asking
/// to be split along a seam you can name.
const MAX_FILE_LINES: usize = 1_000;
/// Lines of one function outside tests.
const MAX_FUNCTION_LINES: usize = 150;

/// The lines of a file before its `#[cfg(test)]` module (test files whole
/// skipped).
fn non_test_lines(file: &Path) -> Vec<String> {
    if file.file_name().is_some_and(|n| n == "tests.rs") {
        return Vec::new();
    }
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines()
        .take_while(|line| !line.starts_with("#[cfg(test)]"))
        .map(str::to_string)
        .collect()
}

#[test]
fn files_and_functions_stay_small() {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let lines = non_test_lines(file);
        if lines.len() > MAX_FILE_LINES {
            problems.push(format!(
                "{} has {} lines outside tests (at most {MAX_FILE_LINES})",
                file.display(),
                lines.len()
            ));
        }
        for (start, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let indent = line.len() - trimmed.len();
            let signature = trimmed
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub(super) ")
                .trim_start_matches("pub ")
                .trim_start_matches("const ")
                .trim_start_matches("async ");
            if !signature.starts_with("fn ") {
                continue;
            }
            let closing = " ".repeat(indent) + "}";
            let Some(length) = lines[start + 1..]
                .iter()
                .position(|l| l.starts_with(&closing) && l.len() - l.trim_start().len() == indent)
            else {
                continue;
            };
            if length + 2 > MAX_FUNCTION_LINES {
                problems.push(format!(
                    "{}:{} `{}` has {} lines (at most {MAX_FUNCTION_LINES})",
                    file.display(),
                    start + 1,
                    signature.split('(').next().unwrap_or(signature),
                    length + 2
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
