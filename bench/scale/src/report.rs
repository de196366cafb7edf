//! Medians over rounds, ratios to the native controller, and the Markdown table.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Run;

/// The medians of one operator at one N.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// Operator name.
    pub operator: String,
    /// WebApps.
    pub n: usize,
    /// Rounds that completed.
    pub rounds: usize,
    /// Median convergence after the bulk create, seconds.
    pub create_s: f64,
    /// Median convergence after the bulk update, seconds.
    pub update_s: f64,
    /// Median operator CPU over both phases, seconds.
    pub cpu_s: f64,
    /// `cpu_s` per WebApp, milliseconds.
    pub cpu_ms_per_object: f64,
    /// Median peak RSS, MiB.
    pub rss_mib: f64,
    /// Median writes per WebApp in the create phase.
    pub writes_create: f64,
    /// Median writes per WebApp in the update phase.
    pub writes_update: f64,
}

/// The median (mean of the middle two for an even count); 0 for none.
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    if xs.len().is_multiple_of(2) {
        (xs[mid - 1] + xs[mid]) / 2.0
    } else {
        xs[mid]
    }
}

/// One summary per (operator, N) that has runs, ordered by N then operator.
pub fn summarize(runs: &[Run]) -> Vec<Summary> {
    let mut groups: BTreeMap<(usize, String), Vec<&Run>> = BTreeMap::new();
    for r in runs {
        groups.entry((r.n, r.operator.clone())).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|((n, operator), rs)| {
            let m = |f: fn(&Run) -> f64| median(rs.iter().map(|r| f(r)).collect());
            let cpu_s = m(|r| r.cpu_create_s + r.cpu_update_s);
            Summary {
                operator,
                n,
                rounds: rs.len(),
                create_s: m(|r| r.create_s),
                update_s: m(|r| r.update_s),
                cpu_s,
                cpu_ms_per_object: cpu_s * 1000.0 / n.max(1) as f64,
                rss_mib: m(|r| r.rss_peak_mib),
                writes_create: m(|r| r.writes_per_object_create),
                writes_update: m(|r| r.writes_per_object_update),
            }
        })
        .collect()
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "–".to_owned()
    }
}

/// The results table, then `wasm-operator ÷ native` (and `kopf ÷ native`) per N.
pub fn markdown(summary: &[Summary], operators: &[String], failures: &[String]) -> String {
    let mut out = String::new();
    out.push_str("| N | operator | rounds | create s | update s | CPU s | CPU ms/object | peak RSS MiB | writes/object create | writes/object update |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for s in summary {
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.1} | {:.2} | {:.2} |\n",
            s.n,
            s.operator,
            s.rounds,
            s.create_s,
            s.update_s,
            s.cpu_s,
            s.cpu_ms_per_object,
            s.rss_mib,
            s.writes_create,
            s.writes_update
        ));
    }
    let find = |op: &str, n: usize| summary.iter().find(|s| s.operator == op && s.n == n);
    let mut sizes: Vec<usize> = summary.iter().map(|s| s.n).collect();
    sizes.dedup();
    for peer in ["wasm-operator", "kopf"] {
        if !operators.iter().any(|o| o == peer) || !operators.iter().any(|o| o == "native") {
            continue;
        }
        out.push_str(&format!(
            "\n| N | convergence, {peer} ÷ native (create / update) | operator CPU ÷ native | peak RSS ÷ native |\n|---|---|---|---|\n"
        ));
        for &n in &sizes {
            if let (Some(a), Some(b)) = (find(peer, n), find("native", n)) {
                out.push_str(&format!(
                    "| {n} | {} / {} | {} | {} ({:.0} vs {:.0} MiB) |\n",
                    ratio(a.create_s, b.create_s),
                    ratio(a.update_s, b.update_s),
                    ratio(a.cpu_s, b.cpu_s),
                    ratio(a.rss_mib, b.rss_mib),
                    a.rss_mib,
                    b.rss_mib
                ));
            }
        }
    }
    if !failures.is_empty() {
        out.push_str("\nFailed runs (not in the medians):\n");
        for f in failures {
            out.push_str(&format!("- {f}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(op: &str, create: f64, cpu: f64) -> Run {
        Run {
            operator: op.to_owned(),
            n: 100,
            round: 0,
            create_s: create,
            update_s: create,
            cpu_create_s: cpu,
            cpu_update_s: 0.0,
            rss_peak_mib: 10.0,
            requests_create: BTreeMap::new(),
            requests_update: BTreeMap::new(),
            writes_per_object_create: 4.0,
            writes_per_object_update: 2.0,
            failed: BTreeMap::new(),
            load: String::new(),
        }
    }

    #[test]
    fn medians_and_ratios() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![1.0, 2.0]), 1.5);
        let runs = [
            run("native", 1.0, 2.0),
            run("native", 3.0, 2.0),
            run("wasm-operator", 3.0, 3.0),
        ];
        let s = summarize(&runs);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].create_s, 2.0);
        assert_eq!(s[0].cpu_ms_per_object, 20.0);
        let md = markdown(&s, &["wasm-operator".to_owned(), "native".to_owned()], &[]);
        assert!(
            md.contains("| 100 | 1.50 / 1.50 | 1.50 | 1.00 (10 vs 10 MiB) |"),
            "{md}"
        );
    }
}
