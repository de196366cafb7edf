//! Admission through the JSON entry points the wasm export glue uses:
//! typed `validate` and `defaults`, and how the typed answer of `defaults`
//! is written back over the object the host passed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasm_operator_sdk::__private::{
    DefaultsHook, OpaqueObject as _, Probe, SerializableObject as _,
};
use wasm_operator_sdk::{
    Children, Context, Desired, Failure, Kind, Manifest, Operation, Reconciler, Verdict,
    defaults_json, validate_json,
};

#[derive(Deserialize, Serialize)]
struct Pool {
    metadata: ObjectMeta,
    spec: PoolSpec,
}

#[derive(Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
struct PoolSpec {
    size: i32,
    #[serde(default = "default_tier")]
    tier: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    zone: Option<String>,
    /// Serialized as `null` when `None`: must never clear a field.
    #[serde(default)]
    note: Option<String>,
}

fn default_tier() -> String {
    "standard".to_owned()
}

/// Refuses shrinking and sizes above 10; defaults the zone from the tier.
struct PoolPlugin;

impl Reconciler for PoolPlugin {
    type Object = Pool;

    fn manifest() -> Manifest {
        Manifest::new("pool", "1.0.0")
            .primary(Kind::namespaced("example.com", "v1", "Pool", "pools"))
            .implements_validate()
            .implements_defaults()
    }

    fn reconcile(_: &Context, _: Pool, _: &Children) -> Result<Desired, Failure> {
        Ok(Desired::new())
    }

    fn validate(
        _ctx: &Context,
        operation: Operation,
        pool: Pool,
        old: Option<Pool>,
    ) -> Result<Verdict, String> {
        if pool.spec.size > 10 {
            let problem = format!("must be at most 10, got {}", pool.spec.size);
            return Ok(Verdict::refuse(format!("spec.size {problem}")).field("spec.size", problem));
        }
        if let (Operation::Update, Some(old)) = (operation, old)
            && pool.spec.size < old.spec.size
        {
            return Ok(Verdict::refuse(format!(
                "spec.size cannot shrink from {} to {}",
                old.spec.size, pool.spec.size
            )));
        }
        if pool.spec.size < 0 {
            return Err("cannot judge a negative size".into());
        }
        Ok(Verdict::allow().warn(format!("{operation} checked")))
    }

    fn defaults(_ctx: &Context, _operation: Operation, mut pool: Pool) -> Result<Pool, String> {
        if pool.spec.zone.is_none() {
            pool.spec.zone = Some(format!("{}-zone", pool.spec.tier));
        }
        if pool.spec.size < 0 {
            return Err("no defaults for a negative size".into());
        }
        Ok(pool)
    }
}

fn pool(spec: Value) -> Value {
    json!({
        "apiVersion": "example.com/v1", "kind": "Pool",
        "metadata": {
            "name": "p", "namespace": "ns", "creationTimestamp": null, "generation": 1,
            "labels": {"app": "p"},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "apiVersion": "example.com/v1",
                               "time": "2026-01-01T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:spec": {"f:size": {}}}}],
        },
        "spec": spec,
        "status": {"observedGeneration": 1, "conditions": []},
    })
}

fn ctx() -> Context {
    Context::new("1.0.0")
}

#[test]
fn validate_runs_the_typed_rules() {
    let allowed = validate_json::<PoolPlugin>(
        &ctx(),
        Operation::Create,
        &pool(json!({"size": 3})).to_string(),
        None,
    )
    .unwrap();
    assert!(allowed.allowed, "{allowed:?}");
    assert_eq!(allowed.warnings, ["CREATE checked"]);
    let too_big = validate_json::<PoolPlugin>(
        &ctx(),
        Operation::Create,
        &pool(json!({"size": 11})).to_string(),
        None,
    )
    .unwrap();
    assert!(!too_big.allowed);
    assert_eq!(too_big.message, "spec.size must be at most 10, got 11");
    assert_eq!(too_big.fields[0].path, "spec.size");
    let shrunk = validate_json::<PoolPlugin>(
        &ctx(),
        Operation::Update,
        &pool(json!({"size": 2})).to_string(),
        Some(&pool(json!({"size": 5})).to_string()),
    )
    .unwrap();
    assert_eq!(shrunk.message, "spec.size cannot shrink from 5 to 2");
    let err = validate_json::<PoolPlugin>(
        &ctx(),
        Operation::Create,
        &pool(json!({"size": -1})).to_string(),
        None,
    )
    .unwrap_err();
    assert_eq!(err, "cannot judge a negative size");
}

#[test]
fn an_object_that_does_not_fit_the_type_is_refused_on_write_only() {
    let bad = pool(json!({"size": "three"})).to_string();
    let refused = validate_json::<PoolPlugin>(&ctx(), Operation::Create, &bad, None).unwrap();
    assert!(!refused.allowed);
    assert!(
        refused
            .message
            .starts_with("Pool ns/p is invalid: invalid type: string \"three\""),
        "{}",
        refused.message
    );
    // Deleting an object the plugin cannot read is not the plugin's to refuse.
    let deleted = validate_json::<PoolPlugin>(&ctx(), Operation::Delete, &bad, Some(&bad)).unwrap();
    assert!(deleted.allowed);
    assert!(
        deleted
            .warnings
            .iter()
            .any(|w| w.starts_with("not validated: Pool ns/p is invalid"))
    );
    // A stored object that does not fit is left out, with a warning.
    let updated = validate_json::<PoolPlugin>(
        &ctx(),
        Operation::Update,
        &pool(json!({"size": 1})).to_string(),
        Some(&bad),
    )
    .unwrap();
    assert!(updated.allowed, "{updated:?}");
    assert!(
        updated.warnings[0].contains("the stored Pool ns/p does not fit"),
        "{updated:?}"
    );
    assert_eq!(updated.warnings[1], "UPDATE checked");
    assert!(
        validate_json::<PoolPlugin>(&ctx(), Operation::Create, "{\"spec\":", None)
            .unwrap_err()
            .contains("not JSON")
    );
}

#[test]
fn a_delete_without_an_object_is_judged_on_the_old_one() {
    let old = pool(json!({"size": 4})).to_string();
    let verdict =
        validate_json::<PoolPlugin>(&ctx(), Operation::Delete, "null", Some(&old)).unwrap();
    assert!(verdict.allowed);
    assert_eq!(verdict.warnings, ["DELETE checked"]);
}

#[test]
fn defaults_are_written_over_the_object_keeping_unknown_fields() {
    let mut object = pool(json!({"size": 3, "unknown": {"kept": true}, "note": "hi"}));
    object["metadata"]["annotations"] = json!({"other.example.com/x": "y"});
    let defaulted: Value = serde_json::from_str(
        &defaults_json::<PoolPlugin>(&ctx(), Operation::Create, &object.to_string()).unwrap(),
    )
    .unwrap();
    let mut expected = object.clone();
    // The type's own default (tier) and the plugin's (zone).
    expected["spec"]["tier"] = json!("standard");
    expected["spec"]["zone"] = json!("standard-zone");
    assert_eq!(defaulted, expected);
}

#[test]
fn a_typed_round_trip_changes_nothing_else() {
    let object = pool(json!({"size": 3, "tier": "gold", "zone": "z"}));
    let defaulted: Value = serde_json::from_str(
        &defaults_json::<PoolPlugin>(&ctx(), Operation::Update, &object.to_string()).unwrap(),
    )
    .unwrap();
    // Metadata (a null creationTimestamp, managedFields' times), status and
    // apiVersion/kind: all as they were.
    assert_eq!(defaulted, object);
}

#[test]
fn defaults_leave_deletes_alone_and_fail_on_objects_they_cannot_read() {
    let text = pool(json!({"size": 3})).to_string();
    assert_eq!(
        defaults_json::<PoolPlugin>(&ctx(), Operation::Delete, &text).unwrap(),
        text
    );
    let bad = pool(json!({"size": "three"})).to_string();
    let err = defaults_json::<PoolPlugin>(&ctx(), Operation::Create, &bad).unwrap_err();
    assert!(err.starts_with("Pool ns/p is invalid"), "{err}");
    let refused = pool(json!({"size": -1})).to_string();
    assert_eq!(
        defaults_json::<PoolPlugin>(&ctx(), Operation::Create, &refused).unwrap_err(),
        "no defaults for a negative size"
    );
    assert!(
        defaults_json::<PoolPlugin>(&ctx(), Operation::Create, "nope")
            .unwrap_err()
            .contains("not JSON")
    );
}

/// A plugin whose object type only deserializes, without admission.
#[derive(Deserialize)]
struct Opaque {
    #[allow(dead_code)]
    spec: Value,
}

struct OpaquePlugin;

impl Reconciler for OpaquePlugin {
    type Object = Opaque;

    fn manifest() -> Manifest {
        Manifest::new("opaque", "1.0.0")
    }

    fn reconcile(_: &Context, _: Opaque, _: &Children) -> Result<Desired, Failure> {
        Ok(Desired::new())
    }
}

#[test]
fn admission_defaults_to_not_implemented() {
    let object = json!({"spec": {}}).to_string();
    let err = validate_json::<OpaquePlugin>(&ctx(), Operation::Create, &object, None).unwrap_err();
    assert!(
        err.contains("does not implement admission.validate") && err.contains("CREATE"),
        "{err}"
    );
    let manifest = OpaquePlugin::manifest();
    assert!(!manifest.implements_validate && !manifest.implements_defaults);
    let manifest = PoolPlugin::manifest();
    assert!(manifest.implements_validate && manifest.implements_defaults);
}

/// What `export_plugin!` does for a concrete plugin type: `defaults` runs
/// the plugin's when its object serializes, and says why not otherwise.
/// (Both borrows pick the method: autoref specialization.)
#[test]
#[allow(clippy::needless_borrow)]
fn the_export_picks_defaults_by_whether_the_object_serializes() {
    let object = pool(json!({"size": 1})).to_string();
    let typed = (&&Probe::<PoolPlugin>::new()).defaults_fn();
    let answer: Value =
        serde_json::from_str(&typed(&ctx(), Operation::Create, &object).unwrap()).unwrap();
    assert_eq!(answer["spec"]["zone"], "standard-zone");
    let opaque = (&&Probe::<OpaquePlugin>::new()).defaults_fn();
    let err = opaque(&ctx(), Operation::Create, &object).unwrap_err();
    assert!(err.contains("does not implement serde::Serialize"), "{err}");
    // A plugin with a serializable object but no defaults of its own.
    struct ValuePlugin;
    impl Reconciler for ValuePlugin {
        type Object = Value;
        fn manifest() -> Manifest {
            Manifest::new("value", "1.0.0")
        }
        fn reconcile(_: &Context, _: Value, _: &Children) -> Result<Desired, Failure> {
            Ok(Desired::new())
        }
    }
    let untyped = (&&Probe::<ValuePlugin>::new()).defaults_fn();
    assert!(
        untyped(&ctx(), Operation::Create, &object)
            .unwrap_err()
            .contains("does not implement admission.defaults")
    );
    struct Hook;
    impl DefaultsHook for Hook {
        fn defaults_json(_: &Context, _: Operation, object: &str) -> Result<String, String> {
            Ok(object.to_owned())
        }
    }
    assert_eq!(
        Hook::defaults_json(&ctx(), Operation::Create, "{}").unwrap(),
        "{}"
    );
}
