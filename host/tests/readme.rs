//! The README's commands work as shown, and every command and relative link
//! the README and `docs/` name exists.
//!
//! How the README's ```` ```console ```` blocks are read:
//!
//! - A line starting with `$ ` is a command. The lines after it, up to the
//!   next command or the end of the block, are its output as shown (a part of
//!   it: a line of `…` or `...` stands for lines left out). A block without
//!   any `$ ` line is a synopsis (the CLI summary): checked, never run.
//! - A command runs here when it needs no cluster: `wasm-operator` with
//!   `--help`/`-h`, `help`, `crd print` or `plugin inspect`, and no
//!   `--kubeconfig`. Every other command (`kubectl`, `bash scripts/…`,
//!   `export`, `sed`, `wasm-operator run|dev|canary|…`) needs a cluster or
//!   runs until stopped: it is skipped here (and printed as skipped), but the
//!   `wasm-operator` subcommands and flags it names are checked like every
//!   other mention.
//! - A command that runs must exit 0, and every output line shown under it
//!   must be a line of its real output (runs of whitespace compared as one
//!   space).
//! - `target/…` arguments are read from the cargo target directory
//!   (`CARGO_TARGET_DIR`, else the workspace's `target/`), where
//!   `bash scripts/build-plugins.sh` puts the plugins.
//!
//! A mention of `wasm-operator <subcommand> …` (in any code block or inline
//! code span of the README or `docs/*.md`) must name subcommands
//! `wasm-operator --help` lists, and flags the subcommand's `--help` lists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root (parent of `host/`).
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("host/ has no parent"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// README.md and every `docs/*.md`, with their paths.
fn documents() -> Vec<(PathBuf, String)> {
    let mut paths = vec![workspace().join("README.md")];
    let docs = workspace().join("docs");
    let entries =
        std::fs::read_dir(&docs).unwrap_or_else(|e| panic!("cannot list {}: {e}", docs.display()));
    let mut pages: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    paths.extend(pages);
    paths
        .into_iter()
        .map(|path| {
            let text = read(&path);
            (path, text)
        })
        .collect()
}

/// The cargo target directory the plugins are built into.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"))
}

/// One fenced code block: its info string and its lines.
struct Block {
    info: String,
    lines: Vec<String>,
}

fn code_blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for line in text.lines() {
        let fence = line.trim_start().strip_prefix("```");
        match (fence, open.take()) {
            (Some(info), None) => {
                open = Some(Block {
                    info: info.trim().to_string(),
                    lines: Vec::new(),
                })
            }
            (Some(_), Some(block)) => blocks.push(block),
            (None, Some(mut block)) => {
                block.lines.push(line.to_string());
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    blocks
}

/// The text outside code blocks, for inline code spans.
fn prose(text: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
            continue;
        }
        if !inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A command of a console block and the output shown under it.
struct Shown {
    command: String,
    output: Vec<String>,
}

/// The `$ ` commands of the README's console blocks.
fn readme_commands() -> Vec<Shown> {
    let readme = read(&workspace().join("README.md"));
    let mut shown: Vec<Shown> = Vec::new();
    for block in code_blocks(&readme)
        .into_iter()
        .filter(|b| b.info == "console")
    {
        let mut current: Option<Shown> = None;
        for line in block.lines {
            if let Some(command) = line.strip_prefix("$ ") {
                shown.extend(current.take());
                current = Some(Shown {
                    command: command.trim().to_string(),
                    output: Vec::new(),
                });
            } else if let Some(c) = current.as_mut() {
                c.output.push(line);
            }
        }
        shown.extend(current);
    }
    shown
}

/// Splits a command line as a POSIX shell would for plain words and quotes
/// (no expansion).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            None => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// Whether `args` (after `wasm-operator`) need no cluster (see the module
/// docs).
fn needs_no_cluster(args: &[String]) -> bool {
    let has = |flag: &str| args.iter().any(|a| a == flag);
    if has("--kubeconfig") {
        return false;
    }
    let first_two: Vec<&str> = args.iter().take(2).map(String::as_str).collect();
    has("--help")
        || has("-h")
        || args.first().is_some_and(|a| a == "help")
        || first_two == ["crd", "print"]
        || first_two == ["plugin", "inspect"]
}

fn run_wasm_operator(args: &[String]) -> std::process::Output {
    let args: Vec<PathBuf> = args
        .iter()
        .map(|a| match a.strip_prefix("target/") {
            Some(rest) => target_dir().join(rest),
            None => PathBuf::from(a),
        })
        .collect();
    for arg in &args {
        if arg.starts_with(target_dir()) {
            assert!(
                arg.is_file(),
                "{} is missing: run `bash scripts/build-plugins.sh` in {} first",
                arg.display(),
                workspace().display()
            );
        }
    }
    Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(&args)
        .current_dir(workspace())
        .env_remove("KUBECONFIG")
        .output()
        .unwrap_or_else(|e| panic!("cannot start wasm-operator: {e}"))
}

fn collapse(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn readme_commands_that_need_no_cluster_run_as_shown() {
    let mut ran = Vec::new();
    for shown in readme_commands() {
        let words = shell_words(&shown.command);
        let runnable =
            words.first().is_some_and(|w| w == "wasm-operator") && needs_no_cluster(&words[1..]);
        if !runnable {
            println!(
                "skipped (needs a cluster or runs until stopped): $ {}",
                shown.command
            );
            continue;
        }
        let args = &words[1..];
        let output = run_wasm_operator(args);
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "`$ {}` from the README failed ({}):\n{}",
            shown.command,
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let real: Vec<String> = stdout.lines().map(collapse).collect();
        for expected in shown
            .output
            .iter()
            .map(|l| collapse(l))
            .filter(|l| !l.is_empty() && l != "…" && l != "...")
        {
            assert!(
                real.contains(&expected),
                "the README shows {expected:?} under `$ {}`, but the command printed:\n{stdout}",
                shown.command
            );
        }
        check_meaning(args, &stdout);
        println!("ran: $ {}", shown.command);
        ran.push(args.join(" "));
    }
    assert!(
        ran.iter().any(|c| c == "crd print"),
        "the README shows no `$ wasm-operator crd print` any more: {ran:?}"
    );
    assert!(
        ran.iter().any(|c| c.contains("--help")),
        "the README shows no `$ wasm-operator … --help` any more: {ran:?}"
    );
}

/// Checks beyond the lines shown: what the command's output must mean.
fn check_meaning(args: &[String], stdout: &str) {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    if words.contains(&"--help") || words.contains(&"-h") {
        let path: Vec<&str> = words
            .iter()
            .copied()
            .take_while(|w| !w.starts_with('-'))
            .collect();
        let usage = format!("Usage: wasm-operator {}", path.join(" "));
        assert!(
            stdout.contains(usage.trim_end()),
            "`wasm-operator {}` does not print {usage:?}:\n{stdout}",
            words.join(" ")
        );
    } else if words.starts_with(&["crd", "print"]) {
        let crd: serde_yaml::Value = serde_yaml::from_str(stdout)
            .unwrap_or_else(|e| panic!("`crd print` is not YAML: {e}\n{stdout}"));
        assert_eq!(
            crd["kind"].as_str(),
            Some("CustomResourceDefinition"),
            "{stdout}"
        );
        assert_eq!(
            crd["spec"]["names"]["kind"].as_str(),
            Some("WasmPlugin"),
            "{stdout}"
        );
    } else if words.starts_with(&["plugin", "inspect"]) {
        assert!(
            stdout.contains("wasm-operator:plugin/reconciler"),
            "`plugin inspect` shows no WIT world:\n{stdout}"
        );
    }
}

/// The `--help` texts of `wasm-operator` and its subcommands, asked once.
#[derive(Default)]
struct HelpTexts(BTreeMap<Vec<String>, String>);

impl HelpTexts {
    fn get(&mut self, path: &[String]) -> &str {
        self.0.entry(path.to_vec()).or_insert_with(|| {
            let mut args = path.to_vec();
            args.push("--help".to_string());
            let output = run_wasm_operator(&args);
            assert!(
                output.status.success(),
                "`wasm-operator {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout).into_owned()
        })
    }

    /// The subcommands a help text lists under `Commands:`.
    fn subcommands(&mut self, path: &[String]) -> Vec<String> {
        let help = self.get(path);
        help.lines()
            .skip_while(|l| l.trim() != "Commands:")
            .skip(1)
            .take_while(|l| !l.trim().is_empty())
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_string)
            .collect()
    }

    /// Whether the help text of `path` lists `flag` (`--name` or `-x`).
    fn has_flag(&mut self, path: &[String], flag: &str) -> bool {
        let help = self.get(path);
        help.match_indices(flag).any(|(at, _)| {
            let before = help[..at].chars().next_back();
            let after = help[at + flag.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
                && !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        })
    }
}

/// Every `wasm-operator …` a document shows: in code blocks (a synopsis
/// line continued on the next lines by `[…]` counts as one), and in inline
/// code spans.
fn mentions(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for block in code_blocks(text) {
        let mut joined: Vec<String> = Vec::new();
        for line in block.lines {
            let line = line.strip_prefix("$ ").unwrap_or(&line).to_string();
            let continues = line.starts_with(' ') && line.trim_start().starts_with('[');
            match joined.last_mut() {
                Some(last) if continues => {
                    last.push(' ');
                    last.push_str(line.trim());
                }
                _ => joined.push(line),
            }
        }
        found.extend(joined.iter().flat_map(|l| invocations(l)));
    }
    let prose = prose(text);
    for span in prose.split('`').skip(1).step_by(2) {
        found.extend(invocations(span));
    }
    found
}

/// The text after each `wasm-operator ` that starts a word of `line`.
fn invocations(line: &str) -> Vec<String> {
    const NAME: &str = "wasm-operator ";
    line.match_indices(NAME)
        .filter(|(at, _)| {
            line[..*at]
                .chars()
                .next_back()
                .is_none_or(|c| c.is_whitespace() || c == '(' || c == '`')
        })
        .map(|(at, _)| line[at + NAME.len()..].to_string())
        .collect()
}

/// The words of an invocation up to a comment, a pipe or another command
/// (a `|` inside parentheses or brackets separates alternatives:
/// `(--a X | --b Y)`).
fn invocation_words(rest: &str) -> Vec<String> {
    let mut depth = 0i32;
    let mut words = Vec::new();
    for word in rest.split_whitespace() {
        let ends = matches!(word, "||" | "&&" | ";" | ">" | "<" | "&")
            || (word == "|" && depth == 0)
            || word.starts_with('#');
        if ends {
            break;
        }
        let opens = word.matches(['(', '[']).count();
        let closes = word.matches([')', ']']).count();
        depth += opens as i32 - closes as i32;
        words.push(word.to_string());
    }
    words
}

fn is_command_word(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '|')
        && !word.starts_with('-')
}

/// The flags (`--name`, `-x`) a word of a synopsis names.
fn flags(word: &str) -> Vec<String> {
    word.split(['|', '[', ']', '(', ')', ','])
        .filter_map(|part| {
            let name = part.split('=').next().unwrap_or_default();
            let long = name.starts_with("--")
                && name.len() > 2
                && name[2..]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-');
            let short = name.len() == 2
                && name.starts_with('-')
                && name[1..].chars().all(|c| c.is_ascii_alphabetic());
            (long || short).then(|| name.to_string())
        })
        .collect()
}

/// What is wrong with one mention, if anything.
fn check_mention(help: &mut HelpTexts, rest: &str) -> Vec<String> {
    let words = invocation_words(rest);
    let mut path: Vec<String> = Vec::new();
    // The subcommands the flags are checked against: the path, or one path
    // per alternative of its last word (`canary status|diff NAME`).
    let mut leaves: Vec<Vec<String>> = vec![Vec::new()];
    for word in &words {
        let subcommands = help.subcommands(&path);
        if subcommands.is_empty() || !is_command_word(word) {
            break;
        }
        if path.is_empty() && word == "dev" && !cfg!(feature = "devcluster") {
            // `dev` exists with the devcluster feature only.
            return Vec::new();
        }
        let missing: Vec<&str> = word
            .split('|')
            .filter(|alt| !subcommands.iter().any(|s| s == alt))
            .collect();
        if !missing.is_empty() {
            return vec![format!(
                "`wasm-operator {}`: {missing:?} is not a subcommand of `wasm-operator {}` (it has {subcommands:?})",
                words.join(" "),
                path.join(" ")
            )];
        }
        leaves = word
            .split('|')
            .map(|alt| {
                let mut leaf = path.clone();
                leaf.push(alt.to_string());
                leaf
            })
            .collect();
        path.push(word.split('|').next().unwrap_or_default().to_string());
    }
    // `cargo … -p wasm-operator --flag` names the package, not the binary.
    if path.is_empty() && !words.first().is_some_and(|w| w == "--help" || w == "-h") {
        return Vec::new();
    }
    let mut problems = Vec::new();
    for flag in words[path.len()..].iter().flat_map(|w| flags(w)) {
        for leaf in &leaves {
            if !help.has_flag(leaf, &flag) {
                problems.push(format!(
                    "`wasm-operator {}`: `wasm-operator {} --help` lists no {flag}",
                    words.join(" "),
                    leaf.join(" ")
                ));
            }
        }
    }
    problems
}

#[test]
fn every_wasm_operator_command_the_docs_name_exists() {
    let mut help = HelpTexts::default();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (path, text) in documents() {
        for rest in mentions(&text) {
            checked += 1;
            for problem in check_mention(&mut help, &rest) {
                problems.push(format!("{}: {problem}", path.display()));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} mentions of wasm-operator found"
    );
    assert!(
        problems.is_empty(),
        "commands the documentation shows do not exist:\n{}",
        problems.join("\n")
    );
}

/// GitHub's anchor of a heading: lower case, spaces as `-`, punctuation
/// dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut inside = false;
    let mut found = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            inside = !inside;
        } else if !inside && line.starts_with('#') {
            found.push(anchor(line.trim_start_matches('#')));
        }
    }
    found
}

/// Every `](target)` of a document outside code blocks.
fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    prose
        .match_indices("](")
        .filter_map(|(at, _)| {
            let rest = &prose[at + 2..];
            rest.find(')').map(|end| rest[..end].to_string())
        })
        .collect()
}

#[test]
fn every_relative_link_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for (path, text) in documents() {
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (file, fragment) = match link.split_once('#') {
                Some((file, fragment)) => (file, Some(fragment)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                path.clone()
            } else {
                dir.join(file)
            };
            if !target.exists() {
                broken.push(format!(
                    "{}: {link} (no {})",
                    path.display(),
                    target.display()
                ));
                continue;
            }
            if let Some(fragment) = fragment {
                let headings = anchors(&read(&target));
                if !headings.iter().any(|h| h == fragment) {
                    broken.push(format!(
                        "{}: {link} (no heading #{fragment} in {})",
                        path.display(),
                        target.display()
                    ));
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} relative links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The `--write-kubeconfig FILE` of a `bash scripts/dev.sh …` command.
fn dev_kubeconfig(words: &[String]) -> Option<&str> {
    let is_dev = words.len() >= 2 && words[0] == "bash" && words[1] == "scripts/dev.sh";
    let at = words.iter().position(|w| w == "--write-kubeconfig")?;
    words.get(at + 1).filter(|_| is_dev).map(String::as_str)
}

/// The README's set-up and tour agree with what `dev` prints (the form
/// `cli dev_binary` checks on the real binary: `kubeconfig: FILE`, then
/// `kubectl --kubeconfig FILE get webapps,deployments,services -A`): every
/// `scripts/dev.sh --write-kubeconfig FILE` shown with output shows that FILE, and
/// every `export KUBECONFIG=$PWD/FILE` exports a FILE a `scripts/dev.sh`
/// command of the README writes, and so does the set-up table's command (it
/// once ran `dev` without `--write-kubeconfig`, and the tour exported a file `dev`
/// never wrote).
#[test]
fn the_kubeconfig_the_readme_exports_is_the_one_dev_is_shown_writing() {
    let commands = readme_commands();
    let mut written = Vec::new();
    for shown in &commands {
        let words = shell_words(&shown.command);
        let Some(file) = dev_kubeconfig(&words) else {
            continue;
        };
        written.push(file.to_string());
        if shown.output.is_empty() {
            continue;
        }
        let output: Vec<String> = shown.output.iter().map(|l| collapse(l)).collect();
        for expected in [
            format!("kubeconfig: {file}"),
            format!("kubectl --kubeconfig {file} get webapps,deployments,services -A"),
        ] {
            assert!(
                output.contains(&expected),
                "the README shows `$ {}` printing {output:?}, without {expected:?} as dev prints it",
                shown.command
            );
        }
    }
    assert!(
        !written.is_empty(),
        "the README shows no `bash scripts/dev.sh --write-kubeconfig FILE` any more"
    );
    let mut exported = 0;
    for shown in &commands {
        for word in shell_words(&shown.command) {
            let Some(file) = word.strip_prefix("KUBECONFIG=$PWD/") else {
                continue;
            };
            exported += 1;
            assert!(
                written.iter().any(|w| w == file),
                "the README exports KUBECONFIG={file} but runs `dev` with --write-kubeconfig {written:?}"
            );
        }
    }
    assert!(exported > 0, "the README exports no KUBECONFIG any more");
    // The set-up table's command too: following the README from the top must
    // write the file the tour exports.
    let readme = read(&workspace().join("README.md"));
    let prose = prose(&readme);
    let spans: Vec<&str> = prose.split('`').skip(1).step_by(2).collect();
    for span in spans
        .into_iter()
        .filter(|s| s.starts_with("bash scripts/dev.sh"))
    {
        let words = shell_words(span);
        assert!(
            dev_kubeconfig(&words).is_some_and(|file| written.iter().any(|w| w == file)),
            "the README runs `{span}`, which writes no kubeconfig the tour exports ({written:?})"
        );
    }
}

/// The README's `## The CLI` section: from its heading to the next `## `.
fn readme_cli_section() -> String {
    let readme = read(&workspace().join("README.md"));
    let start = readme
        .find("\n## The CLI\n")
        .unwrap_or_else(|| panic!("the README has no `## The CLI` section"));
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |at| at + 3);
    rest[..end].to_string()
}

/// The subcommand paths an invocation names (`canary status|diff NAME` is
/// two), as far as `help` knows them as subcommands.
fn named_paths(help: &mut HelpTexts, rest: &str) -> Vec<Vec<String>> {
    let mut paths: Vec<Vec<String>> = vec![Vec::new()];
    for word in invocation_words(rest) {
        let subcommands = help.subcommands(&paths[0]);
        if subcommands.is_empty() || !is_command_word(&word) {
            break;
        }
        let alternatives: Vec<&str> = word
            .split('|')
            .filter(|alt| subcommands.iter().any(|s| s == alt))
            .collect();
        if alternatives.is_empty() {
            break;
        }
        let base = paths[0].clone();
        paths = alternatives
            .into_iter()
            .map(|alt| {
                let mut path = base.clone();
                path.push(alt.to_string());
                path
            })
            .collect();
    }
    paths
}

/// Every runnable subcommand `--help` lists, recursively (`plugin inspect`,
/// not `plugin`), but clap's own `help`.
fn leaf_subcommands(help: &mut HelpTexts, path: &[String]) -> Vec<Vec<String>> {
    let subcommands: Vec<String> = help
        .subcommands(path)
        .into_iter()
        .filter(|s| s != "help")
        .collect();
    if subcommands.is_empty() {
        return vec![path.to_vec()];
    }
    let mut leaves = Vec::new();
    for subcommand in subcommands {
        let mut next = path.to_vec();
        next.push(subcommand);
        leaves.extend(leaf_subcommands(help, &next));
    }
    leaves
}

/// The README's CLI section and `--help` agree both ways: every flag the
/// section names is in that subcommand's `--help`, and every subcommand
/// `--help` lists (down to the runnable ones) is in the section.
#[test]
fn the_readme_cli_section_and_help_agree() {
    let section = readme_cli_section();
    let mut help = HelpTexts::default();
    let mut problems = Vec::new();
    let mut named: Vec<Vec<String>> = Vec::new();
    for rest in mentions(&section) {
        problems.extend(check_mention(&mut help, &rest));
        named.extend(named_paths(&mut help, &rest));
    }
    let flags_named: usize = mentions(&section)
        .iter()
        .map(|rest| invocation_words(rest).iter().flat_map(|w| flags(w)).count())
        .sum();
    assert!(
        flags_named > 10,
        "the CLI section names only {flags_named} flags"
    );
    for leaf in leaf_subcommands(&mut help, &[]) {
        if !named
            .iter()
            .any(|path| leaf.starts_with(path) && !path.is_empty())
        {
            problems.push(format!(
                "`wasm-operator {}` is in --help but not in the README's CLI section",
                leaf.join(" ")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the README's CLI section and --help disagree:\n{}",
        problems.join("\n")
    );
}
