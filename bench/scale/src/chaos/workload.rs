//! The objects of a chaos run and the steady stream of changes the storm
//! puts on them: spec updates, creates and deletes, at a fixed rate, from a
//! seeded generator, never reusing a name (so an audit line's name names
//! one object for the whole run).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

use bench_scale::webapp::webapp_resource;

use crate::faults::Rng;
use crate::observe::Shared;

/// What the harness did, and what it expects to find at the end.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Ledger {
    /// Created and not deleted (`namespace/name`).
    pub alive: BTreeSet<String>,
    /// Deleted, the delete answered with success.
    pub deleted: BTreeSet<String>,
    /// Successful spec updates.
    pub updates: usize,
    /// Successful creates.
    pub creates: usize,
    /// Successful deletes.
    pub deletes: usize,
    /// Writes that failed (API server down, 5xx, 429, conflicts); none is
    /// retried (an update's object keeps the state it has; the next create
    /// takes a new name).
    pub failed: usize,
    /// Creates and deletes that failed but were done (the answer was lost).
    pub ambiguous: BTreeSet<String>,
    /// Deletes that failed while the object could not be read either: its
    /// fate is unknown, and the final check expects nothing of it.
    pub unknown: BTreeSet<String>,
    /// The next object number.
    next: usize,
}

/// The namespaces of a run with `n` objects (one per 500, 1 to 20).
pub fn namespaces(n: usize) -> Vec<String> {
    (0..n.div_ceil(500).clamp(1, 20))
        .map(|i| format!("chaos-{i}"))
        .collect()
}

fn doc(namespace: &str, name: &str, replicas: u64) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "example.com/v1",
        "kind": "WebApp",
        "metadata": {"name": name, "namespace": namespace, "labels": {"chaos": "1"}},
        "spec": {"replicas": replicas, "image": "nginx:1.27", "port": 80},
    }))?)
}

impl Ledger {
    fn next_object(&mut self, namespaces: &[String]) -> (String, String) {
        let i = self.next;
        self.next += 1;
        (
            namespaces[i % namespaces.len()].clone(),
            format!("app-{i:06}"),
        )
    }
}

/// Creates `n` WebApps, 16 requests in flight, and expects each to reach
/// generation 1. Failed creates are retried (under the same name: nothing
/// watches these yet) up to 5 times.
///
/// # Errors
/// When a create fails five times.
pub async fn create_initial(
    client: &Client,
    n: usize,
    ledger: &mut Ledger,
    shared: &Shared,
) -> anyhow::Result<()> {
    let namespaces = namespaces(n);
    let names: Vec<(String, String)> = (0..n).map(|_| ledger.next_object(&namespaces)).collect();
    let results: Vec<anyhow::Result<String>> = futures::stream::iter(names)
        .map(|(ns, name)| {
            let client = client.clone();
            let shared = shared.clone();
            async move {
                let api = Api::<DynamicObject>::namespaced_with(client, &ns, &webapp_resource());
                let mut last = None;
                for _ in 0..5 {
                    match api
                        .create(&PostParams::default(), &doc(&ns, &name, 1)?)
                        .await
                    {
                        Ok(_) => {
                            shared
                                .lock()
                                .expect(&format!("{ns}/{name}"), 1, SystemTime::now());
                            return Ok(format!("{ns}/{name}"));
                        }
                        // A create whose answer was lost and that is retried.
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            shared
                                .lock()
                                .expect(&format!("{ns}/{name}"), 1, SystemTime::now());
                            return Ok(format!("{ns}/{name}"));
                        }
                        Err(e) => last = Some(e),
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(anyhow::anyhow!(
                    "creating WebApp {ns}/{name} failed 5 times: {last:?}"
                ))
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for result in results {
        ledger.alive.insert(result?);
        ledger.creates += 1;
    }
    Ok(())
}

/// Changes at `rate` per second until `stop`: 70 % spec updates (a new
/// `replicas`, 1 to 3), 15 % creates, 15 % deletes, chosen by `rng`.
pub async fn churn(
    client: Client,
    n: usize,
    rate: f64,
    mut rng: Rng,
    mut ledger: Ledger,
    shared: Shared,
    stop: Arc<AtomicBool>,
) -> Ledger {
    let namespaces = namespaces(n);
    let period = Duration::from_secs_f64(1.0 / rate.max(0.01));
    let mut next = Instant::now();
    let mut alive: Vec<String> = ledger.alive.iter().cloned().collect();
    while !stop.load(Ordering::Relaxed) {
        next += period;
        tokio::time::sleep_until(next.into()).await;
        let roll = rng.between(0, 99);
        if roll < 15 || alive.is_empty() {
            let (ns, name) = ledger.next_object(&namespaces);
            let api =
                Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &webapp_resource());
            let key = format!("{ns}/{name}");
            let Ok(object) = doc(&ns, &name, rng.between(1, 3)) else {
                continue;
            };
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => {
                    shared.lock().expect(&key, 1, SystemTime::now());
                    ledger.creates += 1;
                    ledger.alive.insert(key.clone());
                    alive.push(key);
                }
                Err(_) => {
                    ledger.failed += 1;
                    // The answer may be lost while the object was stored.
                    if api.get_opt(&name).await.ok().flatten().is_some() {
                        shared.lock().expect(&key, 1, SystemTime::now());
                        ledger.ambiguous.insert(key.clone());
                        ledger.alive.insert(key.clone());
                        alive.push(key);
                    }
                }
            }
        } else if roll < 30 {
            let key = alive.swap_remove(rng.index(alive.len()));
            let Some((ns, name)) = key.split_once('/') else {
                continue;
            };
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &webapp_resource());
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {
                    shared.lock().forget(&key);
                    ledger.deletes += 1;
                    ledger.alive.remove(&key);
                    ledger.deleted.insert(key);
                }
                Err(_) => {
                    ledger.failed += 1;
                    // The answer may be lost while the delete was done.
                    match api.get_opt(name).await {
                        Ok(Some(app)) if app.metadata.deletion_timestamp.is_none() => {
                            alive.push(key);
                        }
                        Ok(_) => {
                            shared.lock().forget(&key);
                            ledger.ambiguous.insert(key.clone());
                            ledger.alive.remove(&key);
                            ledger.deleted.insert(key);
                        }
                        // Unknown: keep it as alive, and expect nothing of it.
                        Err(_) => {
                            ledger.unknown.insert(key.clone());
                            ledger.alive.remove(&key);
                        }
                    }
                }
            }
        } else {
            let key = alive[rng.index(alive.len())].clone();
            let Some((ns, name)) = key.split_once('/') else {
                continue;
            };
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &webapp_resource());
            let patch = json!({"spec": {"replicas": rng.between(1, 3)}});
            match api
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(updated) => {
                    ledger.updates += 1;
                    if let Some(generation) = updated.metadata.generation {
                        shared.lock().expect(&key, generation, SystemTime::now());
                    }
                }
                Err(_) => ledger.failed += 1,
            }
        }
    }
    ledger
}
