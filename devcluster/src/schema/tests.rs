use serde_json::{Value, json};

use super::{FieldCause, admit, check_structural};

fn crd_schema(spec: Value) -> Value {
    json!({"type": "object", "properties": {"spec": spec, "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
}

fn object(spec: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"a": "b"}}, "spec": spec})
}

fn only_cause(schema: &Value, mut obj: Value) -> FieldCause {
    let causes = admit(schema, &mut obj).expect_err("object should be invalid");
    assert_eq!(causes.len(), 1, "{causes:?}");
    causes.into_iter().next().unwrap()
}

#[test]
fn prunes_unknown_fields_but_keeps_object_fields() {
    let schema =
        crd_schema(json!({"type": "object", "properties": {"replicas": {"type": "integer"}}}));
    let mut obj = object(json!({"replicas": 1, "bogus": true}));
    obj["extra"] = json!(1);
    admit(&schema, &mut obj).unwrap();
    assert_eq!(obj["spec"], json!({"replicas": 1}));
    assert!(obj.get("extra").is_none());
    assert_eq!(obj["metadata"]["labels"]["a"], "b");
    assert_eq!(obj["kind"], "Widget");
}

#[test]
fn preserve_unknown_fields_and_maps_keep_members() {
    let schema = crd_schema(json!({"type": "object", "properties": {
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}},
    }}));
    let mut obj = object(json!({"free": {"x": {"y": 1}}, "labels": {"k": {"v": "1", "drop": 2}}}));
    admit(&schema, &mut obj).unwrap();
    assert_eq!(obj["spec"]["free"], json!({"x": {"y": 1}}));
    assert_eq!(obj["spec"]["labels"], json!({"k": {"v": "1"}}));
}

#[test]
fn embedded_resource_keeps_its_object_fields() {
    let schema = crd_schema(json!({"type": "object", "properties": {
        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
    }}));
    let mut obj = object(
        json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": 1}, "junk": 1}}),
    );
    admit(&schema, &mut obj).unwrap();
    assert_eq!(
        obj["spec"]["template"],
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"a": 1}})
    );
    let c = only_cause(
        &schema,
        object(json!({"template": {"apiVersion": "v1", "spec": {}}})),
    );
    assert_eq!(
        (c.reason.as_str(), c.field.as_str()),
        ("FieldValueRequired", "spec.template.kind")
    );
    assert_eq!(c.message, "Required value: must not be empty");
}

#[test]
fn applies_defaults_recursively_and_prunes_them() {
    let schema = crd_schema(json!({"type": "object", "properties": {
        "replicas": {"type": "integer", "default": 1},
        "strategy": {"type": "object", "default": {"unknown": 1}, "properties": {"kind": {"type": "string", "default": "Rolling"}}},
        "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}, "port": {"type": "integer"}}}},
        "env": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string", "default": "x"}}}},
        "nulled": {"type": "string", "default": "d"},
    }}));
    let mut obj = object(json!({"ports": [{"port": 80}], "env": {"A": {}}, "nulled": null}));
    admit(&schema, &mut obj).unwrap();
    assert_eq!(obj["spec"]["replicas"], 1);
    assert_eq!(obj["spec"]["strategy"], json!({"kind": "Rolling"}));
    assert_eq!(obj["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(obj["spec"]["env"]["A"]["v"], "x");
    assert_eq!(obj["spec"]["nulled"], "d");
}

#[test]
fn maximum_message_matches_kube() {
    let schema = crd_schema(
        json!({"type": "object", "properties": {"replicas": {"type": "integer", "maximum": 10, "minimum": 1}}}),
    );
    let c = only_cause(&schema, object(json!({"replicas": 11})));
    assert_eq!(c.reason, "FieldValueInvalid");
    assert_eq!(c.field, "spec.replicas");
    assert_eq!(
        c.message,
        "Invalid value: 11: spec.replicas in body should be less than or equal to 10"
    );
    let c = only_cause(&schema, object(json!({"replicas": 0})));
    assert_eq!(
        c.message,
        "Invalid value: 0: spec.replicas in body should be greater than or equal to 1"
    );
}

#[test]
fn exclusive_bounds() {
    let schema = crd_schema(
        json!({"type": "object", "properties": {"ratio": {"type": "number", "maximum": 1, "exclusiveMaximum": true, "minimum": 0, "exclusiveMinimum": true}}}),
    );
    let c = only_cause(&schema, object(json!({"ratio": 1})));
    assert_eq!(
        c.message,
        "Invalid value: 1: spec.ratio in body should be less than 1"
    );
    let c = only_cause(&schema, object(json!({"ratio": 0})));
    assert_eq!(
        c.message,
        "Invalid value: 0: spec.ratio in body should be greater than 0"
    );
    let mut ok = object(json!({"ratio": 0.5}));
    admit(&schema, &mut ok).unwrap();
}

#[test]
fn type_errors() {
    let schema = crd_schema(
        json!({"type": "object", "properties": {"replicas": {"type": "integer"}, "ratio": {"type": "number"}}}),
    );
    let c = only_cause(&schema, object(json!({"replicas": "string"})));
    assert_eq!(c.reason, "FieldValueTypeInvalid");
    assert_eq!(
        c.message,
        "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\""
    );
    let c = only_cause(&schema, object(json!({"replicas": 1.5})));
    assert_eq!(
        c.message,
        "Invalid value: \"number\": spec.replicas in body must be of type integer: \"number\""
    );
    let mut ok = object(json!({"replicas": 2, "ratio": 3}));
    admit(&schema, &mut ok).unwrap();
}

#[test]
fn nulls_follow_kube_defaulting_and_nullable_rules() {
    // The example of the Kubernetes docs, "Defaulting and Nullable".
    let schema = crd_schema(json!({"type": "object", "properties": {
        "foo": {"type": "string", "nullable": false, "default": "default"},
        "bar": {"type": "string", "nullable": true},
        "baz": {"type": "string"},
        "map": {"type": "object", "additionalProperties": {"type": "string"}},
        "list": {"type": "array", "items": {"type": "string"}},
    }}));
    let mut obj =
        object(json!({"foo": null, "bar": null, "baz": null, "map": {"a": null, "b": "x"}}));
    admit(&schema, &mut obj).unwrap();
    assert_eq!(
        obj["spec"],
        json!({"foo": "default", "bar": null, "map": {"b": "x"}})
    );
    let c = only_cause(&schema, object(json!({"list": ["a", null]})));
    assert_eq!(c.field, "spec.list[1]");
    assert_eq!(
        c.message,
        "Invalid value: \"null\": spec.list[1] in body must be of type string: \"null\""
    );
}

#[test]
fn required_enum_and_nested_paths() {
    let schema = crd_schema(
        json!({"type": "object", "required": ["image"], "properties": {
            "image": {"type": "string"},
            "mode": {"type": "string", "enum": ["a", "b"]},
            "containers": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "minLength": 2}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}},
        }}),
    );
    let mut obj = object(
        json!({"mode": "x", "containers": [{"name": "ok"}, {}, {"name": "a"}], "labels": {"foo": "long!"}}),
    );
    let causes = admit(&schema, &mut obj).unwrap_err();
    let got: Vec<(&str, &str, &str)> = causes
        .iter()
        .map(|c| (c.reason.as_str(), c.field.as_str(), c.message.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("FieldValueRequired", "spec.image", "Required value"),
            (
                "FieldValueNotSupported",
                "spec.mode",
                "Unsupported value: \"x\": supported values: \"a\", \"b\""
            ),
            (
                "FieldValueRequired",
                "spec.containers[1].name",
                "Required value"
            ),
            (
                "FieldValueInvalid",
                "spec.containers[2].name",
                "Invalid value: \"a\": spec.containers[2].name in body should be at least 2 chars long"
            ),
            (
                "FieldValueTooLong",
                "spec.labels[foo]",
                "Too long: may not be more than 3 bytes"
            ),
        ]
    );
}

#[test]
fn pattern_counts_and_format() {
    let schema = crd_schema(json!({"type": "object", "properties": {
        "cron": {"type": "string", "pattern": "^\\d+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "minItems": 1},
        "sel": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 1, "minProperties": 1},
        "at": {"type": "string", "format": "date-time"},
        "small": {"type": "integer", "format": "int32"},
    }}));
    let mut obj = object(
        json!({"cron": "x", "tags": ["a", "b", "c"], "sel": {}, "at": "yesterday", "small": 4_000_000_000u64}),
    );
    let causes = admit(&schema, &mut obj).unwrap_err();
    let messages: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
    assert_eq!(
        messages,
        vec![
            "Invalid value: \"x\": spec.cron in body should match '^\\d+$'",
            "Too many: 3: must have at most 2 items",
            "Invalid value: \"object\": spec.sel in body should have at least 1 properties",
            "Invalid value: \"yesterday\": spec.at in body must be of type date-time: \"yesterday\"",
            "Invalid value: 4000000000: spec.small in body must be of type int32: \"4000000000\"",
        ]
    );
    let mut ok = object(
        json!({"cron": "5", "tags": ["a"], "sel": {"k": "v"}, "at": "2024-01-02T03:04:05Z", "small": 5}),
    );
    admit(&schema, &mut ok).unwrap();
}

#[test]
fn int_or_string() {
    let schema = crd_schema(
        json!({"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": true}}}),
    );
    admit(&schema, &mut object(json!({"port": 80}))).unwrap();
    admit(&schema, &mut object(json!({"port": "http"}))).unwrap();
    let c = only_cause(&schema, object(json!({"port": true})));
    assert_eq!(
        c.message,
        "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
    );
}

#[test]
fn junctors() {
    let schema = crd_schema(json!({"type": "object", "properties": {
        "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[a-z]+$"}]},
        "one": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "oneOf": [{"required": ["a"]}, {"required": ["b"]}]},
        "not": {"type": "string", "not": {"enum": ["forbidden"]}},
        "all": {"type": "integer", "allOf": [{"minimum": 0}, {"maximum": 5}]},
    }}));
    admit(
        &schema,
        &mut object(json!({"port": 8, "one": {"a": "x"}, "not": "fine", "all": 3})),
    )
    .unwrap();
    admit(&schema, &mut object(json!({"port": "http"}))).unwrap();
    let mut bad =
        object(json!({"port": "HTTP", "one": {"a": "x", "b": "y"}, "not": "forbidden", "all": 6}));
    let causes = admit(&schema, &mut bad).unwrap_err();
    let messages: Vec<&str> = causes.iter().map(|c| c.message.as_str()).collect();
    assert!(
        messages.contains(
            &"Invalid value: \"HTTP\": spec.port in body must validate at least one schema (anyOf)"
        ),
        "{messages:?}"
    );
    assert!(messages.contains(&"Invalid value: \"object\": spec.one in body must validate one and only one schema (oneOf)"), "{messages:?}");
    assert!(
        messages.contains(
            &"Invalid value: \"forbidden\": spec.not in body must not validate the schema (not)"
        ),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"Invalid value: 6: spec.all in body should be less than or equal to 5"),
        "{messages:?}"
    );
}

#[test]
fn structural_accepts_a_normal_crd_schema() {
    let schema = crd_schema(
        json!({"type": "object", "required": ["replicas"], "properties": {
            "replicas": {"type": "integer", "maximum": 10},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "items": {"type": "array", "items": {"type": "string"}},
            "map": {"type": "object", "additionalProperties": {"type": "string"}},
        }}),
    );
    // kubebuilder emits anyOf with types for int-or-string; kube accepts that one shape.
    check_structural(&schema).unwrap();
    let schema = crd_schema(
        json!({"type": "object", "properties": {"n": {"type": "integer", "anyOf": [{"type": "integer"}]}}}),
    );
    let err = check_structural(&schema).unwrap_err();
    assert!(
        err.contains("properties[n].anyOf[0].type: Forbidden"),
        "{err}"
    );
}

#[test]
fn structural_rejects_missing_types_and_items() {
    let schema = json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "array"}, "b": {"type": "strin"}}}}});
    let err = check_structural(&schema).unwrap_err();
    assert!(
        err.contains("openAPIV3Schema.properties[spec].type: Required value"),
        "{err}"
    );
    assert!(
        err.contains("openAPIV3Schema.properties[spec].properties[a].items: Required value"),
        "{err}"
    );
    assert!(
        err.contains("properties[b].type: Unsupported value: \"strin\""),
        "{err}"
    );
    assert!(check_structural(&json!({"properties": {}})).is_err());
    assert!(check_structural(&json!({"type": "object", "properties": {"m": {"type": "object", "additionalProperties": false}}})).is_err());
    assert!(
        check_structural(
            &json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "("}}})
        )
        .is_err()
    );
}

#[test]
fn list_types_reject_duplicates() {
    let schema = crd_schema(json!({"type": "object", "properties": {
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
    }}));
    let mut obj = object(
        json!({"tags": ["a", "b", "a"], "ports": [{"name": "http", "port": 80}, {"name": "http", "port": 81}]}),
    );
    let causes = admit(&schema, &mut obj).unwrap_err();
    let got: Vec<(&str, &str, &str)> = causes
        .iter()
        .map(|c| (c.reason.as_str(), c.field.as_str(), c.message.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                "FieldValueDuplicate",
                "spec.tags[2]",
                "Duplicate value: \"a\""
            ),
            (
                "FieldValueDuplicate",
                "spec.ports[1]",
                "Duplicate value: map[string]interface {}{\"name\":\"http\"}"
            ),
        ]
    );
    admit(
        &schema,
        &mut object(json!({"tags": ["a", "b"], "ports": [{"name": "a"}, {"name": "b"}]})),
    )
    .unwrap();
}
