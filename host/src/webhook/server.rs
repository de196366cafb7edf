//! The HTTPS endpoint: ConversionReviews in, each answered by the stable
//! version of the plugin whose primary kind the objects are.
//!
//! The endpoint is reachable by anything that reaches the Service, so what
//! a caller sends is bounded before it is trusted ([`ServeLimits`]), and a
//! review's objects are kept as the raw text they came as: a review of ten
//! million tiny array elements costs its bytes, not a tree of them.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use futures::StreamExt as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::admission::config::{MUTATE_PATH, VALIDATE_PATH};
use super::admission::{self, Review};
use super::crd::PATH;
use super::review::{self, ConvertedObject};
use crate::cache::SharedCache;
use crate::registry::{ActiveVersion, Registry};
use crate::telemetry::WebhookRefusal;

/// The default of [`ServeLimits::max_review_bytes`] (32 MiB). The API
/// server sends a whole list in one review: 10,000 small objects are ~4 MiB,
/// so this takes lists of ~80,000 such objects, while one review costs the
/// host at most about three times this (the body, the converted answer and
/// the one object being converted). A cluster whose lists of a converted kind
/// are larger raises it (`--webhook-max-review-bytes`).
pub const MAX_REVIEW_BYTES: usize = 32 << 20;

/// What the webhook accepts from a caller before it trusts it: every bound
/// is applied before the bytes it protects are read.
///
/// # Guarantees
/// * at most `max_connections` connections are open; further callers wait in
///   the listen backlog until one closes;
/// * a connection that has not finished its TLS handshake within
///   `handshake_timeout`, or not sent a request head within
///   `header_read_timeout`, is closed;
/// * a review whose `Content-Length` is over `max_review_bytes` is refused
///   (413) before its body is read, and one that sends more is refused when
///   it passes the bound;
/// * at most `max_reviews_in_flight` reviews, holding at most twice
///   `max_review_bytes` of bodies together, are read and converted at once;
///   a review beyond either bound is refused (503, `Retry-After: 1`) before
///   its body is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeLimits {
    /// The largest review body, in bytes (default [`MAX_REVIEW_BYTES`]).
    pub max_review_bytes: usize,
    /// Reviews read and converted at once (default 8: conversions are CPU
    /// work, and the host has few cores).
    pub max_reviews_in_flight: usize,
    /// Connections open at once (default 256).
    pub max_connections: usize,
    /// Time for a caller to finish the TLS handshake (default 10 s).
    pub handshake_timeout: Duration,
    /// Time for a caller to send a request head (default 10 s).
    pub header_read_timeout: Duration,
}

impl Default for ServeLimits {
    fn default() -> ServeLimits {
        ServeLimits {
            max_review_bytes: MAX_REVIEW_BYTES,
            max_reviews_in_flight: 8,
            max_connections: 256,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
        }
    }
}

impl ServeLimits {
    /// The body bytes all reviews in flight may hold together.
    fn bytes_in_flight(&self) -> usize {
        self.max_review_bytes.saturating_mul(2)
    }
}

/// Semaphore permits are counted in KiB, so the budget fits a `u32`.
fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

/// The stable version of the loaded plugin that implements `migration.convert` and
/// reconciles `group`/`kind`, if any.
pub fn serving(registry: &Registry, group: &str, kind: &str) -> Option<Arc<ActiveVersion>> {
    registry.loaded().into_iter().find_map(|info| {
        let stable = registry.versions(&info.name)?.current().stable.clone();
        let manifest = stable.plugin.manifest();
        (manifest.implements.convert
            && manifest.primary.group == group
            && manifest.primary.kind == kind)
            .then_some(stable)
    })
}

/// Answers one ConversionReview (the whole review, as the API server sent
/// it). Every object is converted by the same version: the one serving
/// when the review arrived, so a swap never mixes two versions in one
/// answer. Any failure fails the whole review, naming the object, plugin
/// and version, as kube-apiserver expects.
pub async fn answer(registry: &Registry, review_json: &Value) -> Value {
    let body = review_json.to_string();
    let answered = answer_bytes(registry, body.as_bytes()).await;
    serde_json::from_slice(&answered).unwrap_or(Value::Null)
}

/// [`answer`] from the review's bytes to the response's bytes, keeping the
/// objects as the text they were sent as: only the object being converted
/// is ever parsed into a tree, and only its `metadata`. A review refused for
/// an object over the per-object bound counts in
/// `wasm_operator_webhook_refusals_total{reason="object_too_large"}`.
pub async fn answer_bytes(registry: &Registry, body: &[u8]) -> Vec<u8> {
    match review::parse_bytes(body) {
        Ok(request) => {
            let outcome = convert_all(registry, &request).await;
            review::response_bytes(&request.uid, outcome)
        }
        Err(error) => {
            if let review::ReviewError::ObjectTooLarge { index, size } = error {
                tracing::warn!(
                    index,
                    size,
                    "the conversion webhook refused a review carrying an object over the per-object bound"
                );
                registry
                    .metrics()
                    .webhook_refusal(WebhookRefusal::ObjectTooLarge);
            }
            let message = error.to_string();
            // The uid, when the body says one, even if the rest is wrong.
            let uid = serde_json::from_slice::<UidOnly>(body)
                .ok()
                .and_then(|r| r.request)
                .map(|r| r.uid)
                .unwrap_or_default();
            review::response_bytes(&uid, Err(message))
        }
    }
}

#[derive(serde::Deserialize)]
struct UidOnly {
    request: Option<UidRequest>,
}

#[derive(serde::Deserialize)]
struct UidRequest {
    #[serde(default)]
    uid: String,
}

async fn convert_all<'a>(
    registry: &Registry,
    request: &review::RawReviewRequest<'a>,
) -> Result<Vec<ConvertedObject<'a>>, String> {
    let Some(first) = request.objects.first() else {
        return Ok(Vec::new());
    };
    let desired = request.desired_api_version.as_str();
    let (group, kind) = first.group_kind().ok_or_else(|| {
        format!(
            "{} has no group/version apiVersion; only custom resources are converted here",
            describe(first)
        )
    })?;
    let Some(version) = serving(registry, group, kind) else {
        return Err(format!(
            "no plugin loaded in this host implements migration for {kind}.{group}, so it cannot convert {} to {desired}; deploy the plugin (its WasmPlugin) or set the CRD's spec.conversion back to None",
            describe(first),
        ));
    };
    let plugin = &version.plugin;
    let manifest = plugin.manifest();
    let who = format!("plugin {} {}", manifest.name, manifest.version);
    let mut converted = Vec::with_capacity(request.objects.len());
    for object in &request.objects {
        if object.group_kind() != Some((group, kind)) {
            return Err(format!(
                "{} is not a {kind}.{group} like the first object of the review; {who} converts only {kind}.{group}",
                describe(object)
            ));
        }
        if object.api_version == desired {
            converted.push(ConvertedObject::Unchanged(object.raw));
            continue;
        }
        let original = object.head()?;
        let name = review::describe(&original);
        let result = plugin
            .convert(object.raw.get().to_string(), desired)
            .await
            .map_err(|e| e.to_string())
            .and_then(|out| review::check_converted(&original, &out, desired).map(|()| out))
            .and_then(|mut out| {
                let forged = review::keep_host_marks(&original, &mut out);
                if !forged.is_empty() {
                    tracing::warn!(
                        plugin = %manifest.name,
                        version = %manifest.version,
                        object = %name,
                        marks = ?forged,
                        "the plugin's convert changed the host's marks; they were put back as stored (a plugin never writes them)"
                    );
                    registry
                        .metrics()
                        .host_marks_restored(&manifest.name, "convert", forged.len());
                }
                serde_json::value::to_raw_value(&out)
                    .map_err(|e| format!("its answer cannot be written back as JSON: {e}"))
            });
        match result {
            Ok(out) => converted.push(ConvertedObject::Converted(out)),
            Err(error) => {
                return Err(format!(
                    "{who} could not convert {name} to {desired}: {error}"
                ));
            }
        }
    }
    Ok(converted)
}

/// `Kind namespace/name` of a raw object, for messages.
fn describe(object: &review::RawObject<'_>) -> String {
    object.head().map_or_else(
        |_| format!("a {} object", object.kind),
        |head| review::describe(&head),
    )
}

/// The host's caches, once the manager handed them over: admission calls
/// read them as reconciles do.
pub type SharedCaches = Arc<std::sync::Mutex<Option<SharedCache>>>;

/// What the handler shares: the registry, the caches, the limits and the
/// permits of the reviews in flight.
#[derive(Clone)]
struct Served {
    registry: Registry,
    caches: SharedCaches,
    limits: ServeLimits,
    reviews: Arc<Semaphore>,
    /// KiB of bodies in flight.
    bytes: Arc<Semaphore>,
}

impl Served {
    /// A refusal before a review is read whole: 413 or 503 and a sentence,
    /// counted in `wasm_operator_webhook_refusals_total`.
    fn refuse(&self, refusal: WebhookRefusal, message: String) -> Response {
        self.registry.metrics().webhook_refusal(refusal);
        let status = match refusal {
            WebhookRefusal::Busy => StatusCode::SERVICE_UNAVAILABLE,
            WebhookRefusal::TooLarge | WebhookRefusal::ObjectTooLarge => {
                StatusCode::PAYLOAD_TOO_LARGE
            }
        };
        let mut response = (status, message).into_response();
        if refusal == WebhookRefusal::Busy {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        response
    }
}

async fn handle(State(served): State<Served>, headers: HeaderMap, body: Body) -> Response {
    let (bytes, _permits) = match read_bounded(&served, &headers, body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let answered = answer_bytes(&served.registry, &bytes).await;
    drop(bytes);
    ([(header::CONTENT_TYPE, "application/json")], answered).into_response()
}

/// `/validate` and `/mutate`: AdmissionReviews, bounded like conversions.
async fn admit(served: Served, review: Review, headers: HeaderMap, body: Body) -> Response {
    let (bytes, _permits) = match read_bounded(&served, &headers, body).await {
        Ok(read) => read,
        Err(refused) => return refused,
    };
    let caches = crate::util::lock(&served.caches).clone();
    let answered = admission::answer(&served.registry, caches.as_ref(), review, &bytes).await;
    drop(bytes);
    ([(header::CONTENT_TYPE, "application/json")], answered).into_response()
}

/// The permits a review holds while it is read and answered.
type Permits = (
    tokio::sync::OwnedSemaphorePermit,
    tokio::sync::OwnedSemaphorePermit,
);

/// Reads a review's body within the limits: refused (413, 503) before a
/// byte is read when it cannot fit, or when it passes the bound.
async fn read_bounded(
    served: &Served,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Vec<u8>, Permits), Response> {
    let max = served.limits.max_review_bytes;
    let announced = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(length) = announced
        && length > max
    {
        return Err(served.refuse(
            WebhookRefusal::TooLarge,
            too_large(&format!("announces {length} bytes"), max),
        ));
    }
    // Both permits are taken before a byte of the body is read; a review
    // without a Content-Length is charged the largest a review can be.
    let Ok(review) = served.reviews.clone().try_acquire_owned() else {
        return Err(served.refuse(
            WebhookRefusal::Busy,
            format!(
                "the webhook is answering {} reviews already, its bound; retry",
                served.limits.max_reviews_in_flight
            ),
        ));
    };
    let Ok(held) = served
        .bytes
        .clone()
        .try_acquire_many_owned(kib(announced.unwrap_or(max)))
    else {
        return Err(served.refuse(
            WebhookRefusal::Busy,
            format!(
                "the webhook holds {} bytes of reviews already, its bound; retry",
                served.limits.bytes_in_flight()
            ),
        ));
    };
    let mut stream = body.into_data_stream();
    let mut bytes = Vec::with_capacity(announced.unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return Err((
                StatusCode::BAD_REQUEST,
                "the review's body ended early".to_string(),
            )
                .into_response());
        };
        if bytes.len() + chunk.len() > max {
            return Err(served.refuse(
                WebhookRefusal::TooLarge,
                too_large(&format!("sent more than {max} bytes"), max),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok((bytes, (review, held)))
}

fn too_large(what: &str, max: usize) -> String {
    format!(
        "the ConversionReview {what}; this webhook accepts reviews of at most {max} bytes. If the API server sends lists this large, start the host with a larger --webhook-max-review-bytes"
    )
}

/// Serves the webhook on `listener` with `tls` until `cancel` fires, within
/// `limits`.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    registry: Registry,
    caches: SharedCaches,
    limits: ServeLimits,
    cancel: CancellationToken,
) {
    registry.metrics().webhook_started();
    let served = Served {
        registry,
        caches,
        limits,
        reviews: Arc::new(Semaphore::new(limits.max_reviews_in_flight.max(1))),
        bytes: Arc::new(Semaphore::new(kib(limits.bytes_in_flight()) as usize)),
    };
    let router = Router::new()
        .route(PATH, post(handle))
        .route(
            VALIDATE_PATH,
            post(
                |State(served): State<Served>, headers: HeaderMap, body: Body| {
                    admit(served, Review::Validate, headers, body)
                },
            ),
        )
        .route(
            MUTATE_PATH,
            post(
                |State(served): State<Served>, headers: HeaderMap, body: Body| {
                    admit(served, Review::Mutate, headers, body)
                },
            ),
        )
        // The handler bounds the body itself (before reading it).
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(served);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        // A slot first: at the bound, callers wait in the listen backlog.
        let slot = tokio::select! {
            () = cancel.cancelled() => return,
            slot = connections.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_closed) => return,
            },
        };
        let tcp = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    // Out of file descriptors and the like: pause, go on.
                    tracing::warn!(%error, "conversion webhook cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let stream = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp))
                .await
            {
                Ok(Ok(stream)) => stream,
                Ok(Err(error)) => {
                    tracing::debug!(%error, "conversion webhook TLS handshake failed");
                    return;
                }
                Err(_elapsed) => {
                    tracing::debug!(timeout = ?limits.handshake_timeout, "conversion webhook closed a connection that did not finish its TLS handshake in time");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            // HTTP/1.1 only (the TLS config offers no h2), so hyper's own
            // builder: hyper-util's auto builder first waits, unbounded, for
            // bytes to tell the versions apart, before any timeout starts.
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                () = cancel.cancelled() => {}
                result = connection => {
                    if let Err(error) = result {
                        tracing::debug!(%error, "conversion webhook connection ended with an error");
                    }
                }
            }
        });
    }
}
