//! Decoding of Kubernetes protobuf request bodies for the few built-in kinds
//! kubectl's imperative commands send that way (`kubectl create configmap`,
//! `create secret`, `create namespace`, `create serviceaccount`).
//!
//! The devcluster always answers in JSON, which clients accept; only request
//! bodies need decoding. A body is the `k8s\0` magic followed by a
//! `runtime.Unknown` message whose `raw` field holds the typed message.

use serde_json::{Map, Value, json};

use crate::status::ApiError;

/// The magic prefix of a Kubernetes protobuf body.
const MAGIC: &[u8] = b"k8s\0";

/// How a field is decoded.
#[derive(Clone, Copy)]
enum F {
    Str,
    Int,
    Bool,
    Time,
    StrMap,
    BytesMap,
    RepStr,
    Msg(Schema),
    RepMsg(Schema),
}

type Schema = &'static [(u64, &'static str, F)];

const OWNER_REF: Schema = &[
    (1, "kind", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
    (6, "controller", F::Bool),
    (7, "blockOwnerDeletion", F::Bool),
];
const OBJECT_META: Schema = &[
    (1, "name", F::Str),
    (2, "generateName", F::Str),
    (3, "namespace", F::Str),
    (5, "uid", F::Str),
    (6, "resourceVersion", F::Str),
    (7, "generation", F::Int),
    (8, "creationTimestamp", F::Time),
    (9, "deletionTimestamp", F::Time),
    (10, "deletionGracePeriodSeconds", F::Int),
    (11, "labels", F::StrMap),
    (12, "annotations", F::StrMap),
    (13, "ownerReferences", F::RepMsg(OWNER_REF)),
    (14, "finalizers", F::RepStr),
];
const CONFIG_MAP: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "data", F::StrMap),
    (3, "binaryData", F::BytesMap),
    (4, "immutable", F::Bool),
];
const SECRET: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "data", F::BytesMap),
    (3, "type", F::Str),
    (4, "stringData", F::StrMap),
    (5, "immutable", F::Bool),
];
const NAMESPACE_SPEC: Schema = &[(1, "finalizers", F::RepStr)];
const NAMESPACE: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "spec", F::Msg(NAMESPACE_SPEC)),
];
const OBJECT_REF: Schema = &[
    (1, "kind", F::Str),
    (2, "namespace", F::Str),
    (3, "name", F::Str),
    (4, "uid", F::Str),
    (5, "apiVersion", F::Str),
];
const LOCAL_REF: Schema = &[(1, "name", F::Str)];
const SERVICE_ACCOUNT: Schema = &[
    (1, "metadata", F::Msg(OBJECT_META)),
    (2, "secrets", F::RepMsg(OBJECT_REF)),
    (3, "imagePullSecrets", F::RepMsg(LOCAL_REF)),
    (4, "automountServiceAccountToken", F::Bool),
];
const TYPE_META: Schema = &[(1, "apiVersion", F::Str), (2, "kind", F::Str)];

fn bad(what: &str) -> ApiError {
    ApiError::bad_request(format!("malformed protobuf request body: {what}"))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, ApiError> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self
                .buf
                .get(self.pos)
                .ok_or_else(|| bad("truncated varint"))?;
            self.pos += 1;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(out);
            }
        }
        Err(bad("varint too long"))
    }

    fn bytes(&mut self) -> Result<&'a [u8], ApiError> {
        let len = usize::try_from(self.varint()?).map_err(|_| bad("length too large"))?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|e| *e <= self.buf.len())
            .ok_or_else(|| bad("truncated field"))?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// Reads one field: its number and value (varints as `Ok(Err(n))`, length-delimited as bytes).
    fn field(&mut self) -> Result<(u64, Result<&'a [u8], u64>), ApiError> {
        let tag = self.varint()?;
        let value = match tag & 7 {
            0 => Err(self.varint()?),
            2 => Ok(self.bytes()?),
            1 => {
                self.pos += 8;
                Err(0)
            }
            5 => {
                self.pos += 4;
                Err(0)
            }
            w => return Err(bad(&format!("unsupported wire type {w}"))),
        };
        if self.pos > self.buf.len() {
            return Err(bad("truncated fixed-width field"));
        }
        Ok((tag >> 3, value))
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }
}

fn utf8(b: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(b.to_vec()).map_err(|_| bad("string is not UTF-8"))
}

fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), ApiError> {
    use base64::Engine as _;
    let mut r = Reader { buf: b, pos: 0 };
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    while !r.done() {
        match r.field()? {
            (1, Ok(b)) => k = utf8(b)?,
            (2, Ok(b)) if bytes_value => {
                v = json!(base64::engine::general_purpose::STANDARD.encode(b))
            }
            (2, Ok(b)) => v = json!(utf8(b)?),
            _ => {}
        }
    }
    Ok((k, v))
}

fn time(b: &[u8]) -> Result<Value, ApiError> {
    let mut r = Reader { buf: b, pos: 0 };
    let mut secs = 0i64;
    while !r.done() {
        if let (1, Err(v)) = r.field()? {
            secs = v as i64;
        }
    }
    if secs == 0 {
        return Ok(Value::Null);
    }
    Ok(chrono::DateTime::from_timestamp(secs, 0)
        .map(|t| json!(t.format("%Y-%m-%dT%H:%M:%SZ").to_string()))
        .unwrap_or(Value::Null))
}

fn message(b: &[u8], schema: Schema) -> Result<Map<String, Value>, ApiError> {
    let mut r = Reader { buf: b, pos: 0 };
    let mut out = Map::new();
    while !r.done() {
        let (num, value) = r.field()?;
        let Some((_, name, f)) = schema.iter().find(|(n, _, _)| *n == num) else {
            continue;
        };
        let name = name.to_string();
        match (f, value) {
            (F::Str, Ok(b)) => {
                let s = utf8(b)?;
                if !s.is_empty() {
                    out.insert(name, json!(s));
                }
            }
            (F::Int, Err(v)) => {
                out.insert(name, json!(v as i64));
            }
            (F::Bool, Err(v)) => {
                out.insert(name, json!(v != 0));
            }
            (F::Time, Ok(b)) => {
                let t = time(b)?;
                if !t.is_null() {
                    out.insert(name, t);
                }
            }
            (F::StrMap | F::BytesMap, Ok(b)) => {
                let (k, v) = map_entry(b, matches!(f, F::BytesMap))?;
                if let Some(m) = out.entry(name).or_insert_with(|| json!({})).as_object_mut() {
                    m.insert(k, v);
                }
            }
            (F::RepStr, Ok(b)) => {
                let s = utf8(b)?;
                if let Some(a) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
                    a.push(json!(s));
                }
            }
            (F::Msg(s), Ok(b)) => {
                out.insert(name, Value::Object(message(b, s)?));
            }
            (F::RepMsg(s), Ok(b)) => {
                let m = Value::Object(message(b, s)?);
                if let Some(a) = out.entry(name).or_insert_with(|| json!([])).as_array_mut() {
                    a.push(m);
                }
            }
            _ => return Err(bad(&format!("field {name} has an unexpected wire type"))),
        }
    }
    Ok(out)
}

/// Whether a Content-Type is Kubernetes protobuf.
pub(super) fn is_protobuf(content_type: &str) -> bool {
    content_type.starts_with("application/vnd.kubernetes.protobuf")
}

/// Decodes a protobuf body into the JSON object it encodes.
pub(super) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing the k8s protobuf magic prefix"))?;
    let mut r = Reader { buf: rest, pos: 0 };
    let (mut type_meta, mut raw) = (Map::new(), &[][..]);
    while !r.done() {
        match r.field()? {
            (1, Ok(b)) => type_meta = message(b, TYPE_META)?,
            (2, Ok(b)) => raw = b,
            _ => {}
        }
    }
    let api_version = type_meta
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = type_meta
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let schema = match (api_version.as_str(), kind.as_str()) {
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        _ => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the devcluster decodes protobuf bodies only for ConfigMap, Secret, Namespace and ServiceAccount, not {api_version} {kind}; send JSON (e.g. kubectl create -f FILE)"
                ),
            ));
        }
    };
    let mut obj = message(raw, schema)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u64, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, bytes.len() as u8];
        out.extend_from_slice(bytes);
        out
    }

    #[test]
    fn decodes_a_config_map() {
        let meta = [field(1, b"cfg"), field(3, b"")].concat();
        let entry = [field(1, b"greeting"), field(2, b"hello")].concat();
        let cm = [field(1, &meta), field(2, &entry)].concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let body = [MAGIC.to_vec(), field(1, &tm), field(2, &cm)].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"name": "cfg"}, "data": {"greeting": "hello"}, "apiVersion": "v1", "kind": "ConfigMap"})
        );
    }
}
