//! wasm-operator: a Kubernetes operator host whose application logic runs in
//! sandboxed WebAssembly components (being written).

pub mod contract;
pub mod engine;
