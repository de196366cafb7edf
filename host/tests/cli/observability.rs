//! The chart's Grafana dashboard and PrometheusRule query only metrics the
//! host exports, and docs/operations.md's metric table lists exactly those:
//! every PromQL expression is read, its metric names are collected, and a
//! real `wasm-operator run` serving the webapp plugin on a devcluster is
//! scraped after a reconcile.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::Value;
use wasm_operator::dev::manifests::install_crds;

use crate::common::{eventually, plugin_wasm, run_plugin_command, spawn_logged, workspace};

const DASHBOARD: &str = "deploy/helm/wasm-operator/dashboards/wasm-operator.json";
const RULES: &str = "deploy/helm/wasm-operator/templates/prometheusrule.yaml";

/// PromQL words that are not metric names when they stand alone
/// (aggregations may have `by (...)` between their name and `(`).
const KEYWORDS: [&str; 28] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "atan2",
    "sum",
    "avg",
    "min",
    "max",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "limitk",
    "limit_ratio",
];

/// Every metric name PromQL `expr` selects, checking that its brackets and
/// strings balance. A small lexer rather than a parser crate: the PromQL
/// parser on crates.io (promql-parser) brings a parser generator's tree
/// (cfgrammar, lrlex, lrpar, vergen: about 20 crates) into every test build
/// for a check this small. What it reads: names followed by `(` are
/// functions or aggregations, the parenthesised list after
/// `by`/`without`/`on`/`ignoring`/`group_left`/`group_right` holds labels,
/// `{...}` holds matchers and `[...]` ranges; every other name is a metric.
fn selected(expr: &str) -> Result<BTreeSet<String>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = BTreeSet::new();
    let mut depth: Vec<char> = Vec::new();
    let mut i = 0;
    let mut labels_next = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            let end = chars[i + 1..]
                .iter()
                .position(|d| *d == c)
                .ok_or_else(|| format!("unterminated string at {i}"))?;
            i += end + 2;
            continue;
        }
        if c == '{' || c == '[' {
            let close = if c == '{' { '}' } else { ']' };
            let end = chars[i + 1..]
                .iter()
                .position(|d| *d == close)
                .ok_or_else(|| format!("unclosed {c} at {i}"))?;
            i += end + 2;
            continue;
        }
        if c == '(' {
            if labels_next {
                let end = chars[i + 1..]
                    .iter()
                    .position(|d| *d == ')')
                    .ok_or_else(|| format!("unclosed label list at {i}"))?;
                i += end + 2;
                labels_next = false;
                continue;
            }
            depth.push(c);
        } else if c == ')' && depth.pop().is_none() {
            return Err(format!("unbalanced ) at {i}"));
        }
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = chars[i..].iter().find(|c| !c.is_whitespace());
            let lower = word.to_ascii_lowercase();
            if [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&lower.as_str())
            {
                labels_next = true;
            } else if next != Some(&'(') && !KEYWORDS.contains(&lower.as_str()) {
                out.insert(word);
            }
            continue;
        }
        i += 1;
    }
    if !depth.is_empty() {
        return Err("unclosed (".into());
    }
    Ok(out)
}

/// The metric names of PromQL `query` (`place` names it in failures).
/// Grafana's `label_values(m, l)` is read as its selector `m`.
fn metrics_of(query: &str, place: &str) -> BTreeSet<String> {
    let mut text = query.to_string();
    if let Some(inner) = text
        .trim()
        .strip_prefix("label_values(")
        .and_then(|rest| rest.rsplit_once(','))
        .map(|(selector, _)| selector.to_string())
    {
        text = inner;
    }
    let out = selected(&text)
        .unwrap_or_else(|e| panic!("{place}: cannot read the PromQL {query:?}: {e}"));
    assert!(!out.is_empty(), "{place}: {query:?} selects no metric");
    out
}

/// (place, metric) for every query of the dashboard: panels' targets and
/// the templating variables.
fn dashboard_queries() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(workspace().join(DASHBOARD)).unwrap();
    let dashboard: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not valid JSON: {e}"));
    // The data source is a variable, so the dashboard imports anywhere.
    let variables = dashboard["templating"]["list"].as_array().unwrap();
    assert!(
        variables
            .iter()
            .any(|v| v["name"] == "datasource" && v["type"] == "datasource"),
        "{DASHBOARD}: no ${{datasource}} variable"
    );
    let mut out = Vec::new();
    for variable in variables.iter().filter(|v| v["type"] == "query") {
        let query = variable["query"]["query"]
            .as_str()
            .or_else(|| variable["query"].as_str())
            .unwrap();
        let place = format!("dashboard variable {}", variable["name"]);
        out.extend(
            metrics_of(query, &place)
                .into_iter()
                .map(|m| (place.clone(), m)),
        );
    }
    for panel in dashboard["panels"].as_array().unwrap() {
        if panel["type"] == "row" {
            continue;
        }
        let place = format!("dashboard panel {:?}", panel["title"].as_str().unwrap());
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{place}: its data source is not ${{datasource}}"
        );
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{place}: no query");
        for target in targets {
            let expr = target["expr"].as_str().unwrap();
            out.extend(
                metrics_of(expr, &place)
                    .into_iter()
                    .map(|m| (place.clone(), m)),
            );
        }
    }
    out
}

/// The rule template rendered the simple way Helm would with
/// `metrics.prometheusRule.enabled: true`: template-only lines dropped,
/// `{{`...`}}` unescaped, the release's name and namespace filled in.
fn rendered_rules() -> Value {
    let text = std::fs::read_to_string(workspace().join(RULES)).unwrap();
    let mut out = String::new();
    let mut in_comment = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("{{- /*") {
            in_comment = !trimmed.ends_with("*/ -}}");
            continue;
        }
        if in_comment {
            in_comment = !trimmed.ends_with("*/ -}}");
            continue;
        }
        if trimmed.starts_with("{{-") && trimmed.ends_with("}}") {
            continue;
        }
        let line = line
            .replace("{{`", "")
            .replace("`}}", "")
            .replace("{{ .Release.Name }}", "wasm-operator")
            .replace("{{ .Release.Namespace }}", "wasm-operator-system")
            .replace("{{ .Release.Service }}", "Helm");
        out.push_str(&line);
        out.push('\n');
    }
    serde_yaml::from_str(&out)
        .unwrap_or_else(|e| panic!("{RULES} does not render to YAML: {e}\n{out}"))
}

/// docs/operations.md's headings as GitHub anchors.
fn doc_anchors(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|l| l.strip_prefix('#'))
        .map(|h| {
            h.trim_start_matches('#')
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

/// (place, metric) for every alert's expression, after checking each alert
/// has a severity, a summary, a description and a runbook in the guide.
fn rule_queries(doc: &str) -> Vec<(String, String)> {
    let rule = rendered_rules();
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "wasm-operator-system");
    let anchors = doc_anchors(doc);
    let mut out = Vec::new();
    for group in rule["spec"]["groups"].as_array().unwrap() {
        for alert in group["rules"].as_array().unwrap() {
            let name = alert["alert"].as_str().unwrap();
            let place = format!("alert {name}");
            assert!(
                ["critical", "warning", "info"]
                    .contains(&alert["labels"]["severity"].as_str().unwrap_or("")),
                "{place}: no severity label"
            );
            for key in ["summary", "description"] {
                assert!(
                    alert["annotations"][key]
                        .as_str()
                        .is_some_and(|s| !s.is_empty()),
                    "{place}: no {key}"
                );
            }
            let runbook = alert["annotations"]["runbook_url"].as_str().unwrap_or("");
            let anchor = runbook
                .strip_prefix("docs/operations.md#")
                .unwrap_or_else(|| {
                    panic!(
                        "{place}: runbook_url {runbook:?} does not point into docs/operations.md"
                    )
                });
            assert!(
                anchors.contains(anchor),
                "{place}: docs/operations.md has no heading #{anchor}"
            );
            let expr = alert["expr"].as_str().unwrap();
            out.extend(
                metrics_of(expr, &place)
                    .into_iter()
                    .map(|m| (place.clone(), m)),
            );
        }
    }
    out
}

/// family -> type, from the `# TYPE` lines of a scrape.
fn families(scrape: &str) -> BTreeMap<String, String> {
    scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.trim().to_string()))
        .collect()
}

/// Whether a query's `metric` is a sample of an exported family: the family
/// itself, a counter's `_total`, a histogram's `_bucket`/`_sum`/`_count`.
fn exported(metric: &str, families: &BTreeMap<String, String>) -> bool {
    if families.contains_key(metric) {
        return true;
    }
    let of = |suffix: &str, kinds: &[&str]| {
        metric
            .strip_suffix(suffix)
            .and_then(|family| families.get(family))
            .is_some_and(|kind| kinds.contains(&kind.as_str()))
    };
    of("_total", &["counter"])
        || of("_bucket", &["histogram"])
        || of("_sum", &["histogram", "summary"])
        || of("_count", &["histogram", "summary"])
}

/// The names a user queries for each family: a counter's `_total`, the
/// family's own name otherwise.
fn queried_names(families: &BTreeMap<String, String>) -> BTreeSet<String> {
    families
        .iter()
        .map(|(name, kind)| match kind.as_str() {
            "counter" => format!("{name}_total"),
            _ => name.clone(),
        })
        .collect()
}

/// The first column of docs/operations.md's metric table (the table after
/// the `## Metrics` heading).
fn documented_metrics(doc: &str) -> BTreeSet<String> {
    doc.split("\n## Metrics")
        .nth(1)
        .unwrap_or_else(|| panic!("docs/operations.md has no `## Metrics` section"))
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(|cell| cell.trim().trim_matches('`').to_string())
        .filter(|cell| !cell.is_empty() && cell != "Metric" && !cell.starts_with('-'))
        .collect()
}

async fn scrape(port: u16) -> Option<String> {
    let response = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .ok()?;
    response.text().await.ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_and_the_alerts_query_only_exported_metrics() {
    let doc = std::fs::read_to_string(workspace().join("docs/operations.md")).unwrap();
    let mut queries = dashboard_queries();
    queries.extend(rule_queries(&doc));

    let wasm = plugin_wasm("webapp");
    let cluster = crate::support::start_cluster().await;
    let client = cluster.client();
    install_crds(&client, &workspace().join("examples/webapp/crd.yaml"))
        .await
        .unwrap();
    let port = crate::support::registry::free_port();
    let logs = tempfile::tempdir().unwrap();
    let log_path = logs.path().join("run.log");
    let child = spawn_logged(
        run_plugin_command(&wasm, cluster.kubeconfig_path())
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")]),
        &log_path,
    );
    let webapps = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("example.com", "v1", "WebApp"),
            "webapps",
        ),
    );
    let webapp = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": "shop", "namespace": "default"},
        "spec": {"image": "nginx:1.27", "replicas": 1},
    });
    webapps
        .patch(
            "shop",
            &PatchParams::apply("observability-test").force(),
            &Patch::Apply(&webapp),
        )
        .await
        .unwrap();
    // A reconcile of the webapp plugin has been counted: the series exist.
    let text = eventually(
        Duration::from_secs(180),
        "a counted reconcile on /metrics",
        || async move {
            scrape(port)
                .await
                .filter(|t| t.contains("controller_runtime_reconcile_total{controller=\"webapp\""))
        },
    )
    .await;
    let families = families(&text);

    let missing: Vec<String> = queries
        .iter()
        .filter(|(_, metric)| !exported(metric, &families))
        .map(|(place, metric)| format!("{place} queries {metric}, which /metrics does not export"))
        .collect();
    assert!(
        missing.is_empty(),
        "{}\n/metrics:\n{text}",
        missing.join("\n")
    );

    // The guide's metric table lists exactly what the host exports.
    let exported_names = queried_names(&families);
    let documented = documented_metrics(&doc);
    let undocumented: Vec<_> = exported_names.difference(&documented).collect();
    let stale: Vec<_> = documented.difference(&exported_names).collect();
    assert!(
        undocumented.is_empty() && stale.is_empty(),
        "docs/operations.md's metric table: missing {undocumented:?}, not exported {stale:?}"
    );

    let clean = tokio::task::spawn_blocking(move || child.terminate())
        .await
        .unwrap();
    assert!(
        clean,
        "run did not exit cleanly on SIGTERM; log:\n{}",
        std::fs::read_to_string(&log_path).unwrap_or_default()
    );
}
