//! The Go-template subset against Go's behaviour on the forms kwok's files use.

use serde_json::{Value, json};

use super::funcs::{KwokFuncs, node_ip, pod_ip};
use super::{Template, TemplateError};

fn render(text: &str, data: Value) -> String {
    let funcs = KwokFuncs {
        now: "2026-01-02T03:04:05Z".into(),
        node_name: "kwok-node-0".into(),
    };
    Template::parse(text)
        .unwrap()
        .render(&data, &funcs)
        .unwrap()
}

#[test]
fn fields_variables_and_pipelines() {
    let data = json!({"spec": {"name": "web", "n": 3}});
    assert_eq!(
        render("{{ .spec.name }}/{{ .spec.n }}", data.clone()),
        "web/3"
    );
    assert_eq!(
        render("{{ $x := .spec }}{{ $x.name | Quote }}", data.clone()),
        "\"web\""
    );
    assert_eq!(render("{{ .spec.missing }}", data.clone()), "<no value>");
    assert_eq!(
        render("{{ Now | Quote }}", data.clone()),
        "\"2026-01-02T03:04:05Z\""
    );
    assert_eq!(render("{{ 5 | Quote }}", data), "\"5\"");
}

#[test]
fn trim_markers_and_comments() {
    assert_eq!(render("a  {{- 1 -}}  b{{/* note */}}", json!({})), "a1b");
}

#[test]
fn if_else_if_with_and_go_truthiness() {
    let t = "{{ if .a }}A{{ else if .b }}B{{ else }}C{{ end }}";
    assert_eq!(render(t, json!({"a": 1})), "A");
    assert_eq!(render(t, json!({"a": 0, "b": "x"})), "B");
    assert_eq!(render(t, json!({"a": [], "b": ""})), "C");
    let w = "{{ with .m }}{{ .k }}{{ else }}none{{ end }}";
    assert_eq!(render(w, json!({"m": {"k": "v"}})), "v");
    assert_eq!(render(w, json!({"m": {}})), "none");
}

#[test]
fn range_with_index_and_scoped_assignment() {
    let data = json!({"xs": [{"t": "A"}, {"t": "B"}]});
    assert_eq!(
        render(
            "{{ range $i, $e := .xs }}{{ $i }}{{ $e.t }}{{ end }}",
            data.clone()
        ),
        "0A1B"
    );
    assert_eq!(
        render("{{ range .none }}x{{ else }}empty{{ end }}", data.clone()),
        "empty"
    );
    // `=` assigns the outer variable (kwok's node-initialize relies on it).
    let t = r#"{{ $seen := false }}{{ range .xs }}{{ if eq .t "B" }}{{ $seen = true }}{{ end }}{{ end }}{{ $seen }}"#;
    assert_eq!(render(t, data.clone()), "true");
    // `$` is the root inside a range.
    assert_eq!(render("{{ range .xs }}{{ len $.xs }}{{ end }}", data), "22");
}

#[test]
fn builtins_and_sprig_functions() {
    let data = json!({"a": {"k": "v"}, "n": 2});
    assert_eq!(render(r#"{{ index .a "k" }}"#, data.clone()), "v");
    assert_eq!(render(r#"{{ or .missing "d" }}"#, data.clone()), "d");
    assert_eq!(
        render(r#"{{ and .n .missing }}"#, data.clone()),
        "<no value>"
    );
    assert_eq!(
        render(r#"{{ printf "kwok-%s" Version }}"#, data.clone()),
        "kwok-v0.8.0"
    );
    assert_eq!(render(r#"{{ printf "%q" "x" }}"#, data.clone()), "\"x\"");
    assert_eq!(render("{{ add .n 1 }} {{ sub .n 2 }}", data.clone()), "3 0");
    assert_eq!(
        render(r#"{{ hasKey .a "k" }} {{ hasKey .a "z" }}"#, data.clone()),
        "true false"
    );
    assert_eq!(
        render("{{ eq .n 2 }} {{ ne .n 2 }} {{ lt .n 3 }}", data.clone()),
        "true false true"
    );
    assert_eq!(render(r#"{{ index (dict "x" 1) "x" }}"#, data.clone()), "1");
    assert_eq!(
        render("{{ . | toJson | adler32sum }}", json!("abc")),
        "71369067"
    );
}

#[test]
fn trim_suffix_takes_the_suffix_first_as_sprig_does() {
    let data = json!({"d": "s3://b/p/"});
    assert_eq!(
        render(r#"{{ trimSuffix "/" .d }}"#, data.clone()),
        "s3://b/p"
    );
    assert_eq!(render(r#"{{ .d | trimSuffix "/" }}"#, data), "s3://b/p");
    // Only one suffix goes, as strings.TrimSuffix does.
    assert_eq!(render(r#"{{ trimSuffix "/" "a//" }}"#, json!({})), "a/");
    assert_eq!(render(r#"{{ trimSuffix "/" "a" }}"#, json!({})), "a");
}

/// The form of the backup tool's stage (`builtin/pod-complete-backup.yaml`):
/// a variable declared per container, assigned from a nested `range` over
/// its env, then a JSON message built with `dict`, `printf` and `toJson`.
#[test]
fn a_variable_found_in_a_nested_range_builds_a_json_message() {
    let data = json!({
        "metadata": {"labels": {"backup.wasm-operator.dev/name": "kv-1"}},
        "spec": {"containers": [
            {"name": "tool", "env": [
                {"name": "A", "value": "x"},
                {"name": "WASM_OPERATOR_BACKUP_DESTINATION", "value": "s3://b/p/"},
                {"name": "FROM", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            ]},
            {"name": "sidecar"},
        ]},
    });
    let t = r#"{{ $backup := index .metadata.labels "backup.wasm-operator.dev/name" }}{{ range .spec.containers }}{{ $destination := "" }}{{ range .env }}{{ if eq .name "WASM_OPERATOR_BACKUP_DESTINATION" }}{{ $destination = .value }}{{ end }}{{ end }}[{{ .name }}{{ with $destination }} {{ dict "location" (printf "%s/%s" (trimSuffix "/" .) $backup) | toJson | Quote }}{{ end }}]{{ end }}"#;
    assert_eq!(
        render(t, data),
        r#"[tool "{\"location\":\"s3://b/p/kv-1\"}"][sidecar]"#
    );
}

#[test]
fn yaml_indents_nested_documents() {
    let out = render("cap:\n{{ YAML .c 1 }}", json!({"c": {"cpu": "32"}}));
    let parsed: Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(parsed, json!({"cap": {"cpu": "32"}}));
}

#[test]
fn fake_addresses_are_stable() {
    assert_eq!(node_ip("kwok-node-2"), "10.0.0.12");
    assert_eq!(node_ip("other"), node_ip("other"));
    assert_eq!(pod_ip("kwok-node-0", true, "u", "p", "ns"), "10.0.0.10");
    let ip = pod_ip("kwok-node-0", false, "u", "p", "ns");
    assert!(ip.starts_with("10.244."), "{ip}");
    assert_eq!(ip, pod_ip("kwok-node-0", false, "u", "p", "ns"));
}

#[test]
fn errors_name_what_is_wrong() {
    assert!(
        matches!(Template::parse("{{ if .a }}x"), Err(TemplateError::Parse(m)) if m.contains("end"))
    );
    assert!(matches!(
        Template::parse("{{ end }}"),
        Err(TemplateError::Parse(_))
    ));
    let funcs = KwokFuncs::new("n");
    let t = Template::parse("{{ Nope 1 }}").unwrap();
    assert!(
        matches!(t.render(&json!({}), &funcs), Err(TemplateError::Exec(m)) if m.contains("Nope"))
    );
    let t = Template::parse("a: [").unwrap();
    assert!(matches!(
        t.render_json(&json!({}), &funcs),
        Err(TemplateError::NotYaml { .. })
    ));
}
