"""The WebApp operator in Python: the same logic as the Rust webapp plugin
(plugins/webapp, plugins/webapp-logic). A `WebApp` (`example.com/v1`) becomes
a Deployment and a Service, and its status reports how many replicas are
ready. host/tests/e2e/langs.rs checks that the three ports answer alike.

Built by scripts/build-lang-plugins.sh into webapp_py.wasm.
"""

from wasm_operator import DEPLOYMENT, SERVICE, Children, Condition, Desired, Event, Failure, Finalized, Kind, Plugin, log

plugin = Plugin(
    "webapp",
    "1.0.0",
    description="Runs a web application as a Deployment and a Service",
    primary=Kind.namespaced("example.com", "v1", "WebApp", "webapps"),
    owns=[DEPLOYMENT, SERVICE],
    finalizer=True,
)


@plugin.reconcile
def reconcile(ctx, app, children: Children) -> Desired:
    spec = app.get("spec", {})
    replicas = spec.get("replicas")
    image = spec.get("image", "")
    port = spec.get("port", 80)
    # The CRD validates these too; an object stored before the schema was
    # tightened must not turn into an invalid Deployment.
    if not (isinstance(replicas, int) and 1 <= replicas <= 10 and isinstance(port, int) and 1 <= port <= 65535
            and image):
        raise Failure.permanent(
            f"spec is invalid: replicas must be 1..10 (got {replicas}), port 1..65535 (got {port}), image non-empty")
    meta = app.get("metadata", {})
    name = meta.get("name", "")
    deployment = children.get(DEPLOYMENT, name) or {}
    ready = (deployment.get("status") or {}).get("readyReplicas") or 0
    running = ready >= replicas
    message = f"{ready}/{replicas} replicas ready"
    phase = "Running" if running else "Pending"
    reason = "AllReplicasReady" if running else "ReplicasNotReady"
    desired = Desired()
    for child in children_of(meta, replicas, image, port):
        desired.child(child)
    desired.status({"readyReplicas": ready, "phase": phase})
    # One event per change of phase (not one per reconcile).
    event = phase_event((app.get("status") or {}).get("phase"), phase, message)
    if event is not None:
        desired.event(event)
    return desired.condition(Condition.ready(running, reason, message))


def phase_event(before, now, message):
    """The event for a change of phase from `before` to `now`, or None."""
    if now == "Running":
        return None if before == "Running" else Event.normal("Running", message)
    if before == "Running":
        return Event.normal("Pending", message)
    return None


@plugin.finalize
def finalize(ctx, app, children):
    log(f"WebApp {app.get('metadata', {}).get('name', '')} is being deleted; its Deployment and Service follow")
    return Finalized.DONE


def children_of(meta, replicas, image, port):
    """The Deployment and Service a WebApp stands for, field for field as the Rust plugin writes them."""
    name = meta.get("name", "")
    selector = {"app": name}
    metadata = {"labels": dict(selector), "name": name}
    if meta.get("namespace") is not None:
        metadata["namespace"] = meta["namespace"]
    container = {
        "image": image,
        "name": "web",
        "ports": [{"containerPort": port}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": dict(selector)},
            "template": {
                "metadata": {"labels": dict(selector)},
                "spec": {
                    # The namespace's default account, without its token.
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": dict(metadata),
        "spec": {"ports": [{"port": port, "targetPort": port}], "selector": dict(selector)},
    }
    return [deployment, service]


Reconciler = plugin.export()
