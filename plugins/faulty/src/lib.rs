//! A test plugin whose behaviour each `Fault` object (`test.wasm-operator.dev/v1`)
//! chooses with `spec.mode`, to drive the host through every failure path a
//! real plugin can take. Never deploy it.
//!
//! | mode | what the call does |
//! |------|--------------------|
//! | `ok` | returns one ConfigMap child named like the Fault |
//! | `trap` | panics, which traps the wasm call |
//! | `loop` | spins forever, until the host's deadline interrupts it |
//! | `memory` | allocates 1 MiB chunks without bound, until the memory limit |
//! | `garbage` | returns a child without apiVersion/kind/name and a condition with status `maybe` |
//! | `huge` | returns a ConfigMap with a `spec.hugeMiB` MiB value (default 24: above the host's default 16 MiB output cap, and peak guest memory stays near 3x that, far under a 256 MiB limit) |
//! | `write-undeclared` | returns a Secret child, though the manifest owns only ConfigMaps |
//! | `read-undeclared` | reads a Secret through the cache, though the manifest declares no Secrets; the host's answer becomes a transient failure |
//! | `transient-then-ok` | fails transiently while `attempt < spec.failTimes` (default 2: attempt 1 fails, attempt 2 succeeds), then answers as `ok` |
//! | `permanent` | fails permanently |

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::json;
use wasm_operator_sdk::{
    Children, Condition, Context, Desired, Failure, Kind, Manifest, Reconciler, cache,
};

/// A `Fault` object.
#[derive(Debug, Clone, Deserialize)]
pub struct Fault {
    /// Names the children and the cache read.
    pub metadata: ObjectMeta,
    /// The chosen behaviour.
    pub spec: FaultSpec,
}

/// Which failure to produce.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultSpec {
    /// What the call does.
    pub mode: Mode,
    /// `transient-then-ok`: attempts numbered below this fail (attempts start at 1).
    #[serde(default = "default_fail_times")]
    pub fail_times: u32,
    /// `huge`: size of the giant value in MiB.
    #[serde(default = "default_huge_mib", rename = "hugeMiB")]
    pub huge_mib: u32,
}

fn default_fail_times() -> u32 {
    2
}

fn default_huge_mib() -> u32 {
    24
}

/// The behaviours (`spec.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Ok,
    Trap,
    Loop,
    Memory,
    Garbage,
    Huge,
    WriteUndeclared,
    ReadUndeclared,
    TransientThenOk,
    Permanent,
}

/// The plugin.
pub struct FaultyPlugin;

impl Reconciler for FaultyPlugin {
    type Object = Fault;

    fn manifest() -> Manifest {
        Manifest::new("faulty", env!("CARGO_PKG_VERSION"))
            .description("Test plugin: each Fault object picks how the call fails")
            .primary(Kind::namespaced(
                "test.wasm-operator.dev",
                "v1",
                "Fault",
                "faults",
            ))
            .owns::<ConfigMap>()
    }

    fn reconcile(ctx: &Context, fault: Fault, _children: &Children) -> Result<Desired, Failure> {
        let name = fault.metadata.name.clone().unwrap_or_default();
        let namespace = fault.metadata.namespace.clone();
        match fault.spec.mode {
            Mode::Ok => ok(&name, ctx.attempt),
            Mode::Trap => panic!("Fault {name}: mode trap panics on purpose"),
            Mode::Loop => spin(),
            Mode::Memory => exhaust_memory(),
            Mode::Garbage => Ok(Desired::new()
                .child_json(json!({"data": {"note": "no apiVersion, kind or metadata.name"}}))
                .condition(Condition::new(
                    "Ready",
                    "maybe",
                    "Garbage",
                    "status is not True/False/Unknown",
                ))),
            Mode::Huge => {
                let blob = "x".repeat(fault.spec.huge_mib as usize * 1024 * 1024);
                // Built as JSON so the blob is moved, not copied, on its way out.
                Ok(Desired::new().child_json(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name}, "data": {"blob": blob},
                })))
            }
            Mode::WriteUndeclared => {
                let secret = Secret {
                    metadata: meta(&name),
                    ..Default::default()
                };
                Desired::new().child(&secret)
            }
            Mode::ReadUndeclared => match cache::get::<Secret>(namespace.as_deref(), &name) {
                Err(e) => Err(Failure::transient(format!(
                    "reading an undeclared Secret failed as it should: {e}"
                ))),
                Ok(found) => Err(Failure::transient(format!(
                    "the host let an undeclared Secret be read (found: {}); the host must refuse it",
                    found.is_some()
                ))),
            },
            Mode::TransientThenOk if ctx.attempt < fault.spec.fail_times => {
                Err(Failure::transient(format!(
                    "attempt {} fails on purpose (attempts below failTimes {} fail)",
                    ctx.attempt, fault.spec.fail_times
                )))
            }
            Mode::TransientThenOk => ok(&name, ctx.attempt),
            Mode::Permanent => Err(Failure::permanent(format!(
                "Fault {name}: mode permanent fails on purpose"
            ))),
        }
    }
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

fn ok(name: &str, attempt: u32) -> Result<Desired, Failure> {
    let config_map = ConfigMap {
        metadata: meta(name),
        data: Some(BTreeMap::from([("mode".to_owned(), "ok".to_owned())])),
        ..Default::default()
    };
    Ok(Desired::new()
        .child(&config_map)?
        .status(json!({"phase": "Ok", "attempt": attempt}))
        .condition(Condition::ready(
            true,
            "FaultModeOk",
            "the plugin answered normally",
        )))
}

/// Never returns; `black_box` keeps the optimiser from deleting the loop.
fn spin() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

/// Never returns: grows memory 1 MiB at a time, touching every chunk, until
/// the allocator fails (an abort, i.e. a trap) or the host stops the call.
fn exhaust_memory() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        hoard.push(std::hint::black_box(vec![1u8; 1 << 20]));
    }
}

wasm_operator_sdk::export_plugin!(FaultyPlugin);
