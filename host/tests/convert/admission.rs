//! Admission from plugin logic (issue 30), end to end on both backends:
//! the host keeps a Validating- and MutatingWebhookConfiguration per
//! admitting plugin pointed at its `/validate` and `/mutate`, and the API
//! server (the devcluster's admission chain, or kube-apiserver's) calls
//! them. webapp refuses replicas outside 1–100 and defaults its port;
//! DistributedKV refuses shrinking below its quorum and a smaller storage
//! size; modes switch between Enforce, Warn and Audit.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::support::{self, wait_until};
use crate::{CONVERGE, Fixture, condition_is, digest, get_json, write_atomically};

pub(crate) fn webapps(client: &kube::Client, namespace: &str) -> Api<DynamicObject> {
    support::dynamic_api(
        client,
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(namespace),
    )
}

fn configurations(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    support::dynamic_api(
        client,
        &support::api_resource("admissionregistration.k8s.io", "v1", kind, plural),
        None,
    )
}

/// Deploys the built `plugin` as WasmPlugin `name` with `spec` merged in,
/// and waits until it serves and its webhook configurations exist.
pub(crate) async fn deploy(fx: &Fixture, name: &str, plugin: &str, spec: Value) {
    let bytes = support::plugin_bytes(plugin);
    let path = fx.dir.path().join(format!("{name}.wasm"));
    write_atomically(&path, &bytes);
    let mut full = json!({"source": {"file": {"path": path.display().to_string()}}});
    if let (Some(full), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        full.extend(extra.clone());
    }
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "wasm-operator.dev/v1alpha1", "kind": "WasmPlugin",
        "metadata": {"name": name}, "spec": full,
    }))
    .unwrap();
    fx.wasmplugins()
        .create(&PostParams::default(), &object)
        .await
        .unwrap();
    let digest = digest(&bytes);
    let api = fx.wasmplugins();
    wait_until(&format!("WasmPlugin {name} serving"), CONVERGE, || async {
        match get_json(&api, name).await {
            Some(o)
                if condition_is(&o, "Ready", "True") && o["status"]["digest"] == json!(digest) =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let validating = configurations(
        &fx.client(),
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    let configuration = format!("wasm-operator-{name}");
    wait_until(
        "the plugin's ValidatingWebhookConfiguration",
        CONVERGE,
        || async {
            get_json(&validating, &configuration)
                .await
                .map(|_| ())
                .ok_or_else(|| "none yet".to_string())
        },
    )
    .await;
}

pub(crate) fn webapp(name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebApp",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .unwrap()
}

/// The API server's message for a refused write.
fn refusal(result: kube::Result<DynamicObject>) -> String {
    match result {
        Ok(object) => panic!("admitted: {object:?}"),
        Err(kube::Error::Api(response)) => response.message,
        Err(other) => panic!("not an API refusal: {other}"),
    }
}

async fn create(api: &Api<DynamicObject>, object: &DynamicObject) -> kube::Result<DynamicObject> {
    api.create(&PostParams::default(), object).await
}

fn kv(name: &str, replicas: i64, storage: &str) -> Value {
    json!({
        "apiVersion": "kv.example.com/v1beta1", "kind": "DistributedKV",
        "metadata": {"name": name},
        "spec": {"replicaCount": replicas, "image": "kv:1", "storageSize": storage},
    })
}

/// Patches DistributedKV `name` in `namespace` (v1beta1).
async fn patch_kv(
    fx: &Fixture,
    namespace: &str,
    name: &str,
    patch: Value,
) -> kube::Result<DynamicObject> {
    kvs_in(fx, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Grows DistributedKV `default/quorum`'s disk to 8Gi (admitted in every
/// mode), then shrinks it to 1Gi: the answer to the shrink. Each call is a
/// real decrease, whatever the previous call left.
async fn shrink_disk(fx: &Fixture) -> kube::Result<DynamicObject> {
    patch_kv(
        fx,
        "default",
        "quorum",
        json!({"spec": {"storageSize": "8Gi"}}),
    )
    .await?;
    patch_kv(
        fx,
        "default",
        "quorum",
        json!({"spec": {"storageSize": "1Gi"}}),
    )
    .await
}

fn kvs_in(fx: &Fixture, namespace: &str) -> Api<DynamicObject> {
    support::dynamic_api(
        &fx.client(),
        &support::api_resource(
            "kv.example.com",
            "v1beta1",
            "DistributedKV",
            "distributedkvs",
        ),
        Some(namespace),
    )
}

async fn set_mode(fx: &Fixture, name: &str, mode: &str) {
    fx.wasmplugins()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"admission": {"mode": mode}}})),
        )
        .await
        .unwrap();
}

fn counted(fx: &Fixture, plugin: &str, function: &str, result: &str) -> bool {
    fx.registry.metrics().encode().contains(&format!(
        r#"wasm_operator_admission_reviews_total{{plugin="{plugin}",function="{function}",result="{result}"}}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributedkv_refuses_shrinking_below_quorum_and_a_smaller_disk_in_every_mode() {
    let fx = Fixture::start().await;
    deploy(&fx, "distributedkv", "distributedkv", json!({})).await;
    let api = kvs_in(&fx, "default");
    let object: DynamicObject = serde_json::from_value(kv("quorum", 5, "2Gi")).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap();

    // Enforce: refused with the plugin's message, naming the field.
    let message = wait_until("the refusal of 5 → 2 replicas", CONVERGE, || async {
        match patch_kv(
            &fx,
            "default",
            "quorum",
            json!({"spec": {"replicaCount": 2}}),
        )
        .await
        {
            Err(kube::Error::Api(response)) => Ok(response.message),
            Ok(_) => {
                // Admitted before the configuration reached the API server: undo.
                let _ = patch_kv(
                    &fx,
                    "default",
                    "quorum",
                    json!({"spec": {"replicaCount": 5}}),
                )
                .await;
                Err("admitted".to_string())
            }
            Err(other) => Err(other.to_string()),
        }
    })
    .await;
    assert!(message.contains("spec.replicaCount"), "{message}");
    assert!(message.contains("quorum"), "{message}");
    assert!(
        message.contains("distributedkv"),
        "names the plugin: {message}"
    );
    let message = refusal(
        patch_kv(
            &fx,
            "default",
            "quorum",
            json!({"spec": {"storageSize": "1Gi"}}),
        )
        .await,
    );
    assert!(
        message.contains("2Gi") && message.contains("1Gi"),
        "{message}"
    );
    assert!(counted(&fx, "distributedkv", "validate", "refused"));
    // Within the quorum, and a larger disk: admitted.
    patch_kv(
        &fx,
        "default",
        "quorum",
        json!({"spec": {"replicaCount": 3, "storageSize": "4Gi"}}),
    )
    .await
    .expect("3 of 5 keeps the quorum, and a larger disk is fine");

    // kube-system is never sent.
    let system: DynamicObject = serde_json::from_value(kv("system", 5, "2Gi")).unwrap();
    kvs_in(&fx, "kube-system")
        .create(&PostParams::default(), &system)
        .await
        .unwrap();
    patch_kv(
        &fx,
        "kube-system",
        "system",
        json!({"spec": {"replicaCount": 1}}),
    )
    .await
    .expect("objects in kube-system are never blocked");

    // Warn: admitted, the refusal returned as a warning (and counted).
    set_mode(&fx, "distributedkv", "Warn").await;
    wait_until("a shrink admitted in Warn mode", CONVERGE, || async {
        patch_kv(
            &fx,
            "default",
            "quorum",
            json!({"spec": {"replicaCount": 1}}),
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    })
    .await;
    assert!(counted(&fx, "distributedkv", "validate", "warned"));

    // Audit: admitted and recorded.
    set_mode(&fx, "distributedkv", "Audit").await;
    // The switch reaches the serving version a moment later: shrink the
    // disk (after growing it back) until Audit is what admitted it.
    wait_until("a smaller disk admitted and audited", CONVERGE, || async {
        shrink_disk(&fx).await.map_err(|e| e.to_string())?;
        if counted(&fx, "distributedkv", "validate", "audited") {
            Ok(())
        } else {
            Err("not audited yet".to_string())
        }
    })
    .await;

    // And back to Enforce: refused again (the disk grown first, so each
    // try shrinks it).
    set_mode(&fx, "distributedkv", "Enforce").await;
    wait_until("Enforce again", CONVERGE, || async {
        match shrink_disk(&fx).await {
            Err(kube::Error::Api(response)) => Ok(response.message),
            Ok(_) => Err("admitted".to_string()),
            Err(other) => Err(other.to_string()),
        }
    })
    .await;

    // Unloading the plugin removes its configuration.
    fx.wasmplugins()
        .delete("distributedkv", &DeleteParams::default())
        .await
        .unwrap();
    let validating = configurations(
        &fx.client(),
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
    );
    wait_until(
        "the configuration deleted with the plugin",
        CONVERGE,
        || async {
            match get_json(&validating, "wasm-operator-distributedkv").await {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapping_or_looping_validate_gets_the_failure_policy() {
    let fx = Fixture::start().await;
    let client = fx.client();
    support::install_crd(&client, &support::example_crd("faulty")).await;
    // 3 s: long enough that a trap on a loaded 2-core CI machine ends as a
    // trap, not a timeout (seen with 1 s while Go built beside the tests).
    deploy(
        &fx,
        "faulty",
        "faulty",
        json!({"limits": {"callTimeout": "3s"}}),
    )
    .await;
    let faults = support::dynamic_api(
        &client,
        &support::api_resource("test.wasm-operator.dev", "v1", "Fault", "faults"),
        Some("default"),
    );
    let fault = |name: &str, validate: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "test.wasm-operator.dev/v1", "kind": "Fault",
            "metadata": {"name": name, "annotations": {"test.wasm-operator.dev/validate": validate}},
            "spec": {"mode": "ok"},
        }))
        .unwrap()
    };
    let message = wait_until(
        "a trapping validate refused (failurePolicy Fail)",
        CONVERGE,
        || async {
            match faults
                .create(&PostParams::default(), &fault("trap", "trap"))
                .await
            {
                Err(kube::Error::Api(response)) => Ok(response.message),
                Ok(_) => {
                    let _ = faults.delete("trap", &DeleteParams::default()).await;
                    Err("admitted".to_string())
                }
                Err(other) => Err(other.to_string()),
            }
        },
    )
    .await;
    assert!(
        message.contains("faulty") && message.contains("validate"),
        "{message}"
    );
    assert!(message.contains("trap"), "{message}");
    let message = refusal(
        faults
            .create(&PostParams::default(), &fault("loop", "loop"))
            .await,
    );
    assert!(message.contains("faulty"), "{message}");
    assert!(counted(&fx, "faulty", "validate", "error"));
    // The host stays up and keeps admitting what validates.
    faults
        .create(&PostParams::default(), &fault("fine", "ok"))
        .await
        .expect("a Fault whose validate passes");

    // failurePolicy Ignore: admitted, the failure reported.
    fx.wasmplugins()
        .patch(
            "faulty",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"admission": {"failurePolicy": "Ignore"}}})),
        )
        .await
        .unwrap();
    wait_until(
        "a trapping validate admitted (failurePolicy Ignore)",
        CONVERGE,
        || async {
            faults
                .create(&PostParams::default(), &fault("trap-ignored", "trap"))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_written_by_a_newer_version_is_refused_on_update() {
    let fx = Fixture::start().await;
    let client = fx.client();
    support::install_crd(&client, &support::example_crd("webapp")).await;
    deploy(&fx, "webapp", "webapp", json!({})).await;
    let api = webapps(&client, "default");
    create(
        &api,
        &webapp("newer", json!({"replicas": 1, "image": "nginx"})),
    )
    .await
    .unwrap();
    // Once the controller has reconciled it (and stamped its own version),
    // the object is marked as written by 99.0.0: a metadata-only update,
    // which is never sent to the plugin, and which triggers no reconcile.
    wait_until("the first reconcile", CONVERGE, || async {
        let object = get_json(&api, "newer").await.unwrap_or_default();
        (object["status"]["observedGeneration"] == json!(1))
            .then_some(())
            .ok_or_else(|| object["status"].to_string())
    })
    .await;
    api.patch(
        "newer",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {
            "annotations": {
                "wasm-operator.dev/managed-by-version": "99.0.0",
                "wasm-operator.dev/min-compatible-version": "99.0.0",
            },
            "labels": {"tier": "web"},
        }})),
    )
    .await
    .expect("metadata-only updates are admitted");
    let message = refusal(
        api.patch(
            "newer",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 2}})),
        )
        .await,
    );
    assert!(message.contains("99.0.0"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stricter_canary_candidate_shows_its_refusals_as_shadow_diffs_while_the_stable_admits() {
    let fx = Fixture::start().await;
    let client = fx.client();
    support::install_crd(&client, &support::example_crd("webapp")).await;
    deploy(&fx, "webapp", "webapp", json!({})).await;
    let strict = fx.dir.path().join("webapp-strict.wasm");
    write_atomically(&strict, &support::plugin_bytes("webapp_strict"));
    // A Shadow canary that stays shadowing: the analysis never has enough
    // calls to judge, and promotion is by hand.
    fx.wasmplugins()
        .patch(
            "webapp",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"canary": {
                "source": {"file": {"path": strict.display().to_string()}},
                "mode": "Shadow", "promotion": "Manual",
                "analysis": {"interval": "1s", "minCalls": 100000},
            }}})),
        )
        .await
        .unwrap();
    let shadowing = |fx: &Fixture| {
        fx.registry
            .versions("webapp")
            .and_then(|v| v.current().candidate.clone())
            .filter(|c| {
                c.version.plugin.manifest().version == "1.3.0" && c.settings.rollout.shadows()
            })
    };
    wait_until("webapp 1.3.0 shadowing", CONVERGE, || async {
        shadowing(&fx)
            .map(|_| ())
            .ok_or_else(|| "not yet".to_string())
    })
    .await;
    let api = webapps(&client, "default");
    // The stable version (1..10 replicas) admits both; the candidate (at
    // most 3) would refuse the second.
    create(
        &api,
        &webapp("small", json!({"replicas": 2, "image": "nginx"})),
    )
    .await
    .expect("the stable version admits 2 replicas");
    let admitted = create(
        &api,
        &webapp("large", json!({"replicas": 5, "image": "nginx"})),
    )
    .await
    .expect("only the stable version's verdict counts");
    assert_eq!(admitted.data["spec"]["replicas"], json!(5));
    let candidate = shadowing(&fx).expect("still shadowing");
    let observations = candidate.observations.clone();
    let diff = wait_until(
        "the candidate's refusal recorded as a diff",
        CONVERGE,
        || async {
            observations
                .diff_of("admission:CREATE:default/large")
                .ok_or_else(|| format!("{:?}", observations.shadow_counts()))
        },
    )
    .await;
    let allowed = diff
        .fields
        .iter()
        .find(|f| f.path == "admission.validate.allowed")
        .unwrap_or_else(|| panic!("{diff:?}"));
    assert_eq!(allowed.stable, Some(json!(true)), "{diff:?}");
    assert_eq!(allowed.candidate, Some(json!(false)), "{diff:?}");
    let message = diff
        .fields
        .iter()
        .find(|f| f.path == "admission.validate.message")
        .and_then(|f| f.candidate.clone())
        .unwrap_or_default();
    assert!(message.to_string().contains("at most 3"), "{diff:?}");
    // The small one agrees (validate and defaults both compared).
    wait_until("the agreeing create compared", CONVERGE, || async {
        (observations.agrees("admission:CREATE:default/small") == Some(true))
            .then_some(())
            .ok_or_else(|| format!("{:?}", observations.shadow_counts()))
    })
    .await;
    // `wasm-operator canary diff` shows it, from the diffs ConfigMap.
    let document = wait_until("canary diff shows the admission diff", CONVERGE, || {
        let client = client.clone();
        async move {
            let out = wasm_operator::cli::canary::run(
                &client,
                &wasm_operator::cli::canary::CanaryCommand::Diff(
                    wasm_operator::cli::canary::Target {
                        name: "webapp".into(),
                        namespace: None,
                        output: wasm_operator::cli::OutputFormat::Json,
                        kubeconfig: None,
                        context: None,
                    },
                ),
            )
            .await
            .map_err(|e| e.to_string())?;
            out.contains("admission.validate.allowed")
                .then_some(out.clone())
                .ok_or(out)
        }
    })
    .await;
    assert!(document.contains("large"), "{document}");
    // Nothing was refused by the candidate, and it serves nothing.
    assert!(get_json(&api, "large").await.is_some());
    assert_eq!(fx.registry.current("webapp").unwrap().info.version, "1.0.0");
}
