//! End-to-end tests of the `wasm-operator` binary and of dev mode: the real
//! binary, a real devcluster over HTTP and the real plugins built to wasm.

#[path = "../support/mod.rs"]
mod support;

mod bad_plugin_files;
mod chart;
mod chart_rbac;
mod common;
mod dev_binary;
mod grants;
mod hot_reload;
mod image;
mod inspect;
mod namespaces;
mod observability;
mod plugin_crd;
mod plugin_test;
mod rbac_host;
mod run;
mod scaffold;
mod unreachable;
