//! Test support shared by the host's integration tests (`e2e`, `cli`):
//! a cluster on the chosen backend (the devcluster by default, or the real
//! control plane: see `devcluster::testing` for how it is shared and reset
//! between tests), CRD installation, the built plugins, and waiting helpers
//! that say what they last saw when they give up.
//!
//! Include it with `#[path = "../support/mod.rs"] mod support;`.
#![allow(dead_code)] // each test binary uses a different subset

pub mod cosign;
pub mod host;
pub mod image;
pub mod peak;
pub mod registry;
pub mod workloads;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use devcluster::{DevCluster, DevClusterOptions, TestCluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::Value;

/// The workspace root (parent of `host/`).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("host/ has a parent")
        .to_path_buf()
}

/// The compile cache every host of this test run shares
/// (`<target>/test-compile-cache`): each plugin is compiled once per run,
/// not once per test (a Python or TypeScript plugin takes ~30 s of CPU to
/// compile in a debug host, a Rust one ~4 s). Entries are named by the
/// component's digest and the engine's compatibility hash and written
/// atomically, so concurrent tests and processes share them safely; tests
/// of the cache itself use their own directories.
pub fn compile_cache_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let dir = target.join("test-compile-cache");
    std::fs::create_dir_all(&dir).expect("create the tests' compile cache");
    dir
}

/// A cluster for one test on the backend the environment chooses
/// (`devcluster::testing`): by default a fresh in-memory devcluster on a free
/// port; with `WASM_OPERATOR_TEST_BACKEND=real` an exclusive lease on this
/// test process's real control plane, reset to its initial state.
pub async fn start_cluster() -> TestCluster {
    devcluster::test_cluster().await
}

/// Starts a fresh in-memory devcluster on a free port, whatever the backend:
/// for `devcluster_only_` tests, after [`devcluster_only`] said yes.
pub async fn start_devcluster() -> DevCluster {
    match DevCluster::start(DevClusterOptions::default()).await {
        Ok(c) => c,
        Err(e) => panic!("cannot start a devcluster: {e}"),
    }
}

/// For a `devcluster_only_` test: whether it runs on this backend; when not,
/// prints why (`needs`: what only the devcluster has) and the test returns.
pub fn devcluster_only(test: &str, needs: &str) -> bool {
    devcluster::testing::devcluster_backend(test, needs)
}

/// For a test that does not use the backend's cluster: whether it runs on
/// this backend (the devcluster pass only; see
/// `devcluster::testing::once_per_run`).
pub fn once_per_run(test: &str) -> bool {
    devcluster::testing::once_per_run(test)
}

/// For a `real_only_` test: whether it runs on this backend; when not,
/// prints why (`needs`: what only the real control plane has).
pub fn real_only(test: &str, needs: &str) -> bool {
    devcluster::testing::real_backend(test, needs)
}

/// The built component of plugin `name`
/// (`target/wasm32-wasip2/release/<name>.wasm`).
///
/// Panics telling to run `scripts/build-plugins.sh` when it is missing.
pub fn plugin_wasm(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    let path = target
        .join("wasm32-wasip2")
        .join("release")
        .join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run `bash scripts/build-plugins.sh` in {} first",
        path.display(),
        workspace().display()
    );
    path
}

/// The bytes of plugin `name` (see [`plugin_wasm`]).
pub fn plugin_bytes(name: &str) -> Vec<u8> {
    let path = plugin_wasm(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// `examples/<example>/crd.yaml` in the workspace (or under the directory
/// named by `WASM_OPERATOR_EXAMPLES_DIR`, to test against other CRDs).
pub fn example_crd(example: &str) -> PathBuf {
    let examples = std::env::var_os("WASM_OPERATOR_EXAMPLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("examples"));
    examples.join(example).join("crd.yaml")
}

/// Installs every CRD in the YAML file at `path` (server-side apply, so
/// installing twice is fine) and waits until each is served (a list of its
/// kind succeeds). Returns the installed CRDs.
pub async fn install_crd(client: &Client, path: &Path) -> Vec<CustomResourceDefinition> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read CRD file {}: {e}", path.display()));
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut installed = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(doc)
            .unwrap_or_else(|e| panic!("{}: invalid YAML: {e}", path.display()));
        if value.is_null() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_json::from_value(value)
            .unwrap_or_else(|e| panic!("{}: not a CustomResourceDefinition: {e}", path.display()));
        let name = crd
            .metadata
            .name
            .clone()
            .unwrap_or_else(|| panic!("{}: a CRD without metadata.name", path.display()));
        let applied = api
            .patch(
                &name,
                &PatchParams::apply("e2e-tests").force(),
                &Patch::Apply(&crd),
            )
            .await
            .unwrap_or_else(|e| panic!("installing CRD {name} from {}: {e}", path.display()));
        for version in crd.spec.versions.iter().filter(|v| v.served) {
            let ar = ApiResource {
                group: crd.spec.group.clone(),
                version: version.name.clone(),
                api_version: format!("{}/{}", crd.spec.group, version.name),
                kind: crd.spec.names.kind.clone(),
                plural: crd.spec.names.plural.clone(),
            };
            let list: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            wait_until(
                &format!("CRD {name} version {} to be served", version.name),
                Duration::from_secs(30),
                || {
                    let list = list.clone();
                    async move {
                        list.list(&ListParams::default())
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    }
                },
            )
            .await;
        }
        installed.push(applied);
    }
    assert!(!installed.is_empty(), "{} holds no CRD", path.display());
    installed
}

/// Polls `check` every 100 ms until it returns `Ok`, and returns that value.
/// `Err` carries a description of what was seen; after `timeout` the test
/// panics with `what` and the last description.
pub async fn wait_until<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return v,
            Err(seen) => seen,
        };
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}; last saw: {last}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Like [`wait_until`] for a plain predicate over a value fetched by `fetch`;
/// the last fetched value is printed on timeout.
pub async fn wait_for_value<T, F, Fut, P>(what: &str, timeout: Duration, mut fetch: F, pred: P) -> T
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: Future<Output = T>,
    P: Fn(&T) -> bool,
{
    wait_until(what, timeout, || {
        let fut = fetch();
        let pred = &pred;
        async move {
            let v = fut.await;
            if pred(&v) {
                Ok(v)
            } else {
                Err(format!("{v:?}"))
            }
        }
    })
    .await
}

/// A dynamic API for `ar` in `namespace` (or cluster-wide).
pub fn dynamic_api(
    client: &Client,
    ar: &ApiResource,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// An [`ApiResource`] from its parts.
pub fn api_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// The object as JSON, or `None` when it does not exist (other errors panic).
pub async fn get_json(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    match api.get_opt(name).await {
        Ok(obj) => obj.map(|o| serde_json::to_value(o).expect("objects serialize")),
        Err(e) => panic!("GET {name}: {e}"),
    }
}

/// The managedFields entries of the host's field managers
/// (`wasm-operator…`) on `meta`, as JSON text: what moves when the host
/// writes an object, whatever other controllers write (on a real cluster
/// the Deployment controller writes every Deployment's status).
pub fn host_managed_fields(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager
                .as_deref()
                .is_some_and(|n| n.starts_with("wasm-operator"))
        })
        .map(|m| serde_json::to_string(m).unwrap_or_default())
        .collect()
}

/// The condition of type `kind` in `obj.status.conditions`.
pub fn condition<'a>(obj: &'a Value, kind: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

/// `component` with a custom section appended: a different digest, the same
/// behaviour (custom sections carry no semantics). Tests use it to make "a new
/// version" of a plugin without building one.
pub fn with_custom_section(component: &[u8], name: &str, payload: &[u8]) -> Vec<u8> {
    let mut body = leb128(name.len() as u64);
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(payload);
    let mut bytes = component.to_vec();
    bytes.push(0x00);
    bytes.extend(leb128(body.len() as u64));
    bytes.extend(body);
    bytes
}

fn leb128(mut value: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

#[test]
fn leb128_encodes_multibyte_values() {
    assert_eq!(leb128(0), vec![0]);
    assert_eq!(leb128(127), vec![0x7f]);
    assert_eq!(leb128(128), vec![0x80, 0x01]);
    assert_eq!(leb128(624485), vec![0xe5, 0x8e, 0x26]);
}

/// The `events.k8s.io/v1` events in `namespace` about the object `name` (of
/// `kind`, when given), as `(type, reason, note)`. Events about
/// cluster-scoped objects live in `default`.
pub async fn events_about(
    client: &Client,
    namespace: &str,
    kind: Option<&str>,
    name: &str,
) -> Vec<(String, String, String)> {
    list_events(client, namespace)
        .await
        .into_iter()
        .filter(|e| {
            let regarding = e.regarding.as_ref();
            regarding.and_then(|r| r.name.as_deref()) == Some(name)
                && kind.is_none_or(|k| regarding.and_then(|r| r.kind.as_deref()) == Some(k))
        })
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// The `events.k8s.io/v1` events the host reported in `namespace`, as
/// `(object, type, reason, note)`. Only the host's (reporting controller
/// `wasm-operator…`): on a real control plane the API server reports into
/// `default` too, e.g. a `ClusterIPNotAllocated` Warning while it repairs the
/// `kubernetes` Service.
pub async fn host_events(
    client: &Client,
    namespace: &str,
) -> Vec<(String, String, String, String)> {
    list_events(client, namespace)
        .await
        .into_iter()
        .filter(|e| {
            e.reporting_controller
                .as_deref()
                .is_some_and(|c| c.starts_with("wasm-operator"))
        })
        .map(|e| {
            (
                e.regarding.and_then(|r| r.name).unwrap_or_default(),
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect()
}

/// Every `events.k8s.io/v1` Event in `namespace`.
async fn list_events(client: &Client, namespace: &str) -> Vec<k8s_openapi::api::events::v1::Event> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), namespace);
    api.list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("listing events in {namespace}: {e}"))
        .items
}

/// `metadata.finalizers` of an object as JSON (empty when absent).
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
