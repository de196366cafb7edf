//! The JSON entry points the wasm export glue uses, with a small plugin.

use std::cell::Cell;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Value, json};
use wasm_operator_sdk::cache::{self, CacheError, CacheSource, ObjectRef};
use wasm_operator_sdk::{
    BackupPlan, Children, Context, Desired, Failure, Finalized, Kind, Manifest, Reconciler,
    convert_json, finalize_json, plan_json, reconcile_json, restore_json, upgrade_json,
};

#[derive(Deserialize)]
struct Echo {
    metadata: ObjectMeta,
    spec: EchoSpec,
}

#[derive(Deserialize)]
struct EchoSpec {
    text: String,
}

struct EchoPlugin;

impl Reconciler for EchoPlugin {
    type Object = Echo;

    fn manifest() -> Manifest {
        Manifest::new("echo", "0.1.0")
            .primary(Kind::namespaced("example.com", "v1", "Echo", "echoes"))
            .owns::<ConfigMap>()
    }

    fn reconcile(_ctx: &Context, echo: Echo, children: &Children) -> Result<Desired, Failure> {
        let cm = ConfigMap {
            metadata: ObjectMeta {
                name: echo.metadata.name,
                ..Default::default()
            },
            data: Some([("text".to_owned(), echo.spec.text)].into()),
            ..Default::default()
        };
        Desired::new()
            .child(&cm)?
            .status_of(&json!({"children": children.len()}))
    }
}

fn echo(text: &str) -> String {
    json!({"apiVersion": "example.com/v1", "kind": "Echo",
           "metadata": {"name": "e", "namespace": "ns"}, "spec": {"text": text}})
    .to_string()
}

#[test]
fn reconcile_json_runs_the_plugin_on_json() {
    let out = reconcile_json::<EchoPlugin>(&Context::new("0.1.0"), &echo("hi"), &["{}".to_owned()])
        .unwrap();
    let child: Value = serde_json::from_str(&out.children[0]).unwrap();
    assert_eq!(child["data"]["text"], "hi");
    assert_eq!(child["kind"], "ConfigMap");
    assert_eq!(out.status.as_deref(), Some(r#"{"children":1}"#));
}

#[test]
fn object_that_does_not_fit_the_type_is_a_permanent_spec_error() {
    let bad = json!({"apiVersion": "example.com/v1", "kind": "Echo",
                     "metadata": {"name": "e", "namespace": "ns"}, "spec": {"text": 5}})
    .to_string();
    let err = reconcile_json::<EchoPlugin>(&Context::new("0.1.0"), &bad, &[]).unwrap_err();
    match err {
        Failure::Permanent(m) => {
            assert!(m.starts_with("spec is invalid:"), "{m}");
            assert!(m.contains("Echo ns/e"), "{m}");
        }
        other => panic!("expected permanent, got {other:?}"),
    }
}

#[test]
fn object_that_is_not_json_is_a_transient_host_error() {
    let err =
        reconcile_json::<EchoPlugin>(&Context::new("0.1.0"), "{\"apiVersion\":", &[]).unwrap_err();
    assert!(
        matches!(&err, Failure::Transient(m) if m.contains("not JSON")),
        "{err}"
    );
}

#[test]
fn optional_interfaces_default_to_not_implemented() {
    let ctx = Context::new("0.1.0");
    assert_eq!(
        finalize_json::<EchoPlugin>(&ctx, &echo("x"), &[]).unwrap(),
        Finalized::Done
    );
    let err = upgrade_json::<EchoPlugin>(&ctx, &echo("x"), "0.0.9").unwrap_err();
    assert!(
        err.contains("does not implement migration.upgrade") && err.contains("0.0.9"),
        "{err}"
    );
    assert!(
        convert_json::<EchoPlugin>(&echo("x"), "example.com/v2")
            .unwrap_err()
            .contains("migration.convert")
    );
    assert!(
        plan_json::<EchoPlugin>(&ctx, &echo("x"))
            .unwrap_err()
            .contains("backup.plan")
    );
    assert!(
        restore_json::<EchoPlugin>(&ctx, &echo("x"), "{}")
            .unwrap_err()
            .contains("backup.restore")
    );
    assert!(
        convert_json::<EchoPlugin>("nope", "v2")
            .unwrap_err()
            .contains("not JSON")
    );
}

struct Upgrader;

impl Reconciler for Upgrader {
    type Object = Value;

    fn manifest() -> Manifest {
        Manifest::new("up", "2.0.0").implements_migration()
    }

    fn reconcile(_ctx: &Context, _object: Value, _children: &Children) -> Result<Desired, Failure> {
        Ok(Desired::new())
    }

    fn upgrade(_ctx: &Context, mut object: Value, from: &str) -> Result<Value, String> {
        object["spec"]["upgradedFrom"] = json!(from);
        Ok(object)
    }
}

#[test]
fn overridden_upgrade_is_used() {
    let out = upgrade_json::<Upgrader>(&Context::new("2.0.0"), r#"{"spec":{}}"#, "1.0.0").unwrap();
    assert_eq!(out, r#"{"spec":{"upgradedFrom":"1.0.0"}}"#);
}

/// Backs up Echoes whose text is not empty, restoring from the Backup's
/// `status.location`.
struct Backer;

impl Reconciler for Backer {
    type Object = Echo;

    fn manifest() -> Manifest {
        Manifest::new("backer", "1.0.0").implements_backup()
    }

    fn reconcile(_ctx: &Context, _object: Echo, _children: &Children) -> Result<Desired, Failure> {
        Ok(Desired::new())
    }

    fn plan(_ctx: &Context, echo: Echo) -> Result<Option<BackupPlan>, String> {
        Ok((!echo.spec.text.is_empty()).then(|| {
            BackupPlan::new(
                "0 3 * * *",
                json!({"apiVersion": "batch/v1", "kind": "Job"}),
            )
            .retain(2)
            .time_zone(echo.spec.text)
        }))
    }

    fn restore(_ctx: &Context, _echo: Echo, backup: Value) -> Result<Value, String> {
        let location = backup
            .pointer("/status/location")
            .and_then(Value::as_str)
            .ok_or("the Backup has no status.location")?;
        Ok(json!({"kind": "Job", "from": location}))
    }
}

#[test]
fn plan_and_restore_run_the_plugin_on_json() {
    let ctx = Context::new("1.0.0");
    assert_eq!(plan_json::<Backer>(&ctx, &echo("")).unwrap(), None);
    let plan = plan_json::<Backer>(&ctx, &echo("Europe/Berlin"))
        .unwrap()
        .unwrap();
    assert_eq!(plan.time_zone.as_deref(), Some("Europe/Berlin"));
    assert_eq!((plan.retain, plan.keep_failed), (2, None));
    assert!(
        plan_json::<Backer>(&ctx, r#"{"spec":{"text":1}}"#)
            .unwrap_err()
            .starts_with("spec is invalid")
    );
    let job =
        restore_json::<Backer>(&ctx, &echo("x"), r#"{"status":{"location":"s3://b/k"}}"#).unwrap();
    assert_eq!(job, r#"{"kind":"Job","from":"s3://b/k"}"#);
    assert!(
        restore_json::<Backer>(&ctx, &echo("x"), "{}")
            .unwrap_err()
            .contains("status.location")
    );
    assert!(
        restore_json::<Backer>(&ctx, &echo("x"), "{")
            .unwrap_err()
            .contains("not JSON")
    );
}

struct FakeCache {
    reads: Cell<u32>,
}

impl CacheSource for FakeCache {
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, String> {
        self.reads.set(self.reads.get() + 1);
        match (object.kind.as_str(), object.name.as_str()) {
            ("Secret", _) => Err("CapabilityDenied: plugin may not read v1/Secret".into()),
            ("ConfigMap", "present") => Ok(Some(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "present"}})
                    .to_string(),
            )),
            ("ConfigMap", "broken") => Ok(Some("{".into())),
            _ => Ok(None),
        }
    }

    fn list(
        &self,
        _: &str,
        kind: &str,
        namespace: Option<&str>,
        selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        assert_eq!((namespace, selector), (Some("ns"), Some("app=web")));
        Ok(vec![
            json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "a"}}).to_string(),
        ])
    }
}

#[test]
fn cache_reads_go_through_the_native_source() {
    assert_eq!(
        cache::get::<ConfigMap>(Some("ns"), "present").unwrap_err(),
        CacheError::NoHost
    );
    cache::set_native_source(Some(Box::new(FakeCache {
        reads: Cell::new(0),
    })));
    let cm = cache::get::<ConfigMap>(Some("ns"), "present")
        .unwrap()
        .unwrap();
    assert_eq!(cm.metadata.name.as_deref(), Some("present"));
    assert!(
        cache::get::<ConfigMap>(Some("ns"), "absent")
            .unwrap()
            .is_none()
    );
    let denied = cache::get::<Secret>(Some("ns"), "s").unwrap_err();
    assert!(matches!(&denied, CacheError::Host(m) if m.contains("CapabilityDenied")));
    let failure: Failure = denied.into();
    assert!(matches!(failure, Failure::Transient(m) if m.contains("CapabilityDenied")));
    assert!(matches!(
        cache::get::<ConfigMap>(Some("ns"), "broken"),
        Err(CacheError::Parse { .. })
    ));
    let listed = cache::list::<ConfigMap>(Some("ns"), Some("app=web")).unwrap();
    assert_eq!(listed[0].metadata.name.as_deref(), Some("a"));
    let raw = cache::get_json(&ObjectRef::of::<ConfigMap>(Some("ns"), "present"))
        .unwrap()
        .unwrap();
    assert_eq!(raw["kind"], "ConfigMap");
    assert!(cache::set_native_source(None).is_some());
}
