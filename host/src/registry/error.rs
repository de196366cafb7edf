//! Why the registry refused or failed an operation: [`RegistryError`] and
//! the details a refusal carries ([`PrimaryKindChange`],
//! [`PermissionDenial`], [`KindRefusal`]).

use crate::cache::{DiscoveryError, KindProblem};
use crate::contract::{Excess, ExcessKind, Reason};
use crate::engine::EngineError;

/// Why the registry refused or failed an operation.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The wasm engine could not be created.
    #[error("cannot start the wasm engine: {0}")]
    Engine(#[source] EngineError),
    /// The component could not be loaded.
    #[error("cannot load plugin from {source_name}: {}", error.with_remedy())]
    Load {
        /// Where the component came from, e.g. `file:/path/webapp.wasm`.
        source_name: String,
        /// Why the engine refused it.
        #[source]
        error: EngineError,
    },
    /// A new version changes the primary kind of a running plugin.
    #[error(
        "plugin {} {} from {} reconciles {}, but the running version {} reconciles {}; the running version keeps serving. Deploy a kind change as a new plugin name",
        .0.name, .0.new_version, .0.source_name, .0.new_kind, .0.running_version, .0.running_kind
    )]
    PrimaryKindChanged(Box<PrimaryKindChange>),
    /// The new component is another plugin than the one it must replace.
    #[error(
        "the component from {source_name} is plugin {name} {version}, but it was deployed as a new version of plugin {expected}; deploy another plugin on its own"
    )]
    PluginNameChanged {
        /// Where the new component came from.
        source_name: String,
        /// The name of the plugin it was deployed to replace.
        expected: String,
        /// The new component's plugin name, from its manifest.
        name: String,
        /// The new component's version.
        version: String,
    },
    /// Swapping to an older version that the running version declared
    /// incompatible (its manifest's `min_compatible_version` is above it).
    #[error(
        "refusing to roll plugin {name} back from {running_version} to {new_version}: version {running_version} declares min_compatible_version {min_compatible}, so {new_version} could corrupt objects it managed; {running_version} keeps serving. Deploy {min_compatible} or newer"
    )]
    RollbackRefused {
        /// The plugin's name.
        name: String,
        /// The serving version, which keeps serving.
        running_version: String,
        /// The refused older version.
        new_version: String,
        /// The serving version's `min_compatible_version`: the oldest
        /// version that may replace it.
        min_compatible: String,
    },
    /// The manifest asks for more than the plugin's grant.
    #[error(
        "plugin {} {} from {} asks for more than its grant: {}. Nothing of it was loaded{}. {}",
        .0.name, .0.version, .0.source_name,
        .0.excesses.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "),
        .0.serving.as_ref().map(|v| format!("; version {v} keeps serving")).unwrap_or_default(),
        .0.remedy()
    )]
    PermissionDenied(Box<PermissionDenial>),
    /// Another plugin already serves the candidate's primary kind.
    #[error(
        "plugin {name} {version} from {source_name} reconciles {kind}, which plugin {serving} already serves; one primary kind is served by one plugin. Unload {serving} first, or give {name} its own kind"
    )]
    PrimaryKindConflict {
        /// The refused plugin's name.
        name: String,
        /// The refused plugin's version.
        version: String,
        /// Where the refused component came from.
        source_name: String,
        /// `group/Kind` of the primary.
        kind: String,
        /// The plugin that serves that kind and keeps serving it.
        serving: String,
    },
    /// The cluster disagrees with the manifest's kinds: one it does not
    /// serve, or one it serves under another plural or scope.
    #[error("{0}")]
    Kinds(Box<KindRefusal>),
    /// API discovery could not be read to check the manifest's kinds.
    #[error(
        "cannot check the kinds of plugin {name} {version} from {source_name} against the cluster: {source}"
    )]
    Discovery {
        /// The manifest's plugin name.
        name: String,
        /// The manifest's version.
        version: String,
        /// Where the component came from.
        source_name: String,
        /// Why discovery failed.
        #[source]
        source: Box<DiscoveryError>,
    },
    /// No plugin of that name runs.
    #[error("no plugin named {0} is loaded; `kubectl get wasmplugins` lists the deployed ones")]
    NotLoaded(String),
    /// A canary operation on a plugin without a rollout candidate.
    #[error(
        "plugin {0} has no canary candidate (none was set, or it was promoted or dropped already); `wasm-operator canary status {0}` shows its state"
    )]
    NoCandidate(String),
    /// A split or selector candidate would write objects the stable
    /// version may not serve again: rolling back would be impossible.
    #[error(
        "refusing to let plugin {name} {candidate_version} serve objects beside {stable_version}: {candidate_version} declares min_compatible_version {min_compatible}, so objects it writes could no longer be served by {stable_version} and a rollback would be impossible; {stable_version} keeps serving every object. Use Shadow mode, deploy a candidate whose min_compatible_version is at most {stable_version}, or accept this explicitly (spec.canary.acceptIrreversible)"
    )]
    CanaryIrreversible {
        /// The plugin's name.
        name: String,
        /// The stable version, which keeps serving.
        stable_version: String,
        /// The refused candidate.
        candidate_version: String,
        /// The candidate's `min_compatible_version`.
        min_compatible: String,
    },
    /// A blocking task of the registry failed (a host bug).
    #[error("internal error while loading plugin from {source_name}: {message}")]
    Internal {
        /// Where the component came from.
        source_name: String,
        /// What failed.
        message: String,
    },
}

impl RegistryError {
    /// True when the registry refused a new version (it is bad or unsafe)
    /// and the running version, if any, keeps serving; false for host
    /// problems, a busy engine and unknown names.
    pub fn is_rejection(&self) -> bool {
        match self {
            RegistryError::Load { error, .. } => !error.is_transient(),
            RegistryError::PrimaryKindChanged(_)
            | RegistryError::PluginNameChanged { .. }
            | RegistryError::RollbackRefused { .. }
            | RegistryError::PermissionDenied(_)
            | RegistryError::PrimaryKindConflict { .. }
            | RegistryError::CanaryIrreversible { .. }
            | RegistryError::Kinds(_) => true,
            _ => false,
        }
    }

    /// True when the same load may succeed later (the engine was busy).
    pub fn is_transient(&self) -> bool {
        matches!(self, RegistryError::Load { error, .. } if error.is_transient())
    }

    /// True when loading the same component again later may succeed
    /// without anyone changing it: the engine was busy, discovery could not
    /// be read, or the only problem is a kind the cluster does not serve yet
    /// (its CRD may be installed after the plugin is deployed).
    pub fn may_pass(&self) -> bool {
        match self {
            RegistryError::Discovery { .. } => true,
            RegistryError::Kinds(refusal) => refusal.only_not_served(),
            other => other.is_transient(),
        }
    }

    /// A short CamelCase reason for conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            RegistryError::Engine(_) => Reason::EngineUnavailable.as_str(),
            RegistryError::Load { error, .. } if error.is_transient() => {
                Reason::InstancePoolFull.as_str()
            }
            RegistryError::Load { .. } => Reason::InvalidPlugin.as_str(),
            RegistryError::PrimaryKindChanged(_) => Reason::PrimaryKindChanged.as_str(),
            RegistryError::PluginNameChanged { .. } => Reason::PluginNameChanged.as_str(),
            RegistryError::RollbackRefused { .. } => Reason::RollbackRefused.as_str(),
            RegistryError::PermissionDenied(_) => Reason::PermissionDenied.as_str(),
            RegistryError::PrimaryKindConflict { .. } => Reason::PrimaryKindConflict.as_str(),
            RegistryError::Kinds(refusal) => refusal.reason().as_str(),
            RegistryError::Discovery { .. } => Reason::DiscoveryUnavailable.as_str(),
            RegistryError::NotLoaded(_) => Reason::NotLoaded.as_str(),
            RegistryError::NoCandidate(_) => Reason::NoCanary.as_str(),
            RegistryError::CanaryIrreversible { .. } => Reason::CanaryIrreversible.as_str(),
            RegistryError::Internal { .. } => Reason::InternalError.as_str(),
        }
    }
}

/// A refused change of primary kind: the new version and the serving one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryKindChange {
    /// The new component's plugin name.
    pub name: String,
    /// Where the new component came from.
    pub source_name: String,
    /// The new component's version.
    pub new_version: String,
    /// `apiVersion Kind` the new component reconciles.
    pub new_kind: String,
    /// The serving plugin's name (differs from `name` when the new
    /// component is another plugin altogether).
    pub running_name: String,
    /// The serving version.
    pub running_version: String,
    /// `apiVersion Kind` the serving version reconciles.
    pub running_kind: String,
}

/// A manifest refused by its grant: the plugin and every excess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionDenial {
    /// The plugin's name.
    pub name: String,
    /// The refused version.
    pub version: String,
    /// Where the refused component came from.
    pub source_name: String,
    /// Everything the manifest asks for beyond the grant.
    pub excesses: Vec<Excess>,
    /// The version that serves under the plugin's name and keeps serving.
    pub serving: Option<String>,
}

impl PermissionDenial {
    /// What to do: widen the grant, unless only kinds no grant allows were
    /// refused.
    fn remedy(&self) -> &'static str {
        if self
            .excesses
            .iter()
            .all(|e| matches!(e.problem, ExcessKind::HostOnly(_)))
        {
            "Remove these kinds from the plugin's manifest: no grant allows them"
        } else {
            "If the cluster operator agrees, widen the grant (WasmPlugin spec.permissions, or `run --grant FILE`); otherwise remove these kinds from the plugin's manifest"
        }
    }
}

/// A manifest refused because the cluster disagrees with its kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindRefusal {
    /// The manifest's plugin name.
    pub name: String,
    /// The manifest's version.
    pub version: String,
    /// Where the component came from.
    pub source_name: String,
    /// Every disagreement, in manifest order (primary, owns, watches).
    pub problems: Vec<KindProblem>,
}

impl KindRefusal {
    /// True when every problem is a kind not served (yet): the refusal
    /// passes once the cluster serves them.
    pub fn only_not_served(&self) -> bool {
        self.problems.iter().all(KindProblem::is_not_served)
    }

    /// `KindMismatch` when any kind disagrees (it never passes by itself),
    /// else `KindNotServed`.
    pub fn reason(&self) -> Reason {
        if self.only_not_served() {
            Reason::KindNotServed
        } else {
            Reason::KindMismatch
        }
    }
}

impl std::fmt::Display for KindRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let problems: Vec<String> = self.problems.iter().map(ToString::to_string).collect();
        write!(
            f,
            "plugin {} {} from {} names kinds the cluster does not serve as declared: {}. ",
            self.name,
            self.version,
            self.source_name,
            problems.join("; ")
        )?;
        if self.only_not_served() {
            f.write_str(
                "Install the CRDs that serve them (the host checks again until they are served), or fix the manifest",
            )
        } else {
            f.write_str(
                "Fix the manifest's plural and scope to what the cluster serves (`kubectl api-resources`); the host believes only API discovery",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_error(error: EngineError) -> RegistryError {
        RegistryError::Load {
            source_name: "file:/plugins/webapp.wasm".into(),
            error,
        }
    }

    fn kind_refusal(problems: Vec<KindProblem>) -> RegistryError {
        RegistryError::Kinds(Box::new(KindRefusal {
            name: "liar".into(),
            version: "1.0.0".into(),
            source_name: "file:/plugins/liar.wasm".into(),
            problems,
        }))
    }

    #[test]
    fn a_kind_not_served_yet_passes_a_lie_does_not() {
        use crate::cache::KindRole;
        let not_served = KindProblem::NotServed {
            role: KindRole::Primary,
            kind: "example.com/v1 Widget".into(),
            detail: "the cluster serves no group/version example.com/v1".into(),
        };
        let lie = KindProblem::Mismatch {
            role: KindRole::Watches,
            kind: "v1 ConfigMap".into(),
            declared: "plural \"secrets\", namespaced".into(),
            served: "plural \"configmaps\", namespaced".into(),
        };
        let waiting = kind_refusal(vec![not_served.clone()]);
        assert_eq!(waiting.reason(), "KindNotServed");
        assert!(waiting.is_rejection() && waiting.may_pass());
        let text = waiting.to_string();
        assert!(
            text.contains("plugin liar 1.0.0 from file:/plugins/liar.wasm"),
            "{text}"
        );
        assert!(text.contains("Install the CRDs"), "{text}");

        let lying = kind_refusal(vec![not_served, lie]);
        assert_eq!(lying.reason(), "KindMismatch");
        assert!(lying.is_rejection() && !lying.may_pass());
        let text = lying.to_string();
        assert!(
            text.contains("example.com/v1 Widget is not served"),
            "{text}"
        );
        assert!(
            text.contains("serves it as plural \"configmaps\""),
            "{text}"
        );
        assert!(text.contains("kubectl api-resources"), "{text}");
    }

    #[test]
    fn a_busy_engine_is_not_a_verdict_on_the_plugin() {
        let busy = load_error(EngineError::InstancePoolFull {
            digest: "sha256:00".into(),
            max_instances: 4,
        });
        assert!(busy.is_transient());
        assert!(!busy.is_rejection());
        assert_eq!(busy.reason(), "InstancePoolFull");

        let invalid = load_error(EngineError::InvalidManifest {
            digest: "sha256:00".into(),
            problem: "no version".into(),
        });
        assert!(!invalid.is_transient());
        assert!(invalid.is_rejection());
        assert_eq!(invalid.reason(), "InvalidPlugin");
    }

    #[test]
    fn grant_and_kind_refusals_are_verdicts_that_name_everything() {
        use crate::contract::{Access, ExcessKind, ResourceKind, Scope};
        let denied = RegistryError::PermissionDenied(Box::new(PermissionDenial {
            name: "hostile".into(),
            version: "1.0.0".into(),
            source_name: "file:/plugins/hostile.wasm".into(),
            excesses: vec![Excess {
                access: Access::Own,
                kind: ResourceKind {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "Secret".into(),
                    plural: "secrets".into(),
                    scope: Scope::Namespaced,
                },
                problem: ExcessKind::Sensitive("Secrets hold credentials"),
            }],
            serving: Some("0.9.0".into()),
        }));
        assert!(denied.is_rejection() && !denied.is_transient());
        assert_eq!(denied.reason(), "PermissionDenied");
        let text = denied.to_string();
        assert!(
            text.contains("plugin hostile 1.0.0")
                && text.contains("owns v1 Secret")
                && text.contains("version 0.9.0 keeps serving"),
            "{text}"
        );
        let conflict = RegistryError::PrimaryKindConflict {
            name: "b".into(),
            version: "1.0.0".into(),
            source_name: "file:/b.wasm".into(),
            kind: "example.com/WebApp".into(),
            serving: "a".into(),
        };
        assert!(conflict.is_rejection());
        assert_eq!(conflict.reason(), "PrimaryKindConflict");
        assert!(conflict.to_string().contains("plugin a already serves"));
    }
}
