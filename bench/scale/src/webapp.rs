//! The WebApp every benchmark reconciles, and what "converged" means for it.

use std::collections::BTreeMap;

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};

use crate::process::resource;

/// `example.com/v1` WebApp.
pub fn webapp_resource() -> ApiResource {
    resource("example.com", "v1", "WebApp", "webapps")
}

/// Finalizer present and the status written for the current generation.
pub fn status_converged(app: &DynamicObject) -> bool {
    let generation = app.metadata.generation;
    let observed = app.data["status"]["observedGeneration"].as_i64();
    generation.is_some() && observed == generation && !app.finalizers().is_empty()
}

/// Whether `app`'s status is converged and its Deployment (owned by it, with
/// its replicas) and Service are among `deployments` and `services` (by name).
pub fn app_converged(
    app: &DynamicObject,
    deployments: &BTreeMap<String, DynamicObject>,
    services: &BTreeMap<String, DynamicObject>,
) -> bool {
    let name = app.name_any();
    let uid = app.uid();
    let dep_ok = deployments.get(&name).is_some_and(|d| {
        d.data["spec"]["replicas"] == app.data["spec"]["replicas"]
            && d.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == uid.as_ref())
    });
    status_converged(app) && dep_ok && services.contains_key(&name)
}

/// WebApps whose status is converged and whose Deployment (owned, with the
/// WebApp's replicas) and Service exist (objects of one namespace).
pub fn converged(
    apps: &[DynamicObject],
    deployments: &[DynamicObject],
    services: &[DynamicObject],
) -> usize {
    let by_name = |objs: &[DynamicObject]| -> BTreeMap<String, DynamicObject> {
        objs.iter().map(|o| (o.name_any(), o.clone())).collect()
    };
    let ds = by_name(deployments);
    let ss = by_name(services);
    apps.iter().filter(|a| app_converged(a, &ds, &ss)).count()
}
