//! Three replicas with `--shards 4`: the shard Leases spread 2/1/1, every
//! primary is reconciled by the holder of its shard and by no other
//! replica, a killed replica's shards move to the survivors (after their
//! Leases expire) and every object converges, a joining replica takes
//! shards from the others, and a terminated one releases its shards.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use serde_json::Value;
use wasm_operator::lease::shard_of;

use crate::replica::{
    DEADLINE, Launch, Replica, apply_webapp, holder, install_webapp_crd, lease, reconciled_token,
    sum, tail, transitions, webapps,
};
use crate::support;

const NS: &str = "default";
const SHARDS: usize = 4;

/// The replica name (the holder identity's prefix) of `lease`'s holder.
fn holder_prefix(lease: &Lease) -> Option<String> {
    let holder = holder(lease)?;
    holder.rsplit_once('_').map(|(name, _)| name.to_string())
}

/// Every shard Lease, by shard (`None`: absent).
async fn shard_leases(client: &Client, name: &str) -> Vec<Option<Lease>> {
    let mut leases = Vec::new();
    for shard in 0..SHARDS {
        leases.push(lease(client, NS, &format!("{name}-shard-{shard}")).await);
    }
    leases
}

/// Waits until every shard Lease is held by one of `names` and the number
/// of shards each holds is `spread` (sorted, most first); returns the
/// holder's name and the fencing token of each shard.
async fn wait_spread(
    client: &Client,
    name: &str,
    names: &[&str],
    spread: &[usize],
) -> Vec<(String, String)> {
    support::wait_until(
        &format!("the {SHARDS} shard Leases spread {spread:?} over {names:?}"),
        DEADLINE,
        || async {
            let mut shards = Vec::new();
            for lease in shard_leases(client, name).await {
                let lease = lease.ok_or("a shard Lease is missing")?;
                let holder = holder_prefix(&lease).ok_or("a shard Lease is released")?;
                if !names.contains(&holder.as_str()) {
                    return Err(format!("a shard is held by {holder}"));
                }
                shards.push((holder, transitions(&lease).to_string()));
            }
            let mut counts: BTreeMap<&str, usize> = names.iter().map(|n| (*n, 0)).collect();
            for (holder, _) in &shards {
                *counts.entry(holder.as_str()).or_default() += 1;
            }
            let mut now: Vec<usize> = counts.values().copied().collect();
            now.sort_unstable_by(|a, b| b.cmp(a));
            if now == spread {
                Ok(shards)
            } else {
                Err(format!("holders {shards:?}"))
            }
        },
    )
    .await
}

/// The reconciles `replica` ran per shard.
async fn reconciles_by_shard(replica: &Replica) -> Vec<f64> {
    let metrics = replica.metrics().await.unwrap_or_default();
    (0..SHARDS)
        .map(|shard| {
            sum(
                &metrics,
                &format!(
                    "wasm_operator_shard_reconciles_total{{plugin=\"webapp\",shard=\"{shard}\"}}"
                ),
            )
        })
        .collect()
}

/// The shard of WebApp `obj` (from its UID, as the host computes it).
fn shard_of_object(obj: &Value) -> usize {
    shard_of(obj.pointer("/metadata/uid").and_then(Value::as_str), SHARDS)
}

/// Waits until every WebApp of `names` was reconciled for its current
/// generation in the current term of its shard (its fencing token is the
/// shard Lease's); returns the shards that hold at least one of them.
async fn wait_converged(client: &Client, lease_name: &str, names: &[String]) -> BTreeSet<usize> {
    let api = webapps(client, NS);
    support::wait_until(
        &format!("{} WebApps reconciled by the holders of their shards", names.len()),
        DEADLINE,
        || async {
            let leases = shard_leases(client, lease_name).await;
            let mut used = BTreeSet::new();
            for name in names {
                let obj = support::get_json(&api, name)
                    .await
                    .ok_or(format!("no WebApp {name}"))?;
                let shard = shard_of_object(&obj);
                let expected = leases[shard]
                    .as_ref()
                    .map(|l| transitions(l).to_string())
                    .ok_or("a shard Lease is missing")?;
                let token = reconciled_token(&obj)
                    .map_err(|seen| format!("WebApp {name} (shard {shard}): {seen}, shard Lease's {expected}"))?;
                if token != expected {
                    return Err(format!(
                        "WebApp {name} (shard {shard}): fencing token {token}, shard Lease's {expected}"
                    ));
                }
                used.insert(shard);
            }
            Ok(used)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_with_four_shards_share_the_work_and_rebalance() {
    let cluster = support::start_cluster().await;
    let client = cluster.client();
    install_webapp_crd(&client).await;
    let dir = tempfile::tempdir().unwrap();
    let name = "lease-shards";
    let launch = |n| {
        Launch::new(n, cluster.kubeconfig_path(), NS, name, dir.path()).with_shards(SHARDS as u16)
    };
    let mut replicas: BTreeMap<&str, Replica> = ["a", "b", "c"]
        .into_iter()
        .map(|n| (n, Replica::start(&launch(n))))
        .collect();

    // Spread 2/1/1 before any object exists.
    let spread = wait_spread(&client, name, &["a", "b", "c"], &[2, 1, 1]).await;
    let mut objects: Vec<String> = (0..12).map(|i| format!("w{i:02}")).collect();
    for object in &objects {
        apply_webapp(&client, NS, object, 1).await;
    }
    let used = wait_converged(&client, name, &objects).await;

    // Exactly one replica reconciled each shard's objects: its holder.
    for (replica_name, replica) in &replicas {
        let by_shard = reconciles_by_shard(replica).await;
        for (shard, count) in by_shard.iter().enumerate() {
            let holds = spread[shard].0 == *replica_name;
            if holds && used.contains(&shard) {
                assert!(
                    *count > 0.0,
                    "{replica_name} holds shard {shard} but reconciled none of it"
                );
            }
            if !holds {
                assert_eq!(
                    *count,
                    0.0,
                    "{replica_name} reconciled objects of shard {shard}, held by {}:\n{}",
                    spread[shard].0,
                    tail(&replica.logs())
                );
            }
        }
        let (status, body) = replica.readyz().await.expect("a replica answers /readyz");
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("[+]shards holding shards"), "{body}");
        assert!(body.contains("3 replicas live"), "{body}");
    }

    // `wasm-operator shards` shows the same from the Leases.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_wasm-operator"))
        .args(["shards", "-n", NS, "--leader-election-id", name])
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .output()
        .expect("run wasm-operator shards");
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (shard, (holder, token)) in spread.iter().enumerate() {
        let line = table
            .lines()
            .find(|l| l.starts_with(&format!("{shard} ")))
            .unwrap_or_else(|| panic!("no line for shard {shard}:\n{table}"));
        assert!(
            line.contains(&format!(" {holder}_")) && line.contains(&format!(" {token} ")),
            "shard {shard} held by {holder} with token {token}:\n{table}"
        );
    }
    assert!(
        table.contains("replicas with a membership Lease: a_"),
        "{table}"
    );

    // kill -9 a replica holding two shards: they move to the survivors
    // once their Leases expire, and every object converges, including new
    // objects and changes in the dead replica's shards.
    let (victim, _) = spread
        .iter()
        .find(|(holder, _)| spread.iter().filter(|(h, _)| h == holder).count() == 2)
        .expect("one replica holds two shards")
        .clone();
    let survivors: Vec<&str> = ["a", "b", "c"]
        .into_iter()
        .filter(|n| *n != victim)
        .collect();
    replicas
        .get_mut(victim.as_str())
        .expect("the victim runs")
        .kill();
    let after_kill = wait_spread(&client, name, &survivors, &[2, 2]).await;
    for shard in 0..SHARDS {
        if spread[shard].0 == victim {
            assert!(
                after_kill[shard].1.parse::<i32>().unwrap()
                    > spread[shard].1.parse::<i32>().unwrap(),
                "shard {shard} moved with a new fencing token: {after_kill:?}"
            );
        }
    }
    objects.extend((12..16).map(|i| format!("w{i:02}")));
    for object in &objects {
        apply_webapp(&client, NS, object, 2).await;
    }
    wait_converged(&client, name, &objects).await;

    // A replica joins: the one holding two shards gives one up, the
    // newcomer takes it; the objects converge again.
    replicas.insert("d", Replica::start(&launch("d")));
    let mut with_d = survivors.clone();
    with_d.push("d");
    let after_join = wait_spread(&client, name, &with_d, &[2, 1, 1]).await;
    let d_shards: Vec<usize> = (0..SHARDS).filter(|s| after_join[*s].0 == "d").collect();
    assert_eq!(d_shards.len(), 1, "{after_join:?}");
    for object in &objects {
        apply_webapp(&client, NS, object, 3).await;
    }
    let used = wait_converged(&client, name, &objects).await;
    let d = &replicas["d"];
    let by_shard = reconciles_by_shard(d).await;
    for (shard, count) in by_shard.iter().enumerate() {
        if d_shards.contains(&shard) && used.contains(&shard) {
            assert!(
                *count > 0.0,
                "d holds shard {shard} but reconciled none of it"
            );
        }
        if !d_shards.contains(&shard) {
            assert_eq!(
                *count,
                0.0,
                "d reconciled shard {shard}:\n{}",
                tail(&d.logs())
            );
        }
    }

    // SIGTERM: d releases its shard at once (no expiry), another takes it.
    let mut d = replicas.remove("d").expect("d runs");
    assert!(d.terminate().await, "d exits cleanly:\n{}", d.logs());
    for shard in &d_shards {
        let now = lease(&client, NS, &format!("{name}-shard-{shard}"))
            .await
            .expect("the shard Lease");
        assert_ne!(
            holder_prefix(&now).as_deref(),
            Some("d"),
            "the terminated replica still holds shard {shard}:\n{}",
            d.logs()
        );
    }
    wait_spread(&client, name, &survivors, &[2, 2]).await;
    for replica in replicas.values() {
        assert_eq!(
            replica.reconciles("error").await.unwrap_or_default(),
            0.0,
            "{}",
            tail(&replica.logs())
        );
    }
}
