"""Python `kubernetes` client test against a devcluster.

Usage: python3 python_client.py KUBECONFIG WEBAPP_CRD_YAML

Run by tests/clients/python.rs. Each step prints what it checks; the first failing check
raises with the evidence and the script exits non-zero.
"""

import sys
import threading
import time

import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP = "demo.wasm-operator.dev"
VERSION = "v1"
PLURAL = "webapps"
NS = "default"


def step(what):
    print(f"\n== {what}", flush=True)


def ok(what):
    print(f"ok: {what}", flush=True)


def expect_eq(actual, expected, what):
    if actual != expected:
        raise AssertionError(f"{what}: expected {expected!r}, got {actual!r}")
    ok(f"{what} = {expected!r}")


def expect_api_error(status, what, call, *args, **kwargs):
    """`call` must raise ApiException with HTTP `status`; returns the exception."""
    try:
        result = call(*args, **kwargs)
    except ApiException as e:
        if e.status != status:
            raise AssertionError(
                f"{what}: expected HTTP {status}, got {e.status}: {e.body}"
            ) from e
        print(f"server said: {e.status} {e.reason}: {e.body}")
        ok(f"{what} -> ApiException {status}")
        return e
    raise AssertionError(f"{what}: expected ApiException {status}, the call returned {result!r}")


def webapp(name, image, replicas=1, labels=None):
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WebApp",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"image": image, "replicas": replicas},
    }


def wait_established(ext, name, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        crd = ext.read_custom_resource_definition(name)
        for cond in (crd.status.conditions if crd.status else None) or []:
            if cond.type == "Established" and cond.status == "True":
                return
        time.sleep(0.5)
    raise AssertionError(f"CRD {name} not Established after {seconds}s")


def main():
    kubeconfig, crd_path = sys.argv[1], sys.argv[2]

    step("load the kubeconfig")
    config.load_kube_config(config_file=kubeconfig)
    api_client = client.ApiClient()
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    ok(f"kubeconfig points at {api_client.configuration.host}")

    step("ApiextensionsV1Api: create the WebApp CRD and wait until Established")
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    ext.create_custom_resource_definition(crd)
    wait_established(ext, crd["metadata"]["name"])
    ok("CRD established")

    step("CustomObjectsApi: create")
    created = custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, webapp("py-one", "nginx:1.25", 2, {"suite": "python"})
    )
    expect_eq(created["metadata"]["name"], "py-one", "created name")
    if not created["metadata"].get("uid"):
        raise AssertionError(f"created object has no uid: {created}")
    custom.create_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, webapp("py-two", "httpd:2.4", 1, {"suite": "python"})
    )
    ok("created py-one and py-two")

    step("CustomObjectsApi: get")
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "py-one")
    expect_eq(got["spec"], {"image": "nginx:1.25", "replicas": 2}, "py-one spec")
    expect_eq(got["kind"], "WebApp", "py-one kind")

    step("CustomObjectsApi: list (all, then by label selector)")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    expect_eq(sorted(i["metadata"]["name"] for i in listed["items"]), ["py-one", "py-two"], "listed names")
    if not listed["metadata"].get("resourceVersion"):
        raise AssertionError(f"list has no metadata.resourceVersion: {listed['metadata']}")
    listed = custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, label_selector="suite=python"
    )
    expect_eq(len(listed["items"]), 2, "items matching suite=python")
    listed = custom.list_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, label_selector="suite=other"
    )
    expect_eq(len(listed["items"]), 0, "items matching suite=other")

    step("CustomObjectsApi: patch (merge)")
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "py-one", {"spec": {"replicas": 4}},
        _content_type="application/merge-patch+json",
    )
    expect_eq(patched["spec"], {"image": "nginx:1.25", "replicas": 4}, "py-one spec after the merge patch")
    expect_eq(patched["metadata"]["generation"], 2, "py-one generation after a spec change")

    step("CustomObjectsApi: patch the status subresource")
    status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Test"}]}}
    patched = custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, PLURAL, "py-one", status,
        _content_type="application/merge-patch+json",
    )
    expect_eq(patched["status"]["conditions"][0]["type"], "Ready", "py-one status condition")
    expect_eq(patched["metadata"]["generation"], 2, "generation unchanged by a status patch")

    step("ApiException 404 / 409 / 422 where a kube-apiserver returns them")
    expect_api_error(404, "get a missing webapp", custom.get_namespaced_custom_object,
                     GROUP, VERSION, NS, PLURAL, "does-not-exist")
    expect_api_error(409, "create py-one again", custom.create_namespaced_custom_object,
                     GROUP, VERSION, NS, PLURAL, webapp("py-one", "nginx:1.25"))
    e = expect_api_error(422, "create with replicas above the schema maximum",
                         custom.create_namespaced_custom_object,
                         GROUP, VERSION, NS, PLURAL, webapp("py-bad", "nginx:1.25", 50))
    if "spec.replicas" not in (e.body or ""):
        raise AssertionError(f"the 422 body does not name spec.replicas: {e.body}")
    ok("the 422 body names spec.replicas")
    expect_api_error(404, "read a missing configmap", core.read_namespaced_config_map,
                     "does-not-exist", NS)
    stale = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "py-two")
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "py-two", {"spec": {"replicas": 2}},
        _content_type="application/merge-patch+json",
    )
    stale["spec"]["replicas"] = 3
    expect_api_error(409, "replace with a stale resourceVersion",
                     custom.replace_namespaced_custom_object,
                     GROUP, VERSION, NS, PLURAL, "py-two", stale)

    step("CoreV1Api: create / read / list configmaps")
    cm = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="py-config", labels={"suite": "python"}),
        data={"greeting": "hello"},
    )
    created_cm = core.create_namespaced_config_map(NS, cm)
    expect_eq(created_cm.data, {"greeting": "hello"}, "created configmap data")
    read_cm = core.read_namespaced_config_map("py-config", NS)
    expect_eq(read_cm.metadata.uid, created_cm.metadata.uid, "read configmap uid")
    cms = core.list_namespaced_config_map(NS, label_selector="suite=python")
    expect_eq([c.metadata.name for c in cms.items], ["py-config"], "configmaps matching suite=python")
    expect_api_error(409, "create py-config again", core.create_namespaced_config_map, NS, cm)

    step("CoreV1Api: paginated list (limit + continue), field selector, delete_collection")
    for i in range(5):
        core.create_namespaced_config_map(NS, client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=f"py-page-{i}", labels={"suite": "paging"}),
            data={"i": str(i)}))
    names, token, pages = [], None, 0
    while True:
        page = core.list_namespaced_config_map(NS, label_selector="suite=paging", limit=2,
                                               _continue=token)
        pages += 1
        names += [c.metadata.name for c in page.items]
        if len(page.items) > 2:
            raise AssertionError(f"limit=2 returned {len(page.items)} items")
        token = page.metadata._continue
        if not token:
            break
        if pages > 10:
            raise AssertionError("the continue tokens never ran out")
    expect_eq(sorted(names), [f"py-page-{i}" for i in range(5)], "names across all pages")
    expect_eq(pages, 3, "pages of 2 for 5 objects")
    by_field = core.list_namespaced_config_map(NS, field_selector="metadata.name=py-page-3")
    expect_eq([c.metadata.name for c in by_field.items], ["py-page-3"], "field selector metadata.name")
    core.delete_collection_namespaced_config_map(NS, label_selector="suite=paging")
    deadline = time.monotonic() + 30
    while core.list_namespaced_config_map(NS, label_selector="suite=paging").items:
        if time.monotonic() > deadline:
            raise AssertionError("delete_collection left objects behind after 30s")
        time.sleep(0.5)
    ok("delete_collection removed every suite=paging configmap")
    expect_eq(core.read_namespaced_config_map("py-config", NS).metadata.name, "py-config",
              "delete_collection spared the unlabelled configmap")

    step("dynamic.DynamicClient: discovery finds the CRD kind, then get/list through it")
    from kubernetes import dynamic
    dyn = dynamic.DynamicClient(api_client)
    webapps = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="WebApp")
    expect_eq(webapps.name, PLURAL, "discovered resource name")
    expect_eq(webapps.namespaced, True, "discovered namespaced flag")
    listed = webapps.get(namespace=NS)
    expect_eq(sorted(i.metadata.name for i in listed.items), ["py-one", "py-two"], "dynamic list")
    expect_eq(webapps.get(name="py-one", namespace=NS).spec.replicas, 4, "dynamic get py-one")
    configmaps = dyn.resources.get(api_version="v1", kind="ConfigMap")
    expect_eq(configmaps.get(name="py-config", namespace=NS).data.greeting, "hello", "dynamic get py-config")

    step("watch.Watch().stream sees ADDED and MODIFIED for a new webapp")
    seen = []
    ready = threading.Event()
    errors = []

    def watcher():
        w = watch.Watch()
        try:
            for event in w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS,
                                  PLURAL, timeout_seconds=30):
                ready.set()
                obj = event["object"]
                name = obj.get("metadata", {}).get("name")
                seen.append((event["type"], name, obj.get("spec", {}).get("replicas")))
                if ("MODIFIED", "py-watch", 7) in seen:
                    w.stop()
        except Exception as exc:  # surfaced by the main thread's assertion below
            errors.append(exc)
        finally:
            ready.set()

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    # The stream lists existing objects first (as ADDED); the first one proves it is connected.
    if not ready.wait(30):
        raise AssertionError("the watch delivered nothing within 30s")
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, webapp("py-watch", "nginx:1.25"))
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "py-watch", {"spec": {"replicas": 7}},
        _content_type="application/merge-patch+json",
    )
    thread.join(40)
    print(f"watch events: {seen}")
    if errors:
        raise AssertionError(f"the watch stream failed: {errors[0]!r}")
    if ("ADDED", "py-watch", 1) not in seen:
        raise AssertionError("the watch never delivered ADDED for py-watch")
    ok("ADDED py-watch")
    if ("MODIFIED", "py-watch", 7) not in seen:
        raise AssertionError("the watch never delivered MODIFIED py-watch with replicas 7")
    ok("MODIFIED py-watch")

    step("CustomObjectsApi: delete")
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "py-one")
    deadline = time.monotonic() + 30
    while True:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "py-one")
        except ApiException as e:
            expect_eq(e.status, 404, "get after delete")
            break
        if time.monotonic() > deadline:
            raise AssertionError("py-one still exists 30s after its delete")
        time.sleep(0.5)
    expect_api_error(404, "delete py-one again", custom.delete_namespaced_custom_object,
                     GROUP, VERSION, NS, PLURAL, "py-one")
    core.delete_namespaced_config_map("py-config", NS)
    ok("deleted py-config")

    print("\nALL PYTHON CHECKS PASSED", flush=True)


if __name__ == "__main__":
    main()
