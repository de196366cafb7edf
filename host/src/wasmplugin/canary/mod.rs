//! The canary of a WasmPlugin (`spec.canary`): a candidate version next to
//! the stable one, dry-run, shadowed or split, analysed, then promoted or
//! rolled back. See docs/canary.md.
//!
//! - [`settings`]: `spec.canary` checked, with defaults (pure);
//! - [`machine`]: the lifecycle as a pure state machine;
//! - [`analysis`]: one check's verdict from the window's figures (pure);
//! - [`run`]: one canary as the driver holds it, and its status;
//! - [`restore`]: a canary read back from the last status (restart);
//! - [`diffs`]: the diffs ConfigMap's document (pure);
//! - [`io`]: [`CanaryIo`], every read and write the driver makes, and its
//!   production handle;
//! - [`driver`]: [`CanaryDriver`], which feeds the machine and performs
//!   its decisions through a [`CanaryIo`].

pub mod analysis;
mod diffs;
mod driver;
mod io;
pub mod machine;
mod restore;
pub mod run;
pub mod settings;
#[cfg(test)]
mod tests;

pub use diffs::{DIFFS_KEY, diffs_config_map_name, diffs_namespace};
pub(crate) use driver::{CANARY_TICK, CanaryDriver};
pub(crate) use io::CanaryIo;
pub use run::ACTION_ANNOTATION;
