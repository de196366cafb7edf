//! The namespaces the host serves (`run -n/--namespace`, `-A`): a second
//! bound beside each plugin's grant. The grant is the ceiling the cluster
//! operator sets per plugin; the scope narrows every plugin of one host at
//! once (a team's host serving only its namespaces). A namespace is served
//! only when both allow it. Pure: the gate consults it
//! ([`crate::contract::HostObjects::grants_namespace`]).

use std::collections::BTreeSet;

/// Which namespaces the host serves, whatever the grants say.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum WatchScope {
    /// Every namespace (`-A`, or neither flag): the grants alone decide.
    #[default]
    AllNamespaces,
    /// Only these namespaces (`-n`, repeatable); never empty.
    Namespaces(BTreeSet<String>),
}

impl WatchScope {
    /// The scope the flags describe: `namespaces` from `-n` (empty: every
    /// namespace, as `-A` says explicitly).
    pub fn from_flags(namespaces: &[String]) -> WatchScope {
        let named: BTreeSet<String> = namespaces
            .iter()
            .map(|n| n.trim())
            .filter(|n| !n.is_empty())
            .map(str::to_string)
            .collect();
        if named.is_empty() {
            WatchScope::AllNamespaces
        } else {
            WatchScope::Namespaces(named)
        }
    }

    /// True when objects in `namespace` are within the scope.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            WatchScope::AllNamespaces => true,
            WatchScope::Namespaces(named) => named.contains(namespace),
        }
    }

    /// One line for people: the namespaces served.
    pub fn describe(&self) -> String {
        match self {
            WatchScope::AllNamespaces => "every namespace".to_string(),
            WatchScope::Namespaces(named) => format!(
                "namespaces [{}]",
                named
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::WatchScope;

    #[test]
    fn named_namespaces_narrow_and_no_names_mean_every_namespace() {
        let scope = WatchScope::from_flags(&["team-a".into(), "team-b".into(), "team-a".into()]);
        assert!(scope.contains("team-a") && scope.contains("team-b"));
        assert!(!scope.contains("team-c") && !scope.contains("default"));
        assert_eq!(scope.describe(), "namespaces [team-a, team-b]");
        let all = WatchScope::from_flags(&[]);
        assert_eq!(all, WatchScope::AllNamespaces);
        assert!(all.contains("kube-system"));
        assert_eq!(
            WatchScope::from_flags(&[" ".into()]),
            WatchScope::AllNamespaces
        );
    }
}
