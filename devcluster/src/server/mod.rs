//! HTTP serving: the accept loop, authentication, fault injection, and a single
//! dispatcher that parses the Kubernetes path grammar (`/api/v1/...`,
//! `/apis/<group>/<version>/...`) instead of dozens of routes.

mod admission;
pub mod audit;
mod convert;
mod discovery;
mod path;
mod protobuf;
mod query;
pub mod requests;
mod resources;
mod select;
pub mod snapshots;
mod table;
mod watch;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::faults::{ClientFault, Faults};

/// How often a stalled request looks whether its client was restored.
const STALL_POLL: std::time::Duration = std::time::Duration::from_millis(50);
use crate::status::ApiError;
use crate::store::Store;
use crate::webhook::WebhookClient;

pub use path::ResourcePath;
pub use query::Query;

/// State shared by every request of one cluster.
pub struct Shared {
    /// The object store.
    pub store: Arc<Store>,
    /// Fault injection.
    pub faults: Faults,
    /// Required bearer token, if any.
    pub token: Option<String>,
    /// Client for admission and conversion webhooks.
    pub webhooks: WebhookClient,
    /// Served resource requests by verb, for benchmarks (`GET /_devcluster/requests`).
    pub requests: requests::RequestCounter,
    /// Where completed writes are recorded, if anywhere (see [`audit`]).
    pub audit: Option<audit::AuditLog>,
    /// The rest of the paged lists in progress (see [`snapshots`]).
    pub lists: snapshots::ListSnapshots,
}

impl Shared {
    /// Wraps a store.
    pub fn new(store: Store, token: Option<String>) -> Self {
        let store = Arc::new(store);
        Self {
            faults: Faults::new(store.clone()),
            store,
            token,
            webhooks: WebhookClient::default(),
            requests: requests::RequestCounter::default(),
            audit: None,
            lists: snapshots::ListSnapshots::default(),
        }
    }
}

/// A running accept loop; aborting it closes every connection it accepted.
pub struct Serving {
    task: tokio::task::JoinHandle<()>,
}

impl Serving {
    /// Stops accepting and closes open connections, waiting for the loop to end.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
    }

    /// Stops without waiting (for `Drop`).
    pub fn abort(self) {
        self.task.abort();
    }
}

/// Serves `listener` until the returned handle is stopped.
pub fn serve(listener: tokio::net::TcpListener, shared: Arc<Shared>) -> Serving {
    let task = tokio::spawn(async move {
        // Connections live in this JoinSet so that aborting the loop drops (and aborts) them all.
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let Ok((stream, peer)) = accepted else { continue };
                    let _ = stream.set_nodelay(true);
                    let shared = shared.clone();
                    conns.spawn(async move {
                        let svc = hyper::service::service_fn(move |req| {
                            let shared = shared.clone();
                            async move { Ok::<_, Infallible>(handle(shared, req, peer).await) }
                        });
                        let io = hyper_util::rt::TokioIo::new(stream);
                        let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, svc).await;
                    });
                }
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
            }
        }
    });
    Serving { task }
}

/// A JSON response.
pub(crate) fn json_response(code: u16, body: &Value) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A Status error response.
pub(crate) fn error_response(err: &ApiError) -> Response<Body> {
    let mut resp = json_response(err.code, &err.to_status());
    if err.code == 429 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    resp
}

fn injected(status: u16) -> ApiError {
    match status {
        429 => ApiError::new(
            429,
            "TooManyRequests",
            "the server has received too many requests and has asked us to try again later",
        ),
        503 => ApiError::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        code => ApiError::new(
            code,
            "InternalError",
            "an error on the server (\"injected fault\") has prevented the request from succeeding",
        ),
    }
}

/// Serves one request from `peer`, recording it in the audit log when it is a write.
async fn handle(
    shared: Arc<Shared>,
    req: Request<hyper::body::Incoming>,
    peer: SocketAddr,
) -> Response<Body> {
    // Taken on arrival, before any injected latency or stall.
    let received = chrono::Utc::now();
    let pending = shared
        .audit
        .as_ref()
        .and_then(|_| audit::Pending::begin(&req, peer.ip(), received));
    let resp = respond(shared.clone(), req).await;
    match (pending, &shared.audit) {
        (Some(pending), Some(log)) => pending.complete(log, resp).await,
        _ => resp,
    }
}

async fn respond(shared: Arc<Shared>, req: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    if path == "/_devcluster/requests" {
        return json_response(200, &shared.requests.snapshot());
    }
    if let Some(action) = path.strip_prefix("/_devcluster/faults/") {
        let action = action.to_string();
        let body = read_body(req).await.unwrap_or_default();
        return admin(&shared.faults, &action, &body);
    }
    let latency = shared.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    // A client cut off: its requests fail, or hang until it is restored.
    loop {
        let headers = req.headers();
        let fault = shared
            .faults
            .client_fault(|name| headers.get(name).and_then(|v| v.to_str().ok()));
        match fault {
            Some(ClientFault::Fail(status)) => return error_response(&injected(status)),
            Some(ClientFault::Stall) => tokio::time::sleep(STALL_POLL).await,
            None => break,
        }
    }
    if let Some(status) = shared.faults.take_failure(&path) {
        return error_response(&injected(status));
    }
    let public = matches!(
        path.as_str(),
        "/version" | "/healthz" | "/livez" | "/readyz"
    );
    if let Some(token) = &shared.token
        && !public
    {
        let ok = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| t.trim() == token);
        if !ok {
            return error_response(&ApiError::new(401, "Unauthorized", "Unauthorized"));
        }
    }
    match discovery::handle(&shared, &path) {
        Some(resp) => resp,
        None => {
            // Classified before the handler consumes the request, counted with its outcome.
            let counted = ResourcePath::parse(&path).map(|rp| {
                let query = Query::parse(req.uri().query());
                let content_type = req
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                (requests::verb(req.method(), &rp, &query, content_type), rp)
            });
            let resp = resources::handle(shared.clone(), req).await;
            if let Some((verb, rp)) = counted {
                shared.requests.record(verb, &rp, resp.status().as_u16());
            }
            resp
        }
    }
}

/// The largest request body kube-apiserver reads (`MaxRequestBodyBytes`, 3 MiB).
pub const MAX_REQUEST_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Reads a request body completely.
///
/// # Errors
///
/// A body over [`MAX_REQUEST_BODY_BYTES`] is 413 `RequestEntityTooLarge` with
/// kube-apiserver's message (`limitedReadBody`); the rest of it is read and
/// dropped, so the client gets the answer instead of a reset connection.
pub(crate) async fn read_body(req: Request<hyper::body::Incoming>) -> Result<Bytes, ApiError> {
    let mut body = req.into_body();
    let mut kept: Vec<u8> = Vec::new();
    let mut too_large = false;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        too_large = too_large || kept.len() + data.len() > MAX_REQUEST_BODY_BYTES;
        if too_large {
            kept = Vec::new();
        } else {
            kept.extend_from_slice(&data);
        }
    }
    if too_large {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {MAX_REQUEST_BODY_BYTES}"),
        ));
    }
    Ok(Bytes::from(kept))
}

/// The admin API of the `devcluster` binary: `POST /_devcluster/faults/<action>` with a JSON body.
fn admin(faults: &Faults, action: &str, body: &[u8]) -> Response<Body> {
    let v: Value = serde_json::from_slice(body).unwrap_or(json!({}));
    match action {
        "close-watches" => faults.close_watches(),
        "expire-history" => faults.expire_history(),
        "fail-next" => {
            let prefix = v["pathPrefix"]
                .as_str()
                .or(v["path_prefix"].as_str())
                .unwrap_or("/");
            let count = v["count"].as_u64().unwrap_or(1) as usize;
            let status = v["status"].as_u64().unwrap_or(503) as u16;
            faults.fail_next(prefix, count, status);
        }
        "latency" => {
            let ms = v["millis"].as_u64().or(v["ms"].as_u64()).unwrap_or(0);
            faults.set_latency(std::time::Duration::from_millis(ms));
        }
        "cut-off-client" => {
            let header = v["header"].as_str().unwrap_or("authorization");
            let value = v["value"].as_str().unwrap_or_default();
            let fault = match v["status"].as_u64() {
                Some(status) => ClientFault::Fail(status as u16),
                None => ClientFault::Stall,
            };
            faults.cut_off_client(header, value, fault);
        }
        "restore-client" => {
            let header = v["header"].as_str().unwrap_or("authorization");
            let value = v["value"].as_str().unwrap_or_default();
            faults.restore_client(header, value);
        }
        other => {
            return error_response(&ApiError::new(
                404,
                "NotFound",
                format!(
                    "unknown fault {other:?}; use close-watches, expire-history, fail-next {{pathPrefix,count,status}}, latency {{millis}}, cut-off-client {{header,value,status?}} or restore-client {{header,value}}"
                ),
            ));
        }
    }
    json_response(
        200,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
    )
}
