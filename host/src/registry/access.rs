//! What one plugin's controller could not reach: lists, watches and writes
//! the API server refused (403), and the primaries its grant leaves out.
//! The controller publishes it; the WasmPlugin status and `/readyz` show it
//! (a plugin whose RBAC is missing must not look healthy).

use std::collections::BTreeMap;
use std::sync::Mutex;

use crate::util::lock;

/// Objects named in `status.outsideGrant.examples`.
pub const MAX_OUTSIDE_GRANT_EXAMPLES: usize = 5;

/// The primaries a plugin's grant excludes: how many, and a few of them
/// (`namespace/name`, sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutsideGrant {
    /// Primaries in namespaces the grant does not allow.
    pub count: usize,
    /// Up to [`MAX_OUTSIDE_GRANT_EXAMPLES`] of them, sorted.
    pub examples: Vec<String>,
}

/// Counts the `(namespace, name)` pairs whose namespace `allowed` refuses
/// and names the first [`MAX_OUTSIDE_GRANT_EXAMPLES`] in sorted order.
/// Cluster-scoped objects (no namespace) are never outside a namespace grant.
pub fn outside_grant<'a>(
    objects: impl IntoIterator<Item = (Option<&'a str>, &'a str)>,
    allowed: impl Fn(&str) -> bool,
) -> OutsideGrant {
    let mut excluded: Vec<String> = objects
        .into_iter()
        .filter_map(|(namespace, name)| {
            let namespace = namespace?;
            (!allowed(namespace)).then(|| format!("{namespace}/{name}"))
        })
        .collect();
    excluded.sort();
    let count = excluded.len();
    excluded.truncate(MAX_OUTSIDE_GRANT_EXAMPLES);
    OutsideGrant {
        count,
        examples: excluded,
    }
}

/// What a plugin's controller could not reach, as the status shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessReport {
    /// The API server's messages of refused lists, watches and writes
    /// (each names the verb, the resource and the identity), sorted.
    pub forbidden: Vec<String>,
    /// The primaries the grant excludes.
    pub outside_grant: OutsideGrant,
}

#[derive(Debug, Default)]
struct State {
    /// Per cache (`apiVersion Kind`): the refused list or watch.
    reads: BTreeMap<String, String>,
    /// Per primary (its reconcile's key): the refused write.
    writes: BTreeMap<String, String>,
    outside_grant: OutsideGrant,
}

/// The live access state of one plugin, shared by its controller (which
/// records) and its WasmPlugin's worker (which shows it).
///
/// # Guarantees
///
/// A refused list or watch is replaced at each publication of the
/// controller's caches, so it clears once the watcher's retries succeed; a
/// refused write clears at the next successful reconcile of its primary.
#[derive(Debug, Default)]
pub struct PluginAccess {
    state: Mutex<State>,
}

impl PluginAccess {
    /// The refused lists and watches now, per cache (replaces the last).
    pub fn set_forbidden_reads(&self, reads: BTreeMap<String, String>) {
        lock(&self.state).reads = reads;
    }

    /// A write of the reconcile of `primary` (its key) was refused with
    /// `message` (403).
    pub fn write_forbidden(&self, primary: &str, message: String) {
        lock(&self.state)
            .writes
            .insert(primary.to_string(), message);
    }

    /// A reconcile of `primary` succeeded: a refusal recorded for it heals.
    pub fn write_allowed(&self, primary: &str) {
        let mut state = lock(&self.state);
        if !state.writes.is_empty() {
            state.writes.remove(primary);
        }
    }

    /// The primaries the grant excludes now (replaces the last count).
    pub fn set_outside_grant(&self, outside: OutsideGrant) {
        lock(&self.state).outside_grant = outside;
    }

    /// What is refused and excluded now.
    pub fn report(&self) -> AccessReport {
        let state = lock(&self.state);
        let mut forbidden: Vec<String> = state
            .reads
            .values()
            .chain(state.writes.values())
            .cloned()
            .collect();
        forbidden.sort();
        forbidden.dedup();
        AccessReport {
            forbidden,
            outside_grant: state.outside_grant.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_grant_counts_every_excluded_object_and_names_a_few_sorted() {
        let objects = [
            (Some("team-a"), "kept"),
            (Some("default"), "c"),
            (Some("default"), "a"),
            (None, "cluster-wide"),
            (Some("other"), "b"),
            (Some("default"), "d"),
            (Some("default"), "e"),
            (Some("default"), "f"),
            (Some("default"), "g"),
        ];
        let outside = outside_grant(objects, |ns| ns == "team-a");
        assert_eq!(outside.count, 7);
        assert_eq!(
            outside.examples,
            vec![
                "default/a",
                "default/c",
                "default/d",
                "default/e",
                "default/f"
            ]
        );
        let none = outside_grant(objects, |_| true);
        assert_eq!(none, OutsideGrant::default());
    }

    #[test]
    fn a_refused_read_or_write_heals_when_it_succeeds() {
        let access = PluginAccess::default();
        access.set_forbidden_reads(BTreeMap::from([(
            "example.com/v1 StaticSite".to_string(),
            "cannot list".to_string(),
        )]));
        access.write_forbidden("v1 ConfigMap", "cannot patch".into());
        assert_eq!(
            access.report().forbidden,
            vec!["cannot list", "cannot patch"]
        );
        access.set_forbidden_reads(BTreeMap::new());
        access.write_allowed("v1 Secret");
        assert_eq!(access.report().forbidden, vec!["cannot patch"]);
        access.write_allowed("v1 ConfigMap");
        assert!(access.report().forbidden.is_empty());
    }
}
