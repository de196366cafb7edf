//! `wasm-operator shards`: which replica holds which shard, read from the
//! shard Leases (`<leader-election-id>-shard-<i>`) and the replicas'
//! membership Leases (`<leader-election-id>-member-…`) with a kubeconfig
//! only.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::CliError;

/// `wasm-operator shards`
#[derive(Debug, Args)]
pub struct ShardsArgs {
    /// The Leases' namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long = "namespace")]
    pub namespace: Option<String>,
    /// The replicas' --leader-election-id.
    #[arg(long, value_name = "NAME", default_value = crate::lease::DEFAULT_LEASE_NAME)]
    pub leader_election_id: String,
    /// Path of the kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
}

/// Why `shards` failed.
#[derive(Debug, thiserror::Error)]
pub enum ShardsError {
    /// The Leases could not be listed.
    #[error(
        "cannot list the Leases in namespace {namespace}: {source}; check the namespace (-n) and that you may list coordination.k8s.io leases there"
    )]
    List {
        /// The namespace.
        namespace: String,
        /// The API server's answer.
        #[source]
        source: kube::Error,
    },
}

/// Prints the shard table.
///
/// # Errors
///
/// [`CliError`] when the cluster cannot be reached or the Leases listed.
pub async fn shards(args: ShardsArgs) -> Result<(), CliError> {
    let client =
        super::connect::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let leases = Api::<Lease>::namespaced(client, &namespace)
        .list(&ListParams::default())
        .await
        .map_err(|source| ShardsError::List {
            namespace: namespace.clone(),
            source,
        })?
        .items;
    println!(
        "{}",
        render(&namespace, &args.leader_election_id, &leases).trim_end()
    );
    Ok(())
}

/// The table of the shard Leases of the replicas electing with `id`, and
/// the replicas with a membership Lease.
pub fn render(namespace: &str, id: &str, leases: &[Lease]) -> String {
    let shard_prefix = format!("{id}-shard-");
    let member_prefix = format!("{id}-member-");
    let mut shards: Vec<(usize, &Lease)> = leases
        .iter()
        .filter_map(|l| {
            let index = l.name_any().strip_prefix(&shard_prefix)?.parse().ok()?;
            Some((index, l))
        })
        .collect();
    shards.sort_by_key(|(index, _)| *index);
    let mut out = String::new();
    if shards.is_empty() {
        let _ = writeln!(
            out,
            "no shard Leases {id}-shard-N in namespace {namespace}: the replicas run without --shards, or with another --leader-election-id"
        );
        return out;
    }
    let _ = writeln!(
        out,
        "{:<6} {:<40} {:<40} {:<14} RENEWED",
        "SHARD", "LEASE", "HOLDER", "FENCING TOKEN"
    );
    for (index, lease) in &shards {
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec
            .holder_identity
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "(released)".to_string());
        let renewed = spec
            .renew_time
            .map_or_else(|| "-".to_string(), |t| t.0.to_string());
        let _ = writeln!(
            out,
            "{index:<6} {:<40} {holder:<40} {:<14} {renewed}",
            format!("{namespace}/{}", lease.name_any()),
            spec.lease_transitions.unwrap_or(0),
        );
    }
    let mut members: Vec<String> = leases
        .iter()
        .filter(|l| l.name_any().starts_with(&member_prefix))
        .filter_map(|l| l.spec.as_ref()?.holder_identity.clone())
        .collect();
    members.sort();
    let _ = writeln!(
        out,
        "replicas with a membership Lease: {}",
        if members.is_empty() {
            "none".to_string()
        } else {
            members.join(", ")
        }
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(name: &str, holder: &str, transitions: i32) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ops"},
            "spec": {"holderIdentity": holder, "leaseTransitions": transitions},
        }))
        .unwrap()
    }

    #[test]
    fn prints_each_shards_holder_and_token_in_shard_order() {
        let leases = [
            lease("op-shard-1", "b_2", 4),
            lease("op-shard-0", "a_1", 3),
            lease("op-shard-10", "", 0),
            lease("op-member-00ff", "a_1", 0),
            lease("op-member-0aff", "b_2", 0),
            lease("other", "x_9", 1),
        ];
        let out = render("ops", "op", &leases);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("SHARD"), "{out}");
        assert!(
            lines[1].starts_with("0 ")
                && lines[1].contains("ops/op-shard-0")
                && lines[1].contains("a_1"),
            "{out}"
        );
        assert!(
            lines[2].starts_with("1 ") && lines[2].contains("b_2") && lines[2].contains(" 4 "),
            "{out}"
        );
        assert!(
            lines[3].starts_with("10 ") && lines[3].contains("(released)"),
            "{out}"
        );
        assert_eq!(lines[4], "replicas with a membership Lease: a_1, b_2");
        assert!(!out.contains("x_9"));
        assert!(render("ops", "none", &leases).contains("no shard Leases"));
    }
}
