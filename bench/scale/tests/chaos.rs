//! The two-minute configuration of the chaos harness (issue 32), run by
//! `scripts/test.sh`: 300 WebApps, 3 replicas with `--shards 6` behind
//! their proxies, 10 changes per second, and every fault kind the
//! devcluster can inject on a fixed seed, over debug builds of the host and
//! the devcluster. It fails when an invariant does not hold (the report's
//! verdicts, printed), when the harness fails, or when a fault could not be
//! injected. `scripts/chaos.sh` runs the same harness at scale.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn a_two_minute_storm_on_the_devcluster_keeps_every_invariant() {
    let chaos = PathBuf::from(env!("CARGO_BIN_EXE_chaos"));
    // target/debug: the host's and the devcluster's binaries are built by
    // the same `cargo test --workspace`.
    let bin_dir = chaos.parent().expect("the binary's directory").to_owned();
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let plugins = bin_dir.join("../wasm32-wasip2/release");
    for needed in [
        bin_dir.join("wasm-operator"),
        bin_dir.join("devcluster"),
        plugins.join("webapp.wasm"),
        plugins.join("webapp_next.wasm"),
    ] {
        assert!(
            needed.exists(),
            "{} is missing: `cargo build -p wasm-operator -p wasm-operator-devcluster` and `bash scripts/build-plugins.sh` first",
            needed.display()
        );
    }
    let out = tempfile::Builder::new()
        .prefix("chaos-ci-")
        .tempdir()
        .expect("a temporary directory");
    let status = Command::new(&chaos)
        .args(["--backend", "dev", "--objects", "300", "--storm", "110s"])
        .args(["--churn", "10", "--seed", "32", "--gap", "1s,3s"])
        .args(["--converge-timeout", "4m"])
        .arg("--bin-dir")
        .arg(&bin_dir)
        .arg("--plugins-dir")
        .arg(&plugins)
        .arg("--repo")
        .arg(&repo)
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("running the chaos harness");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.path().join("report.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let logs = out.path().join("logs");
    assert!(
        status.success(),
        "the chaos run failed ({status}); its report is printed above, the replicas' logs were in {}:\n{}",
        logs.display(),
        tail_logs(&logs)
    );
    let faults = report["faults"].as_array().cloned().unwrap_or_default();
    let failed: Vec<&serde_json::Value> = faults.iter().filter(|f| !f["error"].is_null()).collect();
    assert!(
        failed.is_empty(),
        "faults that could not be injected: {failed:#?}"
    );
    let kinds: std::collections::BTreeSet<&str> =
        faults.iter().filter_map(|f| f["kind"].as_str()).collect();
    assert!(
        kinds.len() >= 9,
        "the storm should cover at least 9 of the 11 fault kinds, got {kinds:?}"
    );
    for invariant in report["invariants"].as_array().cloned().unwrap_or_default() {
        assert_eq!(invariant["held"], true, "{invariant}");
    }
    let judged = report["stale"]["counts"]["inTerm"].as_u64().unwrap_or(0);
    assert!(
        judged > 300,
        "too few replica writes judged ({judged}): is the audit log attributed?"
    );
}

fn tail_logs(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        out.push_str(&format!("--- {} (last 15 lines)\n", entry.path().display()));
        out.push_str(&lines[lines.len().saturating_sub(15)..].join("\n"));
        out.push('\n');
    }
    out
}
