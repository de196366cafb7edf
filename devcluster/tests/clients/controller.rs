//! The host's exact use of the API: a kube-runtime `Controller` over a dynamic CRD kind that
//! `.owns` ConfigMaps and server-side-applies one child per primary. The test checks that it
//! converges, repairs a deleted child, and loses no event across closed watches, expired history
//! (410 Gone) and injected 503s (absorbed by the client's retry layer) and 500s (retried by the
//! controller's error policy).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::common::{TestCluster, WEBAPP_CRD_NAME, fixture};

const NS: &str = "default";
const MANAGER: &str = "webapp-controller";
/// How long any single convergence may take before the test gives up (a bound, not a measurement).
const CONVERGE: Duration = Duration::from_secs(60);

struct Ctx {
    client: Client,
    resource: ApiResource,
    reconciles: AtomicUsize,
    errors: AtomicUsize,
}

fn webapp_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("demo.wasm-operator.dev", "v1", "WebApp"),
        "webapps",
    )
}

fn child_name(primary: &str) -> String {
    format!("{primary}-config")
}

/// The reconciler: the desired child is a pure function of the primary, applied with SSA.
async fn reconcile(webapp: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    if webapp.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let image = webapp.data["spec"]["image"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let replicas = webapp.data["spec"]["replicas"].as_i64().unwrap_or(1);
    let owner = webapp
        .controller_owner_ref(&ctx.resource)
        .expect("objects from the API server have a name and uid");
    let child = ConfigMap {
        metadata: ObjectMeta {
            name: Some(child_name(&webapp.name_any())),
            namespace: Some(NS.into()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_string(),
                    MANAGER.to_string(),
                )]
                .into(),
            ),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        data: Some(
            [
                ("image".to_string(), image),
                ("replicas".to_string(), replicas.to_string()),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), NS);
    api.patch(
        &child_name(&webapp.name_any()),
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&child),
    )
    .await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(webapp: Arc<DynamicObject>, error: &kube::Error, ctx: Arc<Ctx>) -> Action {
    ctx.errors.fetch_add(1, Ordering::SeqCst);
    println!(
        "reconcile of {} failed (will retry): {error}",
        webapp.name_any()
    );
    Action::requeue(Duration::from_millis(300))
}

/// Polls `check` until it yields a value; panics naming `what` after [`CONVERGE`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + CONVERGE;
    loop {
        if let Some(value) = check().await {
            println!("ok: {what}");
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened within {CONVERGE:?}: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Retries a test-side write that may hit an injected fault (the faults are not aimed at us).
async fn with_retry<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    eventually(what, || {
        let attempt = call();
        async move {
            match attempt.await {
                Ok(value) => Some(value),
                Err(e) => {
                    println!("{what}: retrying after {e}");
                    None
                }
            }
        }
    })
    .await
}

/// Waits until the child of `primary` exists with `image`, and returns it.
async fn child_with_image(cms: &Api<ConfigMap>, primary: &str, image: &str) -> ConfigMap {
    let what = format!("configmap {} carries image {image}", child_name(primary));
    eventually(&what, || async {
        let cm = cms.get_opt(&child_name(primary)).await.ok().flatten()?;
        let data = cm.data.as_ref()?;
        (data.get("image").map(String::as_str) == Some(image)).then_some(cm)
    })
    .await
}

fn webapp(resource: &ApiResource, name: &str, image: &str) -> DynamicObject {
    DynamicObject::new(name, resource)
        .within(NS)
        .data(json!({ "spec": { "image": image, "replicas": 1 } }))
}

async fn set_image(webapps: &Api<DynamicObject>, name: &str, image: &str) {
    let patch = json!({ "spec": { "image": image } });
    with_retry(
        &format!("merge-patch webapp {name} to image {image}"),
        || async {
            webapps
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        },
    )
    .await;
}

async fn install_crd(client: &Client) {
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&std::fs::read_to_string(fixture("webapp-crd.yaml")).unwrap())
            .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &crd).await.unwrap();
    tokio::time::timeout(
        CONVERGE,
        await_condition(crds, WEBAPP_CRD_NAME, conditions::is_crd_established()),
    )
    .await
    .expect("the WebApp CRD never became Established")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_controller_converges_and_survives_faults() {
    let mut tc = TestCluster::start().await;
    let client = tc.cluster.client();
    install_crd(&client).await;

    let resource = webapp_resource();
    let webapps: Api<DynamicObject> = Api::namespaced_with(client.clone(), NS, &resource);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        resource: resource.clone(),
        reconciles: AtomicUsize::new(0),
        errors: AtomicUsize::new(0),
    });
    let controller = Controller::new_with(
        webapps.clone(),
        watcher::Config::default(),
        resource.clone(),
    )
    .owns(cms.clone(), watcher::Config::default())
    .run(reconcile, error_policy, ctx.clone())
    .for_each(|result| async move {
        if let Err(e) = result {
            println!("controller stream error (the controller keeps running): {e}");
        }
    });
    let controller = tokio::spawn(controller);

    // 1. Converges: every primary gets its child, owned by the primary's controller reference.
    for (name, image) in [("alpha", "nginx:1.25"), ("beta", "httpd:2.4")] {
        webapps
            .create(&PostParams::default(), &webapp(&resource, name, image))
            .await
            .unwrap();
    }
    let alpha_child = child_with_image(&cms, "alpha", "nginx:1.25").await;
    child_with_image(&cms, "beta", "httpd:2.4").await;
    let alpha = webapps.get("alpha").await.unwrap();
    let owner = &alpha_child.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        owner.uid,
        alpha.uid().unwrap(),
        "the child's ownerReference points at alpha"
    );
    assert_eq!(
        owner.controller,
        Some(true),
        "the child's ownerReference is a controller reference"
    );
    let managers: Vec<_> = alpha_child
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == MANAGER),
        "SSA recorded the field manager, got {managers:?}"
    );

    // 2. Reacts to a spec change.
    set_image(&webapps, "alpha", "nginx:1.26").await;
    child_with_image(&cms, "alpha", "nginx:1.26").await;

    // 3. Reacts to child deletion via the owned-ConfigMap watch: the child comes back (new uid).
    let old_uid = cms.get(&child_name("alpha")).await.unwrap().uid().unwrap();
    cms.delete(&child_name("alpha"), &DeleteParams::default())
        .await
        .unwrap();
    eventually("the deleted child alpha-config is recreated", || async {
        let cm = cms.get_opt(&child_name("alpha")).await.ok().flatten()?;
        (cm.uid().as_deref() != Some(old_uid.as_str())).then_some(())
    })
    .await;

    // 4. Closed watches + expired history: the watchers resume from an expired resourceVersion,
    // get 410 Gone, relist, and must still see the writes made meanwhile.
    tc.cluster.faults().expire_history();
    tc.cluster.faults().close_watches();
    set_image(&webapps, "beta", "httpd:2.5").await;
    with_retry("create webapp gamma", || async {
        webapps
            .create(
                &PostParams::default(),
                &webapp(&resource, "gamma", "caddy:2"),
            )
            .await
    })
    .await;
    child_with_image(&cms, "beta", "httpd:2.5").await;
    child_with_image(&cms, "gamma", "caddy:2").await;
    tc.cluster.faults().expire_history();
    tc.cluster.faults().close_watches();
    with_retry("delete configmap gamma-config", || async {
        cms.delete(&child_name("gamma"), &DeleteParams::default())
            .await
    })
    .await;
    let recreated = child_with_image(&cms, "gamma", "caddy:2").await;
    assert!(recreated.metadata.deletion_timestamp.is_none());

    // 5. Three injected 503s on the core API. kube's client retries 429/503/504 itself, so the
    // reconciler must not even notice: the child simply converges.
    tc.cluster.faults().fail_next("/api/v1", 3, 503);
    set_image(&webapps, "beta", "httpd:2.6").await;
    child_with_image(&cms, "beta", "httpd:2.6").await;

    // 5a. Three injected 500s, which the client does not retry. The primary is patched through
    // /apis (not affected) and nothing else is polled meanwhile, so the 500s land on the
    // reconciler's child writes and its error policy must requeue until the child converges.
    let errors_before = ctx.errors.load(Ordering::SeqCst);
    tc.cluster.faults().fail_next("/api/v1", 3, 500);
    set_image(&webapps, "beta", "httpd:2.7").await;
    eventually(
        "the reconciler's child writes hit the three injected 500s",
        || async { (ctx.errors.load(Ordering::SeqCst) >= errors_before + 3).then_some(()) },
    )
    .await;
    child_with_image(&cms, "beta", "httpd:2.7").await;

    // 5b. 503s while the watches reconnect: the owned-ConfigMap watch must come back and still
    // deliver the deletion of a child.
    tc.cluster.faults().fail_next("/api/v1", 3, 503);
    tc.cluster.faults().close_watches();
    with_retry("delete configmap alpha-config", || async {
        cms.delete(&child_name("alpha"), &DeleteParams::default())
            .await
    })
    .await;
    child_with_image(&cms, "alpha", "nginx:1.26").await;

    // 6. Nothing lost: every primary's child reflects the primary's latest spec.
    for (name, image) in [
        ("alpha", "nginx:1.26"),
        ("beta", "httpd:2.7"),
        ("gamma", "caddy:2"),
    ] {
        child_with_image(&cms, name, image).await;
    }
    println!(
        "controller ran {} reconciles, {} failed and were retried",
        ctx.reconciles.load(Ordering::SeqCst),
        ctx.errors.load(Ordering::SeqCst)
    );
    assert!(
        !controller.is_finished(),
        "the controller stream ended on its own"
    );
    controller.abort();
    tc.cluster.stop().await;
}
