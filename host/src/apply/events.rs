//! Events on primaries and WasmPlugins (events.k8s.io/v1), through a
//! [`Recorder`] whose series count identical events only
//! ([`super::correlator`]).

use std::sync::{Arc, Mutex};

use chrono::Utc;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Client;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
pub use kube::runtime::events::{Event, EventType, Reporter};

use super::correlator::{Correlator, Decision, EventKey};
use super::pruned::PrunedMemory;

/// A [`Recorder`] reporting as `controller`, with this host's Pod (env
/// `POD_NAME`, set by the Deployment) as the reporting instance.
pub fn recorder(client: Client, controller: String) -> Recorder {
    let reporter = Reporter {
        controller,
        instance: std::env::var("POD_NAME").ok(),
    };
    Recorder::new(client, reporter)
}

/// Publishes Events like kube-runtime's `Recorder`, but a series
/// (`series.count`) counts identical events only: same involved and related
/// object, type, reason, action and note. A different note is a new Event;
/// past client-go's similarity threshold differing notes are aggregated
/// into one Event whose note says `(combined from similar events): …`.
/// Cheap to clone; clones share the memory of series.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    correlator: Arc<Mutex<Correlator>>,
}

fn describe(reference: &ObjectReference) -> String {
    format!(
        "{}/{}/{}/{}/{}",
        reference.api_version.as_deref().unwrap_or_default(),
        reference.kind.as_deref().unwrap_or_default(),
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name.as_deref().unwrap_or_default(),
        reference.uid.as_deref().unwrap_or_default()
    )
}

impl Recorder {
    /// A recorder reporting as `reporter`.
    pub fn new(client: Client, reporter: Reporter) -> Recorder {
        Recorder {
            client,
            reporter,
            correlator: Arc::default(),
        }
    }

    /// Publishes `ev` about `reference`: a new Event, or one more count of
    /// the identical Event's series.
    ///
    /// # Errors
    ///
    /// The API server's refusal of the create or patch; the occurrence is
    /// then not remembered (the next one tries again).
    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let key = EventKey {
            regarding: describe(reference),
            related: ev.secondary.as_ref().map(describe),
            warning: ev.type_ == EventType::Warning,
            reason: ev.reason.clone(),
            action: ev.action.clone(),
        };
        let now = Utc::now();
        let note = ev.note.clone().unwrap_or_default();
        let decision = crate::util::lock(&self.correlator).observe(key, &note, now);
        let namespace = reference.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        match decision {
            Decision::Create { series, note } => {
                let event = self.new_event(ev, reference, note, now);
                let created = events.create(&PostParams::default(), &event).await?;
                let name = created.meta().name.clone().unwrap_or_default();
                crate::util::lock(&self.correlator).created(series, name, now);
            }
            Decision::Bump {
                series,
                name,
                count,
                note,
            } => {
                let patch = serde_json::json!({
                    "note": note,
                    "series": EventSeries { count, last_observed_time: MicroTime(k8s_openapi::jiff::Timestamp::now()) },
                });
                events
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                crate::util::lock(&self.correlator).bumped(&series, count, now);
            }
        }
        Ok(())
    }

    fn new_event(
        &self,
        ev: &Event,
        reference: &ObjectReference,
        note: String,
        now: chrono::DateTime<Utc>,
    ) -> K8sEvent {
        let nanos = now.timestamp_nanos_opt().unwrap_or_default();
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
            regarding: Some(reference.clone()),
            related: ev.secondary.clone(),
            note: Some(note),
            metadata: ObjectMeta {
                namespace: reference.namespace.clone(),
                name: Some(format!(
                    "{}.{nanos:x}",
                    reference.name.as_ref().unwrap_or(&self.reporter.controller)
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.reporter.controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| self.reporter.controller.clone()),
            ),
            type_: Some(
                if ev.type_ == EventType::Warning {
                    "Warning"
                } else {
                    "Normal"
                }
                .to_string(),
            ),
            ..K8sEvent::default()
        }
    }
}

/// Records events for one controller (the reporting component is
/// `wasm-operator/<plugin>`). Publishing is best effort: an event that cannot
/// be written is logged, never fails a reconcile.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
    /// The `StatusPruned` warnings already given (shared by clones).
    pruned: Arc<Mutex<PrunedMemory>>,
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
            pruned: Arc::default(),
        }
    }

    /// True the first time status fields `paths` are reported pruned on
    /// object `uid` by this sink (see [`PrunedMemory`]).
    pub fn first_pruned(&self, uid: &str, paths: &[String]) -> bool {
        crate::util::lock(&self.pruned).first_time(uid, paths)
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
