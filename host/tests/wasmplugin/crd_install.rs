//! The plugin's own CRD (`permissions.crds`) and `StatusPruned`, with the
//! real webapp plugin (it carries its CRD, `Crd::of::<WebAppSpec,
//! WebAppStatus>`): granted, the host creates or updates the CRD before the
//! version serves; not granted, it leaves the CRD alone and says so once;
//! a CRD dropping a stored version is refused while the last good version
//! serves; a status schema that prunes what the host writes gets a
//! `StatusPruned` Warning on the object naming the fields.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::support::{self, wait_until};
use crate::{CONVERGE, Fixture, NS, digest, file_spec, write_atomically};

const CRD: &str = "webapps.example.com";

/// The example WebApp CRD as JSON, with `edit` applied.
fn example_crd(edit: impl FnOnce(&mut Value)) -> Value {
    let text = std::fs::read_to_string(support::example_crd("webapp")).unwrap();
    let mut crd: Value = serde_yaml::from_str(&text).unwrap();
    edit(&mut crd);
    crd
}

/// Installs `crd` (through a file, as `support::install_crd` reads them).
async fn install(client: &kube::Client, dir: &Path, crd: &Value) {
    let path = dir.join("crd.json");
    std::fs::write(&path, serde_json::to_vec(crd).unwrap()).unwrap();
    support::install_crd(client, &path).await;
}

/// A status schema that holds nothing: every field the host writes is
/// pruned.
fn minimal_status(crd: &mut Value) {
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"] =
        json!({"type": "object"});
}

async fn cluster_crd(client: &kube::Client) -> Option<CustomResourceDefinition> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.get_opt(CRD).await.unwrap()
}

fn status_schema(crd: &CustomResourceDefinition) -> Value {
    let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
    schema["openAPIV3Schema"]["properties"]["status"].clone()
}

/// Writes the webapp plugin to the fixture's dir; returns its path and digest.
fn webapp(fx: &Fixture) -> (std::path::PathBuf, String) {
    let bytes = support::plugin_bytes("webapp");
    let path = fx.dir.path().join("webapp.wasm");
    write_atomically(&path, &bytes);
    (path, digest(&bytes))
}

fn granted(path: &Path) -> Value {
    let mut spec = file_spec(path);
    spec["permissions"] = json!({"crds": true});
    spec
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_the_host_creates_the_plugins_crd_before_it_serves() {
    let fx = Fixture::start_without_webapp_crd(|_| async {}).await;
    assert!(cluster_crd(&fx.client()).await.is_none());
    let (path, digest) = webapp(&fx);
    fx.create("webapp", granted(&path)).await;
    fx.wait_serving("webapp", &digest).await;
    let (kind, note) = fx.wait_event("webapp", "CrdApplied").await;
    assert_eq!(kind, "Normal");
    assert!(note.contains("created CRD webapps.example.com"), "{note}");

    let crd = cluster_crd(&fx.client())
        .await
        .expect("the CRD was created");
    let columns: Vec<String> = crd.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .collect();
    for column in ["Replicas", "Ready", "Phase"] {
        assert!(columns.contains(&column.to_string()), "{columns:?}");
    }
    let status = status_schema(&crd);
    assert!(
        status.pointer("/properties/conditions").is_some()
            && status.pointer("/properties/observedGeneration").is_some(),
        "the status schema holds what the host writes: {status}"
    );
    let managers: Vec<String> = crd
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.contains(&"wasm-operator/crds".to_string()),
        "{managers:?}"
    );
    // A sample object is reconciled, and nothing was pruned from its status.
    fx.assert_reconciles("sample").await;
    wait_status_written(&fx, "sample").await;
    let events = support::events_about(&fx.client(), NS, Some("WebApp"), "sample").await;
    assert!(
        !events.iter().any(|(_, reason, _)| reason == "StatusPruned"),
        "{events:?}"
    );

    // Deleting the WasmPlugin never deletes the CRD.
    fx.wasmplugins()
        .delete("webapp", &Default::default())
        .await
        .unwrap();
    fx.wait_event("webapp", "Unloaded").await;
    assert!(cluster_crd(&fx.client()).await.is_some());
}

/// Waits until WebApp `app`'s status has an observedGeneration: the host
/// wrote it (and compared the answer).
async fn wait_status_written(fx: &Fixture, app: &str) -> Value {
    let api = support::dynamic_api(
        &fx.client(),
        &support::api_resource("example.com", "v1", "WebApp", "webapps"),
        Some(NS),
    );
    wait_until(&format!("the status of WebApp {app}"), CONVERGE, || {
        let api = api.clone();
        async move {
            let o = support::get_json(&api, app).await;
            match o {
                Some(o) if o.pointer("/status/phase").is_some() => Ok(o),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn granted_an_older_crd_is_updated_with_the_versions_fields() {
    let dir = tempfile::tempdir().unwrap();
    let older = example_crd(minimal_status);
    let fx = Fixture::start_without_webapp_crd(|client| {
        let older = older.clone();
        let dir = dir.path().to_path_buf();
        async move { install(&client, &dir, &older).await }
    })
    .await;
    assert!(
        status_schema(&cluster_crd(&fx.client()).await.unwrap())
            .get("properties")
            .is_none()
    );
    let (path, digest) = webapp(&fx);
    fx.create("webapp", granted(&path)).await;
    fx.wait_serving("webapp", &digest).await;
    let (_, note) = fx.wait_event("webapp", "CrdApplied").await;
    assert!(note.contains("updated CRD webapps.example.com"), "{note}");
    let status = status_schema(&cluster_crd(&fx.client()).await.unwrap());
    assert!(
        status.pointer("/properties/phase").is_some()
            && status.pointer("/properties/conditions").is_some(),
        "{status}"
    );
    fx.assert_reconciles("sample").await;
    let o = wait_status_written(&fx, "sample").await;
    assert!(o.pointer("/status/conditions").is_some(), "{o}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_granted_the_crd_is_left_alone_and_pruned_status_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let older = example_crd(minimal_status);
    let fx = Fixture::start_without_webapp_crd(|client| {
        let older = older.clone();
        let dir = dir.path().to_path_buf();
        async move { install(&client, &dir, &older).await }
    })
    .await;
    let (path, digest) = webapp(&fx);
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest).await;
    let (kind, note) = fx.wait_event("webapp", "CrdNotApplied").await;
    assert_eq!(kind, "Warning");
    assert!(
        note.contains("differs from the cluster's") && note.contains("permissions.crds"),
        "{note}"
    );
    // Untouched: the status schema still holds nothing.
    let crd = cluster_crd(&fx.client()).await.unwrap();
    assert!(status_schema(&crd).get("properties").is_none(), "{crd:?}");

    // The host's status write is pruned: a Warning on the object names the
    // fields and the fix.
    fx.assert_reconciles("pruned").await;
    let client = fx.client();
    let note = wait_until("StatusPruned on WebApp pruned", CONVERGE, || {
        let client = client.clone();
        async move {
            let events = support::events_about(&client, NS, Some("WebApp"), "pruned").await;
            events
                .iter()
                .find(|(t, r, _)| t == "Warning" && r == "StatusPruned")
                .map(|(_, _, n)| n.clone())
                .ok_or_else(|| format!("{events:?}"))
        }
    })
    .await;
    for field in [
        ".status.conditions",
        ".status.observedGeneration",
        ".status.phase",
    ] {
        assert!(note.contains(field), "{field} in {note}");
    }
    assert!(
        note.contains("Crd::of") && note.contains("permissions.crds"),
        "{note}"
    );
    // Once per object: later reconciles write the same status again and
    // add no second StatusPruned event.
    let events = support::events_about(&client, NS, Some("WebApp"), "pruned").await;
    let told: Vec<_> = events
        .iter()
        .filter(|(_, r, _)| r == "StatusPruned")
        .collect();
    assert_eq!(told.len(), 1, "{events:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_dropping_a_stored_version_is_refused_and_the_old_version_serves() {
    let dir = tempfile::tempdir().unwrap();
    // The cluster's CRD also serves v1beta1, and objects are stored in it.
    let two_versions = example_crd(|crd| {
        let mut beta = crd["spec"]["versions"][0].clone();
        beta["name"] = json!("v1beta1");
        beta["storage"] = json!(false);
        crd["spec"]["versions"].as_array_mut().unwrap().push(beta);
    });
    let fx = Fixture::start_without_webapp_crd(|client| {
        let dir = dir.path().to_path_buf();
        async move {
            install(&client, &dir, &two_versions).await;
            let api: Api<CustomResourceDefinition> = Api::all(client.clone());
            api.patch_status(
                CRD,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"storedVersions": ["v1", "v1beta1"]}})),
            )
            .await
            .unwrap();
        }
    })
    .await;
    let (path, digest) = webapp(&fx);
    // Not granted: it serves, the CRD left as it is.
    fx.create("webapp", file_spec(&path)).await;
    fx.wait_serving("webapp", &digest).await;
    // Granting crds reloads it: the carried CRD (v1 only) would drop
    // v1beta1, which still has stored objects.
    fx.patch_spec("webapp", json!({"permissions": {"crds": true}}))
        .await;
    let o = fx
        .wait_degraded("webapp", "CrdDropsStoredVersion", &digest)
        .await;
    let message = crate::support::condition(&o, "Degraded")
        .and_then(|c| c["message"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(
        message.contains("v1beta1") && message.contains("docs/conversion.md"),
        "{message}"
    );
    let crd = cluster_crd(&fx.client()).await.unwrap();
    assert_eq!(crd.spec.versions.len(), 2, "the CRD was not touched");
    fx.assert_reconciles("still-served").await;
}
