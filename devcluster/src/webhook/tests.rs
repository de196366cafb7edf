use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Value, json};

use super::*;

fn attrs() -> AdmissionAttributes {
    AdmissionAttributes {
        group: "".into(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        resource: "configmaps".into(),
        sub_resource: "".into(),
        operation: "CREATE".into(),
        namespace: Some("default".into()),
        name: "cm".into(),
        object: Some(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "default", "labels": {"app": "x"}}}),
        ),
        old_object: None,
        dry_run: false,
        namespace_labels: BTreeMap::from([("env".to_string(), "dev".to_string())]),
    }
}

fn rule(ops: &[&str], groups: &[&str], resources: &[&str], scope: &str) -> Value {
    json!({"operations": ops, "apiGroups": groups, "apiVersions": ["*"], "resources": resources, "scope": scope})
}

#[test]
fn rules_match_operations_resources_and_scope() {
    let a = attrs();
    let hook = |r: Value| json!({"rules": [r]});
    assert!(matching::rules_match(
        &hook(rule(&["CREATE"], &[""], &["configmaps"], "*")),
        &a
    ));
    assert!(matching::rules_match(
        &hook(rule(&["*"], &["*"], &["*"], "Namespaced")),
        &a
    ));
    assert!(!matching::rules_match(
        &hook(rule(&["UPDATE"], &[""], &["configmaps"], "*")),
        &a
    ));
    assert!(!matching::rules_match(
        &hook(rule(&["*"], &["apps"], &["*"], "*")),
        &a
    ));
    assert!(!matching::rules_match(
        &hook(rule(&["*"], &["*"], &["*"], "Cluster")),
        &a
    ));
    assert!(!matching::rules_match(
        &hook(rule(&["*"], &["*"], &["configmaps/*"], "*")),
        &a
    ));
    let mut status = attrs();
    status.sub_resource = "status".into();
    assert!(!matching::rules_match(
        &hook(rule(&["*"], &["*"], &["*"], "*")),
        &status
    ));
    assert!(matching::rules_match(
        &hook(rule(&["*"], &["*"], &["*/*"], "*")),
        &status
    ));
    assert!(matching::rules_match(
        &hook(rule(&["*"], &["*"], &["configmaps/status"], "*")),
        &status
    ));
    assert!(matching::rules_match(
        &hook(rule(&["*"], &["*"], &["*/status"], "*")),
        &status
    ));
    assert!(!matching::rules_match(&json!({}), &a));
}

#[test]
fn label_selectors() {
    let labels = BTreeMap::from([
        ("env".to_string(), "dev".to_string()),
        ("tier".to_string(), "web".to_string()),
    ]);
    let yes = |s: Value| selector_matches(&s, &labels).unwrap();
    assert!(yes(json!({})));
    assert!(yes(json!({"matchLabels": {"env": "dev"}})));
    assert!(!yes(json!({"matchLabels": {"env": "prod"}})));
    assert!(yes(
        json!({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev", "qa"]}]})
    ));
    assert!(!yes(
        json!({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]})
    ));
    assert!(yes(
        json!({"matchExpressions": [{"key": "missing", "operator": "NotIn", "values": ["dev"]}]})
    ));
    assert!(yes(
        json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]})
    ));
    assert!(yes(
        json!({"matchExpressions": [{"key": "missing", "operator": "DoesNotExist"}]})
    ));
    assert!(!yes(
        json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]})
    ));
    assert!(
        selector_matches(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
            &labels
        )
        .is_err()
    );
}

#[test]
fn namespace_and_object_selectors() {
    let a = attrs();
    assert!(
        matching::namespace_matches(
            &json!({"namespaceSelector": {"matchLabels": {"env": "dev"}}}),
            &a
        )
        .unwrap()
    );
    assert!(
        !matching::namespace_matches(
            &json!({"namespaceSelector": {"matchLabels": {"env": "prd"}}}),
            &a
        )
        .unwrap()
    );
    assert!(
        matching::object_matches(
            &json!({"objectSelector": {"matchLabels": {"app": "x"}}}),
            &a
        )
        .unwrap()
    );
    assert!(
        !matching::object_matches(
            &json!({"objectSelector": {"matchLabels": {"app": "y"}}}),
            &a
        )
        .unwrap()
    );
    let mut update = attrs();
    update.object = Some(json!({"metadata": {"labels": {}}}));
    update.old_object = Some(json!({"metadata": {"labels": {"app": "y"}}}));
    assert!(
        matching::object_matches(
            &json!({"objectSelector": {"matchLabels": {"app": "y"}}}),
            &update
        )
        .unwrap()
    );
    let mut cluster = attrs();
    cluster.namespace = None;
    assert!(
        matching::namespace_matches(
            &json!({"namespaceSelector": {"matchLabels": {"env": "prd"}}}),
            &cluster
        )
        .unwrap()
    );
}

#[test]
fn review_carries_the_request() {
    let mut a = attrs();
    a.sub_resource = "status".into();
    let review = admission::review(&a, "u1");
    assert_eq!(review["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(review["kind"], "AdmissionReview");
    let r = &review["request"];
    assert_eq!(r["uid"], "u1");
    assert_eq!(
        r["kind"],
        json!({"group": "", "version": "v1", "kind": "ConfigMap"})
    );
    assert_eq!(
        r["resource"],
        json!({"group": "", "version": "v1", "resource": "configmaps"})
    );
    assert_eq!(r["requestResource"], r["resource"]);
    assert_eq!(r["subResource"], "status");
    assert_eq!(r["namespace"], "default");
    assert_eq!(r["operation"], "CREATE");
    assert_eq!(r["userInfo"]["username"], "devcluster-admin");
    assert_eq!(
        r["userInfo"]["groups"],
        json!(["system:masters", "system:authenticated"])
    );
    assert_eq!(r["oldObject"], Value::Null);
    assert_eq!(r["dryRun"], false);
    assert_eq!(r["options"]["kind"], "CreateOptions");
}

fn answer(response: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[test]
fn verdicts() {
    let denied = admission::verdict(
        &answer(json!({"uid": "u", "allowed": false, "status": {"message": "no"}})),
        "u",
    )
    .unwrap();
    assert!(
        matches!(denied, admission::Verdict::Denied { code: 403, ref message } if message == "no")
    );
    let denied = admission::verdict(
        &answer(json!({"uid": "u", "allowed": false, "status": {"code": 422, "reason": "bad"}})),
        "u",
    )
    .unwrap();
    assert!(
        matches!(denied, admission::Verdict::Denied { code: 422, ref message } if message == "bad")
    );
    let err =
        admission::verdict(&answer(json!({"uid": "other", "allowed": true})), "u").unwrap_err();
    assert_eq!(err, "expected response.uid=\"u\", got \"other\"");
    assert!(admission::verdict(&json!({"response": {"uid": "u", "allowed": true}}), "u").is_err());
    assert!(admission::verdict(&answer(json!({"uid": "u"})), "u").is_err());
    let patch =
        base64::engine::general_purpose::STANDARD.encode(r#"[{"op":"add","path":"/a","value":1}]"#);
    let ok = admission::verdict(
        &answer(json!({"uid": "u", "allowed": true, "patchType": "JSONPatch", "patch": patch})),
        "u",
    )
    .unwrap();
    assert!(matches!(ok, admission::Verdict::Allowed { patch: Some(_) }));
    let err = admission::verdict(
        &answer(json!({"uid": "u", "allowed": true, "patch": patch})),
        "u",
    )
    .unwrap_err();
    assert!(err.contains("unsupported patch type"), "{err}");
}

#[test]
fn endpoints() {
    let service = transport::Endpoint::from_client_config(Some(
        &json!({"service": {"name": "s", "namespace": "n"}}),
    ));
    assert_eq!(
        service.unwrap_err(),
        "clientConfig.service is not supported by devcluster; use clientConfig.url"
    );
    assert!(
        transport::Endpoint::from_client_config(Some(&json!({"url": "http://example.com/x"})))
            .is_err()
    );
    assert!(
        transport::Endpoint::from_client_config(Some(&json!({"url": "http://127.0.0.1:1/x"})))
            .is_ok()
    );
    assert!(
        transport::Endpoint::from_client_config(Some(&json!({"url": "http://[::1]:1/x"}))).is_ok()
    );
    assert!(
        transport::Endpoint::from_client_config(Some(&json!({"url": "https://example.com/x"})))
            .is_ok()
    );
    assert!(transport::Endpoint::from_client_config(None).is_err());
}

fn object(name: &str, uid: &str, version: &str) -> Value {
    json!({"apiVersion": format!("example.com/{version}"), "kind": "Widget", "metadata": {"name": name, "namespace": "d", "uid": uid, "resourceVersion": "5"}, "spec": {}})
}

fn conversion_answer(uid: &str, objects: Vec<Value>) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": {"uid": uid, "result": {"status": "Success"}, "convertedObjects": objects}})
}

#[test]
fn conversion_checks() {
    let originals = vec![object("a", "1", "v1"), object("b", "2", "v1")];
    let subject = conversion::subject(&originals);
    assert_eq!(subject, "Widget.example.com");
    let mut first = object("a", "1", "v2");
    first["metadata"]["labels"] = json!({"converted": "yes"});
    first["metadata"]["resourceVersion"] = json!("999");
    let good = conversion_answer("u", vec![first, object("b", "2", "v2")]);
    let out = conversion::converted(&good, "u", "example.com/v2", &originals, &subject).unwrap();
    assert_eq!(out[0]["metadata"]["labels"]["converted"], "yes");
    assert_eq!(
        out[0]["metadata"]["resourceVersion"], "5",
        "only labels and annotations may change"
    );
    let short = conversion_answer("u", vec![object("a", "1", "v2")]);
    assert_eq!(
        conversion::converted(&short, "u", "example.com/v2", &originals, &subject).unwrap_err(),
        "conversion webhook for Widget.example.com returned 1 objects, expected 2"
    );
    let swapped = conversion_answer("u", vec![object("b", "2", "v2"), object("a", "1", "v2")]);
    let err =
        conversion::converted(&swapped, "u", "example.com/v2", &originals, &subject).unwrap_err();
    assert!(err.contains("wrong order"), "{err}");
    let stale = conversion_answer("u", vec![object("a", "1", "v1"), object("b", "2", "v2")]);
    let err =
        conversion::converted(&stale, "u", "example.com/v2", &originals, &subject).unwrap_err();
    assert!(
        err.contains("apiVersion \"example.com/v1\", expected \"example.com/v2\""),
        "{err}"
    );
    let failed = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "response": {"uid": "u", "result": {"status": "Failure", "message": "cannot"}}});
    assert_eq!(
        conversion::converted(&failed, "u", "example.com/v2", &originals, &subject).unwrap_err(),
        "conversion webhook for Widget.example.com failed: cannot"
    );
}

/// Serves `handler` as a webhook on a random loopback port; returns its URL.
async fn serve(handler: fn(Value) -> Value) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| async move {
            axum::Json(handler(body))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/hook")
}

fn add_label(review: Value) -> Value {
    let uid = review["request"]["uid"].clone();
    let patch = base64::engine::general_purpose::STANDARD
        .encode(r#"[{"op":"add","path":"/metadata/labels/mutated","value":"yes"}]"#);
    answer(json!({"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch}))
}

fn deny(review: Value) -> Value {
    let uid = review["request"]["uid"].clone();
    answer(
        json!({"uid": uid, "allowed": false, "status": {"code": 400, "message": "configmaps are frozen"}}),
    )
}

fn configuration(name: &str, url: &str, extra: Value) -> Value {
    let mut hook = json!({"name": name, "clientConfig": {"url": url}, "rules": [rule(&["CREATE"], &[""], &["configmaps"], "*")], "sideEffects": "None", "admissionReviewVersions": ["v1"]});
    if let (Some(h), Some(e)) = (hook.as_object_mut(), extra.as_object()) {
        h.extend(e.clone());
    }
    json!({"metadata": {"name": name}, "webhooks": [hook]})
}

#[tokio::test]
async fn mutate_applies_patches_and_validate_denies() {
    let url = serve(add_label).await;
    let client = WebhookClient::default();
    let out = client
        .mutate(&[configuration("m.example.com", &url, json!({}))], &attrs())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        out["metadata"]["labels"],
        json!({"app": "x", "mutated": "yes"})
    );

    let url = serve(deny).await;
    let err = client
        .validate(&[configuration("v.example.com", &url, json!({}))], &attrs())
        .await
        .unwrap_err();
    assert!(
        matches!(err, WebhookError::Denied { code: 400, .. }),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "admission webhook \"v.example.com\" denied the request: configmaps are frozen"
    );
    let skipped = configuration(
        "v.example.com",
        &url,
        json!({"objectSelector": {"matchLabels": {"app": "other"}}}),
    );
    client.validate(&[skipped], &attrs()).await.unwrap();
}

#[tokio::test]
async fn failure_policy_and_dry_run() {
    // Nothing listens on a freshly closed port, so the call fails to connect.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/hook", l.local_addr().unwrap())
    };
    let client = WebhookClient::default();
    let err = client
        .validate(
            &[configuration("f.example.com", &closed, json!({}))],
            &attrs(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WebhookError::Failed { webhook, message } if webhook == "f.example.com" && message.starts_with("Post ")),
        "{err:?}"
    );
    let ignore = configuration("f.example.com", &closed, json!({"failurePolicy": "Ignore"}));
    client.validate(&[ignore], &attrs()).await.unwrap();

    let mut dry = attrs();
    dry.dry_run = true;
    let unknown = configuration("s.example.com", &closed, json!({"sideEffects": "Unknown"}));
    let err = client.validate(&[unknown], &dry).await.unwrap_err();
    assert!(err.to_string().contains("dry-run"), "{err}");
}

fn convert_to_v2(review: Value) -> Value {
    let request = &review["request"];
    let objects: Vec<Value> = request["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let mut o = o.clone();
            o["apiVersion"] = request["desiredAPIVersion"].clone();
            o
        })
        .collect();
    conversion_answer(request["uid"].as_str().unwrap(), objects)
}

#[tokio::test]
async fn convert_round_trip_keeps_order_and_skips_converted() {
    let url = serve(convert_to_v2).await;
    let hook = json!({"clientConfig": {"url": url}, "conversionReviewVersions": ["v1"]});
    let client = WebhookClient::default();
    let input = vec![
        object("a", "1", "v1"),
        object("b", "2", "v2"),
        object("c", "3", "v1"),
    ];
    let out = client
        .convert(&hook, input, "example.com/v2")
        .await
        .unwrap();
    let names: Vec<&str> = out
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert!(out.iter().all(|o| o["apiVersion"] == "example.com/v2"));
    let v1beta1_only =
        json!({"clientConfig": {"url": url}, "conversionReviewVersions": ["v1beta1"]});
    let err = client
        .convert(
            &v1beta1_only,
            vec![object("a", "1", "v1")],
            "example.com/v2",
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("does not accept ConversionReview v1"),
        "{err}"
    );
}

#[tokio::test]
async fn concurrent_validation_reports_the_first_refusal_in_configuration_order() {
    let url = serve(deny).await;
    let allow_url = serve(add_label).await;
    let configs = [
        configuration("c-deny.example.com", &url, json!({})),
        configuration("a-allow.example.com", &allow_url, json!({})),
        configuration("b-deny.example.com", &url, json!({})),
    ];
    let err = WebhookClient::default()
        .validate(&configs, &attrs())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WebhookError::Denied { webhook, .. } if webhook == "b-deny.example.com"),
        "{err:?}"
    );
}
