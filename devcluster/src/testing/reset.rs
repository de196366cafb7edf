//! Resetting the shared real control plane between tests: which objects a
//! test left behind ([`leftover`], pure) and deleting them until none is left
//! ([`reset`]).
//!
//! An object is a leftover unless it existed when the control plane became
//! ready (its uid is in the baseline), lives in a system namespace, belongs
//! to a resource the control plane manages itself (API services, API
//! priority and fairness, service IP allocation, nodes), is an RBAC default
//! (`kubernetes.io/bootstrapping` label), or is one of the objects the
//! controllers create in `default` shortly after readiness (its
//! ServiceAccount, root CA ConfigMap and the `kubernetes` Service).
//!
//! The fake Nodes `realcluster up` creates for kwok and their heartbeat
//! Leases survive (nodes are a managed resource, `kube-node-lease` a system
//! namespace). A test's workloads go owners first ([`phase`]), so their
//! controllers stop making Pods, and Pods are deleted at once
//! ([`grace_period`]): the reset does not wait on kwok to play their deletion.
//!
//! Whether the leased control plane runs workloads is the test's choice, as
//! on the devcluster: [`fake_node_taints`] (pure) and [`set_workloads`] taint
//! the fake Nodes so that no Pod lands on them (Pods stay Pending, as on a
//! devcluster without simulation) or lift that taint.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::{ApiCapabilities, Discovery, Scope, verbs};

/// Namespaces the tests never write to and the reset never touches.
pub const SYSTEM_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "kube-node-lease"];

/// Resources (`plural` or `plural.group`) the control plane manages itself.
pub const MANAGED_RESOURCES: [&str; 7] = [
    "apiservices.apiregistration.k8s.io",
    "flowschemas.flowcontrol.apiserver.k8s.io",
    "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io",
    "ipaddresses.networking.k8s.io",
    "servicecidrs.networking.k8s.io",
    "nodes",
    "csinodes.storage.k8s.io",
];

/// Objects in `default` the controllers create after readiness: `(resource, name)`.
pub const DEFAULT_NAMESPACE_OBJECTS: [(&str, &str); 5] = [
    ("serviceaccounts", "default"),
    ("configmaps", "kube-root-ca.crt"),
    ("services", "kubernetes"),
    ("endpoints", "kubernetes"),
    ("endpointslices.discovery.k8s.io", "kubernetes"),
];

/// What [`leftover`] needs to know about an object.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// `plural` for the core group, `plural.group` otherwise.
    pub resource: &'a str,
    /// The namespace, `None` for cluster-scoped objects.
    pub namespace: Option<&'a str>,
    /// `metadata.name`.
    pub name: &'a str,
    /// `metadata.uid`.
    pub uid: &'a str,
    /// Whether it carries the `kubernetes.io/bootstrapping` label.
    pub bootstrapping: bool,
}

/// Whether `obj` was left behind by a test (and the reset deletes it).
pub fn leftover(obj: &Seen<'_>, baseline: &HashSet<String>) -> bool {
    if obj
        .namespace
        .is_some_and(|ns| SYSTEM_NAMESPACES.contains(&ns))
        || MANAGED_RESOURCES.contains(&obj.resource)
        || obj.bootstrapping
        || baseline.contains(obj.uid)
    {
        return false;
    }
    if obj.resource == "namespaces"
        && (obj.name == "default" || SYSTEM_NAMESPACES.contains(&obj.name))
    {
        return false;
    }
    !(obj.namespace == Some("default")
        && DEFAULT_NAMESPACE_OBJECTS.contains(&(obj.resource, obj.name)))
}

/// `plural` or `plural.group`.
pub fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Resources whose controllers create Pods: deleted before everything else,
/// so that no Pod the reset deletes is replaced.
pub const WORKLOAD_RESOURCES: [&str; 6] = [
    "cronjobs.batch",
    "jobs.batch",
    "deployments.apps",
    "statefulsets.apps",
    "daemonsets.apps",
    "replicasets.apps",
];

/// The order a reset deletes in: the owners of Pods first, then everything
/// else (custom resources included, so the host's finalizers are off them),
/// then CRDs, then namespaces.
fn phase(resource: &str) -> u8 {
    match resource {
        r if WORKLOAD_RESOURCES.contains(&r) => 0,
        "customresourcedefinitions.apiextensions.k8s.io" => 2,
        "namespaces" => 3,
        _ => 1,
    }
}

/// The grace period a reset deletes an object of `resource` with: none for
/// Pods (a forced deletion: the API server removes a Pod bound to a Node at
/// once instead of waiting for its kubelet, here kwok, to confirm), the
/// resource's default otherwise.
pub fn grace_period(resource: &str) -> Option<u32> {
    (resource == "pods").then_some(0)
}

/// Every listable, deletable resource the cluster serves, in deletion order.
///
/// Discovery is retried for a while: a group whose last CRD is being deleted
/// is listed and then answers 404.
async fn resources(client: &kube::Client) -> Result<Vec<(ApiResource, ApiCapabilities)>, String> {
    let mut attempt = 0;
    let discovery = loop {
        match Discovery::new(client.clone()).run().await {
            Ok(d) => break d,
            Err(e) if attempt >= 50 => return Err(format!("API discovery failed: {e}")),
            Err(_) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let mut all: Vec<(ApiResource, ApiCapabilities)> = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .filter(|(_, caps)| {
            caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::DELETE)
        })
        .collect();
    all.sort_by_key(|(ar, _)| phase(&resource_name(ar)));
    Ok(all)
}

/// The uids of every object the cluster holds now (the baseline of [`leftover`]).
pub async fn baseline(client: &kube::Client) -> Result<HashSet<String>, String> {
    let mut uids = HashSet::new();
    for (ar, _) in resources(client).await? {
        for obj in list(client, &ar).await? {
            if let Some(uid) = obj.metadata.uid {
                uids.insert(uid);
            }
        }
    }
    Ok(uids)
}

async fn list(client: &kube::Client, ar: &ApiResource) -> Result<Vec<DynamicObject>, String> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        // Gone between discovery and the list (a CRD being deleted).
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 405 => Ok(Vec::new()),
        Err(e) => Err(format!("listing {}: {e}", resource_name(ar))),
    }
}

/// Deletes every [`leftover`] object (removing finalizers first, except from
/// CRDs, whose cleanup finalizer deletes their custom resources) and waits,
/// up to `timeout`, until a pass over every resource finds none.
///
/// # Errors
///
/// A request failed other than with 404/409, or leftovers remain after
/// `timeout` (the message lists some).
pub async fn reset(
    client: &kube::Client,
    baseline: &HashSet<String>,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let mut left = Vec::new();
        disarm_conversion_webhooks(client, baseline).await?;
        for (ar, caps) in resources(client).await? {
            let name = resource_name(&ar);
            // A custom resource whose CRD converted through a webhook that
            // went with its test cannot be read or deleted (500) until the
            // API server applies the `None` strategy set above: retried.
            let objects = match list(client, &ar).await {
                Ok(objects) => objects,
                Err(e) => {
                    left.push(e);
                    continue;
                }
            };
            for obj in objects {
                let labels = obj.metadata.labels.as_ref();
                let seen = Seen {
                    resource: &name,
                    namespace: obj.metadata.namespace.as_deref(),
                    name: obj.metadata.name.as_deref().unwrap_or_default(),
                    uid: obj.metadata.uid.as_deref().unwrap_or_default(),
                    bootstrapping: labels
                        .is_some_and(|l| l.contains_key("kubernetes.io/bootstrapping")),
                };
                if !leftover(&seen, baseline) {
                    continue;
                }
                let described = format!(
                    "{name} {}/{}",
                    obj.metadata.namespace.as_deref().unwrap_or("-"),
                    obj.metadata.name.as_deref().unwrap_or("?")
                );
                left.push(match remove(client, &ar, &caps, &name, &obj).await {
                    Ok(()) => described,
                    Err(e) => format!("{described} ({e})"),
                });
            }
        }
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            left.truncate(10);
            return Err(format!(
                "objects of an earlier test are still there after {timeout:?}: {}",
                left.join(", ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The CRDs a test created that convert through a webhook, switched to
/// the `None` strategy: the webhook (a host in the test's process) is gone
/// with the test, and while the CRD still names it every read or delete of
/// an object stored in another version fails, so nothing could be reset.
async fn disarm_conversion_webhooks(
    client: &kube::Client,
    baseline: &HashSet<String>,
) -> Result<(), String> {
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &crds);
    for crd in list(client, &crds).await? {
        let created_by_a_test = !crd
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| baseline.contains(uid));
        let converts_by_webhook = crd.data.pointer("/spec/conversion/strategy")
            == Some(&serde_json::Value::String("Webhook".into()));
        if !(created_by_a_test && converts_by_webhook) || crd.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let name = crd.metadata.name.clone().unwrap_or_default();
        let patch =
            serde_json::json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(format!("switching CRD {name} to conversion None: {e}")),
        }
    }
    Ok(())
}

/// The label selector of the fake Nodes `realcluster up` creates.
pub const FAKE_NODE_SELECTOR: &str = "type=kwok";

/// The taint that keeps Pods off the fake Nodes while a test has not asked
/// for workloads that run. A taint, not a cordon: DaemonSet Pods tolerate
/// `node.kubernetes.io/unschedulable` but not this.
pub const WORKLOADS_OFF_TAINT: &str = "simulate.wasm-operator.dev/workloads";

/// The merge patch of a fake Node's `spec.taints`: none when the test runs
/// workloads, [`WORKLOADS_OFF_TAINT`] (`NoSchedule`) otherwise. `up` creates
/// the fake Nodes without taints, so the patch replaces the whole list.
pub fn fake_node_taints(run_workloads: bool) -> serde_json::Value {
    if run_workloads {
        serde_json::json!({ "spec": { "taints": null } })
    } else {
        serde_json::json!({ "spec": { "taints": [
            { "key": WORKLOADS_OFF_TAINT, "value": "off", "effect": "NoSchedule" }
        ] } })
    }
}

/// Applies [`fake_node_taints`] to every fake Node ([`FAKE_NODE_SELECTOR`]).
///
/// # Errors
///
/// Listing or patching a Node failed (the message names it).
pub async fn set_workloads(client: &kube::Client, run_workloads: bool) -> Result<(), String> {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default().labels(FAKE_NODE_SELECTOR))
        .await
        .map_err(|e| format!("listing the fake Nodes ({FAKE_NODE_SELECTOR}): {e}"))?;
    let patch = fake_node_taints(run_workloads);
    for node in list.items {
        let name = node.metadata.name.unwrap_or_default();
        nodes
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| format!("setting the taints of fake Node {name}: {e}"))?;
    }
    Ok(())
}

async fn remove(
    client: &kube::Client,
    ar: &ApiResource,
    caps: &ApiCapabilities,
    resource: &str,
    obj: &DynamicObject,
) -> Result<(), String> {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let api: Api<DynamicObject> = match (&caps.scope, obj.metadata.namespace.as_deref()) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, ar),
        _ => Api::all_with(client.clone(), ar),
    };
    let ignorable =
        |e: &kube::Error| matches!(e, kube::Error::Api(r) if r.code == 404 || r.code == 409);
    let has_finalizers = obj
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| !f.is_empty());
    if has_finalizers && resource != "customresourcedefinitions.apiextensions.k8s.io" {
        let patch = serde_json::json!({ "metadata": { "finalizers": null } });
        if let Err(e) = api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            && !ignorable(&e)
        {
            return Err(format!("removing the finalizers of {resource} {name}: {e}"));
        }
    }
    let params = DeleteParams {
        grace_period_seconds: grace_period(resource),
        ..DeleteParams::background()
    };
    // A Pod already terminating gracefully (its namespace is going) is
    // deleted again with no grace, which the API server allows.
    let delete =
        obj.metadata.deletion_timestamp.is_none() || params.grace_period_seconds == Some(0);
    if delete
        && let Err(e) = api.delete(&name, &params).await
        && !ignorable(&e)
    {
        return Err(format!("deleting {resource} {name}: {e}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen<'a>(resource: &'a str, namespace: Option<&'a str>, name: &'a str) -> Seen<'a> {
        Seen {
            resource,
            namespace,
            name,
            uid: "u-new",
            bootstrapping: false,
        }
    }

    #[test]
    fn what_a_test_created_is_a_leftover() {
        let base = HashSet::new();
        assert!(leftover(
            &seen("webapps.example.com", Some("default"), "shop"),
            &base
        ));
        assert!(leftover(&seen("namespaces", None, "team-a"), &base));
        assert!(leftover(
            &seen(
                "customresourcedefinitions.apiextensions.k8s.io",
                None,
                "webapps.example.com"
            ),
            &base
        ));
        assert!(leftover(&seen("events", Some("default"), "shop.1"), &base));
    }

    #[test]
    fn what_the_control_plane_made_is_kept() {
        let base: HashSet<String> = ["u-old".to_string()].into();
        let mut old = seen("clusterroles.rbac.authorization.k8s.io", None, "admin");
        old.uid = "u-old";
        assert!(!leftover(&old, &base));
        let mut boot = seen("clusterroles.rbac.authorization.k8s.io", None, "system:x");
        boot.bootstrapping = true;
        assert!(!leftover(&boot, &base));
        assert!(!leftover(
            &seen("leases.coordination.k8s.io", Some("kube-system"), "kcm"),
            &base
        ));
        assert!(!leftover(&seen("namespaces", None, "default"), &base));
        assert!(!leftover(&seen("namespaces", None, "kube-public"), &base));
        assert!(!leftover(
            &seen("apiservices.apiregistration.k8s.io", None, "v1.example.com"),
            &base
        ));
        assert!(!leftover(
            &seen("serviceaccounts", Some("default"), "default"),
            &base
        ));
        assert!(!leftover(
            &seen("configmaps", Some("default"), "kube-root-ca.crt"),
            &base
        ));
        // ...but only in `default`: a test's namespace goes, with its copies.
        assert!(leftover(
            &seen("serviceaccounts", Some("team-a"), "default"),
            &base
        ));
    }

    #[test]
    fn fake_nodes_are_tainted_unless_the_test_runs_workloads() {
        assert_eq!(
            fake_node_taints(true),
            serde_json::json!({"spec": {"taints": null}})
        );
        let off = fake_node_taints(false);
        let taints = off["spec"]["taints"].as_array().unwrap();
        assert_eq!(taints.len(), 1);
        assert_eq!(taints[0]["key"], WORKLOADS_OFF_TAINT);
        assert_eq!(taints[0]["effect"], "NoSchedule");
    }

    #[test]
    fn the_fake_nodes_and_their_leases_survive() {
        let base = HashSet::new();
        assert!(!leftover(&seen("nodes", None, "kwok-node-0"), &base));
        assert!(!leftover(
            &seen(
                "leases.coordination.k8s.io",
                Some("kube-node-lease"),
                "kwok-node-0"
            ),
            &base
        ));
        assert!(!leftover(
            &seen("namespaces", None, "kube-node-lease"),
            &base
        ));
    }

    #[test]
    fn a_tests_workloads_and_their_pods_go() {
        let base = HashSet::new();
        for resource in [
            "pods",
            "replicasets.apps",
            "deployments.apps",
            "statefulsets.apps",
            "jobs.batch",
        ] {
            assert!(
                leftover(&seen(resource, Some("default"), "web"), &base),
                "{resource}"
            );
        }
    }

    #[test]
    fn owners_of_pods_go_first_and_pods_without_grace() {
        let mut names = vec![
            "pods",
            "webapps.example.com",
            "jobs.batch",
            "replicasets.apps",
        ];
        names.sort_by_key(|n| phase(n));
        assert_eq!(
            names,
            [
                "jobs.batch",
                "replicasets.apps",
                "pods",
                "webapps.example.com"
            ]
        );
        assert_eq!(grace_period("pods"), Some(0));
        assert_eq!(grace_period("jobs.batch"), None);
        assert_eq!(grace_period("configmaps"), None);
    }

    #[test]
    fn crds_go_after_their_resources_and_namespaces_last() {
        let mut names = vec![
            "namespaces",
            "customresourcedefinitions.apiextensions.k8s.io",
            "webapps.example.com",
        ];
        names.sort_by_key(|n| phase(n));
        assert_eq!(
            names,
            [
                "webapps.example.com",
                "customresourcedefinitions.apiextensions.k8s.io",
                "namespaces"
            ]
        );
    }
}
