//! The list and map semantics Kubernetes declares in its OpenAPI metadata
//! (`x-kubernetes-patch-merge-key`, `x-kubernetes-list-type`,
//! `x-kubernetes-map-type`), reduced to a table keyed by field name.
//!
//! The devcluster has no OpenAPI document for built-in kinds, so both strategic
//! merge patch and server-side apply decide by the name of the field holding a
//! list (and, for `ports`, the field around it). The table covers the lists
//! operators rely on; every other list is atomic, as it is for a CRD without
//! list-type markers.

/// How a list field merges and how its items are owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Objects identified by one key field (`containers` by `name`).
    Map(&'static str),
    /// Scalars treated as a set (`finalizers`).
    Set,
    /// Replaced and owned as a whole.
    Atomic,
}

/// Fields that hold containers: their `ports` are keyed by `containerPort`.
const CONTAINER_LISTS: &[&str] = &["containers", "initContainers", "ephemeralContainers"];

/// The kind of the list held by field `field`, where `parent` is the name of
/// the field holding the object that contains `field` (None at the root).
pub(crate) fn list_kind(parent: Option<&str>, field: &str) -> ListKind {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "env"
        | "imagePullSecrets"
        | "resourceClaims"
        | "schedulingGates"
        | "secrets" => ListKind::Map("name"),
        "volumeMounts" => ListKind::Map("mountPath"),
        "volumeDevices" => ListKind::Map("devicePath"),
        "ports" if parent.is_some_and(|p| CONTAINER_LISTS.contains(&p)) => {
            ListKind::Map("containerPort")
        }
        "ports" => ListKind::Map("port"),
        "conditions" => ListKind::Map("type"),
        "ownerReferences" => ListKind::Map("uid"),
        "hostAliases" => ListKind::Map("ip"),
        "topologySpreadConstraints" => ListKind::Map("topologyKey"),
        "finalizers" => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// Maps Kubernetes declares atomic (`+mapType=atomic` / `+structType=atomic`):
/// replaced and owned as a whole by server-side apply.
pub(crate) fn is_atomic_map(field: &str) -> bool {
    matches!(
        field,
        "selector"
            | "podSelector"
            | "namespaceSelector"
            | "labelSelector"
            | "nodeSelector"
            | "secretKeyRef"
            | "configMapKeyRef"
            | "fieldRef"
            | "resourceFieldRef"
            | "secretRef"
            | "configMapRef"
    )
}

/// Items of these associative lists are atomic structs (`ownerReferences`,
/// `imagePullSecrets`): owned as a whole, encoded as `k:{…}: {}`.
pub(crate) fn atomic_items(list_field: &str) -> bool {
    matches!(list_field, "ownerReferences" | "imagePullSecrets")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_key_depends_on_the_enclosing_field() {
        assert_eq!(
            list_kind(Some("containers"), "ports"),
            ListKind::Map("containerPort")
        );
        assert_eq!(
            list_kind(Some("initContainers"), "ports"),
            ListKind::Map("containerPort")
        );
        assert_eq!(list_kind(Some("spec"), "ports"), ListKind::Map("port"));
    }

    #[test]
    fn known_and_unknown_lists() {
        assert_eq!(list_kind(Some("spec"), "containers"), ListKind::Map("name"));
        assert_eq!(list_kind(Some("metadata"), "finalizers"), ListKind::Set);
        assert_eq!(list_kind(Some("spec"), "tolerations"), ListKind::Atomic);
        assert_eq!(list_kind(Some("containers"), "envFrom"), ListKind::Atomic);
        assert_eq!(list_kind(Some("containers"), "args"), ListKind::Atomic);
        assert!(is_atomic_map("selector"));
        assert!(!is_atomic_map("labels"));
        assert!(atomic_items("ownerReferences"));
    }
}
