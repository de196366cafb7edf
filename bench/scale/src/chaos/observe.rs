//! What the harness sees while the storm runs, from its own connection to
//! the API server (never through a replica's proxy): every WebApp's
//! generations, fencing marks and status, every shard Lease's terms, and
//! the API server's audit log of writes.
//!
//! Watch events feed [`Observations`] (shared, behind a mutex); the checks
//! in `check.rs` are pure functions over what it holds.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

use bench_scale::process::resource;
use bench_scale::webapp::webapp_resource;

/// The annotation carrying a primary's fencing token.
pub const TOKEN: &str = "wasm-operator.dev/fencing-token";
/// The annotation naming the Lease the token belongs to.
pub const TOKEN_LEASE: &str = "wasm-operator.dev/fencing-lease";

/// Serializes a [`SystemTime`] as RFC 3339 with microseconds.
pub mod system_time {
    use std::time::SystemTime;

    /// RFC 3339, UTC, microseconds.
    pub fn format(t: &SystemTime) -> String {
        chrono::DateTime::<chrono::Utc>::from(*t)
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
    }

    /// For `#[serde(with)]`.
    ///
    /// # Errors
    /// Never (the serializer's own errors only).
    pub fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(t))
    }

    /// Parses RFC 3339 (any offset, any precision).
    pub fn parse(text: &str) -> Option<SystemTime> {
        chrono::DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| SystemTime::from(t.with_timezone(&chrono::Utc)))
    }
}

/// A token that went backwards on one object for one Lease.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TokenRegression {
    /// `namespace/name`.
    pub object: String,
    /// The Lease the tokens belong to.
    pub lease: String,
    /// The token seen before.
    pub from: u64,
    /// The smaller token seen after.
    pub to: u64,
    /// When the harness saw it.
    #[serde(with = "system_time")]
    pub seen: SystemTime,
    /// The object's resourceVersion with the smaller token.
    pub resource_version: String,
}

/// One term of a shard Lease as the harness saw it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Term {
    /// The holder's identity (`None`: released).
    pub holder: Option<String>,
    /// The harness's replica index of the holder (identities start `chaos-r<i>_`).
    pub replica: Option<usize>,
    /// The Lease's `leaseTransitions` in this term.
    pub transitions: i64,
    /// The term's start: the Lease's `acquireTime` (set by the acquirer
    /// before its write), or when the harness saw a release.
    #[serde(with = "system_time")]
    pub start: SystemTime,
}

/// An update the harness made and when its generation was first observed.
#[derive(Debug, Clone)]
struct Expected {
    generation: i64,
    sent: SystemTime,
}

/// One answered expectation: an update (or create) and how long until the
/// object's status showed its generation.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Latency {
    /// When the harness's write returned.
    #[serde(with = "system_time")]
    pub sent: SystemTime,
    /// When the status showed the generation.
    #[serde(with = "system_time")]
    pub observed: SystemTime,
}

impl Latency {
    /// Seconds from the write to the status.
    pub fn seconds(&self) -> f64 {
        self.observed
            .duration_since(self.sent)
            .unwrap_or_default()
            .as_secs_f64()
    }
}

/// What the watches saw of one WebApp.
#[derive(Debug, Clone, Default)]
pub struct AppSeen {
    /// Its UID.
    pub uid: String,
    /// Fencing token per Lease, the highest seen.
    pub tokens: BTreeMap<String, u64>,
    /// The latest `status.observedGeneration` seen.
    pub observed: i64,
}

/// Everything observed so far.
#[derive(Debug, Default)]
pub struct Observations {
    /// By `namespace/name` (the harness never reuses a name).
    pub apps: HashMap<String, AppSeen>,
    /// Tokens that went backwards.
    pub regressions: Vec<TokenRegression>,
    /// Terms per shard, in the order seen.
    pub terms: BTreeMap<usize, Vec<Term>>,
    /// Shard Lease changes the watch skipped (`leaseTransitions` jumped by
    /// more than one): the terms between are unknown.
    pub skipped_terms: usize,
    /// Answered expectations.
    pub latencies: Vec<Latency>,
    /// Unanswered expectations by `namespace/name`.
    expected: HashMap<String, Expected>,
}

impl Observations {
    /// Expects `object`'s status to reach `generation` (written at `sent`).
    ///
    /// A generation the status already showed (an update that changed
    /// nothing, or a reconcile faster than the write's answer) counts as
    /// met when the write returned.
    pub fn expect(&mut self, object: &str, generation: i64, sent: SystemTime) {
        if self
            .apps
            .get(object)
            .is_some_and(|seen| seen.observed >= generation)
        {
            self.latencies.push(Latency {
                sent,
                observed: sent,
            });
            return;
        }
        self.expected
            .insert(object.to_owned(), Expected { generation, sent });
    }

    /// Drops the expectation of a deleted object.
    pub fn forget(&mut self, object: &str) {
        self.expected.remove(object);
    }

    /// Expectations not met yet.
    pub fn backlog(&self) -> usize {
        self.expected.len()
    }

    /// The oldest unmet expectation's write time.
    pub fn oldest_expected(&self) -> Option<SystemTime> {
        self.expected.values().map(|e| e.sent).min()
    }

    fn saw_app(&mut self, app: &DynamicObject, now: SystemTime) {
        let key = format!("{}/{}", app.namespace().unwrap_or_default(), app.name_any());
        let seen = self.apps.entry(key.clone()).or_default();
        seen.uid = app.uid().unwrap_or_default();
        let annotations = app.annotations();
        if let (Some(token), Some(lease)) = (
            annotations.get(TOKEN).and_then(|t| t.parse::<u64>().ok()),
            annotations.get(TOKEN_LEASE),
        ) {
            match seen.tokens.get(lease) {
                Some(&before) if token < before => self.regressions.push(TokenRegression {
                    object: key.clone(),
                    lease: lease.clone(),
                    from: before,
                    to: token,
                    seen: now,
                    resource_version: app.resource_version().unwrap_or_default(),
                }),
                Some(&before) if token == before => {}
                _ => {
                    seen.tokens.insert(lease.clone(), token);
                }
            }
        }
        let observed = app.data["status"]["observedGeneration"].as_i64();
        seen.observed = observed.unwrap_or(0);
        if let (Some(observed), Some(expected)) = (observed, self.expected.get(&key))
            && observed >= expected.generation
        {
            self.latencies.push(Latency {
                sent: expected.sent,
                observed: now,
            });
            self.expected.remove(&key);
        }
    }

    fn saw_lease(&mut self, lease: &DynamicObject, shards_prefix: &str, now: SystemTime) {
        let Some(shard) = lease
            .name_any()
            .strip_prefix(shards_prefix)
            .and_then(|s| s.parse::<usize>().ok())
        else {
            return;
        };
        let spec = &lease.data["spec"];
        let holder = spec["holderIdentity"]
            .as_str()
            .filter(|h| !h.is_empty())
            .map(str::to_owned);
        let transitions = spec["leaseTransitions"].as_i64().unwrap_or(0);
        let terms = self.terms.entry(shard).or_default();
        if let Some(last) = terms.last() {
            if last.holder == holder && last.transitions == transitions {
                return;
            }
            if transitions > last.transitions + 1 {
                self.skipped_terms += 1;
            }
        }
        let start = match &holder {
            Some(_) => spec["acquireTime"]
                .as_str()
                .and_then(system_time::parse)
                .unwrap_or(now),
            None => now,
        };
        terms.push(Term {
            replica: holder.as_deref().and_then(replica_of_identity),
            holder,
            transitions,
            start,
        });
    }
}

/// The replica index of a holder identity `chaos-r<i>_<suffix>`.
pub fn replica_of_identity(identity: &str) -> Option<usize> {
    identity
        .strip_prefix("chaos-r")?
        .split('_')
        .next()?
        .parse()
        .ok()
}

/// Shared observations.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<Observations>>);

impl Shared {
    /// The observations, locked.
    pub fn lock(&self) -> MutexGuard<'_, Observations> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Watches every WebApp (label `chaos=1`) and the shard Leases in
/// `lease_namespace` named `<lease_id>-shard-<i>` until aborted; watch
/// errors (an API server restart) are retried with the watcher's backoff.
pub fn watch(
    client: &Client,
    lease_namespace: &str,
    lease_id: &str,
    shared: &Shared,
) -> Vec<tokio::task::JoinHandle<()>> {
    let apps = Api::<DynamicObject>::all_with(client.clone(), &webapp_resource());
    let apps_shared = shared.clone();
    let app_task = tokio::spawn(async move {
        let config = watcher::Config::default().labels("chaos=1");
        let mut stream = watcher(apps, config).boxed();
        while let Some(event) = stream.next().await {
            let now = SystemTime::now();
            match event {
                Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)) => {
                    apps_shared.lock().saw_app(&app, now);
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    let leases = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        lease_namespace,
        &resource("coordination.k8s.io", "v1", "Lease", "leases"),
    );
    let prefix = format!("{lease_id}-shard-");
    let lease_shared = shared.clone();
    let lease_task = tokio::spawn(async move {
        let mut stream = watcher(leases, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let now = SystemTime::now();
            match event {
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    lease_shared.lock().saw_lease(&lease, &prefix, now);
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    });
    vec![app_task, lease_task]
}

/// One write in the API server's audit log.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Write {
    /// create, update, patch, delete, deletecollection.
    pub verb: String,
    /// The resource's plural (`webapps`, `deployments`, …).
    pub resource: String,
    /// `status`, or empty.
    pub subresource: String,
    /// The object's namespace (empty when cluster-scoped).
    pub namespace: String,
    /// The object's name (empty when the log does not say).
    pub name: String,
    /// The client's address.
    pub source: String,
    /// When the API server received it.
    #[serde(with = "system_time")]
    pub received: SystemTime,
    /// The response code.
    pub code: u16,
}

/// The writes of an audit log (kube-apiserver's or the devcluster's, one
/// JSON event per line; lines that do not parse, and stages other than
/// `ResponseComplete`, are skipped).
///
/// # Errors
/// When the file cannot be read.
pub fn read_audit(path: &Path) -> anyhow::Result<Vec<Write>> {
    let text = std::fs::read_to_string(path)?;
    let mut writes = Vec::new();
    for line in text.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if event["stage"].as_str() != Some("ResponseComplete") {
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or_default();
        if !matches!(
            verb,
            "create" | "update" | "patch" | "delete" | "deletecollection"
        ) {
            continue;
        }
        let Some(received) = event["requestReceivedTimestamp"]
            .as_str()
            .and_then(system_time::parse)
        else {
            continue;
        };
        let object = &event["objectRef"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        writes.push(Write {
            verb: verb.to_owned(),
            resource: text(&object["resource"]),
            subresource: text(&object["subresource"]),
            namespace: text(&object["namespace"]),
            name: text(&object["name"]),
            source: text(&event["sourceIPs"][0]),
            received,
            code: event["responseStatus"]["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(0),
        });
    }
    Ok(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(token: Option<(&str, &str)>, generation: i64, observed: Option<i64>) -> DynamicObject {
        let mut annotations = serde_json::Map::new();
        if let Some((t, l)) = token {
            annotations.insert(TOKEN.into(), t.into());
            annotations.insert(TOKEN_LEASE.into(), l.into());
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "WebApp",
            "metadata": {"name": "a", "namespace": "n", "uid": "u1", "generation": generation,
                         "annotations": annotations},
            "status": {"observedGeneration": observed},
        }))
        .unwrap()
    }

    #[test]
    fn a_token_going_backwards_for_the_same_lease_is_a_regression() {
        let mut obs = Observations::default();
        let now = SystemTime::now();
        obs.saw_app(&app(Some(("3", "ns/id-shard-1/u")), 1, None), now);
        obs.saw_app(&app(Some(("4", "ns/id-shard-1/u")), 1, None), now);
        // Another Lease's token is not comparable.
        obs.saw_app(&app(Some(("1", "ns/id-shard-2/u")), 1, None), now);
        assert!(obs.regressions.is_empty());
        obs.saw_app(&app(Some(("2", "ns/id-shard-1/u")), 1, None), now);
        assert_eq!(obs.regressions.len(), 1);
        assert_eq!((obs.regressions[0].from, obs.regressions[0].to), (4, 2));
    }

    #[test]
    fn an_expectation_is_met_by_its_generation_or_a_later_one() {
        let mut obs = Observations::default();
        let sent = SystemTime::now();
        obs.expect("n/a", 3, sent);
        obs.saw_app(&app(None, 3, Some(2)), sent);
        assert_eq!(obs.backlog(), 1);
        obs.saw_app(&app(None, 4, Some(4)), sent + Duration::from_secs(1));
        assert_eq!(obs.backlog(), 0);
        assert_eq!(obs.latencies.len(), 1);
        assert!((obs.latencies[0].seconds() - 1.0).abs() < 1e-6);
    }

    #[test]
    fn identities_name_their_replica() {
        assert_eq!(replica_of_identity("chaos-r2_5f3a"), Some(2));
        assert_eq!(replica_of_identity("other_1"), None);
    }

    #[test]
    fn audit_lines_of_both_servers_parse() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, concat!(
            r#"{"kind":"Event","stage":"ResponseComplete","verb":"patch","sourceIPs":["127.0.0.11"],"objectRef":{"resource":"webapps","namespace":"n","name":"a","subresource":"status"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-28T10:00:00.123456Z"}"#, "\n",
            r#"{"kind":"Event","stage":"RequestReceived","verb":"patch"}"#, "\n",
            r#"{"kind":"Event","stage":"ResponseComplete","verb":"get","requestReceivedTimestamp":"2026-11-28T10:00:00Z"}"#, "\n",
            "not json\n"
        )).unwrap();
        let writes = read_audit(&path).unwrap();
        assert_eq!(writes.len(), 1);
        assert_eq!(writes[0].source, "127.0.0.11");
        assert_eq!(writes[0].subresource, "status");
        assert_eq!(writes[0].code, 200);
    }
}
