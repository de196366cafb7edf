//! Webhook tests: the devcluster's webhook client against small in-test
//! webhook servers (plain HTTP on loopback and HTTPS with a self-signed
//! certificate passed as `caBundle`), and admission and conversion webhooks
//! end to end through a `DevCluster` and the real `kube` client.
//!
//! Every server binds 127.0.0.1:0, so the tests run in parallel.

mod client;
mod cluster;
mod reviews;
mod servers;
