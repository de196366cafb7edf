//! The invariants, as pure functions of what was observed: no write from a
//! replica outside its term ([`stale_writes`]), and nothing lost, doubled,
//! orphaned or stuck at the end ([`final_state`]). Unit-tested here; the
//! harness only gathers their inputs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use kube::ResourceExt;
use kube::api::DynamicObject;

use bench_scale::webapp::app_converged;

use crate::observe::{Term, Write};
use crate::proxy::Delay;

/// The shard of a primary with `uid` among `shards`: FNV-1a (64 bit) of the
/// UID modulo the count. It must equal the host's
/// `wasm_operator::lease::assign::shard_of` (pinned by the same known values
/// in both crates' unit tests); the harness does not link the host, so that
/// a bug there cannot hide one here.
pub fn shard_of(uid: &str, shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in uid.as_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    usize::try_from(hash % shards as u64).unwrap_or(0)
}

/// How a replica's write relates to its terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Verdict {
    /// Sent while the replica held the object's shard.
    InTerm,
    /// Received after the term ended, but the replica's link held bytes it
    /// sent before the term ended and delivered them just then: a request
    /// already sent, the documented limit of fencing.
    DelayedInFlight,
    /// Received after the term ended with no delay to explain it: a stale
    /// write.
    Stale,
    /// The object's shard is unknown (not a chaos object, or an object the
    /// watch never saw), or no term was observed yet.
    Unattributed,
}

/// One replica write judged.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Judged {
    /// The replica.
    pub replica: usize,
    /// The write.
    pub write: Write,
    /// The shard of its object (`None`: cluster-wide work, shard 0's).
    pub shard: usize,
    /// The verdict.
    pub verdict: Verdict,
    /// The holder at the time (replica index), if known.
    pub holder: Option<usize>,
}

/// The writes of the replicas, judged against the shard terms.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StaleWrites {
    /// Writes by verdict.
    pub counts: BTreeMap<String, usize>,
    /// Writes by replica.
    pub by_replica: BTreeMap<usize, usize>,
    /// The stale ones (every one), and the first 20 delayed in flight and unattributed.
    pub notable: Vec<Judged>,
}

/// The holder (replica) of `shard` at `t`, and when the next term began.
fn holder_at(terms: &[Term], t: SystemTime) -> Option<(Option<usize>, Option<SystemTime>)> {
    let index = terms.iter().rposition(|term| term.start <= t)?;
    Some((terms[index].replica, terms.get(index + 1).map(|n| n.start)))
}

/// The object a write is about, as `namespace/name` of its WebApp: children
/// are named after their WebApp, and Events after the object they are about
/// (`<name>.<suffix>`).
fn primary_of(write: &Write) -> String {
    let name = match write.resource.as_str() {
        "events" => write.name.split('.').next().unwrap_or_default(),
        _ => write.name.as_str(),
    };
    format!("{}/{}", write.namespace, name)
}

/// How a write is tied to a replica and an object.
pub struct Attribution<'a> {
    /// The namespace of the election's own Leases and their Events (skipped).
    pub election_namespace: &'a str,
    /// Whether a write is cluster-wide work (shard 0's holder's).
    pub cluster_wide: &'a dyn Fn(&Write) -> bool,
    /// The replica of an audit log source address (`None`: the harness).
    pub replica_of_source: &'a dyn Fn(&str) -> Option<usize>,
    /// The UID of the WebApp `namespace/name`.
    pub uid_of: &'a dyn Fn(&str) -> Option<String>,
}

/// Judges every write from a replica (`replica_of_source` maps the audit
/// log's source address to one; other sources are the harness's) against
/// the terms of the object's shard. Lease writes, and every write in
/// `election_namespace` (the Leases' Events), are the election itself and
/// are skipped. A write to a WasmPlugin is cluster-wide work, done by
/// shard 0's holder. `delays[r]` are replica `r`'s late deliveries.
pub fn stale_writes(
    writes: &[Write],
    rules: &Attribution<'_>,
    terms: &BTreeMap<usize, Vec<Term>>,
    shards: usize,
    delays: &[Vec<Delay>],
) -> StaleWrites {
    let mut out = StaleWrites::default();
    for write in writes {
        let Some(replica) = (rules.replica_of_source)(&write.source) else {
            continue;
        };
        if write.resource == "leases" || write.namespace == rules.election_namespace {
            continue;
        }
        *out.by_replica.entry(replica).or_default() += 1;
        let shard = if (rules.cluster_wide)(write) {
            Some(0)
        } else {
            (rules.uid_of)(&primary_of(write)).map(|uid| shard_of(&uid, shards))
        };
        let (verdict, holder, shard) = match shard.and_then(|s| {
            terms
                .get(&s)
                .and_then(|t| holder_at(t, write.received))
                .map(|h| (s, h))
        }) {
            None => (Verdict::Unattributed, None, shard.unwrap_or(0)),
            Some((s, (holder, _))) if holder == Some(replica) => (Verdict::InTerm, holder, s),
            Some((s, (holder, _))) => {
                // When did this replica's last term of the shard end?
                let ended = terms.get(&s).and_then(|t| {
                    let mine = t.iter().rposition(|term| {
                        term.start <= write.received && term.replica == Some(replica)
                    })?;
                    t.get(mine + 1).map(|next| next.start)
                });
                let delayed = ended.is_some_and(|ended| {
                    delays.get(replica).is_some_and(|ds| {
                        ds.iter().any(|d| {
                            d.sent < ended
                                && within(d.delivered, write.received, Duration::from_secs(1))
                        })
                    })
                });
                let verdict = if delayed {
                    Verdict::DelayedInFlight
                } else {
                    Verdict::Stale
                };
                (verdict, holder, s)
            }
        };
        let key = serde_json::to_value(verdict)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let count = out.counts.entry(key).or_default();
        *count += 1;
        let notable = verdict == Verdict::Stale || (verdict != Verdict::InTerm && *count <= 20);
        if notable {
            out.notable.push(Judged {
                replica,
                write: write.clone(),
                shard,
                verdict,
                holder,
            });
        }
    }
    out
}

fn within(a: SystemTime, b: SystemTime, tolerance: Duration) -> bool {
    let gap = a
        .duration_since(b)
        .or_else(|_| b.duration_since(a))
        .unwrap_or_default();
    gap <= tolerance
}

/// What the cluster holds at the end, against what the harness did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct FinalState {
    /// WebApps now.
    pub apps: usize,
    /// WebApps whose status, Deployment and Service match their generation.
    pub converged: usize,
    /// Created (and not deleted) by the harness, but absent.
    pub lost: Vec<String>,
    /// Deleted by the harness, but present and not terminating.
    pub undeleted: Vec<String>,
    /// Terminating (a deletion timestamp) at the end, with their finalizers.
    pub stuck_terminating: Vec<String>,
    /// WebApps owning more than one Deployment or Service.
    pub doubled: Vec<String>,
    /// Deployments and Services owned by a WebApp that does not exist.
    pub orphaned: Vec<String>,
    /// WebApps not converged (first 20).
    pub not_converged: Vec<String>,
}

impl FinalState {
    /// Whether nothing is lost, doubled, orphaned, stuck or unconverged.
    pub fn holds(&self) -> bool {
        self.lost.is_empty()
            && self.undeleted.is_empty()
            && self.stuck_terminating.is_empty()
            && self.doubled.is_empty()
            && self.orphaned.is_empty()
            && self.converged == self.apps
    }
}

fn key(o: &DynamicObject) -> String {
    format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any())
}

/// Compares the cluster's WebApps and their children (every namespace of
/// the run) with `alive` (created and not deleted) and `deleted` (deleted
/// by the harness, the delete answered with success).
pub fn final_state(
    apps: &[DynamicObject],
    deployments: &[DynamicObject],
    services: &[DynamicObject],
    alive: &BTreeSet<String>,
    deleted: &BTreeSet<String>,
) -> FinalState {
    let by_key = |objs: &[DynamicObject]| -> HashMap<String, BTreeMap<String, DynamicObject>> {
        let mut m: HashMap<String, BTreeMap<String, DynamicObject>> = HashMap::new();
        for o in objs {
            m.entry(o.namespace().unwrap_or_default())
                .or_default()
                .insert(o.name_any(), o.clone());
        }
        m
    };
    let ds = by_key(deployments);
    let ss = by_key(services);
    let empty = BTreeMap::new();
    let present: BTreeSet<String> = apps.iter().map(key).collect();
    let uids: BTreeSet<String> = apps.iter().filter_map(ResourceExt::uid).collect();
    let mut state = FinalState {
        apps: apps.len(),
        ..FinalState::default()
    };
    for app in apps {
        let ns = app.namespace().unwrap_or_default();
        let k = key(app);
        if app.metadata.deletion_timestamp.is_some() {
            state
                .stuck_terminating
                .push(format!("{k} (finalizers {:?})", app.finalizers()));
            continue;
        }
        if deleted.contains(&k) {
            state.undeleted.push(k.clone());
        }
        if app_converged(
            app,
            ds.get(&ns).unwrap_or(&empty),
            ss.get(&ns).unwrap_or(&empty),
        ) {
            state.converged += 1;
        } else if state.not_converged.len() < 20 {
            state.not_converged.push(k);
        }
    }
    // A terminating app is neither converged nor unconverged: it is stuck.
    state.apps -= state.stuck_terminating.len();
    state.lost = alive.difference(&present).cloned().collect();
    // By the list a child came from: list items carry no kind on
    // kube-apiserver (only the list does).
    let mut owned: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for (kind, children) in [("Deployment", deployments), ("Service", services)] {
        for child in children {
            for owner in child
                .owner_references()
                .iter()
                .filter(|o| o.kind == "WebApp")
            {
                if uids.contains(&owner.uid) {
                    *owned.entry((owner.uid.clone(), kind)).or_default() += 1;
                } else {
                    state.orphaned.push(key(child));
                }
            }
        }
    }
    for ((uid, kind), count) in owned {
        if count > 1 {
            state
                .doubled
                .push(format!("WebApp uid {uid}: {count} {kind}s"));
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_of_matches_the_hosts_pinned_values() {
        // The values host/src/lease/assign.rs pins: FNV-1a 64 of "" is the
        // offset basis, of "a" 0xaf63dc4c8601ec8c.
        assert_eq!(
            shard_of("", 1 << 20),
            (0xcbf2_9ce4_8422_2325_u64 % (1 << 20)) as usize
        );
        assert_eq!(
            shard_of("a", 1_000_003),
            (0xaf63_dc4c_8601_ec8c_u64 % 1_000_003) as usize
        );
        assert_eq!(shard_of("anything", 1), 0);
    }

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s)
    }

    fn term(replica: Option<usize>, start: u64, transitions: i64) -> Term {
        Term {
            holder: replica.map(|r| format!("chaos-r{r}_x")),
            replica,
            transitions,
            start: at(start),
        }
    }

    fn write(name: &str, source: &str, received: u64) -> Write {
        Write {
            verb: "patch".into(),
            resource: "deployments".into(),
            subresource: String::new(),
            namespace: "n".into(),
            name: name.into(),
            source: source.into(),
            received: at(received),
            code: 200,
        }
    }

    fn judge(writes: &[Write], delays: &[Vec<Delay>]) -> StaleWrites {
        // Replica 0 held shard 0 from 10 s, replica 1 took it at 30 s.
        let terms = BTreeMap::from([(0, vec![term(Some(0), 10, 0), term(Some(1), 30, 1)])]);
        let rules = Attribution {
            election_namespace: "election",
            cluster_wide: &|w: &Write| w.resource == "wasmplugins",
            replica_of_source: &|s: &str| s.strip_prefix("127.0.0.1").and_then(|r| r.parse().ok()),
            uid_of: &|_: &str| Some("uid".into()),
        };
        stale_writes(writes, &rules, &terms, 1, delays)
    }

    #[test]
    fn a_write_after_the_successor_acquired_is_stale_unless_delayed_in_flight() {
        let writes = [
            write("a", "127.0.0.10", 20),
            write("a", "127.0.0.10", 31),
            write("a", "127.0.0.11", 32),
            write("a", "127.0.0.1", 33),
        ];
        let judged = judge(&writes, &[vec![], vec![]]);
        assert_eq!(judged.counts.get("inTerm"), Some(&2));
        assert_eq!(judged.counts.get("stale"), Some(&1));
        assert_eq!(judged.notable[0].write.received, at(31));
        // The harness's own write (127.0.0.1) is not judged.
        assert_eq!(judged.by_replica.values().sum::<usize>(), 3);

        // Sent at 29 s (before the successor's term), held by a partition
        // and delivered at 31 s: in flight.
        let delays = vec![
            vec![Delay {
                sent: at(29),
                delivered: at(31),
            }],
            vec![],
        ];
        let judged = judge(&writes, &delays);
        assert_eq!(judged.counts.get("delayedInFlight"), Some(&1));
        assert_eq!(judged.counts.get("stale"), None);
    }

    #[test]
    fn a_write_before_any_term_or_of_an_unknown_object_is_unattributed() {
        let judged = judge(&[write("a", "127.0.0.10", 5)], &[]);
        assert_eq!(judged.counts.get("unattributed"), Some(&1));
    }

    fn obj(kind: &str, name: &str, uid: &str, owner: Option<&str>, replicas: i64) -> DynamicObject {
        let mut v = serde_json::json!({
            "apiVersion": if kind == "WebApp" { "example.com/v1" } else if kind == "Deployment" { "apps/v1" } else { "v1" },
            "kind": kind,
            "metadata": {"name": name, "namespace": "n", "uid": uid, "generation": 2},
            "spec": {"replicas": replicas},
        });
        if kind == "WebApp" {
            v["metadata"]["finalizers"] = serde_json::json!(["wasm-operator.dev/cleanup"]);
            v["status"] = serde_json::json!({"observedGeneration": 2});
        }
        if let Some(owner) = owner {
            v["metadata"]["ownerReferences"] = serde_json::json!([{
                "apiVersion": "example.com/v1", "kind": "WebApp", "name": name, "uid": owner
            }]);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_final_state_names_lost_doubled_orphaned_and_undeleted_objects() {
        let apps = [
            obj("WebApp", "a", "ua", None, 2),
            obj("WebApp", "b", "ub", None, 2),
        ];
        let mut deployments = [
            obj("Deployment", "a", "d1", Some("ua"), 2),
            obj("Deployment", "a-copy", "d2", Some("ua"), 2),
            obj("Deployment", "gone", "d3", Some("ugone"), 2),
        ];
        let mut services = [obj("Service", "a", "s1", Some("ua"), 0)];
        // kube-apiserver's list items carry no kind: a Deployment and a
        // Service of one WebApp are not two of a kind.
        for child in deployments.iter_mut().chain(services.iter_mut()) {
            child.types = None;
        }
        let alive = BTreeSet::from(["n/a".to_owned(), "n/c".to_owned()]);
        let deleted = BTreeSet::from(["n/b".to_owned()]);
        let state = final_state(&apps, &deployments, &services, &alive, &deleted);
        assert_eq!(state.converged, 1, "{state:?}");
        assert_eq!(state.lost, vec!["n/c"]);
        assert_eq!(state.undeleted, vec!["n/b"]);
        assert_eq!(state.orphaned, vec!["n/gone"]);
        assert_eq!(state.doubled, vec!["WebApp uid ua: 2 Deployments"]);
        assert!(!state.holds());
    }
}
