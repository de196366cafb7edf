//! The reasons the documentation promises are the reasons the code writes:
//! the "What happens when a plugin misbehaves" table of docs/operations.md
//! (the README's until it became a front door) lists exactly the reconcile
//! reasons of [`Reason`], and every reason docs/deploying-plugins.md names
//! for WasmPlugins, permissions, conversion, upgrades and canaries exists;
//! the backup and admission pages list their scopes' reasons.

use std::collections::BTreeSet;
use std::path::Path;

use wasm_operator::contract::{Reason, ReasonScope};

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The text of the section that starts with `heading`, up to the next
/// heading of the same or a higher level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("no section {heading:?}"));
    let level = heading.chars().take_while(|c| *c == '#').count();
    let body = &text[start + heading.len()..];
    let end = body
        .lines()
        .scan(0usize, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| {
            let hashes = line.chars().take_while(|c| *c == '#').count();
            hashes > 0 && hashes <= level && line.chars().nth(hashes) == Some(' ')
        })
        .map_or(body.len(), |(at, _)| at);
    &body[..end]
}

/// The paragraph that starts with `start` (up to the next blank line).
fn paragraph<'a>(text: &'a str, start: &str) -> &'a str {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("no paragraph {start:?}"));
    let body = &text[at..];
    &body[..body.find("\n\n").unwrap_or(body.len())]
}

/// Every `` `CamelCase` `` word in `text`.
fn backticked_reasons(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.len() > 2
                && w.starts_with(|c: char| c.is_ascii_uppercase())
                && w.chars().all(|c| c.is_ascii_alphanumeric())
                && w.chars().any(|c| c.is_ascii_lowercase())
        })
        .map(str::to_string)
        .collect()
}

/// The reasons in the first column of the table rows (`| `Reason` |`) of
/// the section `heading`.
fn table_reasons(text: &str, heading: &str) -> BTreeSet<String> {
    section(text, heading)
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| backticked_reasons(l.split('|').nth(1).unwrap_or_default()))
        .collect()
}

fn known(reason: &str) -> bool {
    Reason::ALL.iter().any(|r| r.as_str() == reason)
}

/// The name is historical: the table moved from the README to
/// docs/operations.md.
#[test]
fn readme_table_lists_every_reconcile_reason() {
    assert_table_matches_scope(
        "docs/operations.md",
        "## What happens when a plugin misbehaves",
        ReasonScope::Reconcile,
    );
}

#[test]
fn documented_wasmplugin_and_upgrade_reasons_exist() {
    let docs = read("docs/deploying-plugins.md");
    // What the README's "Deploying plugins: WasmPlugin" section said, now
    // these sections of the page.
    let mut named: BTreeSet<String> = [
        "## Checks before a version serves",
        "## Permissions",
        "## CRD versions: the conversion webhook",
        "## Version-aware upgrades",
        "## Canaries",
    ]
    .into_iter()
    .flat_map(|heading| backticked_reasons(section(&docs, heading)))
    .collect();
    named.extend(backticked_reasons(paragraph(&docs, "Degraded reasons:")));
    let unknown: Vec<_> = named
        .iter()
        .filter(|r| {
            !known(r)
                && !matches!(
                    r.as_str(),
                    "WasmPlugin" | "Degraded" | "Ready" | "CanaryProgressing" | "CanaryFailed"
                )
        })
        .collect();
    assert!(
        unknown.is_empty(),
        "the docs name reasons the code never writes: {unknown:?}"
    );
}

/// True for the reasons a canary writes (docs/canary.md lists them).
fn canary_reason(name: &str) -> bool {
    ["Canary", "DryRun", "Analysis", "Shadow"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || matches!(
            name,
            "AwaitingPromotion" | "CandidateUnloadable" | "NoCanary"
        )
}

#[test]
fn docs_canary_lists_every_canary_reason() {
    let docs = read("docs/canary.md");
    let table = table_reasons(&docs, "## Status");
    let code: BTreeSet<String> = Reason::ALL
        .iter()
        .map(|r| r.as_str().to_string())
        .filter(|r| canary_reason(r))
        .collect();
    let undocumented: Vec<_> = code.difference(&table).collect();
    let unknown: Vec<_> = table.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "docs/canary.md's reason table and contract::Reason disagree: in the code only {undocumented:?}; in the table only {unknown:?}"
    );
}

#[test]
fn docs_backup_lists_every_backup_reason() {
    assert_table_matches_scope("docs/backup.md", "## Reasons", ReasonScope::Backup);
}

#[test]
fn docs_admission_lists_every_admission_reason() {
    assert_table_matches_scope(
        "docs/admission.md",
        "## Audit of stored objects",
        ReasonScope::Admission,
    );
}

/// Asserts that the reason table under `heading` of `page` lists exactly
/// the reasons of `scope`.
fn assert_table_matches_scope(page: &str, heading: &str, scope: ReasonScope) {
    let table = table_reasons(&read(page), heading);
    let code: BTreeSet<String> = Reason::ALL
        .iter()
        .filter(|r| r.scope() == scope)
        .map(|r| r.as_str().to_string())
        .collect();
    let undocumented: Vec<_> = code.difference(&table).collect();
    let unknown: Vec<_> = table.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "{page}'s reason table ({heading}) and contract::Reason disagree: in the code only {undocumented:?}; in the table only {unknown:?}"
    );
}
