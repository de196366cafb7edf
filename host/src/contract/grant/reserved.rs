//! Uses of a kind no grant, or only an explicit one, lets a plugin have:
//! kinds only the host writes ([`host_only`]) and children of the plugin's
//! own primary kind ([`owns_primary_granted`]).

use super::GroupKind;
use crate::contract::ResourceKind;

/// Why no plugin may write `kind` (as a child or as its primary), whatever
/// its grant says; `None` for every other kind.
///
/// Events (core v1 and `events.k8s.io`) are the host's recorder's: a plugin
/// reports through the events of its answer, which the host records about
/// the plugin's own primaries and attributes to the plugin. An Event written
/// as a child could name any object and any reporting controller — a
/// `CanaryPromoted` about a WasmPlugin, attributed to the host.
pub fn host_only(kind: &ResourceKind) -> Option<&'static str> {
    match (kind.group.as_str(), kind.kind.as_str()) {
        ("" | "events.k8s.io", "Event") => Some(
            "Events are the host's recorder's: a plugin reports events in its answer and the host records them about the plugin's primaries; no grant lets a plugin write Events",
        ),
        _ => None,
    }
}

/// True when `own` (a grant's `own` list; `None` is the restricted default)
/// lets a plugin return children of its own `primary` kind: only an entry
/// naming that group and kind exactly. Every such child is a primary the
/// plugin reconciles again, so one object can grow into any number; the
/// creation bounds (`spec.limits.creationsPerMinute`, `creationsTotal`)
/// hold the granted case.
pub fn owns_primary_granted(own: Option<&[GroupKind]>, primary: &ResourceKind) -> bool {
    own.is_some_and(|own| {
        own.iter()
            .any(|entry| entry.group == primary.group && entry.kind == primary.kind)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::Scope;

    fn kind(group: &str, kind: &str) -> ResourceKind {
        ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_ascii_lowercase()),
            scope: Scope::Namespaced,
        }
    }

    #[test]
    fn both_event_kinds_are_the_hosts_and_nothing_else_is() {
        for group in ["", "events.k8s.io"] {
            let why = host_only(&kind(group, "Event")).unwrap();
            assert!(why.contains("recorder"), "{why}");
        }
        for (group, k) in [("", "ConfigMap"), ("example.com", "Event"), ("", "Secret")] {
            assert_eq!(host_only(&kind(group, k)), None, "{group}/{k}");
        }
    }

    #[test]
    fn owning_the_primary_kind_needs_an_entry_naming_it_exactly() {
        let primary = kind("example.com", "Grower");
        assert!(!owns_primary_granted(None, &primary));
        let wildcard = [GroupKind::new("example.com", "*")];
        assert!(!owns_primary_granted(Some(&wildcard), &primary));
        let other = [GroupKind::new("other.com", "Grower")];
        assert!(!owns_primary_granted(Some(&other), &primary));
        let named = [GroupKind::new("example.com", "Grower")];
        assert!(owns_primary_granted(Some(&named), &primary));
    }
}
