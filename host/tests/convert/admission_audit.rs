//! The audit of stored objects (issue 30), end to end on both backends:
//! webapp 1.0.0 admits WebApps of 2, 5 and 8 replicas; once the WasmPlugin
//! serves webapp-strict 1.3.0 (at most 3 replicas), the audit of the
//! objects already stored reports the two it would refuse, in the
//! WasmPlugin's status, as a Warning event on each and in the gauges,
//! without refusing or changing anything.

use std::time::Duration;

use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::admission::{deploy, webapp, webapps};
use crate::support::{self, wait_until};
use crate::{CONVERGE, Fixture, get_json, write_atomically};

const REASON: &str = "AdmissionAuditViolation";

/// `status.admissionAudit` of WasmPlugin `name` once `pred` holds for it.
async fn wait_audit(fx: &Fixture, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let api = fx.wasmplugins();
    wait_until(&format!("WasmPlugin {name}: {what}"), CONVERGE, || async {
        let audit = get_json(&api, name)
            .await
            .map(|o| o["status"]["admissionAudit"].clone())
            .unwrap_or_default();
        if pred(&audit) {
            Ok(audit)
        } else {
            Err(audit.to_string())
        }
    })
    .await
}

/// The AdmissionAuditViolation events on WebApp `name` in `default`.
async fn audit_events(
    client: &kube::Client,
    name: &str,
) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(REASON)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect()
}

fn gauge(fx: &Fixture, family: &str) -> Option<String> {
    let prefix = format!(r#"wasm_operator_admission_audit_{family}{{plugin="webapp"}} "#);
    fx.registry
        .metrics()
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix).map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_of_stored_objects_reports_existing_violations_after_a_stricter_version_loads() {
    let fx = Fixture::start().await;
    let client = fx.client();
    support::install_crd(&client, &support::example_crd("webapp")).await;
    // A one-second period, so the test also sees that a violation found
    // again and again is reported once.
    deploy(
        &fx,
        "webapp",
        "webapp",
        json!({"admission": {"auditIntervalSeconds": 1}}),
    )
    .await;
    let api = webapps(&client, "default");
    for (name, replicas) in [("small", 2), ("big", 5), ("huge", 8)] {
        let object = webapp(name, json!({"replicas": replicas, "image": "nginx"}));
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("webapp 1.0.0 admits {replicas} replicas: {e}"));
    }
    let before = wait_audit(&fx, "webapp", "1.0.0 audited all three", |a| {
        a["version"] == "1.0.0" && a["checked"] == 3
    })
    .await;
    assert_eq!(before["violations"], 0, "{before}");
    assert_eq!(before["errors"], 0, "{before}");
    assert_eq!(gauge(&fx, "violations").as_deref(), Some("0"));

    // The stricter version serves: the objects already stored are judged.
    let strict = support::plugin_bytes("webapp_strict");
    let path = fx.dir.path().join("webapp-strict.wasm");
    write_atomically(&path, &strict);
    fx.wasmplugins()
        .patch(
            "webapp",
            &PatchParams::default(),
            &Patch::Merge(
                &json!({"spec": {"source": {"file": {"path": path.display().to_string()}}}}),
            ),
        )
        .await
        .unwrap();
    let audit = wait_audit(&fx, "webapp", "1.3.0 found two violations", |a| {
        a["version"] == "1.3.0" && a["checked"] == 3 && a["violations"] == 2
    })
    .await;
    assert_eq!(audit["errors"], 0, "{audit}");
    assert_eq!(audit["digest"], json!(crate::digest(&strict)), "{audit}");
    let named: Vec<&str> = audit["first"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(named, ["big", "huge"], "sorted by name: {audit}");
    let message = audit["first"][1]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 3") && message.contains("got 8"),
        "{message}"
    );
    assert!(message.contains("webapp 1.3.0"), "{message}");
    assert!(audit["startedAt"].is_string() && audit["finishedAt"].is_string());

    // A Warning event on each violating object, none on the other.
    for name in ["big", "huge"] {
        let events = wait_until(
            &format!("the audit's event on {name}"),
            CONVERGE,
            || async {
                let events = audit_events(&client, name).await;
                if events.is_empty() {
                    Err("none yet".to_string())
                } else {
                    Ok(events)
                }
            },
        )
        .await;
        let event = &events[0];
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        let note = event.note.as_deref().unwrap_or_default();
        assert!(
            note.contains("webapp 1.3.0") && note.contains("at most 3"),
            "{note}"
        );
        assert!(note.contains("Nothing was changed"), "{note}");
    }
    assert!(audit_events(&client, "small").await.is_empty());
    assert_eq!(gauge(&fx, "violations").as_deref(), Some("2"));
    assert_eq!(gauge(&fx, "checked").as_deref(), Some("3"));
    assert_eq!(gauge(&fx, "errors").as_deref(), Some("0"));

    // Several periods later the same violations were found again, and not
    // reported again: one event each, never repeated into a series.
    let first_run = audit["finishedAt"].clone();
    wait_audit(&fx, "webapp", "a later run", |a| {
        a["finishedAt"] != first_run && a["violations"] == 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["big", "huge"] {
        let events = audit_events(&client, name).await;
        assert_eq!(events.len(), 1, "{name}: {events:?}");
        assert!(events[0].series.is_none(), "{name}: {events:?}");
    }

    // The audit refused and changed nothing.
    let reviews = fx.registry.metrics().encode();
    assert!(
        !reviews.contains(r#"wasm_operator_admission_reviews_total{plugin="webapp",function="validate",result="refused"}"#),
        "{reviews}"
    );
    for (name, replicas) in [("small", 2), ("big", 5), ("huge", 8)] {
        let object = get_json(&api, name).await.unwrap();
        assert_eq!(object["spec"]["replicas"], replicas, "{object}");
        assert_eq!(object["metadata"]["generation"], 1, "{object}");
    }
}
