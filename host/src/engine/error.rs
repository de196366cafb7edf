//! Typed errors of the engine: [`EngineError`] when a plugin cannot be loaded,
//! [`CallError`] when one call of a loaded plugin fails.
//!
//! Every message names the plugin (or its digest), what went wrong and what a
//! person can do about it, because these strings end up on object conditions
//! and in the CLI. A remedy that is a setting of this program (a command-line
//! flag) is not part of the message: the engine does not know how it was
//! configured, so the place that reports the error to a person appends it,
//! through `with_remedy` (see [`WithRemedy`]).

use std::time::Duration;

use crate::contract::Failure;
use crate::contract::Reason;

/// Why a plugin could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The engine itself could not be configured (a host bug or an unsupported platform).
    #[error("cannot configure the wasm engine: {0}")]
    Config(String),
    /// Cranelift rejected the component (invalid or unsupported wasm).
    #[error(
        "plugin {digest} does not compile: {message}; rebuild it with the wasm-operator SDK for wasm32-wasip2"
    )]
    Compile {
        /// The component's digest (`sha256:…`): before its manifest is read it has no other name.
        digest: String,
        /// Wasmtime's explanation.
        message: String,
    },
    /// The bytes are not a WebAssembly component.
    #[error(
        "plugin {digest} is not a WebAssembly component ({what}); build it with `cargo build --target wasm32-wasip2` and the wasm-operator SDK"
    )]
    NotAComponent {
        /// The component's digest (`sha256:…`): before its manifest is read it has no other name.
        digest: String,
        /// What the bytes are instead, and how to build a component.
        what: String,
    },
    /// The component does not target the `wasm-operator:plugin` world.
    #[error(
        "plugin {digest} does not implement the wasm-operator:plugin world: {missing}; build it against wit/plugin.wit (world `plugin` or `reconciler-plugin`)"
    )]
    WrongWorld {
        /// The component's digest (`sha256:…`): before its manifest is read it has no other name.
        digest: String,
        /// What does not fit: an import the host lacks, a missing export, or
        /// exports of other types (another contract version).
        missing: String,
    },
    /// The manifest the plugin returned is unusable.
    #[error(
        "plugin {digest} has an invalid manifest: {problem}; fix the plugin's manifest and rebuild it"
    )]
    InvalidManifest {
        /// The component's digest (`sha256:…`): before its manifest is read it has no other name.
        digest: String,
        /// What is wrong with the manifest, or why `manifest` could not be called.
        problem: String,
    },
    /// Reading or writing the compiled-component cache failed.
    #[error(
        "compiled-component cache {path}: {source}; check that the directory exists and is writable"
    )]
    Io {
        /// The cache file or directory.
        path: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// A cache entry could not be produced (serialization failed).
    #[error("compiled-component cache: {0}")]
    Cache(String),
    /// The plugin's `manifest` could not run because every instance of the
    /// engine's pool was taken by other calls. Says nothing about the plugin:
    /// load it again later.
    #[error(
        "plugin {digest} cannot be checked yet: all {max_instances} instances of the engine's pool are in use by other calls, so its `manifest` could not run; the load is retried"
    )]
    InstancePoolFull {
        /// The component's digest (`sha256:…`): before its manifest is read it has no other name.
        digest: String,
        /// The pool's size (`--max-instances`).
        max_instances: u32,
    },
}

impl EngineError {
    /// True when loading again later may succeed with the same bytes (the
    /// engine was busy); false when the component itself was refused or the
    /// host is misconfigured.
    pub fn is_transient(&self) -> bool {
        matches!(self, EngineError::InstancePoolFull { .. })
    }

    /// What a person can change in this program's configuration about the
    /// error, if anything; reporting code appends it (see
    /// [`EngineError::with_remedy`]).
    pub fn remedy(&self) -> Option<&'static str> {
        match self {
            EngineError::InstancePoolFull { .. } => Some(POOL_FULL_REMEDY_IF_PERSISTS),
            _ => None,
        }
    }

    /// The message followed by its [`remedy`](EngineError::remedy): what a
    /// person is shown.
    pub fn with_remedy(&self) -> WithRemedy<'_> {
        WithRemedy {
            error: self,
            remedy: self.remedy(),
        }
    }
}

/// The remedy for a full instance pool on a call.
const POOL_FULL_REMEDY: &str = "raise `--max-instances` or lower plugin concurrency";

/// The remedy for a full instance pool on a load, which is retried anyway.
const POOL_FULL_REMEDY_IF_PERSISTS: &str =
    "raise `--max-instances` or lower plugin concurrency if this persists";

/// An engine error's message followed by its remedy (when it has one), as a
/// person should read it. Made by `EngineError::with_remedy` and
/// `CallError::with_remedy`.
pub struct WithRemedy<'a> {
    error: &'a dyn std::fmt::Display,
    remedy: Option<&'static str>,
}

impl std::fmt::Display for WithRemedy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.remedy {
            Some(remedy) => write!(f, "{}; {remedy}", self.error),
            None => self.error.fmt(f),
        }
    }
}

impl std::fmt::Debug for WithRemedy<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// Where a call failed: the plugin version and the function it called.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSite {
    /// The plugin's name, from its manifest.
    pub plugin: String,
    /// The plugin's version, from its manifest.
    pub version: String,
    /// The plugin function that was called: `reconcile`, `finalize`,
    /// `migration.upgrade`…
    pub function: String,
}

/// Why one call of a loaded plugin failed: where ([`CallSite`]) and what
/// ([`CallFailure`]). The plugin and the host keep serving other calls
/// whatever the failure.
///
/// Its message names the plugin, its version and function, what failed and
/// what to do; [`CallError::reason`] is the condition reason.
#[derive(Debug, Clone)]
pub struct CallError {
    /// The plugin version and function that failed.
    pub site: CallSite,
    /// What failed.
    pub failure: CallFailure,
}

/// What failed in one call ([`CallError::failure`]).
#[derive(Debug, Clone)]
pub enum CallFailure {
    /// The plugin trapped (panic, unreachable, out-of-bounds access...).
    Trap {
        /// The plugin's last lines on stderr (a panic's message) and what trapped.
        message: String,
    },
    /// The call ran past its deadline and was interrupted.
    Timeout {
        /// The plugin's time limit per call.
        timeout: Duration,
    },
    /// The plugin tried to grow its memory beyond the call's limit.
    MemoryExceeded {
        /// The plugin's memory limit per call, in bytes.
        limit: usize,
    },
    /// The answer was larger than the call's output limit.
    OutputTooLarge {
        /// The size of the answer, in bytes.
        size: usize,
        /// The plugin's output limit per call, in bytes.
        limit: usize,
    },
    /// The answer breaks the contract (bad JSON, malformed children, ...).
    InvalidOutput {
        /// What is wrong with the answer.
        problem: String,
    },
    /// The plugin read a kind its manifest does not declare.
    CapabilityDenied {
        /// The first undeclared kind it read, as `apiVersion/kind`.
        kind: String,
    },
    /// The plugin read a namespace its grant does not include (reason
    /// `CapabilityDenied`).
    NamespaceDenied(Box<NamespaceDenial>),
    /// The plugin answered with a transient or permanent failure.
    Failed(Failure),
    /// The plugin does not implement the optional interface of the call's
    /// function (e.g. `migration.upgrade`).
    NotImplemented,
    /// Every slot of the engine's instance pool is taken by calls in flight
    /// (pooling allocation only). Transient: the call is retried with backoff.
    InstancePoolFull {
        /// The pool's size (`--max-instances`).
        max_instances: u32,
    },
    /// A host-side problem (not the plugin's fault).
    Internal(String),
}

/// A read into a namespace outside the plugin's grant
/// ([`CallFailure::NamespaceDenied`]; boxed, so that every `CallError`
/// stays small on the call path's `Result`s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceDenial {
    /// The kind it read, as `apiVersion/kind`.
    pub kind: String,
    /// The namespace outside its grant.
    pub namespace: String,
    /// The namespaces its grant allows, in words.
    pub granted: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let CallSite {
            plugin,
            version,
            function,
        } = &self.site;
        match &self.failure {
            CallFailure::Trap { message } => write!(
                f,
                "plugin {plugin} {version}: {function} trapped: {message}; this is a bug in the plugin, fix it or roll back to an earlier version"
            ),
            CallFailure::Timeout { timeout } => write!(
                f,
                "plugin {plugin} {version}: {function} did not finish within {timeout:?} and was interrupted; the plugin loops or is too slow, fix it or raise the plugin's timeout limit"
            ),
            CallFailure::MemoryExceeded { limit } => write!(
                f,
                "plugin {plugin} {version}: {function} exceeded its memory limit of {limit} bytes; fix the plugin's memory use or raise the plugin's memory limit"
            ),
            CallFailure::OutputTooLarge { size, limit } => write!(
                f,
                "plugin {plugin} {version}: {function} returned {size} bytes, more than the limit of {limit} bytes; make the plugin return less or raise the plugin's output limit"
            ),
            CallFailure::InvalidOutput { problem } => write!(
                f,
                "plugin {plugin} {version}: {function} returned invalid output: {problem}; this is a bug in the plugin, fix it or roll back to an earlier version"
            ),
            CallFailure::CapabilityDenied { kind } => write!(
                f,
                "plugin {plugin} {version}: {function} tried to read {kind}, which its manifest does not declare; add the kind to the manifest's `watches` or stop reading it"
            ),
            CallFailure::NamespaceDenied(denial) => write!(
                f,
                "plugin {plugin} {version}: {function} tried to read {} in namespace {}, outside its grant ({}); the cluster operator can grant the namespace (WasmPlugin spec.permissions.namespaces or namespaceSelector, or run --grant), or the plugin must stop reading it",
                denial.kind, denial.namespace, denial.granted
            ),
            CallFailure::Failed(failure) => write!(f, "{failure}"),
            CallFailure::NotImplemented => write!(
                f,
                "plugin {plugin} does not implement {function}; it does not declare the function (its manifest, or `implemented` of the interface), use a version that does"
            ),
            CallFailure::InstancePoolFull { max_instances } => write!(
                f,
                "plugin {plugin} {version}: {function} could not start: all {max_instances} instances of the engine's pool are in use by other calls"
            ),
            CallFailure::Internal(message) => {
                write!(f, "internal error of the wasm engine: {message}")
            }
        }
    }
}

impl std::error::Error for CallError {}

impl CallError {
    /// The condition/event reason an on-call engineer can search for.
    pub fn reason(&self) -> &'static str {
        match &self.failure {
            CallFailure::Trap { .. } => Reason::PluginTrap.as_str(),
            CallFailure::Timeout { .. } => Reason::PluginTimeout.as_str(),
            CallFailure::MemoryExceeded { .. } => Reason::PluginMemoryExceeded.as_str(),
            CallFailure::OutputTooLarge { .. } => Reason::PluginOutputTooLarge.as_str(),
            CallFailure::InvalidOutput { .. } => Reason::PluginInvalidOutput.as_str(),
            CallFailure::CapabilityDenied { .. } | CallFailure::NamespaceDenied(_) => {
                Reason::CapabilityDenied.as_str()
            }
            CallFailure::Failed(Failure::Transient(_)) => Reason::ReconcileFailed.as_str(),
            CallFailure::Failed(Failure::Permanent(_)) => {
                Reason::ReconcilePermanentFailure.as_str()
            }
            CallFailure::NotImplemented => Reason::NotImplemented.as_str(),
            CallFailure::InstancePoolFull { .. } => Reason::InstancePoolFull.as_str(),
            CallFailure::Internal(_) => Reason::InternalError.as_str(),
        }
    }

    /// True when retrying the same input cannot help, so the host should wait
    /// for the object (or the plugin version) to change instead of backing off:
    /// a permanent failure, an undeclared read (the same code reads the same
    /// kind again) and a missing optional interface.
    pub fn is_permanent(&self) -> bool {
        matches!(
            self.failure,
            CallFailure::Failed(Failure::Permanent(_))
                | CallFailure::CapabilityDenied { .. }
                | CallFailure::NamespaceDenied(_)
                | CallFailure::NotImplemented
        )
    }

    /// What a person can change in this program's configuration about the
    /// error, if anything; reporting code appends it (see
    /// [`CallError::with_remedy`]).
    pub fn remedy(&self) -> Option<&'static str> {
        match self.failure {
            CallFailure::InstancePoolFull { .. } => Some(POOL_FULL_REMEDY),
            _ => None,
        }
    }

    /// The message followed by its [`remedy`](CallError::remedy): what a
    /// person is shown.
    pub fn with_remedy(&self) -> WithRemedy<'_> {
        WithRemedy {
            error: self,
            remedy: self.remedy(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_and_permanence() {
        let at = CallSite {
            plugin: "webapp".into(),
            version: "1.0.0".into(),
            function: "reconcile".into(),
        };
        let failed = |failure| CallError {
            site: at.clone(),
            failure: CallFailure::Failed(failure),
        };
        let transient = failed(Failure::Transient("db not ready".into()));
        assert_eq!(transient.reason(), "ReconcileFailed");
        assert!(!transient.is_permanent());
        let permanent = failed(Failure::Permanent("bad spec".into()));
        assert_eq!(permanent.reason(), "ReconcilePermanentFailure");
        assert!(permanent.is_permanent());
        let timeout = CallError {
            site: at.clone(),
            failure: CallFailure::Timeout {
                timeout: Duration::from_secs(1),
            },
        };
        assert_eq!(timeout.reason(), "PluginTimeout");
        assert!(!timeout.is_permanent());
        let text = timeout.to_string();
        assert!(
            text.contains("webapp") && text.contains("1.0.0") && text.contains("reconcile"),
            "{text}"
        );
        assert_eq!(timeout.remedy(), None);
        assert_eq!(timeout.with_remedy().to_string(), text);
    }

    #[test]
    fn the_remedy_follows_the_facts() {
        let busy = CallError {
            site: CallSite {
                plugin: "webapp".into(),
                version: "1.0.0".into(),
                function: "reconcile".into(),
            },
            failure: CallFailure::InstancePoolFull { max_instances: 4 },
        };
        let facts = busy.to_string();
        assert!(facts.contains("all 4 instances") && !facts.contains("--max-instances"));
        assert_eq!(
            busy.with_remedy().to_string(),
            format!("{facts}; {POOL_FULL_REMEDY}")
        );
        let load = EngineError::InstancePoolFull {
            digest: "sha256:00".into(),
            max_instances: 4,
        };
        assert!(!load.to_string().contains("--max-instances"), "{load}");
        assert!(load.with_remedy().to_string().ends_with("if this persists"));
    }
}
