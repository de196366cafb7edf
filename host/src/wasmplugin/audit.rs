//! The audit trail of plugin versions: every transition is an Event on the
//! WasmPlugin (events.k8s.io/v1, where this replica may write), a structured
//! log line with target `audit`, and an [`AuditRecord`] for in-process
//! subscribers (e.g. `dev`, which reports loads as they happen).

use crate::apply::events::{Event, EventType, Recorder};
use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::broadcast;

use crate::lease::WriteGate;

/// Records kept for subscribers that fall behind; older ones are dropped
/// for them (they see a lag), never block the controller.
const SUBSCRIBER_BACKLOG: usize = 256;

/// The reporting controller of WasmPlugin events.
pub const REPORTER: &str = "wasm-operator/wasmplugin";

/// One version transition of a WasmPlugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    /// Event reason: `Loaded`, `Swapped`, `RolledBack`, `Reloaded`,
    /// `Unloaded`, or the reason a new version was rejected.
    pub reason: String,
    /// True for rejections.
    pub warning: bool,
    /// True when the problem passes by itself (the engine's instance pool
    /// was busy) and the load is retried: not a verdict on the plugin.
    pub retrying: bool,
    /// The plugin's manifest name (empty when nothing was ever loaded).
    pub plugin: String,
    /// The version that served before (empty for none).
    pub from: String,
    /// The version that serves after (for a rejection: still the old one).
    pub to: String,
    /// The digest of the component involved.
    pub digest: String,
    /// The source, e.g. `file:/plugins/webapp.wasm`.
    pub source: String,
    /// What happened, for people.
    pub message: String,
}

/// One transition of one WasmPlugin, as subscribers receive it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// The WasmPlugin's name.
    pub wasmplugin: String,
    /// What happened.
    pub transition: Transition,
}

/// Publishes transitions. Publishing an event is best effort: a failure is
/// logged, never stops the controller.
#[derive(Clone)]
pub struct AuditTrail {
    /// Writes the events, while `writes` lets this replica write.
    recorder: Recorder,
    /// Where this replica may not write: log lines and subscribers only.
    writes: WriteGate,
    subscribers: broadcast::Sender<AuditRecord>,
}

impl std::fmt::Debug for AuditTrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditTrail").finish_non_exhaustive()
    }
}

impl AuditTrail {
    /// An audit trail writing events through `client` while `writes` is
    /// open.
    pub fn new(client: kube::Client, writes: WriteGate) -> AuditTrail {
        AuditTrail {
            recorder: crate::apply::events::recorder(client, REPORTER.to_string()),
            writes,
            subscribers: broadcast::channel(SUBSCRIBER_BACKLOG).0,
        }
    }

    /// Every later transition recorded.
    pub fn subscribe(&self) -> broadcast::Receiver<AuditRecord> {
        self.subscribers.subscribe()
    }

    /// Records `t` about the WasmPlugin `object`.
    pub async fn record(&self, wasmplugin: &str, object: &ObjectReference, t: &Transition) {
        self.record_related(wasmplugin, object, t, None).await;
    }

    /// [`AuditTrail::record`] with a related object on the Event (e.g. the
    /// primary a shadow difference was seen on). Events with the same
    /// reason about the same object fold into one series; a different
    /// related object keeps them apart.
    pub async fn record_related(
        &self,
        wasmplugin: &str,
        object: &ObjectReference,
        t: &Transition,
        related: Option<ObjectReference>,
    ) {
        if t.warning {
            tracing::warn!(
                target: "audit", wasmplugin, transition = %t.reason, plugin = %t.plugin,
                from = %t.from, to = %t.to, digest = %t.digest, source = %t.source,
                "{}", t.message
            );
        } else {
            tracing::info!(
                target: "audit", wasmplugin, transition = %t.reason, plugin = %t.plugin,
                from = %t.from, to = %t.to, digest = %t.digest, source = %t.source,
                "{}", t.message
            );
        }
        // Nobody listening is the usual case outside `dev`.
        let _ = self.subscribers.send(AuditRecord {
            wasmplugin: wasmplugin.to_string(),
            transition: t.clone(),
        });
        if !self.writes.may_write() {
            return;
        }
        let recorder = &self.recorder;
        let event = Event {
            type_: if t.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: t.reason.clone(),
            note: Some(crate::util::truncate(&t.message, 1000)),
            action: "Load".to_string(),
            secondary: related,
        };
        if let Err(error) = recorder.publish(&event, object).await {
            tracing::warn!(%error, wasmplugin, reason = %t.reason, "cannot record WasmPlugin event");
        }
    }
}
