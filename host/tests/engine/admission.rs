//! `admission.validate` and `admission.defaults` through the engine: on
//! webapp (both), on distributedkv (validate only, old-vs-new rules in both
//! API versions), on faulty (SDK-built, declares neither) and on
//! `backup-v1`, built against the contract before `admission` existed.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wasm_operator::contract::{AdmissionFunctions, AdmissionOperation, Failure, Verdict};
use wasm_operator::engine::{
    CallError, CallFailure, CallLimits, CallObserver, CallReport, Engine, EngineConfig,
    LoadedPlugin,
};

use super::{cache, component, ctx, engine, primary, webapp_spec};

async fn validate(
    plugin: &LoadedPlugin,
    operation: AdmissionOperation,
    object: &Value,
    old: Option<&Value>,
) -> Result<Verdict, CallError> {
    plugin
        .validate(
            &ctx(plugin),
            operation,
            object.to_string(),
            old.map(Value::to_string),
            cache(),
        )
        .await
}

async fn defaults(
    plugin: &LoadedPlugin,
    operation: AdmissionOperation,
    object: &Value,
) -> Result<Value, CallError> {
    plugin
        .defaults(&ctx(plugin), operation, object.to_string(), cache())
        .await
}

fn assert_not_implemented(result: Result<impl std::fmt::Debug, CallError>, function: &str) {
    let err = result.unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::NotImplemented),
        "{function}: {err}"
    );
    assert_eq!(err.site.function, function);
    assert_eq!(err.reason(), "NotImplemented");
}

#[tokio::test]
async fn webapp_refuses_replicas_outside_its_bounds() {
    let plugin = engine().load(&component("webapp")).unwrap();
    assert_eq!(
        plugin.admission_functions(),
        AdmissionFunctions {
            validate: true,
            defaults: true
        }
    );
    let mut spec = webapp_spec();
    let good = primary(&plugin, "shop", spec.clone());
    let verdict = validate(&plugin, AdmissionOperation::Create, &good, None)
        .await
        .unwrap();
    assert!(verdict.allowed, "{verdict:?}");
    assert!(verdict.message.is_empty() && verdict.fields.is_empty());
    spec["replicas"] = json!(0);
    let bad = primary(&plugin, "shop", spec);
    let verdict = validate(&plugin, AdmissionOperation::Update, &bad, Some(&good))
        .await
        .unwrap();
    assert!(!verdict.allowed);
    assert_eq!(
        verdict.message,
        "spec.replicas must be between 1 and 10, got 0"
    );
    assert_eq!(verdict.fields.len(), 1);
    assert_eq!(verdict.fields[0].path, "spec.replicas");
    // Deleting is not refused, whatever the spec.
    let verdict = validate(&plugin, AdmissionOperation::Delete, &bad, Some(&bad))
        .await
        .unwrap();
    assert!(verdict.allowed);
    // An object the plugin's type cannot read is refused with serde's words.
    let unreadable = primary(
        &plugin,
        "shop",
        json!({"image": "nginx", "replicas": "two"}),
    );
    let verdict = validate(&plugin, AdmissionOperation::Create, &unreadable, None)
        .await
        .unwrap();
    assert!(!verdict.allowed);
    assert!(
        verdict
            .message
            .starts_with("WebApp default/shop is invalid: invalid type: string \"two\""),
        "{}",
        verdict.message
    );
}

#[tokio::test]
async fn webapp_defaults_fill_the_port_and_nothing_else() {
    let plugin = engine().load(&component("webapp")).unwrap();
    let mut object = primary(
        &plugin,
        "shop",
        json!({"image": "nginx:1.27", "replicas": 2, "fromTheFuture": {"kept": true}}),
    );
    object["metadata"]["creationTimestamp"] = Value::Null;
    object["metadata"]["labels"] = json!({"team": "a"});
    let defaulted = defaults(&plugin, AdmissionOperation::Create, &object)
        .await
        .unwrap();
    let mut expected = object.clone();
    expected["spec"]["port"] = json!(80);
    assert_eq!(defaulted, expected);
    // A port that is set stays, and the object comes back as it was.
    let mut with_port = object.clone();
    with_port["spec"]["port"] = json!(8080);
    with_port["status"] = json!({"phase": "Running", "readyReplicas": 2, "observedGeneration": 1});
    assert_eq!(
        defaults(&plugin, AdmissionOperation::Update, &with_port)
            .await
            .unwrap(),
        with_port
    );
    // The plugin's error (an object its type cannot read) is permanent.
    let unreadable = primary(&plugin, "shop", json!({"image": 5, "replicas": 2}));
    let err = defaults(&plugin, AdmissionOperation::Create, &unreadable)
        .await
        .unwrap_err();
    assert!(
        matches!(&err.failure, CallFailure::Failed(Failure::Permanent(m)) if m.contains("is invalid")),
        "{err}"
    );
    assert_eq!(err.site.function, "admission.defaults");
}

#[tokio::test]
async fn a_verdict_is_bounded_by_the_output_limit() {
    let plugin = engine().load(&component("webapp")).unwrap();
    let plugin = plugin.with_limits(CallLimits {
        output_bytes: 16,
        ..plugin.limits()
    });
    let bad = primary(
        &plugin,
        "shop",
        json!({"image": "", "replicas": 0, "port": 0}),
    );
    let err = validate(&plugin, AdmissionOperation::Create, &bad, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure, CallFailure::OutputTooLarge { size, limit: 16 } if size > 16),
        "{err}"
    );
    assert_eq!(err.site.function, "admission.validate");
}

fn kv(api_version: &str, spec: Value) -> Value {
    json!({
        "apiVersion": api_version, "kind": "DistributedKV",
        "metadata": {"name": "sessions", "namespace": "default", "uid": "0b6f1c2e-2222-4c1e-9a35-2f0c6d7a8b90"},
        "spec": spec,
    })
}

const BETA: &str = "kv.example.com/v1beta1";
const ALPHA: &str = "kv.example.com/v1alpha1";

#[tokio::test]
async fn distributedkv_refuses_losing_its_quorum_or_shrinking_its_volumes() {
    let plugin = engine().load(&component("distributedkv")).unwrap();
    assert_eq!(
        plugin.admission_functions(),
        AdmissionFunctions {
            validate: true,
            defaults: false
        }
    );
    let old = kv(
        BETA,
        json!({"replicaCount": 5, "image": "kv:1.4", "storageSize": "1Gi"}),
    );
    let shrunk = kv(
        BETA,
        json!({"replicaCount": 2, "image": "kv:1.4", "storageSize": "1Gi"}),
    );
    let verdict = validate(&plugin, AdmissionOperation::Update, &shrunk, Some(&old))
        .await
        .unwrap();
    assert!(!verdict.allowed);
    assert!(
        verdict.message.starts_with(
            "spec.replicaCount cannot go from 5 to 2: below the quorum of the current 5 replicas (3)"
        ),
        "{}",
        verdict.message
    );
    assert_eq!(verdict.fields[0].path, "spec.replicaCount");
    // A v1alpha1 client shrinking the volume: the field as it writes it.
    let smaller = kv(
        ALPHA,
        json!({"size": 5, "image": "kv:1.4", "storage": {"size": "512Mi"}}),
    );
    let verdict = validate(&plugin, AdmissionOperation::Update, &smaller, Some(&old))
        .await
        .unwrap();
    assert!(!verdict.allowed);
    assert_eq!(
        verdict.message,
        "spec.storage.size cannot decrease from 1Gi to 512Mi: volumes cannot shrink"
    );
    assert_eq!(verdict.fields[0].path, "spec.storage.size");
    // The same size spelled another way, a quorum kept, and a create.
    let same = kv(
        BETA,
        json!({"replicaCount": 3, "image": "kv:1.5", "storageSize": "1024Mi"}),
    );
    for (operation, old) in [
        (AdmissionOperation::Update, Some(&old)),
        (AdmissionOperation::Create, None),
    ] {
        let verdict = validate(&plugin, operation, &same, old).await.unwrap();
        assert!(verdict.allowed, "{operation}: {verdict:?}");
    }
    assert_not_implemented(
        defaults(&plugin, AdmissionOperation::Create, &same).await,
        "admission.defaults",
    );
}

/// A component without `admission` (built before it existed) and an
/// SDK-built one that declares neither function load alike: no
/// functions, and calls are `NotImplemented`.
#[tokio::test]
async fn plugins_without_admission_implement_none() {
    for name in ["backup_v1", "webapp_next"] {
        let plugin = engine().load(&component(name)).unwrap();
        assert_eq!(
            plugin.admission_functions(),
            AdmissionFunctions::default(),
            "{name}"
        );
        let object = primary(&plugin, "x", json!({}));
        assert_not_implemented(
            validate(&plugin, AdmissionOperation::Create, &object, None).await,
            "admission.validate",
        );
        assert_not_implemented(
            defaults(&plugin, AdmissionOperation::Create, &object).await,
            "admission.defaults",
        );
    }
}

/// `admission.implemented` is read with the manifest, in the same call:
/// loading reports one call, and admission calls are reported by name.
#[tokio::test]
async fn admission_calls_are_observed_and_loading_is_one_call() {
    #[derive(Default)]
    struct Record(Mutex<Vec<(String, &'static str)>>);
    impl CallObserver for Record {
        fn observe(&self, r: &CallReport<'_>) {
            self.0
                .lock()
                .unwrap()
                .push((r.function.to_string(), r.outcome));
        }
    }
    let record = Arc::new(Record::default());
    let engine = Engine::new(EngineConfig {
        observer: Some(record.clone()),
        ..Default::default()
    })
    .unwrap();
    let plugin = engine.load(&component("webapp")).unwrap();
    let object = primary(&plugin, "shop", webapp_spec());
    validate(&plugin, AdmissionOperation::Create, &object, None)
        .await
        .unwrap();
    defaults(&plugin, AdmissionOperation::Create, &object)
        .await
        .unwrap();
    let seen = record.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        vec![
            ("manifest".to_string(), "Ok"),
            ("admission.validate".to_string(), "Ok"),
            ("admission.defaults".to_string(), "Ok"),
        ]
    );
}
