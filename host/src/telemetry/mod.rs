//! Telemetry: Prometheus metrics, the health/readiness/metrics HTTP server and
//! logging initialisation.
//!
//! Metric names follow controller-runtime where a concept matches, so the
//! dashboards and alerts operators already have keep working.

mod logging;
mod metrics;
mod server;

pub use logging::{init_logging, verbosity_filter};
pub use metrics::{Metrics, ReconcileResult, ShadowResult, WebhookRefusal, WriteKind};
pub use server::{ReadinessCheck, readiness_report, serve, serve_checks};
