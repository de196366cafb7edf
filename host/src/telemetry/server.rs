//! The HTTP endpoint for `/metrics`, `/healthz` and `/readyz`.
//!
//! `/readyz` answers for the host, not for each plugin: it is 200 once
//! every *host* check passes. A plugin whose caches have not synced (its
//! kind's list is forbidden, very large, or its CRD went away) is reported
//! but does not hold the host at 503: one bad plugin must not take every
//! other plugin out of service. Per-plugin readiness is on
//! `/readyz?verbose` (one `[+]`/`[-]` line per check, as the API server
//! prints its own) and in the `wasm_operator_plugin_ready{plugin}` gauge.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::RawQuery;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::task::JoinHandle;

use super::Metrics;

/// One readiness check, as `/readyz?verbose` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadinessCheck {
    /// What is checked, e.g. `host` or `plugin webapp`.
    pub name: String,
    /// The plugin the check is about; `None` for a host check. Only host
    /// checks decide `/readyz`'s status.
    pub plugin: Option<String>,
    /// True when the check passes.
    pub ready: bool,
    /// Why it does not pass (or what it checked).
    pub detail: String,
}

type ChecksFn = Arc<dyn Fn() -> Vec<ReadinessCheck> + Send + Sync>;

/// `/readyz`'s status and body for `checks`: 200 when every host check
/// passes, whatever the plugins; the body lists every check when `verbose`.
pub fn readiness_report(checks: &[ReadinessCheck], verbose: bool) -> (StatusCode, String) {
    let ready = checks
        .iter()
        .filter(|c| c.plugin.is_none())
        .all(|c| c.ready);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if !verbose {
        let body = if ready {
            "ok".to_string()
        } else {
            let failing: Vec<String> = checks
                .iter()
                .filter(|c| c.plugin.is_none() && !c.ready)
                .map(|c| format!("{}: {}", c.name, c.detail))
                .collect();
            format!("not ready: {}", failing.join("; "))
        };
        return (status, body);
    }
    let mut body = String::new();
    for check in checks {
        let mark = if check.ready { '+' } else { '-' };
        let scope = if check.plugin.is_some() {
            " (does not gate /readyz)"
        } else {
            ""
        };
        body.push_str(&format!("[{mark}]{} {}{scope}\n", check.name, check.detail));
    }
    body.push_str(if ready {
        "readyz check passed\n"
    } else {
        "readyz check failed\n"
    });
    (status, body)
}

/// Binds `addr` (port 0 picks a free port) and serves `/metrics` (Prometheus
/// text), `/healthz` (always 200 while the process serves) and `/readyz` (200
/// once `ready()` is true, 503 before). Returns the bound address and the
/// server task.
///
/// # Errors
///
/// When `addr` cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    ready: impl Fn() -> bool + Send + Sync + 'static,
) -> Result<(SocketAddr, JoinHandle<()>), io::Error> {
    serve_checks(addr, metrics, move || {
        let ready = ready();
        vec![ReadinessCheck {
            name: "host".into(),
            plugin: None,
            ready,
            detail: if ready { "ok" } else { "caches not synced yet" }.into(),
        }]
    })
    .await
}

/// [`serve`] with readiness from `checks` (see [`readiness_report`]); the
/// plugin checks also set the `wasm_operator_plugin_ready` gauge when
/// `/metrics` is scraped.
///
/// # Errors
///
/// When `addr` cannot be bound.
pub async fn serve_checks(
    addr: SocketAddr,
    metrics: Metrics,
    checks: impl Fn() -> Vec<ReadinessCheck> + Send + Sync + 'static,
) -> Result<(SocketAddr, JoinHandle<()>), io::Error> {
    let checks: ChecksFn = Arc::new(checks);
    let for_metrics = checks.clone();
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                let checks = for_metrics.clone();
                async move {
                    let current = checks();
                    metrics.plugins_ready(
                        current
                            .iter()
                            .filter_map(|c| c.plugin.as_deref().map(|p| (p, c.ready))),
                    );
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
            get(move |RawQuery(query): RawQuery| {
                let checks = checks.clone();
                async move {
                    let verbose = query.as_deref().is_some_and(|q| {
                        q.split('&')
                            .any(|p| p == "verbose" || p.starts_with("verbose="))
                    });
                    readiness_report(&checks(), verbose).into_response()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn check(name: &str, plugin: Option<&str>, ready: bool) -> ReadinessCheck {
        ReadinessCheck {
            name: name.into(),
            plugin: plugin.map(str::to_string),
            ready,
            detail: if ready {
                "ok"
            } else {
                "caches not synced: v1 Secret"
            }
            .into(),
        }
    }

    #[test]
    fn one_unready_plugin_does_not_make_the_host_unready() {
        let checks = [
            check("host", None, true),
            check("plugin webapp", Some("webapp"), true),
            check("plugin hostile", Some("hostile"), false),
        ];
        let (status, body) = readiness_report(&checks, false);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(body, "ok");
        let (status, body) = readiness_report(&checks, true);
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("[+]plugin webapp ok"), "{body}");
        assert!(
            body.contains("[-]plugin hostile caches not synced: v1 Secret (does not gate /readyz)"),
            "{body}"
        );
    }

    #[test]
    fn a_failing_host_check_is_503_and_named() {
        let checks = [check("host", None, false)];
        let (status, body) = readiness_report(&checks, false);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("host: caches not synced"), "{body}");
        assert!(
            readiness_report(&checks, true)
                .1
                .ends_with("readyz check failed\n")
        );
    }
}
