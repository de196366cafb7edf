//! Medians over rounds, the ratios issue 12 asks for, and the Markdown tables.

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
    /// Median writes per WebApp in the create phase (devcluster only).
    pub writes_create: Option<f64>,
    /// Median writes per WebApp in the update phase (devcluster only).
    pub writes_update: Option<f64>,
}

/// `numerator ÷ denominator` at one N: below 1, the numerator is faster or smaller.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Ratio {
    /// WebApps.
    pub n: usize,
    /// The operator divided.
    pub numerator: String,
    /// The operator divided by.
    pub denominator: String,
    /// Convergence after the bulk create.
    pub create: f64,
    /// Convergence after the bulk update.
    pub update: f64,
    /// Operator CPU over both phases.
    pub cpu: f64,
    /// Peak RSS.
    pub rss: f64,
}

/// The pairs reported (issue 12's, then issue 11's native peer), when both ran.
pub const PAIRS: &[(&str, &str)] = &[
    ("wasm-operator", "controller-runtime"),
    ("wasm-operator", "floor"),
    ("kopf", "wasm-operator"),
    ("wasm-operator", "native"),
    ("controller-runtime", "native"),
];

/// `x` with two decimals, or `–` when it was not measured.
pub fn optional(x: Option<f64>) -> String {
    x.map_or_else(|| "–".to_owned(), |x| format!("{x:.2}"))
}

/// The median of values all present; `None` when any is missing.
fn median_of_all(xs: Vec<Option<f64>>) -> Option<f64> {
    xs.into_iter().collect::<Option<Vec<f64>>>().map(median)
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
                writes_create: median_of_all(
                    rs.iter().map(|r| r.writes_per_object_create).collect(),
                ),
                writes_update: median_of_all(
                    rs.iter().map(|r| r.writes_per_object_update).collect(),
                ),
            }
        })
        .collect()
}

/// Every pair of [`PAIRS`] with a summary for both, per N.
pub fn ratios(summary: &[Summary]) -> Vec<Ratio> {
    let find = |op: &str, n: usize| summary.iter().find(|s| s.operator == op && s.n == n);
    let mut sizes: Vec<usize> = summary.iter().map(|s| s.n).collect();
    sizes.dedup();
    let div = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mut out = Vec::new();
    for &(numerator, denominator) in PAIRS {
        for &n in &sizes {
            if let (Some(a), Some(b)) = (find(numerator, n), find(denominator, n)) {
                out.push(Ratio {
                    n,
                    numerator: numerator.to_owned(),
                    denominator: denominator.to_owned(),
                    create: div(a.create_s, b.create_s),
                    update: div(a.update_s, b.update_s),
                    cpu: div(a.cpu_s, b.cpu_s),
                    rss: div(a.rss_mib, b.rss_mib),
                });
            }
        }
    }
    out
}

/// The results table, then the ratios table.
pub fn markdown(summary: &[Summary], ratios: &[Ratio], failures: &[String]) -> String {
    let mut out = String::new();
    out.push_str("| N | operator | rounds | create s | update s | CPU s | CPU ms/object | peak RSS MiB | writes/object create | writes/object update |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for s in summary {
        out.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.1} | {} | {} |\n",
            s.n,
            s.operator,
            s.rounds,
            s.create_s,
            s.update_s,
            s.cpu_s,
            s.cpu_ms_per_object,
            s.rss_mib,
            optional(s.writes_create),
            optional(s.writes_update)
        ));
    }
    if !ratios.is_empty() {
        out.push_str("\nRatios of the medians (below 1: the first is faster or smaller):\n\n");
        out.push_str("| N | ratio | convergence create | convergence update | CPU | peak RSS |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for r in ratios {
            out.push_str(&format!(
                "| {} | {} ÷ {} | {:.2} | {:.2} | {:.2} | {:.2} |\n",
                r.n, r.numerator, r.denominator, r.create, r.update, r.cpu, r.rss
            ));
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
            backend: crate::Backend::Dev,
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
            writes_per_object_create: Some(4.0),
            writes_per_object_update: Some(2.0),
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
        let r = ratios(&s);
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].create, r[0].cpu, r[0].rss), (1.5, 1.5, 1.0));
        let md = markdown(&s, &r, &[]);
        assert!(
            md.contains("| 100 | wasm-operator ÷ native | 1.50 | 1.50 | 1.50 | 1.00 |"),
            "{md}"
        );
        assert!(md.contains("| 4.00 | 2.00 |"), "{md}");
    }

    #[test]
    fn issue_12_pairs_and_unmeasured_writes() {
        let mut runs = vec![
            run("wasm-operator", 2.0, 2.0),
            run("controller-runtime", 4.0, 1.0),
            run("kopf", 8.0, 8.0),
            run("floor", 1.0, 1.0),
        ];
        runs[0].writes_per_object_create = None;
        let s = summarize(&runs);
        let wasm = s.iter().find(|s| s.operator == "wasm-operator").unwrap();
        assert_eq!(wasm.writes_create, None);
        let r = ratios(&s);
        let names: Vec<(String, String)> = r
            .iter()
            .map(|r| (r.numerator.clone(), r.denominator.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("wasm-operator", "controller-runtime"),
                ("wasm-operator", "floor"),
                ("kopf", "wasm-operator"),
            ]
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
        );
        assert_eq!((r[0].create, r[0].cpu), (0.5, 2.0));
        assert_eq!(r[2].create, 4.0);
        assert!(markdown(&s, &r, &[]).contains("| – | 2.00 |"));
    }
}
