//! The HTTP endpoint for `/metrics`, `/healthz` and `/readyz`.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::task::JoinHandle;

use super::Metrics;

type ReadyFn = Arc<dyn Fn() -> bool + Send + Sync>;

/// Binds `addr` (port 0 picks a free port) and serves `/metrics` (Prometheus
/// text), `/healthz` (always 200 while the process serves) and `/readyz` (200
/// once `ready()` is true, 503 before). Returns the bound address and the
/// server task.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    ready: impl Fn() -> bool + Send + Sync + 'static,
) -> Result<(SocketAddr, JoinHandle<()>), io::Error> {
    let ready: ReadyFn = Arc::new(ready);
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { (StatusCode::OK, "ok") }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    if ready() {
                        (StatusCode::OK, "ok").into_response()
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet").into_response()
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let handle = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "telemetry server stopped");
        }
    });
    Ok((bound, handle))
}
