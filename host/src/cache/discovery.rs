//! API discovery: what the cluster says a manifest's kinds are. A manifest
//! names each kind with its plural and scope; the host believes only the
//! API server (`/api/v1`, `/apis/<group>/<version>`), so a manifest that
//! calls Secrets' plural a ConfigMap, or names a kind nobody serves, is
//! refused before a version serves instead of being handed another
//! resource's objects or listing a missing resource forever.
//!
//! The reads live here (the cache layer has the client); the decision is
//! the pure [`check_kinds`].

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;
use kube::Client;

use crate::contract::{Manifest, ResourceKind, Scope};

/// How a manifest uses a kind, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindRole {
    /// The manifest's `primary`.
    Primary,
    /// An entry of `owns`.
    Owns,
    /// An entry of `watches`.
    Watches,
}

impl fmt::Display for KindRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KindRole::Primary => "primary",
            KindRole::Owns => "owns",
            KindRole::Watches => "watches",
        })
    }
}

/// One way a manifest's kind disagrees with the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindProblem {
    /// The cluster does not serve the kind (its group/version, or the kind
    /// within it). May pass: a CRD can be installed later.
    NotServed {
        /// How the manifest uses the kind.
        role: KindRole,
        /// `apiVersion Kind`.
        kind: String,
        /// What discovery found instead, e.g. `example.com/v1 is not served`.
        detail: String,
    },
    /// The cluster serves the kind under another plural or scope than the
    /// manifest says. Never passes by itself: the manifest lies or is wrong.
    Mismatch {
        /// How the manifest uses the kind.
        role: KindRole,
        /// `apiVersion Kind`.
        kind: String,
        /// The manifest's `plural` and scope.
        declared: String,
        /// The cluster's plural and scope.
        served: String,
    },
}

impl KindProblem {
    /// True for [`KindProblem::NotServed`].
    pub fn is_not_served(&self) -> bool {
        matches!(self, KindProblem::NotServed { .. })
    }
}

impl fmt::Display for KindProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KindProblem::NotServed { role, kind, detail } => {
                write!(
                    f,
                    "{role} kind {kind} is not served by the cluster ({detail})"
                )
            }
            KindProblem::Mismatch {
                role,
                kind,
                declared,
                served,
            } => write!(
                f,
                "{role} kind {kind} is declared as {declared}, but the cluster serves it as {served}"
            ),
        }
    }
}

/// Discovery could not be read (the API server is unreachable or failed).
#[derive(Debug, thiserror::Error)]
#[error("cannot read API discovery for {api_version}: {source}; the host retries")]
pub struct DiscoveryError {
    /// The group/version whose resource list failed.
    pub api_version: String,
    /// The client's error.
    #[source]
    pub source: kube::Error,
}

fn scope_name(namespaced: bool) -> &'static str {
    if namespaced {
        "namespaced"
    } else {
        "cluster-scoped"
    }
}

/// The resources of each group/version as discovery lists them; `None`
/// when the group/version is not served at all.
pub type ServedResources = BTreeMap<String, Option<Vec<APIResource>>>;

/// Every kind of `manifest` with its role, primary first; a kind listed
/// twice (owned and watched) is checked once.
pub fn manifest_kinds(manifest: &Manifest) -> Vec<(KindRole, &ResourceKind)> {
    let mut kinds: Vec<(KindRole, &ResourceKind)> = vec![(KindRole::Primary, &manifest.primary)];
    for kind in &manifest.owns {
        kinds.push((KindRole::Owns, kind));
    }
    for kind in &manifest.watches {
        kinds.push((KindRole::Watches, kind));
    }
    let mut seen = Vec::new();
    kinds.retain(|(_, k)| {
        if seen.contains(k) {
            false
        } else {
            seen.push(*k);
            true
        }
    });
    kinds
}

/// What is wrong with `kinds` given what the cluster serves (`served` must
/// hold every group/version of `kinds`; a missing entry counts as not
/// served). Empty when every kind is served with the declared plural and
/// scope. Subresources (`deployments/scale`) are never a kind's resource.
pub fn check_kinds(
    kinds: &[(KindRole, &ResourceKind)],
    served: &ServedResources,
) -> Vec<KindProblem> {
    let mut problems = Vec::new();
    for (role, kind) in kinds {
        let api_version = kind.api_version();
        let name = format!("{api_version} {}", kind.kind);
        let Some(Some(resources)) = served.get(&api_version) else {
            problems.push(KindProblem::NotServed {
                role: *role,
                kind: name,
                detail: format!("the cluster serves no group/version {api_version}"),
            });
            continue;
        };
        let of_kind: Vec<&APIResource> = resources
            .iter()
            .filter(|r| r.kind == kind.kind && !r.name.contains('/'))
            .collect();
        let Some(resource) = of_kind
            .iter()
            .find(|r| r.name == kind.plural)
            .or_else(|| of_kind.first())
        else {
            let mut kinds: Vec<&str> = resources
                .iter()
                .filter(|r| !r.name.contains('/'))
                .map(|r| r.kind.as_str())
                .collect();
            kinds.sort_unstable();
            kinds.dedup();
            problems.push(KindProblem::NotServed {
                role: *role,
                kind: name,
                detail: format!(
                    "{api_version} serves no kind {}; it serves: {}",
                    kind.kind,
                    kinds.join(", ")
                ),
            });
            continue;
        };
        let declared_namespaced = kind.scope == Scope::Namespaced;
        if resource.name != kind.plural || resource.namespaced != declared_namespaced {
            problems.push(KindProblem::Mismatch {
                role: *role,
                kind: name,
                declared: format!(
                    "plural {:?}, {}",
                    kind.plural,
                    scope_name(declared_namespaced)
                ),
                served: format!(
                    "plural {:?}, {}",
                    resource.name,
                    scope_name(resource.namespaced)
                ),
            });
        }
    }
    problems
}

/// Reads API discovery with the host's client.
#[derive(Clone)]
pub struct Discovery {
    client: Client,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Discovery").finish_non_exhaustive()
    }
}

impl Discovery {
    /// Discovery through `client`.
    pub fn new(client: Client) -> Discovery {
        Discovery { client }
    }

    /// The resource list of `api_version` (`v1` is the core group), `None`
    /// when the cluster does not serve it.
    async fn resources(
        &self,
        api_version: &str,
    ) -> Result<Option<Vec<APIResource>>, DiscoveryError> {
        let listed = if api_version.contains('/') {
            self.client.list_api_group_resources(api_version).await
        } else {
            self.client.list_core_api_resources(api_version).await
        };
        match listed {
            Ok(list) => Ok(Some(list.resources)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
            Err(source) => Err(DiscoveryError {
                api_version: api_version.to_string(),
                source,
            }),
        }
    }

    /// What is wrong with `manifest`'s kinds (see [`check_kinds`]): one
    /// discovery read per group/version it names, read now (a CRD installed
    /// a moment ago counts).
    ///
    /// # Errors
    ///
    /// [`DiscoveryError`] when a resource list cannot be read (other than
    /// "not served").
    pub async fn check_manifest(
        &self,
        manifest: &Manifest,
    ) -> Result<Vec<KindProblem>, DiscoveryError> {
        let kinds = manifest_kinds(manifest);
        let mut served = ServedResources::new();
        for (_, kind) in &kinds {
            if let std::collections::btree_map::Entry::Vacant(slot) =
                served.entry(kind.api_version())
            {
                let resources = self.resources(slot.key()).await?;
                slot.insert(resources);
            }
        }
        Ok(check_kinds(&kinds, &served))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(group: &str, kind: &str, plural: &str, scope: Scope) -> ResourceKind {
        ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            scope,
        }
    }

    fn resource(name: &str, kind: &str, namespaced: bool) -> APIResource {
        APIResource {
            name: name.into(),
            kind: kind.into(),
            namespaced,
            singular_name: String::new(),
            verbs: vec!["list".into(), "watch".into()],
            ..APIResource::default()
        }
    }

    fn core() -> ServedResources {
        let mut served = ServedResources::new();
        served.insert(
            "v1".into(),
            Some(vec![
                resource("configmaps", "ConfigMap", true),
                resource("secrets", "Secret", true),
                resource("namespaces", "Namespace", false),
                resource("pods/status", "Pod", true),
            ]),
        );
        served.insert("nowhere.example.com/v1".into(), None);
        served
    }

    #[test]
    fn an_honest_manifest_passes() {
        let cm = kind("", "ConfigMap", "configmaps", Scope::Namespaced);
        let ns = kind("", "Namespace", "namespaces", Scope::Cluster);
        assert!(
            check_kinds(
                &[(KindRole::Primary, &cm), (KindRole::Watches, &ns)],
                &core()
            )
            .is_empty()
        );
    }

    #[test]
    fn a_plural_or_scope_lie_is_a_mismatch_naming_what_the_cluster_says() {
        let liar = kind("", "ConfigMap", "secrets", Scope::Namespaced);
        let problems = check_kinds(&[(KindRole::Watches, &liar)], &core());
        assert_eq!(problems.len(), 1);
        let text = problems[0].to_string();
        assert!(!problems[0].is_not_served());
        assert!(text.contains("watches kind v1 ConfigMap"), "{text}");
        assert!(text.contains("\"secrets\""), "{text}");
        assert!(
            text.contains("cluster serves it as plural \"configmaps\", namespaced"),
            "{text}"
        );

        let scope = kind("", "Namespace", "namespaces", Scope::Namespaced);
        let text = check_kinds(&[(KindRole::Owns, &scope)], &core())[0].to_string();
        assert!(text.contains("cluster-scoped"), "{text}");
    }

    #[test]
    fn an_unserved_group_or_kind_is_not_served() {
        let ghost = ResourceKind {
            group: "nowhere.example.com".into(),
            ..kind("", "Ghost", "ghosts", Scope::Namespaced)
        };
        let missing = kind("", "Widget", "widgets", Scope::Namespaced);
        let unknown = ResourceKind {
            group: "elsewhere.example.com".into(),
            ..kind("", "Thing", "things", Scope::Namespaced)
        };
        let problems = check_kinds(
            &[
                (KindRole::Owns, &ghost),
                (KindRole::Primary, &missing),
                (KindRole::Watches, &unknown),
            ],
            &core(),
        );
        assert_eq!(problems.len(), 3);
        assert!(problems.iter().all(KindProblem::is_not_served));
        assert!(
            problems[0]
                .to_string()
                .contains("owns kind nowhere.example.com/v1 Ghost")
        );
        assert!(
            problems[1].to_string().contains("v1 serves no kind Widget"),
            "{}",
            problems[1]
        );
        // A subresource is not a kind's resource.
        let pod = kind("", "Pod", "pods", Scope::Namespaced);
        assert!(check_kinds(&[(KindRole::Watches, &pod)], &core())[0].is_not_served());
    }

    #[test]
    fn a_kind_declared_twice_is_checked_once() {
        let cm = kind("", "ConfigMap", "configmaps", Scope::Namespaced);
        let manifest = Manifest {
            name: "x".into(),
            version: "1.0.0".into(),
            description: String::new(),
            primary: cm.clone(),
            owns: vec![cm.clone()],
            watches: vec![cm],
            finalizer: false,
            implements: Default::default(),
            min_compatible_version: None,
        };
        assert_eq!(manifest_kinds(&manifest).len(), 1);
    }
}
