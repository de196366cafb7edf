//! The HTTPS endpoint: ConversionReviews in, each answered by the stable
//! version of the plugin whose primary kind the objects are.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::post;
use axum::{Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::crd::PATH;
use super::review;
use crate::registry::{ActiveVersion, Registry};

/// The largest ConversionReview accepted. The API server sends a whole
/// list in one review (a list of 10,000 small objects is ~4 MiB), far
/// beyond axum's default of 2 MiB.
pub const MAX_REVIEW_BYTES: usize = 256 << 20;

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
    let uid = review_json
        .pointer("/request/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let outcome = match review::parse(review_json) {
        Ok(request) => convert_all(registry, &request).await,
        Err(message) => Err(message),
    };
    review::response(&uid, outcome)
}

async fn convert_all(
    registry: &Registry,
    request: &review::ReviewRequest,
) -> Result<Vec<Value>, String> {
    let Some(first) = request.objects.first() else {
        return Ok(Vec::new());
    };
    let (group, kind) = review::group_kind(first).ok_or_else(|| {
        format!(
            "{} has no group/version apiVersion or no kind; only custom resources are converted here",
            review::describe(first)
        )
    })?;
    let Some(version) = serving(registry, group, kind) else {
        return Err(format!(
            "no plugin loaded in this host implements migration for {kind}.{group}, so it cannot convert {} to {}; deploy the plugin (its WasmPlugin) or set the CRD's spec.conversion back to None",
            review::describe(first),
            request.desired_api_version
        ));
    };
    let plugin = &version.plugin;
    let manifest = plugin.manifest();
    let who = format!("plugin {} {}", manifest.name, manifest.version);
    let mut converted = Vec::with_capacity(request.objects.len());
    for object in &request.objects {
        let name = review::describe(object);
        if review::group_kind(object) != Some((group, kind)) {
            return Err(format!(
                "{name} is not a {kind}.{group} like the first object of the review; {who} converts only {kind}.{group}"
            ));
        }
        if object.get("apiVersion").and_then(Value::as_str)
            == Some(request.desired_api_version.as_str())
        {
            converted.push(object.clone());
            continue;
        }
        let result = plugin
            .convert(object.to_string(), &request.desired_api_version)
            .await
            .map_err(|e| e.to_string())
            .and_then(|out| {
                review::check_converted(object, &out, &request.desired_api_version).map(|()| out)
            });
        match result {
            Ok(mut out) => {
                let forged = review::keep_host_marks(object, &mut out);
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
                converted.push(out);
            }
            Err(error) => {
                return Err(format!(
                    "{who} could not convert {name} to {}: {error}",
                    request.desired_api_version
                ));
            }
        }
    }
    Ok(converted)
}

async fn handle(State(registry): State<Registry>, Json(review_json): Json<Value>) -> Json<Value> {
    Json(answer(&registry, &review_json).await)
}

/// Serves the webhook on `listener` with `tls` until `cancel` fires.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    registry: Registry,
    cancel: CancellationToken,
) {
    let router = Router::new()
        .route(PATH, post(handle))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(registry);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    loop {
        let tcp = tokio::select! {
            () = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(error) => {
                    // Out of file descriptors and the like: pause, go on.
                    tracing::warn!(%error, "conversion webhook cannot accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let acceptor = acceptor.clone();
        let router = router.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(%error, "conversion webhook TLS handshake failed");
                    return;
                }
            };
            let service = hyper_util::service::TowerToHyperService::new(router);
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
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
