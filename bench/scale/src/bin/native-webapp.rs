//! `native-webapp`: the webapp plugin's logic as a native kube-rs controller,
//! the peer wasm-operator is measured against in the scale benchmark.
//!
//! `native-webapp run` is a kube-runtime `Controller` over WebApps owning
//! Deployments and Services that calls `webapp-logic` natively and makes the
//! writes wasm-operator makes for the plugin: the finalizer (JSON patch, before
//! any child exists), a server-side apply of every child (always sent, like the
//! host), and a `.status` merge patch only when it changes something (the
//! plugin's fields, `observedGeneration`, the `Ready` condition merged by type).
//!
//! `native-webapp floor` is the bare-client floor: no watch, one list, then the
//! fewest writes that leave every WebApp converged, 16 at a time.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use wasm_operator_sdk::{Children, Desired};
use webapp_logic::WebApp;

/// The finalizer this controller puts on every WebApp (the plugin asks for one).
const FINALIZER: &str = "example.com/native-webapp";
/// Field manager of every write.
const MANAGER: &str = "native-webapp";

#[derive(Debug, Parser)]
#[command(name = "native-webapp", version)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the controller until killed.
    Run {
        /// Kubeconfig of the cluster.
        #[arg(long)]
        kubeconfig: std::path::PathBuf,
        /// Reconciles at once.
        #[arg(long, default_value_t = 16)]
        concurrency: u16,
    },
    /// Write the converged state of every WebApp once, without watching.
    Floor {
        /// Kubeconfig of the cluster.
        #[arg(long)]
        kubeconfig: std::path::PathBuf,
        /// Writes in flight at once.
        #[arg(long, default_value_t = 16)]
        concurrency: usize,
        /// What changed since the last pass: everything (`create`) or only
        /// the spec (`update`: the Service and the finalizer are already right).
        #[arg(long, value_enum)]
        phase: Phase,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    Create,
    Update,
}

/// The WebApp kind.
fn webapp_resource() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "WebApp".into(),
        plural: "webapps".into(),
    }
}

async fn client(path: &std::path::Path) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(Client::try_from(config)?)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // One TLS provider for the process: the workspace enables two (ring and
    // aws-lc-rs), and rustls will not choose by itself.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Args::parse().command {
        Command::Run {
            kubeconfig,
            concurrency,
        } => run(client(&kubeconfig).await?, concurrency).await,
        Command::Floor {
            kubeconfig,
            concurrency,
            phase,
        } => {
            floor(client(&kubeconfig).await?, concurrency, phase).await?;
            // The floor is gone before the harness could read /proc, so it
            // reports its own usage.
            if std::env::var_os("BENCH_REPORT_USAGE").is_some() {
                println!("{}", own_usage());
            }
            Ok(())
        }
    }
}

/// This process's CPU seconds (utime+stime, 100 ticks/s as on Linux) and peak RSS, as JSON.
fn own_usage() -> Value {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = (11..=14)
        .map(|i| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        })
        .sum();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let hwm_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    json!({ "cpuSeconds": ticks / 100.0, "peakRssMib": hwm_kib / 1024.0 })
}

/// What every reconcile shares.
struct Ctx {
    client: Client,
    deployments: Store<Deployment>,
    services: Store<Service>,
}

/// A reconcile failure: logged, retried after a second (like the host's first backoff step).
#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

fn failed(what: &str, e: impl std::fmt::Display) -> Failed {
    Failed(format!("{what}: {e}"))
}

async fn run(client: Client, concurrency: u16) -> anyhow::Result<()> {
    let ar = webapp_resource();
    let wc = watcher::Config::default();
    // Children come from reflector stores, as the host's come from its caches:
    // a reconcile reads its Deployment by name, with no API request.
    let (deployments, dw) = reflector::store();
    let (services, sw) = reflector::store();
    let deployment_events = reflector::reflector(
        dw,
        watcher(Api::<Deployment>::all(client.clone()), wc.clone()),
    )
    .default_backoff()
    .touched_objects();
    let service_events =
        reflector::reflector(sw, watcher(Api::<Service>::all(client.clone()), wc.clone()))
            .default_backoff()
            .touched_objects();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        deployments,
        services,
    });
    Controller::new_with(Api::<DynamicObject>::all_with(client, &ar), wc, ar)
        .with_config(ControllerConfig::default().concurrency(concurrency))
        .owns_stream(deployment_events)
        .owns_stream(service_events)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
            futures::future::ready(())
        })
        .await;
    Ok(())
}

fn error_policy(_obj: Arc<DynamicObject>, error: &Failed, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(%error, "reconcile failed");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Failed> {
    let ar = webapp_resource();
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api = Api::<DynamicObject>::namespaced_with(ctx.client.clone(), &ns, &ar);
    let app: WebApp = serde_json::to_value(&*obj)
        .and_then(serde_json::from_value)
        .map_err(|e| failed("parsing the WebApp", e))?;
    let finalizers = obj.finalizers();
    if obj.meta().deletion_timestamp.is_some() {
        if finalizers.iter().any(|f| f == FINALIZER) {
            webapp_logic::finalize(app).map_err(|e| failed("finalize", e))?;
            let patch = finalizer_patch(finalizers, false)
                .ok_or_else(|| failed("finalizer", "not present"))?;
            api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
                .await
                .map_err(|e| failed("removing the finalizer", e))?;
        }
        return Ok(Action::await_change());
    }
    if let Some(patch) = finalizer_patch(finalizers, true) {
        api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(|e| failed("adding the finalizer", e))?;
    }
    let mut existing = Vec::new();
    if let Some(d) = ctx
        .deployments
        .get(&ObjectRef::<Deployment>::new(&name).within(&ns))
    {
        existing.push(serde_json::to_value(&*d).map_err(|e| failed("child", e))?);
    }
    if let Some(s) = ctx
        .services
        .get(&ObjectRef::<Service>::new(&name).within(&ns))
    {
        existing.push(serde_json::to_value(&*s).map_err(|e| failed("child", e))?);
    }
    let desired = webapp_logic::desired_state(app, &Children::new(existing), &[])
        .map_err(|e| failed("desired state", e))?;
    let owner = obj
        .controller_owner_ref(&ar)
        .ok_or_else(|| failed("owner reference", "the WebApp has no uid"))?;
    let owner = serde_json::to_value(owner).map_err(|e| failed("owner reference", e))?;
    let params = PatchParams::apply(MANAGER).force();
    for child in &desired.children {
        let doc = child_document(child, &owner, &ns);
        let child_name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match doc["kind"].as_str() {
            Some("Deployment") => {
                Api::<Deployment>::namespaced(ctx.client.clone(), &ns)
                    .patch(&child_name, &params, &Patch::Apply(&doc))
                    .await
                    .map_err(|e| failed("applying the Deployment", e))?;
            }
            Some("Service") => {
                Api::<Service>::namespaced(ctx.client.clone(), &ns)
                    .patch(&child_name, &params, &Patch::Apply(&doc))
                    .await
                    .map_err(|e| failed("applying the Service", e))?;
            }
            other => return Err(failed("child", format!("unexpected kind {other:?}"))),
        }
    }
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let current = obj.data.get("status").cloned().unwrap_or(Value::Null);
    if let Some(body) = status_patch(&current, obj.meta().generation, &desired, &now) {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": body })),
        )
        .await
        .map_err(|e| failed("writing the status", e))?;
    }
    Ok(match desired.requeue_after {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The JSON patch adding (`add`) or removing the finalizer, `None` when
/// there is nothing to do. Both test the list they change, so a concurrent
/// edit makes the patch fail instead of clobbering it.
fn finalizer_patch(finalizers: &[String], add: bool) -> Option<json_patch::Patch> {
    let position = finalizers.iter().position(|f| f == FINALIZER);
    let ops = match (add, position) {
        (true, Some(_)) | (false, None) => return None,
        (true, None) if finalizers.is_empty() => json!([
            { "op": "add", "path": "/metadata/finalizers", "value": [FINALIZER] }
        ]),
        (true, None) => json!([
            { "op": "test", "path": "/metadata/finalizers", "value": finalizers },
            { "op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER }
        ]),
        (false, Some(i)) => json!([
            { "op": "test", "path": format!("/metadata/finalizers/{i}"), "value": FINALIZER },
            { "op": "remove", "path": format!("/metadata/finalizers/{i}") }
        ]),
    };
    serde_json::from_value(ops).ok()
}

/// A child as it is applied: the plugin's document with the namespace, the
/// owner reference and the managed-by label added.
fn child_document(child: &Value, owner: &Value, namespace: &str) -> Value {
    let mut doc = child.clone();
    if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("namespace".into(), json!(namespace));
        meta.insert("ownerReferences".into(), json!([owner]));
        let labels = meta
            .entry("labels")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(labels) = labels {
            labels.insert("app.kubernetes.io/managed-by".into(), json!(MANAGER));
        }
    }
    doc
}

/// The `.status` merge patch for `desired`, `None` when `current` already
/// shows it: the plugin's fields, `observedGeneration`, and its conditions
/// merged by type (`lastTransitionTime` kept while a condition's status
/// holds). The same rules as the host's `plan::status::build_status`.
fn status_patch(
    current: &Value,
    generation: Option<i64>,
    desired: &Desired,
    now: &str,
) -> Option<Value> {
    let current = if current.is_object() {
        current.clone()
    } else {
        json!({})
    };
    let mut patch = desired
        .status
        .clone()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    let body = patch.as_object_mut()?;
    body.remove("conditions");
    if let Some(g) = generation {
        body.insert("observedGeneration".into(), json!(g));
    }
    let mut merged: Vec<Value> = current
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in &desired.conditions {
        let existing = merged
            .iter()
            .position(|e| e.get("type").and_then(Value::as_str) == Some(c.kind.as_str()));
        let transition = existing
            .and_then(|i| merged.get(i))
            .filter(|e| e.get("status").and_then(Value::as_str) == Some(c.status.as_str()))
            .and_then(|e| e.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        let mut cond = Map::new();
        cond.insert("type".into(), json!(c.kind));
        cond.insert("status".into(), json!(c.status));
        cond.insert("reason".into(), json!(c.reason));
        cond.insert("message".into(), json!(c.message));
        cond.insert("lastTransitionTime".into(), transition);
        if let Some(g) = generation {
            cond.insert("observedGeneration".into(), json!(g));
        }
        match existing {
            Some(i) => merged[i] = Value::Object(cond),
            None => merged.push(Value::Object(cond)),
        }
    }
    body.insert("conditions".into(), Value::Array(merged));
    let mut after = current.clone();
    json_patch::merge(&mut after, &patch);
    (after != current).then_some(patch)
}

/// The bare-client floor: one list, then per WebApp the fewest writes that
/// converge it (create: finalizer, Deployment, Service, status; update:
/// Deployment and status), `concurrency` at a time. No watch, no cache, no
/// retries beyond the client's: any failure fails the pass.
async fn floor(client: Client, concurrency: usize, phase: Phase) -> anyhow::Result<()> {
    let ar = webapp_resource();
    let all = Api::<DynamicObject>::all_with(client.clone(), &ar)
        .list(&ListParams::default())
        .await
        .context("listing WebApps")?;
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let results: Vec<Result<(), Failed>> = futures::stream::iter(all.items)
        .map(|obj| {
            let client = client.clone();
            let ar = ar.clone();
            let now = now.clone();
            async move { floor_one(&client, &ar, &obj, phase, &now).await }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    let failures: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.err().map(|e| e.0))
        .collect();
    if let Some(first) = failures.first() {
        anyhow::bail!("{} WebApps failed, the first: {first}", failures.len());
    }
    Ok(())
}

async fn floor_one(
    client: &Client,
    ar: &ApiResource,
    obj: &DynamicObject,
    phase: Phase,
    now: &str,
) -> Result<(), Failed> {
    let ns = obj.namespace().unwrap_or_default();
    let name = obj.name_any();
    let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, ar);
    if phase == Phase::Create
        && let Some(patch) = finalizer_patch(obj.finalizers(), true)
    {
        api.patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .map_err(|e| failed("adding the finalizer", e))?;
    }
    let app: WebApp = serde_json::to_value(obj)
        .and_then(serde_json::from_value)
        .map_err(|e| failed("parsing the WebApp", e))?;
    let desired = webapp_logic::desired_state(app, &Children::default(), &[])
        .map_err(|e| failed("desired state", e))?;
    let owner = obj
        .controller_owner_ref(ar)
        .ok_or_else(|| failed("owner reference", "the WebApp has no uid"))?;
    let owner = serde_json::to_value(owner).map_err(|e| failed("owner reference", e))?;
    let params = PatchParams::apply(MANAGER).force();
    for child in &desired.children {
        let doc = child_document(child, &owner, &ns);
        match doc["kind"].as_str() {
            Some("Deployment") => {
                Api::<Deployment>::namespaced(client.clone(), &ns)
                    .patch(&name, &params, &Patch::Apply(&doc))
                    .await
                    .map_err(|e| failed("applying the Deployment", e))?;
            }
            Some("Service") if phase == Phase::Create => {
                Api::<Service>::namespaced(client.clone(), &ns)
                    .patch(&name, &params, &Patch::Apply(&doc))
                    .await
                    .map_err(|e| failed("applying the Service", e))?;
            }
            _ => {}
        }
    }
    let current = obj.data.get("status").cloned().unwrap_or(Value::Null);
    if let Some(body) = status_patch(&current, obj.meta().generation, &desired, now) {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": body })),
        )
        .await
        .map_err(|e| failed("writing the status", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_operator_sdk::Condition;

    fn desired(ready: bool) -> Desired {
        Desired::new()
            .status(json!({"readyReplicas": 0, "phase": "Pending"}))
            .condition(Condition::ready(ready, "R", "m"))
    }

    #[test]
    fn status_is_written_once_then_left_alone() {
        let first = status_patch(&Value::Null, Some(1), &desired(false), "t0").unwrap();
        assert_eq!(first["observedGeneration"], 1);
        assert_eq!(first["conditions"][0]["lastTransitionTime"], "t0");
        assert_eq!(status_patch(&first, Some(1), &desired(false), "t1"), None);
        let next = status_patch(&first, Some(2), &desired(false), "t1").unwrap();
        // Same condition status: the transition time holds.
        assert_eq!(next["conditions"][0]["lastTransitionTime"], "t0");
        let flipped = status_patch(&next, Some(2), &desired(true), "t2").unwrap();
        assert_eq!(flipped["conditions"][0]["lastTransitionTime"], "t2");
    }

    #[test]
    fn finalizer_patches_only_when_needed() {
        assert!(finalizer_patch(&[], true).is_some());
        assert!(finalizer_patch(&[FINALIZER.to_owned()], true).is_none());
        assert!(finalizer_patch(&[], false).is_none());
        let p = finalizer_patch(&["other".to_owned(), FINALIZER.to_owned()], false).unwrap();
        assert_eq!(p.0.len(), 2);
    }

    #[test]
    fn children_get_owner_namespace_and_label() {
        let doc = child_document(
            &json!({"kind": "Service", "metadata": {"name": "a"}}),
            &json!({"uid": "u"}),
            "ns",
        );
        assert_eq!(doc["metadata"]["namespace"], "ns");
        assert_eq!(doc["metadata"]["ownerReferences"][0]["uid"], "u");
        assert_eq!(
            doc["metadata"]["labels"]["app.kubernetes.io/managed-by"],
            MANAGER
        );
    }
}
