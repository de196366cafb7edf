//! The CRD itself: the deploy/ and examples/ copies agree, the schema
//! enforces exactly one source, and the controller refuses to start without
//! the CRD.

use kube::api::{DynamicObject, PostParams};
use serde_json::json;
use wasm_operator::wasmplugin::{WasmPluginController, WasmPluginError};

use crate::support;
use crate::{Fixture, condition_is, file_spec};

#[test]
fn deploy_and_example_crds_are_identical() {
    let root = support::workspace();
    let deploy = std::fs::read_to_string(root.join("deploy/crds/wasmplugin.yaml")).unwrap();
    let example = std::fs::read_to_string(root.join("examples/wasmplugin/crd.yaml")).unwrap();
    assert_eq!(
        deploy, example,
        "keep deploy/crds/wasmplugin.yaml and examples/wasmplugin/crd.yaml identical"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_requires_exactly_one_source() {
    let fx = Fixture::start().await;
    let api = fx.wasmplugins();
    for (name, source) in [
        (
            "two-sources",
            json!({"file": {"path": "/x.wasm"}, "configMap": {"namespace": "a", "name": "b", "key": "c"}}),
        ),
        ("no-source", json!({})),
    ] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
            "metadata": {"name": name}, "spec": {"source": source},
        }))
        .unwrap();
        let err = api
            .create(&PostParams::default(), &object)
            .await
            .unwrap_err();
        match err {
            kube::Error::Api(e) => assert_eq!(e.code, 422, "{name}: {e:?}"),
            other => panic!("{name}: {other}"),
        }
    }

    // A valid one is accepted and gets a status (here: the file is missing).
    fx.create("missing-file", file_spec(&fx.dir.path().join("nope.wasm")))
        .await;
    let o = fx
        .wait_for("missing-file", "Ready False (SourceNotFound)", |o| {
            condition_is(o, "Ready", "False")
                && crate::support::condition(o, "Ready").and_then(|c| c.get("reason"))
                    == Some(&json!("SourceNotFound"))
        })
        .await;
    let message = crate::support::condition(&o, "Degraded").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("nope.wasm"), "{message}");
    let (kind, _) = fx.wait_event("missing-file", "SourceNotFound").await;
    assert_eq!(kind, "Warning");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controller_requires_the_crd() {
    crate::install_crypto_provider();
    let cluster = support::start_cluster().await;
    let registry = wasm_operator::registry::Registry::new(Default::default()).unwrap();
    let err = WasmPluginController::start(cluster.client(), registry)
        .await
        .unwrap_err();
    assert!(matches!(err, WasmPluginError::CrdNotInstalled), "{err:?}");
    assert!(
        err.to_string().contains("deploy/crds/wasmplugin.yaml"),
        "{err}"
    );
}
