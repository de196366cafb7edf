//! wasm-operator: a Kubernetes operator host whose application logic runs in
//! sandboxed WebAssembly components (being written).

pub mod contract;
pub mod engine;
pub mod apply;
pub mod cache;
pub mod controller;
pub mod plugins;
pub mod telemetry;
pub mod cli;
pub mod dev;
