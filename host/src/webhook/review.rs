//! ConversionReview v1, as values: reading a request, checking one converted
//! object the way kube-apiserver does, and building the response. Pure: no
//! plugin calls, no I/O.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
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

/// The largest single object a review may carry (4 MiB): the API server
/// refuses request bodies over 3 MiB and etcd stores objects of at most
/// 1.5 MiB by default, so no stored custom resource comes near it (the
/// headroom covers re-encoding). Checked before an object is parsed: a
/// review cannot make the host build the tree of a giant object.
pub const MAX_OBJECT_BYTES: usize = 4 << 20;

/// A ConversionReview v1 request read from its bytes without building its
/// objects: each object stays the raw JSON text it was sent as (borrowed
/// from the body), checked only for the fields the webhook reads.
#[derive(Debug)]
pub struct RawReviewRequest<'a> {
    /// `request.uid`, echoed in the response.
    pub uid: String,
    /// `request.desiredAPIVersion`.
    pub desired_api_version: String,
    /// `request.objects`, in order, as sent.
    pub objects: Vec<RawObject<'a>>,
}

/// One object of a review: its raw text and the head fields read from it.
#[derive(Debug)]
pub struct RawObject<'a> {
    /// The object as the API server sent it.
    pub raw: &'a RawValue,
    /// Its `apiVersion` (borrowed from the body unless it had escapes).
    pub api_version: Cow<'a, str>,
    /// Its `kind` (borrowed likewise).
    pub kind: Cow<'a, str>,
}

impl RawObject<'_> {
    /// `(group, kind)`, from `apiVersion` and `kind`.
    pub fn group_kind(&self) -> Option<(&str, &str)> {
        let (group, _) = self.api_version.split_once('/')?;
        Some((group, &*self.kind))
    }

    /// The object without what a conversion may change freely (`spec`,
    /// `status`...): `apiVersion`, `kind` and `metadata`, to check a
    /// converted object against and to name it. Bounded: the object is at
    /// most [`MAX_OBJECT_BYTES`].
    ///
    /// # Errors
    /// A message when the object is not a JSON object with an object
    /// `metadata` (never the case for what the API server sends).
    pub fn head(&self) -> Result<Value, String> {
        #[derive(Deserialize)]
        struct Head {
            #[serde(default)]
            metadata: Option<Value>,
        }
        let head: Head = serde_json::from_str(self.raw.get())
            .map_err(|e| format!("an object of the review does not parse: {e}"))?;
        let mut out = json!({"apiVersion": self.api_version, "kind": self.kind});
        if let Some(metadata) = head.metadata {
            out["metadata"] = metadata;
        }
        Ok(out)
    }
}

/// Why a review's bytes are not a ConversionReview the webhook converts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewError {
    /// `request.objects[index]` is `size` bytes, over [`MAX_OBJECT_BYTES`]:
    /// refused unparsed.
    #[error(
        "request.objects[{index}]: the object is {size} bytes; objects over {MAX_OBJECT_BYTES} bytes are refused (the API server stores none over 3 MiB), so this review did not come from it"
    )]
    ObjectTooLarge {
        /// The object's index in `request.objects`.
        index: usize,
        /// Its size in bytes.
        size: usize,
    },
    /// Not a ConversionReview v1 request (the sentence says what is wrong).
    #[error("{0}")]
    Invalid(String),
}

/// Reads a ConversionReview v1 request from `body` (see [`parse`] for the
/// rules), checking each object as it is read: a JSON object of at most
/// [`MAX_OBJECT_BYTES`] with a string `apiVersion` and `kind`. The first
/// object that is not fails the whole review there, so no more of a
/// malformed body is kept.
///
/// # Errors
/// [`ReviewError::ObjectTooLarge`] for an object over the bound,
/// [`ReviewError::Invalid`] for anything else; both are messages for the
/// response (and the API server's error).
pub fn parse_bytes(body: &[u8]) -> Result<RawReviewRequest<'_>, ReviewError> {
    #[derive(Deserialize)]
    struct Review<'a> {
        #[serde(default, rename = "apiVersion")]
        api_version: String,
        #[serde(default)]
        kind: String,
        #[serde(borrow)]
        request: Option<Request<'a>>,
    }
    #[derive(Deserialize)]
    struct Request<'a> {
        #[serde(default)]
        uid: String,
        #[serde(default, rename = "desiredAPIVersion")]
        desired: String,
        #[serde(borrow, default)]
        objects: Option<&'a RawValue>,
    }
    let invalid = ReviewError::Invalid;
    let review: Review<'_> = serde_json::from_slice(body)
        .map_err(|e| invalid(format!("the ConversionReview does not parse: {e}")))?;
    if review.api_version != "apiextensions.k8s.io/v1" || review.kind != "ConversionReview" {
        return Err(invalid(format!(
            "expected an apiextensions.k8s.io/v1 ConversionReview, got {:?} {:?}; set conversionReviewVersions: [v1] on the CRD",
            review.api_version, review.kind
        )));
    }
    let request = review
        .request
        .ok_or_else(|| invalid("the ConversionReview has no request".into()))?;
    if request.uid.is_empty() {
        return Err(invalid("the ConversionReview request has no uid".into()));
    }
    if !request.desired.contains('/') {
        return Err(invalid(format!(
            "the ConversionReview request asks for apiVersion {:?}; a custom resource's apiVersion is group/version",
            request.desired
        )));
    }
    let objects = match request.objects {
        Some(objects) => read_objects(objects)?,
        None => Vec::new(),
    };
    Ok(RawReviewRequest {
        uid: request.uid,
        desired_api_version: request.desired,
        objects,
    })
}

/// `request.objects` (raw), each object checked as the array is read.
fn read_objects(objects: &RawValue) -> Result<Vec<RawObject<'_>>, ReviewError> {
    use serde::de::DeserializeSeed as _;
    let mut too_large = None;
    let mut deserializer = serde_json::Deserializer::from_str(objects.get());
    let read = Objects {
        too_large: &mut too_large,
    }
    .deserialize(&mut deserializer);
    match (read, too_large) {
        (_, Some(refusal)) => Err(refusal),
        (Ok(objects), None) => Ok(objects),
        (Err(e), None) => Err(ReviewError::Invalid(format!(
            "the ConversionReview does not parse: {e}"
        ))),
    }
}

/// Reads `request.objects`; an object over [`MAX_OBJECT_BYTES`] stops the
/// read and is reported in `too_large` (a serde error carries only text).
struct Objects<'s> {
    too_large: &'s mut Option<ReviewError>,
}

impl<'de> serde::de::DeserializeSeed<'de> for Objects<'_> {
    type Value = Vec<RawObject<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Objects<'_> {
    type Value = Vec<RawObject<'de>>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an array of objects")
    }

    fn visit_seq<S: serde::de::SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let mut objects = Vec::new();
        while let Some(raw) = seq.next_element::<&'de RawValue>()? {
            let index = objects.len();
            let size = raw.get().len();
            if size > MAX_OBJECT_BYTES {
                let refusal = ReviewError::ObjectTooLarge { index, size };
                let message = refusal.to_string();
                *self.too_large = Some(refusal);
                return Err(serde::de::Error::custom(message));
            }
            let object = read_object(raw)
                .map_err(|e| serde::de::Error::custom(format!("request.objects[{index}]: {e}")))?;
            objects.push(object);
        }
        Ok(objects)
    }
}

/// Reads one raw object's `apiVersion` and `kind` (everything else is
/// skipped, not built); its size was checked.
fn read_object(raw: &RawValue) -> Result<RawObject<'_>, String> {
    #[derive(Deserialize)]
    struct Kinded<'a> {
        #[serde(borrow, rename = "apiVersion")]
        api_version: Option<Cow<'a, str>>,
        #[serde(borrow)]
        kind: Option<Cow<'a, str>>,
    }
    if !raw.get().starts_with('{') {
        return Err("it is not a JSON object".into());
    }
    let kinded: Kinded<'_> = serde_json::from_str(raw.get()).map_err(|e| e.to_string())?;
    match (kinded.api_version, kinded.kind) {
        (Some(api_version), Some(kind)) => Ok(RawObject {
            raw,
            api_version,
            kind,
        }),
        _ => Err("the object has no apiVersion or no kind".into()),
    }
}

/// One converted object of a response: the object as it was sent (it was
/// at the desired version already) or the plugin's answer, serialized.
#[derive(Debug)]
pub enum ConvertedObject<'a> {
    /// Passed through as sent.
    Unchanged(&'a RawValue),
    /// What the plugin returned, checked.
    Converted(Box<RawValue>),
}

impl Serialize for ConvertedObject<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ConvertedObject::Unchanged(raw) => raw.serialize(serializer),
            ConvertedObject::Converted(raw) => raw.serialize(serializer),
        }
    }
}

/// [`response`], written straight to bytes from the raw objects (no tree of
/// every converted object is built).
pub fn response_bytes(uid: &str, outcome: Result<Vec<ConvertedObject<'_>>, String>) -> Vec<u8> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Body<'a> {
        uid: &'a str,
        result: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        converted_objects: Option<Vec<ConvertedObject<'a>>>,
    }
    #[derive(Serialize)]
    struct Review<'a> {
        #[serde(rename = "apiVersion")]
        api_version: &'static str,
        kind: &'static str,
        response: Body<'a>,
    }
    let response = match outcome {
        Ok(objects) => Body {
            uid,
            result: json!({"status": "Success"}),
            converted_objects: Some(objects),
        },
        Err(message) => Body {
            uid,
            result: json!({"status": "Failure", "message": message}),
            converted_objects: None,
        },
    };
    let review = Review {
        api_version: "apiextensions.k8s.io/v1",
        kind: "ConversionReview",
        response,
    };
    // Serializing strings, a Value and raw JSON text into a Vec cannot fail.
    serde_json::to_vec(&review).unwrap_or_default()
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

    #[test]
    fn reads_a_review_from_bytes_keeping_objects_as_sent() {
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "1", "desiredAPIVersion": "kv.example.com/v1alpha1", "objects": [object(), object()]}});
        let bytes = serde_json::to_vec(&review).unwrap();
        let request = parse_bytes(&bytes).unwrap();
        assert_eq!(request.uid, "1");
        assert_eq!(request.desired_api_version, "kv.example.com/v1alpha1");
        assert_eq!(request.objects.len(), 2);
        let first = &request.objects[0];
        assert_eq!(first.raw.get(), object().to_string());
        assert_eq!(
            first.group_kind(),
            Some(("kv.example.com", "DistributedKV"))
        );
        let head = first.head().unwrap();
        assert_eq!(head["metadata"], object()["metadata"]);
        assert_eq!(head.get("spec"), None, "the head leaves the spec out");
        assert_eq!(describe(&head), "DistributedKV ns/a");
    }

    #[test]
    fn refuses_a_review_at_its_first_bad_object() {
        let review = |objects: Value| {
            serde_json::to_vec(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "1", "desiredAPIVersion": "kv.example.com/v1alpha1", "objects": objects}}))
            .unwrap()
        };
        let error = parse_bytes(&review(json!([object(), 0, 0])))
            .unwrap_err()
            .to_string();
        assert!(error.contains("request.objects[1]"), "{error}");
        assert!(error.contains("not a JSON object"), "{error}");
        let error = parse_bytes(&review(json!([{"kind": "X"}])))
            .unwrap_err()
            .to_string();
        assert!(error.contains("no apiVersion"), "{error}");
        let mut huge = object();
        huge["spec"]["items"] = json!(vec![0; MAX_OBJECT_BYTES / 2 + 1]);
        let refusal = parse_bytes(&review(json!([object(), huge]))).unwrap_err();
        assert!(
            matches!(refusal, ReviewError::ObjectTooLarge { index: 1, size } if size > MAX_OBJECT_BYTES),
            "{refusal:?}"
        );
        let error = refusal.to_string();
        assert!(error.contains("request.objects[1]"), "{error}");
        assert!(
            error.contains(&format!("over {MAX_OBJECT_BYTES} bytes")),
            "{error}"
        );
        let error = parse_bytes(
            b"{\"apiVersion\": \"apiextensions.k8s.io/v1beta1\", \"kind\": \"ConversionReview\"}",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("conversionReviewVersions"), "{error}");
        assert!(
            parse_bytes(b"[0,0,0")
                .unwrap_err()
                .to_string()
                .contains("does not parse")
        );
    }

    #[test]
    fn byte_responses_match_the_value_responses() {
        let raw = serde_json::value::to_raw_value(&object()).unwrap();
        let converted = serde_json::value::to_raw_value(&json!({"a": 1})).unwrap();
        let ok = response_bytes(
            "u1",
            Ok(vec![
                ConvertedObject::Unchanged(&raw),
                ConvertedObject::Converted(converted),
            ]),
        );
        let ok: Value = serde_json::from_slice(&ok).unwrap();
        assert_eq!(ok, response("u1", Ok(vec![object(), json!({"a": 1})])));
        let failed: Value =
            serde_json::from_slice(&response_bytes("u2", Err("no".into()))).unwrap();
        assert_eq!(failed, response("u2", Err("no".into())));
    }
}
