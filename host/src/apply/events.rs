//! Events on primaries, through kube-runtime's `Recorder` (events.k8s.io/v1).

use kube::Client;
use kube::Resource;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// A kube `Recorder` reporting as `controller`, with this host's Pod (env
/// `POD_NAME`, set by the Deployment) as the reporting instance.
pub fn recorder(client: Client, controller: String) -> Recorder {
    let reporter = Reporter {
        controller,
        instance: std::env::var("POD_NAME").ok(),
    };
    Recorder::new(client, reporter)
}

/// Records events for one controller (the reporting component is
/// `wasm-operator/<plugin>`). Publishing is best effort: an event that cannot
/// be written is logged, never fails a reconcile.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").finish_non_exhaustive()
    }
}

impl EventSink {
    /// A sink reporting as `wasm-operator/<plugin>`.
    pub fn new(client: Client, plugin: &str) -> EventSink {
        EventSink {
            recorder: recorder(client, crate::plan::field_manager(plugin)),
        }
    }

    /// Publishes one event on `obj`. `action` says what the host was doing
    /// (`Reconcile`, `Finalize`, `Prune`).
    pub async fn publish(
        &self,
        ar: &ApiResource,
        obj: &DynamicObject,
        warning: bool,
        reason: &str,
        message: &str,
        action: &str,
    ) {
        let reference = obj.object_ref(ar);
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.to_string(),
            // The API limits notes to 1 kB.
            note: Some(crate::util::truncate(message, 1000)),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(%error, reason, object = ?reference.name, "cannot record event");
        }
    }
}
