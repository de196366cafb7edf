//! Black-box client tests for the devcluster: real clients nobody on this team wrote
//! (kubectl, the Python `kubernetes` client, kube-runtime's Controller) talk to a
//! `DevCluster` over HTTP exactly as they would to a kube-apiserver.
//!
//! Every test starts its own cluster on a random loopback port, so the tests run in parallel.

mod common;
mod controller;
mod kubectl;
mod python;
mod reflector;
