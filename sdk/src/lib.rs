//! Write [wasm-operator] plugins in Rust against typed Kubernetes objects.
//!
//! A plugin is a *function of observed state*: the host hands it the primary
//! object and the children it owns; the plugin answers with the desired
//! children, status, conditions and events. The host does every API write.
//!
//! Implement [`Reconciler`] for a type, call [`export_plugin!`] once, and build
//! with `cargo build --release --target wasm32-wasip2`: the `cdylib` is the
//! component the host loads. The same code compiles natively (the export is
//! only emitted on `wasm32`), so unit tests and benchmarks call the logic
//! directly or through [`reconcile_json`], the path the export glue uses.
//!
//! # A complete plugin
//!
//! ```
//! use std::time::Duration;
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
//! use serde::Deserialize;
//! use wasm_operator_sdk::{
//!     Children, Condition, Context, Desired, Event, Failure, Kind, Manifest, Reconciler, log,
//! };
//!
//! /// The primary object: `greeters.example.com/v1`, kind `Greeter`.
//! #[derive(Deserialize)]
//! struct Greeter {
//!     metadata: ObjectMeta,
//!     spec: GreeterSpec,
//! }
//!
//! #[derive(Deserialize)]
//! struct GreeterSpec {
//!     greeting: String,
//! }
//!
//! /// Optional plugin config (`spec.config` of the `WasmPlugin`).
//! #[derive(Deserialize, Default)]
//! #[serde(default)]
//! struct Config {
//!     shout: bool,
//! }
//!
//! struct GreeterPlugin;
//!
//! impl Reconciler for GreeterPlugin {
//!     type Object = Greeter;
//!
//!     fn manifest() -> Manifest {
//!         Manifest::new("greeter", "0.1.0")
//!             .description("Writes a greeting into a ConfigMap")
//!             .primary(Kind::namespaced("example.com", "v1", "Greeter", "greeters"))
//!             .owns::<ConfigMap>()
//!     }
//!
//!     fn reconcile(ctx: &Context, greeter: Greeter, children: &Children) -> Result<Desired, Failure> {
//!         let config: Config = ctx.config()?;
//!         let name = greeter.metadata.name.unwrap_or_default();
//!         let mut greeting = greeter.spec.greeting;
//!         if config.shout {
//!             greeting = greeting.to_uppercase();
//!         }
//!         let existed = children.get::<ConfigMap>(&name)?.is_some();
//!         if !existed {
//!             log::info(format!("creating the greeting for {name}"));
//!         }
//!         let cm = ConfigMap {
//!             metadata: ObjectMeta { name: Some(name), ..Default::default() },
//!             data: Some([("greeting".to_owned(), greeting)].into()),
//!             ..Default::default()
//!         };
//!         let mut desired = Desired::new()
//!             .child(&cm)?
//!             .status(serde_json::json!({ "phase": "Greeting" }))
//!             .condition(Condition::ready(true, "GreetingWritten", "the ConfigMap holds the greeting"))
//!             .requeue_after(Duration::from_secs(300));
//!         if !existed {
//!             desired = desired.event(Event::normal("Created", "wrote the greeting ConfigMap"));
//!         }
//!         Ok(desired)
//!     }
//! }
//!
//! wasm_operator_sdk::export_plugin!(GreeterPlugin);
//!
//! // Natively, the same logic runs on JSON exactly as the host would call it:
//! let answer = wasm_operator_sdk::reconcile_json::<GreeterPlugin>(
//!     &Context::new("0.1.0"),
//!     r#"{"apiVersion":"example.com/v1","kind":"Greeter",
//!         "metadata":{"name":"hi","namespace":"default"},"spec":{"greeting":"hello"}}"#,
//!     &[],
//! )
//! .unwrap();
//! assert_eq!(answer.children.len(), 1);
//! ```
//!
//! # Performance
//!
//! Every call runs in a fresh instance, which shapes two choices:
//!
//! **Allocation.** With the default `arena-allocator` feature the SDK
//! installs a bump allocator as the plugin's global allocator on wasm: an
//! allocation moves a pointer through a 512 KiB arena of static memory, a
//! free gives memory back only if it was the latest allocation, and growing
//! the latest allocation (a `String` or `Vec` being written) happens in
//! place. Nothing outlives a call, so there is nothing to reuse, and the host
//! resets the pages the call wrote anyway. A call that needs more carries on
//! in the standard library's allocator. In the host's side-by-side benchmark
//! this took a webapp reconcile from 49.7 to 43.6 µs (the same logic
//! natively: 29.4 µs). A plugin that installs its own `#[global_allocator]`
//! turns the feature off:
//!
//! ```toml
//! wasm-operator-sdk = { version = "0.1", default-features = false }
//! ```
//!
//! **Initial memory.** A plugin pays for whatever memory it grows into on
//! *every* call: each `memory.grow` costs the host an `mprotect` to grow and
//! another to shrink the slot back for the next call. The linker's default
//! initial memory is just the 1 MiB stack plus data and static memory (the
//! arena among it), which a realistic reconcile outgrows. Link with a
//! somewhat larger initial memory (the reset after each call scans every
//! accessible page, so do not overdo it: 2 MiB measured ~5% faster than 4):
//!
//! ```toml
//! # .cargo/config.toml of the plugin's workspace
//! [target.wasm32-wasip2]
//! rustflags = ["-C", "link-arg=--initial-memory=2097152"]
//! ```
//!
//! In the host's benchmark this took a webapp reconcile from 88 µs to 77 µs.
//! If the linker answers that the initial memory is too small, the plugin's
//! data no longer fits beside the stack and the arena: raise it in steps of
//! 64 KiB. Keep the plugin's memory limit above the initial memory.
//!
//! [wasm-operator]: https://example.invalid/wasm-operator

#![warn(missing_docs)]

// Lets the generated bindings name this crate the same way from inside it and
// from the plugin crates the export macro expands in.
extern crate self as wasm_operator_sdk;

mod admission;
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
// installed on wasm; unit-tested natively
mod arena;
mod backup;
#[allow(missing_docs)] // generated code; documented by the WIT
pub mod bindings;
pub mod cache;
mod children;
mod context;
mod crd;
mod desired;
mod export;
mod failure;
mod glue;
mod kind;
pub mod log;
mod manifest;
mod reconciler;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use admission::{FieldError, Operation, Verdict};
pub use backup::{BackupPlan, BackupStatus};
pub use children::Children;
pub use context::Context;
pub use crd::Crd;
pub use desired::{Condition, Desired, DesiredJson, Event, Finalized};
pub use failure::Failure;
pub use glue::{
    convert_json, defaults_json, finalize_json, plan_json, reconcile_json, restore_json,
    upgrade_json, validate_json,
};
pub use kind::{Kind, KnownScope, Scope};
pub use manifest::Manifest;
pub use reconciler::Reconciler;

/// A call's allocations live as long as the call's instance (see the `arena` module).
#[cfg(all(
    feature = "arena-allocator",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
#[global_allocator]
static ALLOCATOR: arena::CallArena = arena::CallArena::new();

/// Re-exports of the SDK's own dependencies, so plugins need not list them.
pub use k8s_openapi;
pub use schemars;
pub use serde_json;

/// Items the macros expand to. Not part of the public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::export::{DefaultsHook, Glue, OpaqueObject, Probe, SerializableObject};
    pub use wit_bindgen;
}

/// Exports a [`Reconciler`] as the plugin's component interface.
///
/// Call it once per plugin crate, at module level. It expands to nothing when
/// compiling for anything but `wasm32`, so the crate still builds natively for
/// tests and benchmarks.
///
/// ```
/// # use wasm_operator_sdk::{Children, Context, Desired, Failure, Manifest, Reconciler};
/// struct MyPlugin;
///
/// impl Reconciler for MyPlugin {
///     type Object = serde_json::Value;
///     fn manifest() -> Manifest {
///         Manifest::new("mine", "0.1.0")
///     }
///     fn reconcile(_: &Context, _: serde_json::Value, _: &Children) -> Result<Desired, Failure> {
///         Ok(Desired::new())
///     }
/// }
///
/// wasm_operator_sdk::export_plugin!(MyPlugin);
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($plugin:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            /// Runs `defaults` when the plugin's object type serializes
            /// (known here, where the plugin type is concrete).
            struct __WasmOperatorDefaults;
            impl $crate::__private::DefaultsHook for __WasmOperatorDefaults {
                fn defaults_json(
                    ctx: &$crate::Context,
                    operation: $crate::Operation,
                    object: &str,
                ) -> ::core::result::Result<::std::string::String, ::std::string::String> {
                    #[allow(unused_imports)]
                    use $crate::__private::{OpaqueObject as _, SerializableObject as _};
                    // Both borrows pick the method (autoref specialization).
                    #[allow(clippy::needless_borrow)]
                    let defaults = (&&$crate::__private::Probe::<$plugin>::new()).defaults_fn();
                    defaults(ctx, operation, object)
                }
            }
            type __WasmOperatorPlugin = $crate::__private::Glue<$plugin, __WasmOperatorDefaults>;
    $crate::bindings::export!(__WasmOperatorPlugin with_types_in $crate::bindings);
        };
    };
}
