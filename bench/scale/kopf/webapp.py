"""The webapp operator's logic as a kopf operator, for the scale benchmark.

The same work as plugins/webapp-logic: a WebApp becomes a Deployment and a
Service (server-side applied, owned by the WebApp), and its status gets
readyReplicas, phase, observedGeneration and a Ready condition. kopf adds its
own finalizer and keeps its last-handled state in an annotation: that is
kopf's cost and is counted.

Run: KUBECONFIG=... kopf run --standalone --all-namespaces webapp.py
"""

import datetime
import os

import kopf
import kubernetes

CONCURRENCY = int(os.environ.get("BENCH_CONCURRENCY", "16"))
MANAGER = "kopf-webapp"

_apps = None
_core = None


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    global _apps, _core
    # Sync handlers run in a thread pool: its size is the reconcile concurrency.
    settings.execution.max_workers = CONCURRENCY
    # The other operators record no event for a routine reconcile.
    settings.posting.enabled = False
    settings.persistence.finalizer = "example.com/kopf-webapp"
    kubernetes.config.load_kube_config()
    config = kubernetes.client.Configuration.get_default_copy()
    config.connection_pool_maxsize = CONCURRENCY
    api = kubernetes.client.ApiClient(config)
    _apps = kubernetes.client.AppsV1Api(api)
    _core = kubernetes.client.CoreV1Api(api)


def children_of(name, namespace, spec):
    """The Deployment and Service a WebApp stands for (webapp-logic's children_of)."""
    selector = {"app": name}
    port = spec.get("port", 80)
    meta = {"name": name, "namespace": namespace, "labels": dict(selector)}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": dict(meta),
        "spec": {
            "replicas": spec["replicas"],
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    "containers": [
                        {"name": "web", "image": spec["image"], "ports": [{"containerPort": port}]}
                    ]
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(meta),
        "spec": {"selector": selector, "ports": [{"port": port, "targetPort": port}]},
    }
    return deployment, service


@kopf.on.resume("example.com", "v1", "webapps")
@kopf.on.create("example.com", "v1", "webapps")
@kopf.on.update("example.com", "v1", "webapps", field="spec")
def reconcile(spec, meta, name, namespace, body, patch, **_):
    replicas = spec.get("replicas", 0)
    if not (1 <= replicas <= 10) or not spec.get("image"):
        raise kopf.PermanentError(f"spec is invalid: replicas {replicas}, image {spec.get('image')!r}")
    deployment, service = children_of(name, namespace, spec)
    kopf.adopt([deployment, service], owner=body)
    apply = dict(field_manager=MANAGER, force=True, _content_type="application/apply-patch+yaml")
    _apps.patch_namespaced_deployment(name, namespace, deployment, **apply)
    _core.patch_namespaced_service(name, namespace, service, **apply)
    # No controller runs pods on the devcluster: 0 ready, as the others see it.
    ready = 0
    running = ready >= replicas
    generation = meta.get("generation")
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = body.get("status", {}) or {}
    old = next((c for c in status.get("conditions", []) or [] if c.get("type") == "Ready"), None)
    cond_status = "True" if running else "False"
    transition = old.get("lastTransitionTime") if old and old.get("status") == cond_status else now
    patch.status["readyReplicas"] = ready
    patch.status["phase"] = "Running" if running else "Pending"
    patch.status["observedGeneration"] = generation
    patch.status["conditions"] = [
        {
            "type": "Ready",
            "status": cond_status,
            "reason": "AllReplicasReady" if running else "ReplicasNotReady",
            "message": f"{ready}/{replicas} replicas ready",
            "lastTransitionTime": transition,
            "observedGeneration": generation,
        }
    ]


@kopf.on.delete("example.com", "v1", "webapps")
def finalize(name, logger, **_):
    # The plugin asks for a finalizer; kopf keeps its own only while a delete
    # handler exists, so this is what puts it on every WebApp.
    logger.info(f"WebApp {name} is being deleted; its Deployment and Service follow")
