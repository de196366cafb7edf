//! The round-trip gate: a version whose `convert` loses a field or traps on
//! a stored object never serves; the previous version keeps serving
//! conversions and reconciles.

use crate::{Fixture, alpha, beta};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_convert_is_refused_naming_object_and_path_until_allowed() {
    let fx = Fixture::start().await;
    let good = fx.deploy("distributedkv").await;
    fx.create_kv(beta("sessions", 5, 2)).await;
    fx.create_kv(alpha("orders", 3)).await;

    let lossy = fx.swap_file("distributedkv_lossy");
    let message = fx.wait_degraded("ConversionNotLossless", &good).await;
    assert!(message.contains("distributedkv 1.1.0"), "{message}");
    assert!(
        message.contains("DistributedKV default/sessions does not come back identical through kv.example.com/v1alpha1: .spec.maxUnavailable"),
        "{message}"
    );
    // `orders` sets no v1beta1-only field: it survives and is not named.
    assert!(!message.contains("orders"), "{message}");
    assert!(message.contains("allowLossyConversion"), "{message}");
    assert_eq!(
        fx.registry.current("distributedkv").unwrap().info.version,
        "1.0.0"
    );

    // 1.0.0 still answers the webhook: the field survives a v1alpha1 read.
    let sessions = fx.read_kv("v1alpha1", "sessions").await;
    assert_eq!(
        sessions["metadata"]["annotations"]["kv.example.com/v1beta1-fields"],
        r#"{"maxUnavailable":2}"#,
        "{sessions}"
    );

    // Allowed explicitly, the lossy version serves.
    fx.patch_spec(serde_json::json!({"allowLossyConversion": true}))
        .await;
    fx.wait_serving(&lossy).await;
    assert_eq!(
        fx.registry.current("distributedkv").unwrap().info.version,
        "1.1.0"
    );
    // The swap switched conversions too: 1.1.0 answers, and drops the field.
    let sessions = fx.read_kv("v1alpha1", "sessions").await;
    assert!(
        sessions["metadata"]
            .get("annotations")
            .and_then(|a| a.get("kv.example.com/v1beta1-fields"))
            .is_none(),
        "{sessions}"
    );
    assert_eq!(sessions["spec"]["size"], 5, "{sessions}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_convert_that_traps_on_one_object_is_refused_naming_it() {
    let fx = Fixture::start().await;
    let good = fx.deploy("distributedkv").await;
    fx.create_kv(beta("fine", 3, 1)).await;
    let mut poison = alpha("poison", 1);
    poison["metadata"]["annotations"] = serde_json::json!({"kv.example.com/trap-convert": "yes"});
    fx.create_kv(poison).await;

    fx.swap_file("distributedkv_trap");
    let message = fx.wait_degraded("ConversionNotLossless", &good).await;
    assert!(message.contains("distributedkv 1.2.0"), "{message}");
    assert!(
        message
            .contains("converting DistributedKV default/poison to kv.example.com/v1alpha1 failed"),
        "{message}"
    );
    assert!(!message.contains("default/fine"), "{message}");
    // Allowing lossy conversion does not let a failing convert through.
    fx.patch_spec(serde_json::json!({"allowLossyConversion": true}))
        .await;
    let message = fx.wait_degraded("ConversionNotLossless", &good).await;
    assert!(message.contains("default/poison"), "{message}");

    // 1.0.0 keeps converting, the poisoned object included.
    let object = fx.read_kv("v1alpha1", "poison").await;
    assert_eq!(object["spec"]["size"], 1, "{object}");
    let object = fx.read_kv("v1alpha1", "fine").await;
    assert_eq!(object["spec"]["size"], 3, "{object}");
    assert_eq!(
        fx.registry.current("distributedkv").unwrap().info.version,
        "1.0.0"
    );
}
