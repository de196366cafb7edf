//! Leader election end to end: several `wasm-operator run --leader-elect`
//! processes (the real binary) against one cluster started by the test,
//! with the real webapp plugin. The Lease, the primaries' fencing-token
//! annotation and each replica's `/metrics` and `/readyz?verbose` tell who
//! leads and who wrote.
//!
//! Short timings (lease 3 s, renew deadline 2 s, retry 0.5 s) keep the tests
//! quick; every wait has a generous deadline and no test asserts a
//! duration.

#[path = "../support/mod.rs"]
mod support;

mod cutoff;
mod deploy;
mod failover;
mod handoff;
mod replica;
mod scoped;
mod shards;
mod squatter;
