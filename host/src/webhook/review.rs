//! ConversionReview v1, as values: reading a request, checking one converted
//! object the way kube-apiserver does, and building the response. Pure: no
//! plugin calls, no I/O.

use serde_json::{Value, json};

pub use crate::plan::marks::keep_host_marks;

/// The part of a ConversionReview request the webhook needs.
#[derive(Debug, Clone, PartialEq)]
pub struct ReviewRequest {
    /// `request.uid`, echoed in the response.
    pub uid: String,
    /// `request.desiredAPIVersion`, e.g. `kv.example.com/v1alpha1`.
    pub desired_api_version: String,
    /// `request.objects`, in order.
    pub objects: Vec<Value>,
}

/// Reads a ConversionReview v1 request.
///
/// # Errors
///
/// A message for the response (and the API server's error) when the review
/// is not a ConversionReview v1 request.
pub fn parse(review: &Value) -> Result<ReviewRequest, String> {
    let api_version = review
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = review
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if api_version != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
        return Err(format!(
            "expected an apiextensions.k8s.io/v1 ConversionReview, got {api_version:?} {kind:?}; set conversionReviewVersions: [v1] on the CRD"
        ));
    }
    let request = review
        .get("request")
        .filter(|r| r.is_object())
        .ok_or("the ConversionReview has no request")?;
    let uid = request
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if uid.is_empty() {
        return Err("the ConversionReview request has no uid".into());
    }
    let desired = request
        .get("desiredAPIVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !desired.contains('/') {
        return Err(format!(
            "the ConversionReview request asks for apiVersion {desired:?}; a custom resource's apiVersion is group/version"
        ));
    }
    let objects = request
        .get("objects")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    Ok(ReviewRequest {
        uid: uid.to_string(),
        desired_api_version: desired.to_string(),
        objects,
    })
}

/// `(group, kind)` of an object, from its `apiVersion` and `kind`.
pub fn group_kind(object: &Value) -> Option<(&str, &str)> {
    let api_version = object.get("apiVersion").and_then(Value::as_str)?;
    let (group, _) = api_version.split_once('/')?;
    let kind = object.get("kind").and_then(Value::as_str)?;
    Some((group, kind))
}

/// `Kind namespace/name` of an object, to name it in messages.
pub fn describe(object: &Value) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("<unnamed>");
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Checks what a plugin's `convert` returned for `original` against the
/// rules kube-apiserver enforces on a conversion webhook: the requested
/// `apiVersion`, the same `kind`, and `metadata` untouched except labels and
/// annotations. Returns the problem in words (the caller adds plugin and
/// version).
///
/// # Errors
///
/// The first rule broken, naming the field and both values.
pub fn check_converted(original: &Value, converted: &Value, desired: &str) -> Result<(), String> {
    if !converted.is_object() {
        return Err("it returned something other than a JSON object".into());
    }
    let got = converted
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if got != desired {
        return Err(format!(
            "it returned apiVersion {got:?}, but {desired:?} was requested"
        ));
    }
    if converted.get("kind") != original.get("kind") {
        return Err(format!(
            "it changed kind from {} to {}",
            shown(original.get("kind")),
            shown(converted.get("kind"))
        ));
    }
    let empty = json!({});
    let before = original.get("metadata").unwrap_or(&empty);
    let after = converted.get("metadata").unwrap_or(&empty);
    let (Some(before), Some(after)) = (before.as_object(), after.as_object()) else {
        return Err("it returned metadata that is not an object".into());
    };
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    for key in keys {
        if key == "labels" || key == "annotations" {
            continue;
        }
        if before.get(key) != after.get(key) {
            return Err(format!(
                "it changed metadata.{key} from {} to {}; a conversion may change only labels and annotations in metadata",
                shown(before.get(key)),
                shown(after.get(key))
            ));
        }
    }
    Ok(())
}

fn shown(value: Option<&Value>) -> String {
    value.map_or_else(|| "unset".to_string(), Value::to_string)
}

/// The ConversionReview response for `uid`: the converted objects, or a
/// failure with `message` (the API server shows it to the client).
pub fn response(uid: &str, outcome: Result<Vec<Value>, String>) -> Value {
    let response = match outcome {
        Ok(objects) => json!({
            "uid": uid,
            "result": {"status": "Success"},
            "convertedObjects": objects,
        }),
        Err(message) => json!({
            "uid": uid,
            "result": {"status": "Failure", "message": message},
        }),
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "response": response,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> Value {
        json!({
            "apiVersion": "kv.example.com/v1beta1", "kind": "DistributedKV",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
            "spec": {"replicaCount": 1},
        })
    }

    #[test]
    fn parses_a_v1_review_and_refuses_anything_else() {
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "1", "desiredAPIVersion": "kv.example.com/v1alpha1", "objects": [object()]}});
        let request = parse(&review).unwrap();
        assert_eq!(request.uid, "1");
        assert_eq!(request.desired_api_version, "kv.example.com/v1alpha1");
        assert_eq!(request.objects.len(), 1);
        let v1beta1 =
            json!({"apiVersion": "apiextensions.k8s.io/v1beta1", "kind": "ConversionReview"});
        assert!(
            parse(&v1beta1)
                .unwrap_err()
                .contains("conversionReviewVersions")
        );
        let no_uid = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview", "request": {}});
        assert!(parse(&no_uid).unwrap_err().contains("uid"));
    }

    #[test]
    fn accepts_a_conversion_that_changes_only_spec_labels_and_annotations() {
        let mut converted = object();
        converted["apiVersion"] = json!("kv.example.com/v1alpha1");
        converted["spec"] = json!({"size": 1});
        converted["metadata"]["annotations"] = json!({"x": "y"});
        converted["metadata"]["labels"] = json!({"l": "v"});
        check_converted(&object(), &converted, "kv.example.com/v1alpha1").unwrap();
    }

    #[test]
    fn refuses_a_wrong_version_kind_or_metadata_change() {
        let desired = "kv.example.com/v1alpha1";
        let mut wrong_version = object();
        wrong_version["apiVersion"] = json!("kv.example.com/v1beta1");
        assert!(
            check_converted(&object(), &wrong_version, desired)
                .unwrap_err()
                .contains("apiVersion")
        );
        let mut converted = object();
        converted["apiVersion"] = json!(desired);
        let mut kind = converted.clone();
        kind["kind"] = json!("Other");
        assert!(
            check_converted(&object(), &kind, desired)
                .unwrap_err()
                .contains("kind")
        );
        for field in ["name", "namespace", "uid", "resourceVersion"] {
            let mut changed = converted.clone();
            changed["metadata"][field] = json!("other");
            let error = check_converted(&object(), &changed, desired).unwrap_err();
            assert!(error.contains(&format!("metadata.{field}")), "{error}");
        }
        let mut added = converted.clone();
        added["metadata"]["finalizers"] = json!(["f"]);
        assert!(
            check_converted(&object(), &added, desired)
                .unwrap_err()
                .contains("metadata.finalizers")
        );
        assert!(check_converted(&object(), &json!("text"), desired).is_err());
    }

    #[test]
    fn responses_echo_the_uid() {
        let ok = response("u1", Ok(vec![object()]));
        assert_eq!(ok["response"]["uid"], "u1");
        assert_eq!(ok["response"]["result"]["status"], "Success");
        assert_eq!(ok["response"]["convertedObjects"][0], object());
        let failed = response("u2", Err("no".into()));
        assert_eq!(
            failed["response"]["result"],
            json!({"status": "Failure", "message": "no"})
        );
    }

    #[test]
    fn names_objects_and_their_group_kind() {
        assert_eq!(describe(&object()), "DistributedKV ns/a");
        assert_eq!(
            group_kind(&object()),
            Some(("kv.example.com", "DistributedKV"))
        );
        assert_eq!(
            group_kind(&json!({"apiVersion": "v1", "kind": "Pod"})),
            None
        );
    }
}
