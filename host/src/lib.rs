//! wasm-operator: a Kubernetes operator host whose application logic runs in
//! sandboxed WebAssembly components (being written).

pub mod apply;
pub mod cache;
pub mod cli;
pub mod contract;
pub mod controller;
pub mod dev;
pub mod engine;
pub mod manager;
pub mod migration;
pub mod oci;
pub mod plan;
pub mod registry;
pub mod telemetry;
pub mod wasmplugin;
