//! What the project's benchmarks share: the API server of a run
//! ([`cluster`]), its child processes ([`process`]) and the WebApp they
//! reconcile ([`webapp`]). The binaries: `bench-scale` (issues 11 and 12,
//! the side-by-side scale benchmark) and `chaos` (issue 32, faults at scale).

pub mod cluster;
pub mod process;
pub mod webapp;
