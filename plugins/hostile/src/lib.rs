//! A test plugin that attacks the host the way a hostile plugin author
//! would, through the API the host writes for it rather than through the
//! sandbox. Each `Attack` object (`test.wasm-operator.dev/v1`) picks the
//! attack with `spec.mode`; `spec.target`, `spec.count` and `spec.sizeKiB`
//! parametrize it. Never deploy it: the security tests
//! (`host/tests/security/`) load it to prove every attack ends in a refusal
//! or a clear condition with nothing written that should not be.
//!
//! Its manifest asks for far more than a default grant gives: it owns
//! Secrets and ClusterRoleBindings and watches Secrets.
//!
//! | mode | what the call does |
//! |------|--------------------|
//! | `ok` | one ConfigMap child `<name>-ok` |
//! | `bind-cluster-admin` | a ClusterRoleBinding `hostile-<name>` of `cluster-admin` to the ServiceAccount `spec.target` (`ns/name`, default `default/default`) |
//! | `copy-secrets` | lists every Secret of every namespace and copies their data into a ConfigMap `<name>-loot`, `status.loot`, a condition and an event |
//! | `read-namespace` | lists the ConfigMaps of namespace `spec.target` into `status.seen` (their names) |
//! | `takeover` | a ConfigMap child named `spec.target` (an existing object) |
//! | `cluster-takeover` | a ClusterRoleBinding child named `spec.target` (an existing one) |
//! | `child-metadata` | a ConfigMap `<name>-sticky` with its own finalizer, a foreign ownerReference and the host's labels set to other values |
//! | `bad-name` | a ConfigMap child named `spec.target` (default `Not_A_DNS_Name`) |
//! | `many-children` | `spec.count` ConfigMaps (default 5000) |
//! | `huge-status` | `status.blob` of `spec.sizeKiB` KiB (default 2048) |
//! | `events-flood` | `spec.count` events (default 10000) |
//! | `long-message` | a condition whose message is `spec.sizeKiB` KiB (default 15360) |
//! | `huge-failure` | a permanent failure whose message is `spec.sizeKiB` KiB (default 15360) |
//! | `log-flood` | one log line of `spec.sizeKiB` KiB (default 51200), and the same on stdout |
//! | `requeue-zero` | like `ok`, asking to be called again after 0 ms |
//! | `finalize-forever` | like `ok`; `finalize` always answers "wait 1 s" |

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};
use wasm_operator_sdk::{
    Children, Condition, Context, Desired, Event, Failure, Finalized, Kind, Manifest, Reconciler,
    cache, log,
};

/// An `Attack` object.
#[derive(Debug, Clone, Deserialize)]
pub struct Attack {
    /// Names the children.
    pub metadata: ObjectMeta,
    /// The chosen attack.
    pub spec: AttackSpec,
}

/// Which attack, and its parameters.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttackSpec {
    /// What the call does.
    pub mode: Mode,
    /// An object or namespace the attack aims at.
    #[serde(default)]
    pub target: Option<String>,
    /// How many children or events.
    #[serde(default)]
    pub count: Option<u32>,
    /// How large, in KiB.
    #[serde(default, rename = "sizeKiB")]
    pub size_kib: Option<u32>,
}

/// The attacks (`spec.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[allow(missing_docs)]
pub enum Mode {
    Ok,
    BindClusterAdmin,
    CopySecrets,
    ReadNamespace,
    Takeover,
    ClusterTakeover,
    ChildMetadata,
    BadName,
    ManyChildren,
    HugeStatus,
    EventsFlood,
    LongMessage,
    HugeFailure,
    LogFlood,
    RequeueZero,
    FinalizeForever,
}

/// The plugin.
pub struct HostilePlugin;

impl Reconciler for HostilePlugin {
    type Object = Attack;

    fn manifest() -> Manifest {
        Manifest::new("hostile", env!("CARGO_PKG_VERSION"))
            .description("Test plugin: each Attack object picks how it attacks the host")
            .primary(Kind::namespaced(
                "test.wasm-operator.dev",
                "v1",
                "Attack",
                "attacks",
            ))
            .owns::<ConfigMap>()
            .owns::<Secret>()
            .owns::<ClusterRoleBinding>()
            .watches::<Secret>()
            .finalizer(true)
    }

    fn reconcile(_ctx: &Context, attack: Attack, _children: &Children) -> Result<Desired, Failure> {
        let name = attack.metadata.name.clone().unwrap_or_default();
        let spec = &attack.spec;
        let size =
            |default_kib: u32| "x".repeat(spec.size_kib.unwrap_or(default_kib) as usize * 1024);
        let count = |default: u32| spec.count.unwrap_or(default);
        match spec.mode {
            Mode::Ok | Mode::FinalizeForever => ok(&name),
            Mode::RequeueZero => Ok(ok(&name)?.requeue_after(Duration::ZERO)),
            Mode::BindClusterAdmin => {
                let target = spec.target.as_deref().unwrap_or("default/default");
                let (ns, sa) = target.split_once('/').unwrap_or(("default", target));
                Ok(Desired::new().child_json(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": format!("hostile-{name}")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "ServiceAccount", "namespace": ns, "name": sa}],
                })))
            }
            Mode::CopySecrets => {
                let secrets = cache::list::<Secret>(None, None)
                    .map_err(|e| Failure::transient(format!("listing Secrets: {e}")))?;
                let mut loot = BTreeMap::new();
                for secret in &secrets {
                    let key = format!(
                        "{}.{}",
                        secret.metadata.namespace.as_deref().unwrap_or_default(),
                        secret.metadata.name.as_deref().unwrap_or_default()
                    );
                    let data = serde_json::to_string(&secret.data).unwrap_or_default();
                    loot.insert(key, data);
                }
                let dump = serde_json::to_string(&loot).unwrap_or_default();
                Ok(Desired::new()
                    .child_json(config_map(&format!("{name}-loot"), json!(loot)))
                    .status(json!({"loot": loot}))
                    .condition(Condition::new("Looted", "True", "SecretsCopied", dump.clone()))
                    .event(Event::normal("SecretsCopied", dump)))
            }
            Mode::ReadNamespace => {
                let namespace = spec.target.as_deref().unwrap_or("kube-system");
                let seen = cache::list::<ConfigMap>(Some(namespace), None).map_err(|e| {
                    Failure::transient(format!("listing ConfigMaps in {namespace}: {e}"))
                })?;
                let names: Vec<String> = seen
                    .iter()
                    .filter_map(|c| c.metadata.name.clone())
                    .collect();
                Ok(Desired::new().status(json!({"seen": names})))
            }
            Mode::Takeover => {
                let target = spec.target.as_deref().unwrap_or("victim");
                Ok(Desired::new().child_json(config_map(target, json!({"pwned": "true"}))))
            }
            Mode::ClusterTakeover => {
                let target = spec.target.as_deref().unwrap_or("system:basic-user");
                Ok(Desired::new().child_json(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": target},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"kind": "Group", "name": "system:authenticated", "apiGroup": "rbac.authorization.k8s.io"}],
                })))
            }
            Mode::ChildMetadata => Ok(Desired::new().child_json(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {
                    "name": format!("{name}-sticky"),
                    "finalizers": ["hostile.example.com/never"],
                    "ownerReferences": [{
                        "apiVersion": "v1", "kind": "ConfigMap", "name": "someone-else",
                        "uid": "00000000-0000-0000-0000-000000000000", "controller": true,
                    }],
                    "labels": {
                        "app.kubernetes.io/managed-by": "someone-else",
                        "wasm-operator.dev/plugin": "webapp",
                    },
                },
                "data": {"sticky": "true"},
            }))),
            Mode::BadName => {
                let target = spec.target.as_deref().unwrap_or("Not_A_DNS_Name");
                Ok(Desired::new().child_json(config_map(target, json!({}))))
            }
            Mode::ManyChildren => Ok((0..count(5000)).fold(Desired::new(), |desired, i| {
                desired.child_json(config_map(&format!("{name}-{i}"), json!({})))
            })),
            Mode::HugeStatus => Ok(Desired::new().status(json!({"blob": size(2048)}))),
            Mode::EventsFlood => Ok((0..count(10_000)).fold(Desired::new(), |desired, i| {
                desired.event(Event::normal("Flood", format!("event {i} of a flood")))
            })),
            Mode::LongMessage => Ok(Desired::new().condition(Condition::new(
                "Ready",
                "True",
                "LongMessage",
                size(15 * 1024),
            ))),
            Mode::HugeFailure => Err(Failure::permanent(size(15 * 1024))),
            Mode::LogFlood => {
                let line = size(50 * 1024);
                log::info(&line);
                println!("{line}");
                ok(&name)
            }
        }
    }

    fn finalize(
        _ctx: &Context,
        attack: Attack,
        _children: &Children,
    ) -> Result<Finalized, Failure> {
        Ok(match attack.spec.mode {
            Mode::FinalizeForever => Finalized::Wait(Duration::from_secs(1)),
            _ => Finalized::Done,
        })
    }
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

fn ok(name: &str) -> Result<Desired, Failure> {
    Ok(Desired::new()
        .child_json(config_map(&format!("{name}-ok"), json!({"mode": "ok"})))
        .status(json!({"phase": "Ok"})))
}

wasm_operator_sdk::export_plugin!(HostilePlugin);
