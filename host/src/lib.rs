//! wasm-operator: a Kubernetes operator host whose application logic runs in
//! sandboxed WebAssembly components.
//!
//! The host owns everything an operator does except the application logic:
//! watches and caches, every API write (server-side apply of children,
//! pruning, finalizers, status, events), telemetry and leader election.
//! The logic — how to reconcile a `WebApp`, how to upgrade objects an
//! older version wrote — lives in components implementing the WIT contract
//! `wasm-operator:plugin` (`wit/plugin.wit`), loaded from files, ConfigMaps or
//! OCI registries and swapped atomically across versions.
//!
//! # Entry points
//!
//! - [`Manager`]: the composition root. Start one against a [`kube::Client`]
//!   and it serves plugins: `--plugin` files through [`Manager::registry`], or
//!   the cluster's `WasmPlugin` objects through [`Manager::serve_wasmplugins`].
//!   This is what `wasm-operator run` and `wasm-operator dev` do.
//! - [`Registry`]: plugin versions. [`Registry::prepare`] compiles and checks
//!   a component once, [`Registry::activate`] makes it serve.
//! - [`Engine`]: wasmtime, for tools that call a component directly
//!   (inspection, benchmarks).
//! - [`cli::Cli`]: the command line, as the `wasm-operator` binary runs it.
//!
//! # How data flows
//!
//! One way: watch event → queue → plugin call → plan → write → status. Each
//! module has one job and imports only modules before it in this list
//! (`tests/architecture.rs` checks it):
//!
//! | module | job |
//! |---|---|
//! | [`contract`] | the host's types of the WIT contract, and every condition [`Reason`](contract::Reason) |
//! | [`engine`] | compile (cached on disk by digest), sandbox and call one plugin version |
//! | [`telemetry`] | `/metrics`, `/healthz`, `/readyz`, logs |
//! | [`lease`] | leader election over a Lease: the decision (pure), the elector, the write gate and its fencing token |
//! | [`cache`] | shared reflectors, one per resolved resource, shared by every plugin that reads it; API discovery |
//! | [`oci`] | pull and push plugin components as OCI artifacts |
//! | [`registry`] | plugin versions: prepare a candidate, activate it, version sets |
//! | `plan` | pure: a plugin's answer plus the observed state become a plan of writes |
//! | `apply` | executes a plan: SSA, prune, status, events, finalizers |
//! | `migration` | the upgrade walk of objects an older version managed |
//! | [`webhook`] | the CRD conversion webhook (HTTPS, answered by plugins' `convert`) and the round-trip gate |
//! | [`backup`] | Backup and Restore: pure schedules (cron, catch-up, recorded skips), names, retention and Jobs; the runner beside each plugin's controller that takes backups and restores by reconcile |
//! | `controller` | one kube-runtime `Controller` per plugin: queue, backoff, call → plan → write |
//! | [`wasmplugin`] | the `WasmPlugin` controller: sources, loads, status, audit trail |
//! | [`manager`] | the composition root: what runs on every replica, what only where it may write |
//! | `dev` | `wasm-operator dev`: the embedded devcluster around a manager (cargo feature `devcluster`) |
//! | [`cli`] | the command line |
//!
//! `plan`, `apply`, `migration` and `controller` are internal: they are
//! reached through the [`Manager`].
//!
//! # Cargo features
//!
//! - `devcluster` (default): `wasm-operator dev` and the embedded API server.
//!   Build an operator image without it (`--no-default-features`) to leave
//!   the API server and SQLite out.

#![deny(unsafe_code)]
#![warn(missing_docs)]
// A chosen set of clippy's pedantic lints: the ones that catch real
// mistakes or noise in this code base without fighting idiomatic kube code.
#![warn(
    clippy::cloned_instead_of_copied,
    clippy::explicit_iter_loop,
    clippy::implicit_clone,
    clippy::inefficient_to_string,
    clippy::manual_let_else,
    clippy::map_unwrap_or,
    clippy::redundant_closure_for_method_calls,
    clippy::semicolon_if_nothing_returned,
    clippy::uninlined_format_args,
    clippy::unnested_or_patterns
)]

pub(crate) mod apply;
pub mod backup;
pub mod cache;
pub mod cli;
pub mod contract;
pub(crate) mod controller;
#[cfg(feature = "devcluster")]
pub mod dev;
pub mod engine;
pub mod lease;
pub mod manager;
pub(crate) mod migration;
pub mod oci;
pub(crate) mod plan;
pub mod registry;
pub mod telemetry;
pub mod util;
pub mod wasmplugin;
pub mod webhook;

/// A client whose requests impersonate a grant's ServiceAccount (how the
/// host writes as a plugin; tests use it to act as a limited identity).
pub use apply::impersonating;
pub use engine::Engine;
pub use manager::{Manager, ManagerOptions, Role};
/// The labels, annotations, finalizer and field managers the host writes.
pub use plan::names;
pub use registry::Registry;
