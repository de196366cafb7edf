//! ConversionReview v1: the request kube-apiserver sends to a CRD's conversion
//! webhook and the checks it makes on the converted objects.

use serde_json::{Value, json};

/// Builds the ConversionReview carrying `objects`.
pub fn review(uid: &str, desired_api_version: &str, objects: &[Value]) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired_api_version, "objects": objects},
    })
}

/// `<Kind>.<group>` of the objects, to name them in errors.
pub fn subject(objects: &[Value]) -> String {
    let Some(first) = objects.first() else {
        return "no objects".into();
    };
    let kind = first
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let api_version = first
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind.to_string(),
    }
}

/// Checks the answer to the review with uid `uid` and returns the converted
/// objects in request order. As kube-apiserver does, only labels and
/// annotations may be changed in `metadata`; everything else is restored from
/// `originals`.
pub fn converted(
    answer: &Value,
    uid: &str,
    desired_api_version: &str,
    originals: &[Value],
    subject: &str,
) -> Result<Vec<Value>, String> {
    let api_version = answer
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = answer
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if api_version != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
        return Err(format!(
            "conversion webhook for {subject} answered {api_version}, Kind={kind}; expected apiextensions.k8s.io/v1, Kind=ConversionReview"
        ));
    }
    let Some(response) = answer.get("response").filter(|r| r.is_object()) else {
        return Err(format!(
            "conversion webhook for {subject} returned no response"
        ));
    };
    let got_uid = response
        .get("uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if got_uid != uid {
        return Err(format!(
            "conversion webhook for {subject} returned response.uid={got_uid:?}, expected {uid:?}"
        ));
    }
    let result = response.get("result");
    let status = result
        .and_then(|r| r.get("status"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    if status != "Success" {
        let message = result
            .and_then(|r| r.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(format!(
            "conversion webhook for {subject} failed: {message}"
        ));
    }
    let objects = response
        .get("convertedObjects")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if objects.len() != originals.len() {
        return Err(format!(
            "conversion webhook for {subject} returned {} objects, expected {}",
            objects.len(),
            originals.len()
        ));
    }
    objects
        .iter()
        .zip(originals)
        .enumerate()
        .map(|(i, (object, original))| check_one(object, original, desired_api_version, subject, i))
        .collect()
}

fn check_one(
    object: &Value,
    original: &Value,
    desired: &str,
    subject: &str,
    index: usize,
) -> Result<Value, String> {
    let mut object = object.clone();
    let got_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if got_version != desired {
        return Err(format!(
            "conversion webhook for {subject} returned object {index} with apiVersion {got_version:?}, expected {desired:?}"
        ));
    }
    if object.get("kind") != original.get("kind") {
        return Err(format!(
            "conversion webhook for {subject} changed the kind of object {index}"
        ));
    }
    for field in ["name", "namespace", "uid"] {
        let before = original.pointer(&format!("/metadata/{field}"));
        let after = object.pointer(&format!("/metadata/{field}"));
        if before != after {
            return Err(format!(
                "conversion webhook for {subject} returned objects in the wrong order or changed metadata.{field} of object {index} ({} became {})",
                before
                    .map(Value::to_string)
                    .unwrap_or_else(|| "unset".into()),
                after
                    .map(Value::to_string)
                    .unwrap_or_else(|| "unset".into())
            ));
        }
    }
    let mut metadata = original
        .get("metadata")
        .filter(|m| m.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    for field in ["labels", "annotations"] {
        match object.pointer(&format!("/metadata/{field}")) {
            Some(value) if !value.is_null() => metadata[field] = value.clone(),
            _ => {
                if let Some(map) = metadata.as_object_mut() {
                    map.remove(field);
                }
            }
        }
    }
    object["metadata"] = metadata;
    Ok(object)
}
