//! Webhook behaviours used by the tests.

use base64::Engine as _;
use serde_json::{Value, json};

fn admission(uid: &Value, response: Value) -> Value {
    let mut response = response;
    response["uid"] = uid.clone();
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Allows the request and adds the label `mutated-by: webhook`.
pub fn add_label(review: Value) -> Value {
    let has_labels = review["request"]["object"]["metadata"]["labels"].is_object();
    let ops = if has_labels {
        json!([{"op": "add", "path": "/metadata/labels/mutated-by", "value": "webhook"}])
    } else {
        json!([{"op": "add", "path": "/metadata/labels", "value": {"mutated-by": "webhook"}}])
    };
    let patch = base64::engine::general_purpose::STANDARD.encode(ops.to_string());
    admission(
        &review["request"]["uid"],
        json!({"allowed": true, "patchType": "JSONPatch", "patch": patch}),
    )
}

/// Denies every request it sees.
pub fn deny(review: Value) -> Value {
    admission(
        &review["request"]["uid"],
        json!({"allowed": false, "status": {"code": 403, "message": "configmaps labelled frozen=true are read-only"}}),
    )
}

/// Answers with a uid that does not echo the request's.
pub fn wrong_uid(_review: Value) -> Value {
    admission(&json!("not-the-request-uid"), json!({"allowed": true}))
}

/// Converts Widgets between `v1` (`spec.size`) and `v2` (`spec.replicas`),
/// marking each converted object with the annotation `converted-to`.
pub fn convert_widgets(review: Value) -> Value {
    let request = &review["request"];
    let desired = request["desiredAPIVersion"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let objects: Vec<Value> = request["objects"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|mut o| {
            let spec = o["spec"].take();
            o["spec"] = if desired.ends_with("/v2") {
                json!({"replicas": spec["size"]})
            } else {
                json!({"size": spec["replicas"]})
            };
            o["apiVersion"] = json!(desired);
            o["metadata"]["annotations"] = json!({"converted-to": desired});
            o
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": {"uid": request["uid"], "result": {"status": "Success"}, "convertedObjects": objects},
    })
}
