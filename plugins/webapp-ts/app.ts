/**
 * The WebApp operator in TypeScript: the same logic as the Rust webapp
 * plugin (plugins/webapp, plugins/webapp-logic). A `WebApp`
 * (`example.com/v1`) becomes a Deployment and a Service, and its status
 * reports how many replicas are ready. host/tests/e2e/langs.rs checks that
 * the three ports answer alike.
 *
 * Built by scripts/build-lang-plugins.sh into webapp_ts.wasm.
 */
import {
  Children, DEPLOYMENT, DONE, Desired, Event, Failure, KubeObject, SERVICE, log, namespaced, normalEvent, plugin, ready,
} from "../../sdk-ts/src/index.ts";

export const reconciler = plugin({
  name: "webapp",
  version: "1.0.0",
  description: "Runs a web application as a Deployment and a Service",
  primary: namespaced("example.com", "v1", "WebApp", "webapps"),
  owns: [DEPLOYMENT, SERVICE],
  finalizer: true,
  reconcile(_ctx, app, children) {
    return desiredState(app, children);
  },
  finalize(_ctx, app) {
    log(`WebApp ${app.metadata?.name ?? ""} is being deleted; its Deployment and Service follow`);
    return DONE;
  },
});

function desiredState(app: KubeObject, children: Children): Desired {
  const spec = app.spec ?? {};
  const replicas = spec.replicas;
  const image: string = spec.image ?? "";
  const port = spec.port ?? 80;
  // The CRD validates these too; an object stored before the schema was
  // tightened must not turn into an invalid Deployment.
  const valid = Number.isInteger(replicas) && replicas >= 1 && replicas <= 10
    && Number.isInteger(port) && port >= 1 && port <= 65535 && image !== "";
  if (!valid) {
    throw Failure.permanent(
      `spec is invalid: replicas must be 1..10 (got ${replicas}), port 1..65535 (got ${port}), image non-empty`,
    );
  }
  const meta = app.metadata ?? {};
  const name: string = meta.name ?? "";
  const readyReplicas: number = children.get(DEPLOYMENT, name)?.status?.readyReplicas ?? 0;
  const running = readyReplicas >= replicas;
  const message = `${readyReplicas}/${replicas} replicas ready`;
  const phase = running ? "Running" : "Pending";
  const reason = running ? "AllReplicasReady" : "ReplicasNotReady";
  const desired = new Desired();
  for (const child of childrenOf(meta, replicas, image, port)) desired.child(child);
  desired.status({ readyReplicas, phase });
  // One event per change of phase (not one per reconcile).
  const event = phaseEvent(app.status?.phase, phase, message);
  if (event) desired.event(event);
  return desired.condition(ready(running, reason, message));
}

function phaseEvent(before: string | undefined, now: string, message: string): Event | undefined {
  if (now === "Running") return before === "Running" ? undefined : normalEvent("Running", message);
  if (before === "Running") return normalEvent("Pending", message);
  return undefined;
}

/** The Deployment and Service, field for field as the Rust plugin writes them. */
function childrenOf(meta: Record<string, any>, replicas: number, image: string, port: number): KubeObject[] {
  const name: string = meta.name ?? "";
  const selector = () => ({ app: name });
  const metadata = () => ({
    labels: selector(),
    name,
    ...(meta.namespace !== undefined ? { namespace: meta.namespace } : {}),
  });
  const deployment = {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: metadata(),
    spec: {
      replicas,
      selector: { matchLabels: selector() },
      template: {
        metadata: { labels: selector() },
        spec: {
          // The namespace's default account, without its token.
          automountServiceAccountToken: false,
          containers: [{
            image,
            name: "web",
            ports: [{ containerPort: port }],
            securityContext: { allowPrivilegeEscalation: false, capabilities: { drop: ["ALL"] } },
          }],
          securityContext: { runAsNonRoot: true, seccompProfile: { type: "RuntimeDefault" } },
        },
      },
    },
  };
  const service = {
    apiVersion: "v1",
    kind: "Service",
    metadata: metadata(),
    spec: { ports: [{ port, targetPort: port }], selector: selector() },
  };
  return [deployment, service];
}
