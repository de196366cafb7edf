//! The simulation task: watches the store's Pods, Nodes and workload kinds,
//! binds unscheduled Pods, picks the stage that applies to each changed
//! object, waits its delay, and writes the stage's effects through the
//! store's ordinary write path (`create`, `update` of the object or its status
//! subresource, `delete` with garbage collection), so watchers see ordinary
//! ADDED/MODIFIED/DELETED events with new resourceVersions.
//!
//! Guarantees: an effect is written only if the object still has the
//! resourceVersion the stage was chosen for (a newer change is evaluated on
//! its own); a write that changes nothing is not made (no event, so no loop).

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use rand::Rng;
use serde_json::{Value, json};
use tokio_stream::wrappers::ReceiverStream;

use super::next::{Effect, effects, event_object};
use super::template::funcs::KwokFuncs;
use super::{StageSet, jobs, nodes, select};
use crate::registry::ResourceType;
use crate::status::ApiError;
use crate::store::write::DeleteOpts;
use crate::store::{Change, EventType, State, Store, now, obj_key, rv_of};

/// The storage keys of the kinds the simulation moves.
pub const WATCHED: &[&str] = &[
    "/nodes",
    "/pods",
    "apps/deployments",
    "apps/replicasets",
    "apps/statefulsets",
    "apps/daemonsets",
    "batch/jobs",
];

const PODS: &str = "/pods";
const NODES: &str = "/nodes";
const EVENTS: &str = "/events";
const JOBS: &str = "batch/jobs";

/// The running simulation; dropping it stops it.
#[derive(Debug)]
pub struct Simulation {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Simulation {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts simulating workloads on `store` with `stages`.
pub fn start(store: Arc<Store>, stages: Arc<StageSet>) -> Simulation {
    Simulation {
        task: tokio::spawn(run(store, stages)),
    }
}

fn roll(n: u64) -> u64 {
    if n == 0 {
        0
    } else {
        rand::rng().random_range(0..n)
    }
}

async fn run(store: Arc<Store>, stages: Arc<StageSet>) {
    loop {
        if let Err(e) = ensure_nodes(&mut store.lock()) {
            tracing::warn!("workload simulation: cannot create the fake nodes: {e}");
        }
        let (initial, receivers) = {
            let mut st = store.lock();
            let mut initial = Vec::new();
            let mut receivers = Vec::new();
            for resource in WATCHED {
                let start = st.watch_current(resource, None);
                initial.extend(start.initial);
                receivers.push(ReceiverStream::new(start.rx));
            }
            (initial, receivers)
        };
        for change in initial {
            handle(&store, &stages, &change);
        }
        let mut changes = futures::stream::select_all(receivers);
        while let Some(change) = changes.next().await {
            handle(&store, &stages, &change);
        }
        // The store closed its watches (a restart, fault injection): watch again.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn resource_type(st: &State, resource: &str) -> Result<ResourceType, ApiError> {
    st.registry
        .by_key(resource)
        .cloned()
        .ok_or_else(|| ApiError::internal(format!("resource {resource} is not served")))
}

/// Creates the fake nodes that do not exist yet, with their capacity.
fn ensure_nodes(st: &mut State) -> Result<(), ApiError> {
    let rt = resource_type(st, NODES)?;
    for i in 0..nodes::NODE_COUNT {
        let name = nodes::node_name(i);
        if st.get(NODES, "", &name).is_some() {
            continue;
        }
        let created = st.create(&rt, nodes::fake_node(&name), false)?;
        let mut with_status = (*created).clone();
        with_status["status"] = nodes::fake_node_capacity();
        st.update(&rt, with_status, rv_of(&created), Some("status"), false)?;
    }
    Ok(())
}

fn handle(store: &Arc<Store>, stages: &Arc<StageSet>, change: &Change) {
    if change.kind == EventType::Deleted {
        return;
    }
    let obj = &change.object;
    if change.resource == JOBS {
        if let Err(e) = delete_job_pods(&mut store.lock(), obj) {
            tracing::warn!("workload simulation: cannot delete the Pods of a Job: {e}");
        }
        if let Err(e) = create_job_pods(&mut store.lock(), obj) {
            tracing::warn!("workload simulation: cannot create the Pods of a Job: {e}");
        }
    }
    if change.resource == PODS
        && let Err(e) = record_job_pod_success(&mut store.lock(), obj)
    {
        tracing::warn!("workload simulation: cannot record a Job's Pod that succeeded: {e}");
    }
    if change.resource == PODS {
        if nodes::unscheduled(obj) {
            if let Err(e) = bind(&mut store.lock(), obj) {
                tracing::warn!("workload simulation: cannot bind a Pod: {e}");
            }
            return;
        }
        let node = obj["spec"]["nodeName"].as_str().unwrap_or_default();
        let on_fake_node = store
            .lock()
            .get(NODES, "", node)
            .is_some_and(|n| nodes::is_fake(&n));
        if !on_fake_node {
            return;
        }
    }
    let matching: Vec<_> = stages
        .stages
        .iter()
        .filter(|s| select::matches(s, obj))
        .collect();
    let Some(stage) = select::choose(&matching, obj, roll) else {
        return;
    };
    let wait = select::delay(stage, obj, chrono::Utc::now(), roll);
    let name = stage.name().to_string();
    let (store, stages) = (store.clone(), stages.clone());
    let resource = change.resource.clone();
    let (key, rv) = (obj_key(obj), rv_of(obj));
    tokio::spawn(async move {
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let mut st = store.lock();
        let Some(current) = st.get(&resource, &key.0, &key.1) else {
            return;
        };
        if rv_of(&current) != rv {
            return;
        }
        if let Err(e) = apply(&mut st, &stages, &name, &resource, &current) {
            tracing::warn!("workload simulation: {e}");
        }
    });
}

/// The stored Job `job` (`None` once it is gone), its namespace and the
/// Pods of that namespace.
fn job_and_pods(st: &State, job: &Value) -> Option<(String, Arc<Value>, Vec<Value>)> {
    let (ns, name) = obj_key(job);
    let current = st.get(JOBS, &ns, &name)?;
    let pods = st
        .list(PODS, Some(&ns))
        .iter()
        .map(|p| (**p).clone())
        .collect();
    Some((ns, current, pods))
}

/// Creates the Pods the Job's status counts and that do not exist yet.
fn create_job_pods(st: &mut State, job: &Value) -> Result<(), ApiError> {
    let Some((_, current, pods)) = job_and_pods(st, job) else {
        return Ok(());
    };
    let missing = jobs::missing_pods(&current, &pods);
    if missing.is_empty() {
        return Ok(());
    }
    let rt = resource_type(st, PODS)?;
    for pod in missing {
        st.create(&rt, pod, false)?;
    }
    Ok(())
}

/// Deletes the active Pods of a Job that failed its deadline.
fn delete_job_pods(st: &mut State, job: &Value) -> Result<(), ApiError> {
    let Some((ns, current, pods)) = job_and_pods(st, job) else {
        return Ok(());
    };
    let doomed = jobs::pods_to_delete(&current, &pods);
    if doomed.is_empty() {
        return Ok(());
    }
    let rt = resource_type(st, PODS)?;
    for pod in doomed {
        match st.delete(&rt, &ns, &pod, &DeleteOpts::default()) {
            Ok(_) => {}
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    crate::gc::collect(st)
}

/// Records a Pod of a Job that Succeeded in the Job's status
/// (`uncountedTerminatedPods.succeeded`), which `job-complete` waits for.
fn record_job_pod_success(st: &mut State, pod: &Value) -> Result<(), ApiError> {
    let (ns, name) = obj_key(pod);
    let Some(current) = st.get(PODS, &ns, &name) else {
        return Ok(());
    };
    let Some((job_name, _)) = jobs::owner_job(&current) else {
        return Ok(());
    };
    let Some(job) = st.get(JOBS, &ns, job_name) else {
        return Ok(());
    };
    let Some(recorded) = jobs::record_succeeded(&job, &current) else {
        return Ok(());
    };
    let rt = resource_type(st, JOBS)?;
    st.update(&rt, recorded, rv_of(&job), Some("status"), false)?;
    Ok(())
}

/// Binds an unscheduled Pod to a fake node and marks it scheduled.
fn bind(st: &mut State, pod: &Value) -> Result<(), ApiError> {
    let (ns, name) = obj_key(pod);
    let Some(current) = st.get(PODS, &ns, &name) else {
        return Ok(());
    };
    if !nodes::unscheduled(&current) {
        return Ok(());
    }
    let node_list: Vec<Value> = st.list(NODES, None).iter().map(|n| (**n).clone()).collect();
    let pods: Vec<Value> = st.list(PODS, None).iter().map(|p| (**p).clone()).collect();
    let Some(node) = nodes::choose_node(&node_list, &pods) else {
        return Ok(());
    };
    let rt = resource_type(st, PODS)?;
    let bound = st.update(
        &rt,
        nodes::bound(&current, &node),
        rv_of(&current),
        None,
        false,
    )?;
    let scheduled = nodes::scheduled_status(&bound, &now());
    st.update(&rt, scheduled, rv_of(&bound), Some("status"), false)?;
    Ok(())
}

/// Writes the effects of stage `name` on `obj` (the current stored object).
fn apply(
    st: &mut State,
    stages: &StageSet,
    name: &str,
    resource: &str,
    obj: &Arc<Value>,
) -> Result<(), String> {
    let Some(stage) = stages.get(name) else {
        return Ok(());
    };
    let object_name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let funcs = KwokFuncs::new(object_name);
    let planned = effects(stage, obj, &funcs).map_err(|e| e.to_string())?;
    let rt = resource_type(st, resource).map_err(|e| e.message)?;
    let (ns, obj_name) = obj_key(obj);
    let mut current = obj.clone();
    let written =
        |e: ApiError| format!("stage {name:?} on {} {obj_name:?}: {}", rt.kind, e.message);
    for effect in planned {
        match effect {
            Effect::Event(event) => {
                // An event is a report, not a state change: failing to record
                // it must not keep the stage's patches from being written.
                let object = event_object(&current, &event, &now());
                let recorded = resource_type(st, EVENTS)
                    .and_then(|events| st.create(&events, object, false).map(|_| ()));
                if let Err(e) = recorded {
                    tracing::warn!("workload simulation: event not recorded: {}", written(e));
                }
            }
            Effect::Finalizers(list) => {
                let mut new = (*current).clone();
                new["metadata"]["finalizers"] = json!(list);
                current = st
                    .update(&rt, new, rv_of(&current), None, false)
                    .map_err(written)?;
            }
            Effect::Delete => {
                match st.delete(&rt, &ns, &obj_name, &DeleteOpts::default()) {
                    Ok(_) => {}
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(written(e)),
                }
                crate::gc::collect(st).map_err(written)?;
                return Ok(());
            }
            Effect::Update {
                subresource,
                mut object,
            } => {
                // A finalizer step before this patch changed the stored finalizers.
                if subresource.is_none()
                    && let Some(finalizers) = current["metadata"].get("finalizers")
                {
                    object["metadata"]["finalizers"] = finalizers.clone();
                }
                current = st
                    .update(&rt, object, rv_of(&current), subresource.as_deref(), false)
                    .map_err(written)?;
            }
        }
    }
    Ok(())
}
