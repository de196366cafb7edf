//! The WebApp operator's logic: a `WebApp` (`example.com/v1`) becomes a
//! Deployment and a Service, and its status reports how many replicas are
//! ready. Every version of the webapp plugin links this crate; versions differ
//! only in what they add (labels, upgrade steps).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile,
    SecurityContext, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasm_operator_sdk::{
    Children, Condition, Crd, Desired, Event, Failure, Finalized, Kind, Manifest, Operation, Verdict, log,
};

/// The fewest replicas a WebApp runs (the CRD's `minimum` of `spec.replicas`).
pub const MIN_REPLICAS: i32 = 1;
/// The most replicas a WebApp runs (the CRD's `maximum` of `spec.replicas`).
pub const MAX_REPLICAS: i32 = 10;
/// `spec.port` when the WebApp does not set one (the CRD's default too).
pub const DEFAULT_PORT: i32 = 80;

/// A `WebApp` object. It serializes for admission defaults: what the SDK
/// writes back over the object (fields this type does not know survive).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct WebApp {
    /// Name and namespace name the children.
    pub metadata: ObjectMeta,
    /// What the user asks for.
    pub spec: WebAppSpec,
    /// What the last reconcile reported (empty before the first).
    #[serde(default)]
    pub status: WebAppStatus,
}

/// What the plugin reports (the phase is read back to tell a change of
/// phase); the host adds `conditions` and `observedGeneration`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebAppStatus {
    /// Ready pods of the WebApp's Deployment.
    #[serde(default)]
    pub ready_replicas: Option<i32>,
    /// Pending until every replica is ready, then Running.
    #[serde(default)]
    pub phase: Option<String>,
}

/// What the user asks for.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct WebAppSpec {
    /// Number of pods to run.
    #[schemars(range(min = 1, max = 10))]
    pub replicas: i32,
    /// Container image to run.
    #[schemars(length(min = 1))]
    pub image: String,
    /// Port the container listens on; the Service exposes the same port.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535), extend("default" = 80))]
    pub port: i32,
}

fn default_port() -> i32 {
    DEFAULT_PORT
}

/// The desired state of `app`: its Deployment and Service, with
/// `extra_labels` on them and their pods (later plugin versions add labels
/// this way), and the status read from the Deployment.
pub fn desired_state(app: WebApp, children: &Children, extra_labels: &[(&str, &str)]) -> Result<Desired, Failure> {
    let spec = &app.spec;
    // The CRD validates these too; an object stored before the schema was
    // tightened must not turn into an invalid Deployment.
    if !(MIN_REPLICAS..=MAX_REPLICAS).contains(&spec.replicas)
        || !(1..=65535).contains(&spec.port)
        || spec.image.is_empty()
    {
        return Err(Failure::permanent(format!(
            "spec is invalid: replicas must be {MIN_REPLICAS}..{MAX_REPLICAS} (got {}), port 1..65535 (got {}), image non-empty",
            spec.replicas, spec.port
        )));
    }
    let name = app.metadata.name.clone().unwrap_or_default();
    let ready = children.get::<Deployment>(&name)?.and_then(|d| d.status).and_then(|s| s.ready_replicas).unwrap_or(0);
    let running = ready >= spec.replicas;
    let message = format!("{ready}/{} replicas ready", spec.replicas);
    let phase = if running { "Running" } else { "Pending" };
    let reason = if running { "AllReplicasReady" } else { "ReplicasNotReady" };
    let (deployment, service) = children_of(&app.metadata, spec, extra_labels);
    let mut desired =
        Desired::new().child(&deployment)?.child(&service)?.status(json!({ "readyReplicas": ready, "phase": phase }));
    // One event per change of phase, so `kubectl describe webapp` tells the
    // story (not one per reconcile: the host would count them as a series).
    if let Some(event) = phase_event(app.status.phase.as_deref(), phase, &message) {
        desired = desired.event(event);
    }
    Ok(desired.condition(Condition::ready(running, reason, message)))
}

/// The event for a change of phase from `before` (none before the first
/// reconcile) to `now`, named after the new phase: `Running` when every
/// replica became ready, `Pending` when a running app has fewer ready than
/// asked (a scale-up does that too, so it is not a warning).
fn phase_event(before: Option<&str>, now: &str, message: &str) -> Option<Event> {
    match (before, now) {
        (Some("Running"), "Running") => None,
        (_, "Running") => Some(Event::normal("Running", message)),
        (Some("Running"), _) => Some(Event::normal("Pending", message)),
        _ => None,
    }
}

/// Admission of a WebApp being created or updated: refused when its spec is
/// one [`desired_state`] would refuse (the CRD's bounds, checked again for
/// a CRD installed without them), each field at fault named with its
/// value: `spec.replicas must be between 1 and 10, got 0`. Deletes and
/// connects are allowed.
pub fn validate(operation: Operation, app: &WebApp) -> Verdict {
    if !operation.writes() {
        return Verdict::allow();
    }
    let spec = &app.spec;
    let mut faults = Vec::new();
    if !(MIN_REPLICAS..=MAX_REPLICAS).contains(&spec.replicas) {
        faults.push((
            "spec.replicas",
            format!("must be between {MIN_REPLICAS} and {MAX_REPLICAS}, got {}", spec.replicas),
        ));
    }
    if !(1..=65535).contains(&spec.port) {
        faults.push(("spec.port", format!("must be between 1 and 65535, got {}", spec.port)));
    }
    if spec.image.is_empty() {
        faults.push(("spec.image", "must not be empty".to_owned()));
    }
    if faults.is_empty() {
        return Verdict::allow();
    }
    let message = faults.iter().map(|(path, problem)| format!("{path} {problem}")).collect::<Vec<_>>().join("; ");
    faults.into_iter().fold(Verdict::refuse(message), |verdict, (path, problem)| verdict.field(path, problem))
}

/// The defaults of a WebApp: `spec.port` [`DEFAULT_PORT`] when it sets
/// none. Reading the object into [`WebApp`] fills it already (the field's
/// serde default, the same the CRD declares), and the SDK writes the typed
/// object back, so `app` comes back as it is.
pub fn defaults(app: WebApp) -> WebApp {
    app
}

/// The manifest every webapp version shares; versions add to it.
pub fn manifest(version: &str) -> Manifest {
    Manifest::new("webapp", version)
        .description("Runs a web application as a Deployment and a Service")
        .primary(Kind::namespaced("example.com", "v1", "WebApp", "webapps"))
        .owns::<Deployment>()
        .owns::<Service>()
        .finalizer(true)
}

/// The WebApp CRD, from [`WebAppSpec`] and [`WebAppStatus`]: what
/// `wasm-operator plugin crd webapp.wasm` prints and examples/webapp/crd.yaml
/// holds.
pub fn crd(version: &str) -> Crd {
    Crd::of::<WebAppSpec, WebAppStatus>(&manifest(version))
        .printer_column("Replicas", "integer", ".spec.replicas")
        .printer_column("Ready", "integer", ".status.readyReplicas")
        .printer_column("Phase", "string", ".status.phase")
}

/// Clean-up before a WebApp goes: its children go with their owner, and there
/// is nothing outside the cluster to clean up.
pub fn finalize(app: WebApp) -> Result<Finalized, Failure> {
    let name = app.metadata.name.unwrap_or_default();
    log::info(format!("WebApp {name} is being deleted; its Deployment and Service follow"));
    Ok(Finalized::Done)
}

/// The pod-level securityContext of Pod Security `restricted`: non-root,
/// the runtime's seccomp profile. The host refuses pod templates beyond the
/// plugin's grant, and `restricted` is the default grant.
pub fn restricted_pod() -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".to_owned(), ..Default::default() }),
        ..Default::default()
    }
}

/// The container-level securityContext of Pod Security `restricted`: no
/// privilege escalation, every capability dropped.
pub fn restricted_container() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".to_owned()]), ..Default::default() }),
        ..Default::default()
    }
}

/// The Deployment and Service a WebApp stands for. `extra_labels` go on the
/// objects and the pod template, never into selectors (a Deployment's
/// selector is immutable, so versions must agree on it).
pub fn children_of(meta: &ObjectMeta, spec: &WebAppSpec, extra_labels: &[(&str, &str)]) -> (Deployment, Service) {
    let name = meta.name.clone().unwrap_or_default();
    let selector = BTreeMap::from([("app".to_owned(), name.clone())]);
    let mut labels = selector.clone();
    labels.extend(extra_labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    let metadata = ObjectMeta {
        name: Some(name),
        namespace: meta.namespace.clone(),
        labels: Some(labels.clone()),
        ..Default::default()
    };
    let container = Container {
        name: "web".to_owned(),
        image: Some(spec.image.clone()),
        ports: Some(vec![ContainerPort { container_port: spec.port, ..Default::default() }]),
        security_context: Some(restricted_container()),
        ..Default::default()
    };
    let deployment = Deployment {
        metadata: metadata.clone(),
        spec: Some(DeploymentSpec {
            replicas: Some(spec.replicas),
            selector: LabelSelector { match_labels: Some(selector.clone()), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    containers: vec![container],
                    // The namespace's default account, without its token: the
                    // web server needs no API access.
                    automount_service_account_token: Some(false),
                    security_context: Some(restricted_pod()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    let port = ServicePort { port: spec.port, target_port: Some(IntOrString::Int(spec.port)), ..Default::default() };
    let service = Service {
        metadata,
        spec: Some(ServiceSpec { selector: Some(selector), ports: Some(vec![port]), ..Default::default() }),
        ..Default::default()
    };
    (deployment, service)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(spec: serde_json::Value) -> WebApp {
        serde_json::from_value(json!({"metadata": {"name": "shop", "namespace": "default"}, "spec": spec})).unwrap()
    }

    #[test]
    fn replicas_outside_the_bounds_are_refused_naming_the_field() {
        for replicas in [0, 11, -3] {
            let verdict = validate(Operation::Create, &app(json!({"replicas": replicas, "image": "nginx"})));
            assert!(!verdict.allowed);
            assert_eq!(verdict.message, format!("spec.replicas must be between 1 and 10, got {replicas}"));
            assert_eq!(verdict.fields.len(), 1);
            assert_eq!(verdict.fields[0].path, "spec.replicas");
            assert_eq!(verdict.fields[0].message, format!("must be between 1 and 10, got {replicas}"));
        }
        for replicas in [1, 10] {
            assert!(validate(Operation::Update, &app(json!({"replicas": replicas, "image": "nginx"}))).allowed);
        }
    }

    #[test]
    fn every_field_at_fault_is_named_and_deletes_are_allowed() {
        let bad = app(json!({"replicas": 0, "image": "", "port": 70000}));
        let verdict = validate(Operation::Update, &bad);
        let paths: Vec<&str> = verdict.fields.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["spec.replicas", "spec.port", "spec.image"]);
        assert_eq!(
            verdict.message,
            "spec.replicas must be between 1 and 10, got 0; spec.port must be between 1 and 65535, got 70000; spec.image must not be empty"
        );
        assert!(validate(Operation::Delete, &bad).allowed);
        assert!(validate(Operation::Connect, &bad).allowed);
    }

    #[test]
    fn the_port_is_defaulted_when_absent() {
        let defaulted = serde_json::to_value(defaults(app(json!({"replicas": 2, "image": "nginx"})))).unwrap();
        assert_eq!(defaulted["spec"]["port"], DEFAULT_PORT);
        let kept = serde_json::to_value(defaults(app(json!({"replicas": 2, "image": "nginx", "port": 8080})))).unwrap();
        assert_eq!(kept["spec"]["port"], 8080);
    }

    #[test]
    fn an_event_marks_each_change_of_phase_only() {
        let running = phase_event(None, "Running", "2/2 replicas ready").map(|e| (e.warning, e.reason));
        assert_eq!(running, Some((false, "Running".to_string())));
        assert!(phase_event(Some("Pending"), "Running", "m").is_some_and(|e| !e.warning));
        assert!(phase_event(Some("Running"), "Running", "m").is_none());
        assert!(phase_event(None, "Pending", "m").is_none());
        assert!(phase_event(Some("Pending"), "Pending", "m").is_none());
        let lost = phase_event(Some("Running"), "Pending", "2/3 replicas ready").map(|e| (e.warning, e.reason));
        assert_eq!(lost, Some((false, "Pending".to_string())));
    }
}
