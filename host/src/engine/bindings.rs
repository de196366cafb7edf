//! Host bindings generated from `wit/plugin.wit`.
//!
//! We generate the full `plugin` world but never instantiate it as a whole:
//! each exported interface is looked up on its own (`GuestIndices::new`), so a
//! minimal `reconciler-plugin` component (which exports only `reconciler`)
//! loads as well as an SDK-built one. Imports are synchronous host functions:
//! calls run on a blocking thread, see `plugin.rs`.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "plugin",
});

pub use self::exports::wasm_operator::plugin::{
    admission, backup, backup_policy, migration, migration_functions, reconciler, schema,
};
pub use self::wasm_operator::plugin::{cache, log, types};
