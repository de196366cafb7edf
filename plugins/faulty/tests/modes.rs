//! The modes that return (the others trap, spin or exhaust memory on purpose
//! and are exercised by the host's tests against the wasm component).

use std::cell::RefCell;
use std::rc::Rc;

use faulty::FaultyPlugin;
use serde_json::{Value, json};
use wasm_operator_sdk::cache::{self, CacheSource, ObjectRef};
use wasm_operator_sdk::{Context, DesiredJson, Failure, Reconciler, reconcile_json};

fn fault(spec: Value) -> String {
    json!({"apiVersion": "test.wasm-operator.dev/v1", "kind": "Fault",
           "metadata": {"name": "f1", "namespace": "ns"}, "spec": spec})
    .to_string()
}

fn run_at(attempt: u32, spec: Value) -> Result<DesiredJson, Failure> {
    reconcile_json::<FaultyPlugin>(
        &Context::new("1.0.0").with_attempt(attempt),
        &fault(spec),
        &[],
    )
}

fn children(out: &DesiredJson) -> Vec<Value> {
    out.children
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect()
}

#[test]
fn ok_returns_one_config_map() {
    let out = run_at(1, json!({"mode": "ok"})).unwrap();
    let c = children(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0]["apiVersion"].as_str(), c[0]["kind"].as_str()),
        (Some("v1"), Some("ConfigMap"))
    );
    assert_eq!(c[0]["metadata"]["name"], "f1");
    assert_eq!(out.conditions[0].status, "True");
}

#[test]
fn garbage_breaks_the_contract() {
    let out = run_at(1, json!({"mode": "garbage"})).unwrap();
    let c = children(&out);
    assert!(c[0].get("apiVersion").is_none() && c[0].get("kind").is_none());
    assert_eq!(out.conditions[0].status, "maybe");
}

#[test]
fn huge_output_has_the_requested_size() {
    let out = run_at(1, json!({"mode": "huge", "hugeMiB": 2})).unwrap();
    assert!(
        out.children[0].len() > 2 * 1024 * 1024,
        "{}",
        out.children[0].len()
    );
    assert!(out.children[0].len() < 2 * 1024 * 1024 + 1024);
}

#[test]
fn write_undeclared_returns_a_secret() {
    let out = run_at(1, json!({"mode": "write-undeclared"})).unwrap();
    assert_eq!(children(&out)[0]["kind"], "Secret");
    let m = FaultyPlugin::manifest();
    assert_eq!(
        m.owns.iter().map(|k| k.kind.as_str()).collect::<Vec<_>>(),
        ["ConfigMap"]
    );
    assert!(m.watches.is_empty() && !m.finalizer);
}

#[test]
fn transient_then_ok_fails_until_fail_times() {
    // Default failTimes 2: attempt 1 fails, attempt 2 succeeds.
    let err = run_at(1, json!({"mode": "transient-then-ok"})).unwrap_err();
    assert!(
        matches!(&err, Failure::Transient(m) if m.contains("attempt 1 fails")),
        "{err}"
    );
    assert_eq!(
        run_at(2, json!({"mode": "transient-then-ok"}))
            .unwrap()
            .children
            .len(),
        1
    );
    for attempt in 1..4 {
        assert!(
            run_at(
                attempt,
                json!({"mode": "transient-then-ok", "failTimes": 4})
            )
            .is_err()
        );
    }
    assert!(run_at(4, json!({"mode": "transient-then-ok", "failTimes": 4})).is_ok());
    assert!(run_at(1, json!({"mode": "transient-then-ok", "failTimes": 0})).is_ok());
}

#[test]
fn permanent_and_unknown_modes_fail_permanently() {
    assert!(matches!(
        run_at(1, json!({"mode": "permanent"})),
        Err(Failure::Permanent(_))
    ));
    let err = run_at(1, json!({"mode": "explode"})).unwrap_err();
    assert!(
        matches!(&err, Failure::Permanent(m) if m.starts_with("spec is invalid")),
        "{err}"
    );
}

struct Recorder(Rc<RefCell<Vec<ObjectRef>>>, Result<Option<String>, String>);

impl CacheSource for Recorder {
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, String> {
        self.0.borrow_mut().push(object.clone());
        self.1.clone()
    }
    fn list(
        &self,
        _: &str,
        _: &str,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

#[test]
fn read_undeclared_reads_a_secret_and_reports_the_answer() {
    let reads = Rc::new(RefCell::new(Vec::new()));
    let denial = Err("CapabilityDenied: faulty may not read v1/Secret".to_owned());
    cache::set_native_source(Some(Box::new(Recorder(reads.clone(), denial))));
    let err = run_at(1, json!({"mode": "read-undeclared"})).unwrap_err();
    assert!(
        matches!(&err, Failure::Transient(m) if m.contains("CapabilityDenied")),
        "{err}"
    );
    assert_eq!(
        reads.borrow()[0],
        ObjectRef::of::<k8s_openapi::api::core::v1::Secret>(Some("ns"), "f1")
    );

    cache::set_native_source(Some(Box::new(Recorder(reads.clone(), Ok(None)))));
    let err = run_at(1, json!({"mode": "read-undeclared"})).unwrap_err();
    assert!(
        matches!(&err, Failure::Transient(m) if m.contains("must refuse")),
        "{err}"
    );
    cache::set_native_source(None);
}
