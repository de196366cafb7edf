//! An audit log of writes, in the subset of kube-apiserver's `audit.k8s.io/v1`
//! `Event` schema that attributes a write to its client: one JSON line per
//! completed create, update, patch, delete or deletecollection, at level
//! `Metadata` and stage `ResponseComplete`, e.g.
//!
//! ```json
//! {"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","stage":"ResponseComplete",
//!  "requestURI":"/apis/example.com/v1/namespaces/ns/webapps/n/status","verb":"patch",
//!  "userAgent":"kube-rs","sourceIPs":["127.0.0.12"],
//!  "objectRef":{"resource":"webapps","namespace":"ns","name":"n","apiGroup":"example.com","apiVersion":"v1","subresource":"status"},
//!  "responseStatus":{"code":200},
//!  "requestReceivedTimestamp":"2026-11-28T10:00:00.123456Z","stageTimestamp":"2026-11-28T10:00:00.124000Z"}
//! ```
//!
//! (one line in the file). Fields that do not apply are left out: `namespace`
//! for cluster-scoped resources, `apiGroup` for the core group, `subresource`,
//! `userAgent` when the client sent none, and `name` when a create's response
//! names no object.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use axum::body::Body;
use chrono::{DateTime, Utc};
use http::{Method, Request, Response, header};
use http_body_util::BodyExt;
use serde::Serialize;

use super::ResourcePath;
use crate::status::ApiError;

/// An append-only audit log file (cheap to share: one short lock per write).
///
/// Guarantees: every event is written with a single `write` of the whole line
/// and its newline to a file opened in append mode, without userspace
/// buffering, so a line is complete on disk as soon as the request's response
/// is sent, even if the process is killed with SIGKILL right after. Lines of
/// concurrent requests never interleave.
#[derive(Debug)]
pub struct AuditLog {
    path: PathBuf,
    /// `None` after a write failed: further events are dropped.
    file: Mutex<Option<File>>,
}

impl AuditLog {
    /// Opens `path` for appending, creating it if needed.
    ///
    /// # Errors
    ///
    /// The I/O error when the file cannot be created or opened for writing.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(AuditLog {
            path: path.to_path_buf(),
            file: Mutex::new(Some(file)),
        })
    }

    /// The file this log appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one event as one line.
    ///
    /// # Errors
    ///
    /// Never fails or panics: the first I/O error is logged with `tracing` and
    /// this event and every later one are dropped.
    fn append(&self, event: &Event<'_>) {
        let Ok(mut line) = serde_json::to_vec(event) else {
            return;
        };
        line.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = file.as_mut() else {
            return;
        };
        if let Err(error) = f.write_all(&line) {
            tracing::error!(
                path = %self.path.display(),
                %error,
                "cannot write the audit log; further audit events are dropped"
            );
            *file = None;
        }
    }
}

/// `objectRef` of an event.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    resource: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    namespace: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    api_group: Option<String>,
    api_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    subresource: Option<String>,
}

/// `responseStatus` of an event.
#[derive(Debug, Serialize)]
struct ResponseStatus {
    code: u16,
}

/// One line of the log, fields in kube-apiserver's order.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Event<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    stage: &'static str,
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    user_agent: Option<&'a str>,
    #[serde(rename = "sourceIPs")]
    source_ips: [String; 1],
    object_ref: &'a ObjectRef,
    response_status: ResponseStatus,
    request_received_timestamp: String,
    stage_timestamp: String,
}

/// RFC 3339 in UTC with microseconds, as kube-apiserver writes audit timestamps.
fn micro_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The Kubernetes verb of a write to `path`, `None` for reads and other methods.
fn write_verb(method: &Method, path: &ResourcePath) -> Option<&'static str> {
    match *method {
        Method::POST => Some("create"),
        Method::PUT => Some("update"),
        Method::PATCH => Some("patch"),
        Method::DELETE if path.name.is_some() => Some("delete"),
        Method::DELETE => Some("deletecollection"),
        _ => None,
    }
}

/// A write being served: what the event needs from the request.
#[derive(Debug)]
pub(crate) struct Pending {
    verb: &'static str,
    request_uri: String,
    user_agent: Option<String>,
    source_ip: IpAddr,
    object_ref: ObjectRef,
    received: DateTime<Utc>,
}

impl Pending {
    /// Starts the event of `req` from `peer`, received at `received`; `None`
    /// when the request is not a write to a resource path.
    pub(crate) fn begin<B>(
        req: &Request<B>,
        peer: IpAddr,
        received: DateTime<Utc>,
    ) -> Option<Pending> {
        let path = ResourcePath::parse(req.uri().path())?;
        let verb = write_verb(req.method(), &path)?;
        let request_uri = req.uri().path_and_query().map_or_else(
            || req.uri().path().to_string(),
            |pq| pq.as_str().to_string(),
        );
        let user_agent = req
            .headers()
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .map(String::from);
        Some(Pending {
            verb,
            request_uri,
            user_agent,
            source_ip: peer,
            object_ref: ObjectRef {
                resource: path.plural,
                namespace: path.namespace,
                name: path.name,
                api_group: Some(path.group).filter(|g| !g.is_empty()),
                api_version: path.version,
                subresource: path.subresource,
            },
            received,
        })
    }

    /// Writes the event of the finished request to `log` and gives the response back.
    ///
    /// The JSON response to a create without a name in its path is read to
    /// name the object (it is already complete in memory): the created
    /// object's name, or the `details.name` of a Status that refused it.
    pub(crate) async fn complete(mut self, log: &AuditLog, resp: Response<Body>) -> Response<Body> {
        let named_by_body = self.object_ref.name.is_none()
            && self.verb == "create"
            && resp
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|ct| ct.starts_with("application/json"));
        let resp = if named_by_body {
            let (parts, body) = resp.into_parts();
            match body.collect().await {
                Ok(collected) => {
                    let bytes = collected.to_bytes();
                    self.object_ref.name = serde_json::from_slice::<serde_json::Value>(&bytes)
                        .ok()
                        .and_then(|v| {
                            let name = if v["kind"] == "Status" {
                                &v["details"]["name"]
                            } else {
                                &v["metadata"]["name"]
                            };
                            name.as_str().filter(|n| !n.is_empty()).map(String::from)
                        });
                    Response::from_parts(parts, Body::from(bytes))
                }
                // Not expected: write responses are built in memory.
                Err(e) => super::error_response(&ApiError::internal(format!(
                    "cannot read the response body: {e}"
                ))),
            }
        } else {
            resp
        };
        let code = resp.status().as_u16();
        log.append(&Event {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: "Metadata",
            stage: "ResponseComplete",
            request_uri: &self.request_uri,
            verb: self.verb,
            user_agent: self.user_agent.as_deref(),
            source_ips: [self.source_ip.to_string()],
            object_ref: &self.object_ref,
            response_status: ResponseStatus { code },
            request_received_timestamp: micro_time(self.received),
            stage_timestamp: micro_time(Utc::now()),
        });
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: Method, uri: &str) -> Request<()> {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(header::USER_AGENT, "t/1")
            .body(())
            .unwrap()
    }

    fn begin(method: Method, uri: &str) -> Option<Pending> {
        Pending::begin(&req(method, uri), "127.0.0.7".parse().unwrap(), Utc::now())
    }

    #[test]
    fn only_writes_to_resources_are_audited_with_kubernetes_verbs() {
        let coll = "/api/v1/namespaces/d/configmaps";
        let one = "/api/v1/namespaces/d/configmaps/a";
        assert!(begin(Method::GET, one).is_none());
        assert!(begin(Method::POST, "/_devcluster/faults/fail-next").is_none());
        assert_eq!(begin(Method::POST, coll).unwrap().verb, "create");
        assert_eq!(begin(Method::PUT, one).unwrap().verb, "update");
        assert_eq!(begin(Method::PATCH, one).unwrap().verb, "patch");
        assert_eq!(begin(Method::DELETE, one).unwrap().verb, "delete");
        assert_eq!(
            begin(Method::DELETE, coll).unwrap().verb,
            "deletecollection"
        );
    }

    #[tokio::test]
    async fn writes_one_complete_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let log = AuditLog::open(&path).unwrap();
        let p = begin(
            Method::PATCH,
            "/apis/example.com/v1/namespaces/ns/webapps/n/status?fieldManager=m",
        )
        .unwrap();
        let resp = super::super::json_response(200, &serde_json::json!({}));
        p.complete(&log, resp).await;
        let p = begin(Method::DELETE, "/api/v1/namespaces/x").unwrap();
        let resp = super::super::json_response(404, &serde_json::json!({}));
        p.complete(&log, resp).await;
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(text.ends_with('\n'));
        assert_eq!(
            lines[0],
            serde_json::json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
                "stage": "ResponseComplete",
                "requestURI": "/apis/example.com/v1/namespaces/ns/webapps/n/status?fieldManager=m",
                "verb": "patch", "userAgent": "t/1", "sourceIPs": ["127.0.0.7"],
                "objectRef": {"resource": "webapps", "namespace": "ns", "name": "n",
                    "apiGroup": "example.com", "apiVersion": "v1", "subresource": "status"},
                "responseStatus": {"code": 200},
                "requestReceivedTimestamp": lines[0]["requestReceivedTimestamp"],
                "stageTimestamp": lines[0]["stageTimestamp"]})
        );
        let ts = lines[0]["stageTimestamp"].as_str().unwrap();
        assert_eq!(ts.len(), "2026-11-28T10:00:00.124000Z".len(), "{ts}");
        assert!(DateTime::parse_from_rfc3339(ts).is_ok());
        assert_eq!(
            lines[1]["objectRef"],
            serde_json::json!({"resource": "namespaces", "name": "x", "apiVersion": "v1"})
        );
        assert_eq!(lines[1]["responseStatus"]["code"], 404);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_write_error_drops_later_events_without_failing_requests() {
        let log = AuditLog::open(Path::new("/dev/full")).unwrap();
        for _ in 0..2 {
            let p = begin(Method::DELETE, "/api/v1/namespaces/d/configmaps/a").unwrap();
            let resp = super::super::json_response(200, &serde_json::json!({}));
            assert_eq!(p.complete(&log, resp).await.status(), 200);
        }
        assert!(log.file.lock().unwrap().is_none());
    }
}
