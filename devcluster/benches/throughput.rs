//! Devcluster throughput and watch latency, measured through the real `kube` client over HTTP.
//!
//! Criterion measures create/update throughput and listing 10k objects; watch delivery latency
//! (update response -> arrival at each of 20 watchers, 10k objects stored) is a distribution,
//! which criterion does not report, so it is a separate timed section printing percentiles.
//! A summary table is printed at the end.
//!
//! Run: `cargo bench -p wasm-operator-devcluster --bench throughput` (about 2 minutes).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, Throughput};
use devcluster::{DevCluster, DevClusterOptions};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// Objects written per criterion iteration, split across [`WRITERS`] concurrent writers.
const BATCH: u64 = 40;
/// Concurrent writers (each issues its share of a batch sequentially).
const WRITERS: u64 = 4;
/// Objects stored for the list and watch-latency sections.
const STORED: usize = 10_000;
/// Concurrent watchers in the latency section.
const WATCHERS: usize = 20;
/// Updates whose delivery is timed in the latency section.
const LATENCY_UPDATES: u64 = 200;

/// Total objects and time spent, accumulated over every criterion iteration of one benchmark.
#[derive(Default)]
struct Rate {
    objects: u64,
    elapsed: Duration,
}

impl Rate {
    fn per_second(&self) -> f64 {
        self.objects as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some([("value".to_string(), value.to_string())].into()),
        ..Default::default()
    }
}

async fn ensure_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("cannot create namespace {name}: {e}"),
    }
}

/// Creates `count` configmaps named `{prefix}-{i}` with `concurrency` requests in flight.
async fn populate(api: &Api<ConfigMap>, prefix: &str, count: usize, concurrency: usize) {
    stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            let name = format!("{prefix}-{i}");
            async move {
                api.create(&PostParams::default(), &configmap(&name, "initial"))
                    .await
            }
        })
        .buffer_unordered(concurrency)
        .try_for_each(|_| async { Ok(()) })
        .await
        .unwrap_or_else(|e| panic!("populating {prefix}-* failed: {e}"));
}

/// One criterion iteration of creates: [`BATCH`] new configmaps from [`WRITERS`] writers.
async fn create_batch(api: &Api<ConfigMap>, next: &AtomicU64) {
    let writers = (0..WRITERS).map(|_| async {
        for _ in 0..BATCH / WRITERS {
            let name = format!("c-{}", next.fetch_add(1, Ordering::Relaxed));
            api.create(&PostParams::default(), &configmap(&name, "x"))
                .await
                .unwrap();
        }
    });
    futures::future::join_all(writers).await;
}

/// One criterion iteration of updates: every one of [`BATCH`] configmaps merge-patched once.
async fn update_batch(api: &Api<ConfigMap>, round: u64) {
    let writers = (0..WRITERS).map(|w| async move {
        for i in 0..BATCH / WRITERS {
            let name = format!("u-{}", w * (BATCH / WRITERS) + i);
            let patch = json!({ "data": { "value": round.to_string() } });
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
        }
    });
    futures::future::join_all(writers).await;
}

/// Percentile (nearest rank) of sorted durations.
fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Watch delivery latencies, sorted, one sample per (watcher, update).
struct Latency {
    /// Arrival minus the instant the updating client got its response (earlier arrivals count 0).
    from_response: Vec<Duration>,
    /// Arrival minus the instant the update request was sent: an upper bound that includes the
    /// write itself, reported because most events beat the writer's own response.
    from_request: Vec<Duration>,
    expected: usize,
    before_response: usize,
}

/// Watch delivery latency: [`WATCHERS`] watches on a namespace holding [`STORED`] objects, then
/// [`LATENCY_UPDATES`] sequential updates; each event's arrival is compared with the instants the
/// update was sent and its response received.
async fn watch_latency(api: &Api<ConfigMap>) -> Latency {
    let list = api
        .list_metadata(&ListParams::default().limit(1))
        .await
        .unwrap();
    let rv = list.metadata.resource_version.unwrap_or_default();
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        // `watch` returns once the server has answered, so every watcher is connected
        // before the first timed update.
        let events = api
            .watch(&WatchParams::default().timeout(290), &rv)
            .await
            .unwrap();
        let arrivals: Arc<Mutex<BTreeMap<u64, Instant>>> = Arc::default();
        let sink = arrivals.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            while let Some(event) = events.next().await {
                if let Ok(WatchEvent::Modified(cm)) = event {
                    let seq = cm
                        .data
                        .as_ref()
                        .and_then(|d| d.get("seq"))
                        .and_then(|s| s.parse::<u64>().ok());
                    if let Some(seq) = seq {
                        sink.lock().unwrap().entry(seq).or_insert_with(Instant::now);
                    }
                }
            }
        });
        watchers.push((arrivals, task));
    }
    let mut timings = Vec::new();
    for seq in 0..LATENCY_UPDATES {
        let sent = Instant::now();
        let name = format!("l-{}", seq as usize % STORED);
        let patch = json!({ "data": { "seq": seq.to_string() } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        timings.push((sent, Instant::now()));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline
        && watchers
            .iter()
            .any(|(a, _)| a.lock().unwrap().len() < LATENCY_UPDATES as usize)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut from_response = Vec::new();
    let mut from_request = Vec::new();
    let mut before_response = 0;
    for (arrivals, task) in watchers {
        task.abort();
        for (seq, arrived) in arrivals.lock().unwrap().iter() {
            let (sent, responded) = timings[*seq as usize];
            if *arrived < responded {
                before_response += 1;
            }
            from_response.push(arrived.saturating_duration_since(responded));
            from_request.push(arrived.saturating_duration_since(sent));
        }
    }
    from_response.sort();
    from_request.sort();
    Latency {
        from_response,
        from_request,
        expected: WATCHERS * LATENCY_UPDATES as usize,
        before_response,
    }
}

/// Runs `routine` for `iters` criterion iterations, adds `per_iter` objects per iteration to
/// `rate`, and returns the elapsed time (what `iter_custom` expects).
async fn timed<F, Fut>(iters: u64, per_iter: u64, rate: &Mutex<Rate>, mut routine: F) -> Duration
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = ()>,
{
    let start = Instant::now();
    for i in 0..iters {
        routine(i).await;
    }
    let elapsed = start.elapsed();
    let mut rate = rate.lock().unwrap();
    rate.objects += iters * per_iter;
    rate.elapsed += elapsed;
    elapsed
}

fn print_summary(create: &Rate, update: &Rate, list: &Rate, populate: Duration, latency: &Latency) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let row = |what: String, value: String| println!("{what:<52} {value:>16}");
    println!(
        "\n============== devcluster summary (kube client over HTTP, loopback) =============="
    );
    row("measurement".into(), "result".into());
    row(
        format!("create configmaps ({WRITERS} writers)"),
        format!("{:.0} obj/s", create.per_second()),
    );
    row(
        format!("update configmaps ({WRITERS} writers, merge patch)"),
        format!("{:.0} obj/s", update.per_second()),
    );
    row(
        "populate 10k configmaps (16 in flight)".into(),
        format!("{:.0} obj/s", STORED as f64 / populate.as_secs_f64()),
    );
    row(
        "list 10k configmaps (one request)".into(),
        format!("{:.1} ms", ms(list.elapsed) / list.objects.max(1) as f64),
    );
    for (what, samples) in [
        ("from update response", &latency.from_response),
        ("from update request", &latency.from_request),
    ] {
        for p in [50.0, 99.0] {
            row(
                format!("watch delivery p{p:.0} ({what})"),
                format!("{:.2} ms", ms(percentile(samples, p))),
            );
        }
        row(
            format!("watch delivery max ({what})"),
            format!("{:.2} ms", ms(samples.last().copied().unwrap_or_default())),
        );
    }
    row(
        format!("watch events delivered ({WATCHERS} watchers x {LATENCY_UPDATES})"),
        format!("{}/{}", latency.from_response.len(), latency.expected),
    );
    row(
        "events that arrived before the update's response".into(),
        latency.before_response.to_string(),
    );
    println!("===================================================================================");
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut cluster = rt
        .block_on(DevCluster::start(DevClusterOptions::default()))
        .unwrap();
    let client = cluster.client();
    for ns in ["bench-create", "bench-update", "bench-store"] {
        rt.block_on(ensure_namespace(&client, ns));
    }
    let create_api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-create");
    let update_api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-update");
    let store_api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-store");
    let mut criterion = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8))
        .configure_from_args();

    // List and watch first, while exactly STORED objects (plus the small update set) exist;
    // the create benchmark afterwards adds tens of thousands more.
    let populate_start = Instant::now();
    rt.block_on(populate(&store_api, "l", STORED, 16));
    let populate_elapsed = populate_start.elapsed();
    rt.block_on(populate(&update_api, "u", BATCH as usize, 8));
    let list_rate = Mutex::new(Rate::default());
    {
        let mut group = criterion.benchmark_group("list");
        group
            .sampling_mode(SamplingMode::Flat)
            .throughput(Throughput::Elements(STORED as u64));
        group.bench_function("configmaps/10k", |b| {
            b.to_async(&rt).iter_custom(|iters| {
                timed(iters, 1, &list_rate, |_| async {
                    let list = store_api.list(&ListParams::default()).await.unwrap();
                    assert_eq!(
                        list.items.len(),
                        STORED,
                        "the list returned every stored object"
                    );
                })
            })
        });
        group.finish();
    }
    println!(
        "\nwatch delivery latency: {WATCHERS} watchers, {STORED} objects stored, {LATENCY_UPDATES} updates"
    );
    let latency = rt.block_on(watch_latency(&store_api));

    let create_rate = Mutex::new(Rate::default());
    let update_rate = Mutex::new(Rate::default());
    {
        let mut group = criterion.benchmark_group("configmaps");
        group
            .sampling_mode(SamplingMode::Flat)
            .throughput(Throughput::Elements(BATCH));
        let next = AtomicU64::new(0);
        group.bench_function(format!("create/{WRITERS}-writers"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                timed(iters, BATCH, &create_rate, |_| {
                    create_batch(&create_api, &next)
                })
            })
        });
        let round = AtomicU64::new(0);
        group.bench_function(format!("update/{WRITERS}-writers"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                timed(iters, BATCH, &update_rate, |_| {
                    update_batch(&update_api, round.fetch_add(1, Ordering::Relaxed))
                })
            })
        });
        group.finish();
    }
    criterion.final_summary();

    print_summary(
        &create_rate.lock().unwrap(),
        &update_rate.lock().unwrap(),
        &list_rate.lock().unwrap(),
        populate_elapsed,
        &latency,
    );
    rt.block_on(cluster.stop());
}
