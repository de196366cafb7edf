/**
 * The wasm-operator plugin SDK for TypeScript (built with jco componentize,
 * StarlingMonkey, every WASI feature disabled: the component imports nothing
 * but wasm-operator:plugin).
 *
 * An author writes plain functions over plain objects and exports the
 * `reconciler` the SDK builds:
 *
 *   import { plugin, Desired, Condition, DEPLOYMENT } from "../../sdk-ts/src/index.ts";
 *   export const reconciler = plugin({
 *     name: "webapp", version: "1.0.0", primary: namespaced("example.com", "v1", "WebApp", "webapps"),
 *     owns: [DEPLOYMENT],
 *     reconcile(ctx, obj, children) { return new Desired().child({...}); },
 *   });
 *
 * A thrown `Failure` fails the call (transient: retried, permanent: waits for
 * a change); any other exception becomes a transient failure naming the
 * error, its message and the source line, and its stack goes to the host log.
 * The WIT types come from `jco types wit/plugin.wit` (sdk-ts/types).
 */
import { log as hostLog } from "wasm-operator:plugin/log@0.1.0";
import { get as cacheGet, list as cacheList } from "wasm-operator:plugin/cache@0.1.0";
import type * as wit from "../types/interfaces/wasm-operator-plugin-types.js";

/** A Kubernetes object as the API server serializes it. */
export type KubeObject = { apiVersion?: string; kind?: string; metadata?: Record<string, any>; [field: string]: any };

/** A resource kind: group ("" for core), version, kind, plural, scope. */
export type Kind = wit.ResourceKind;

/** A namespaced kind. */
export function namespaced(group: string, version: string, kind: string, plural: string): Kind {
  return { group, version, kind, plural, scope: "namespaced" };
}

/** A cluster-scoped kind. */
export function cluster(group: string, version: string, kind: string, plural: string): Kind {
  return { group, version, kind, plural, scope: "cluster" };
}

/** `group/version`, or `version` for the core group. */
export function apiVersion(kind: Kind): string {
  return kind.group ? `${kind.group}/${kind.version}` : kind.version;
}

export const DEPLOYMENT = namespaced("apps", "v1", "Deployment", "deployments");
export const SERVICE = namespaced("", "v1", "Service", "services");
export const CONFIG_MAP = namespaced("", "v1", "ConfigMap", "configmaps");
export const SECRET = namespaced("", "v1", "Secret", "secrets");

/** What the host knows about a call beyond the object. */
export interface Context {
  pluginVersion: string;
  attempt: number;
  managedByVersion?: string;
  config: Record<string, any>;
}

/** A status condition on the primary (the host adds the times). */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
}

/** The `Ready` condition. */
export function ready(isReady: boolean, reason: string, message: string): Condition {
  return { type: "Ready", status: isReady ? "True" : "False", reason, message };
}

/** An event recorded on the primary. */
export interface Event {
  warning: boolean;
  reason: string;
  message: string;
}

/** A `Normal` event. */
export function normalEvent(reason: string, message: string): Event {
  return { warning: false, reason, message };
}

/** A `Warning` event. */
export function warningEvent(reason: string, message: string): Event {
  return { warning: true, reason, message };
}

/** The answer to `reconcile`; the builder methods return `this`. */
export class Desired {
  children: KubeObject[] = [];
  statusFields?: Record<string, any>;
  conditions: Condition[] = [];
  events: Event[] = [];
  requeueAfterMs?: number;

  child(obj: KubeObject): this {
    this.children.push(obj);
    return this;
  }
  status(fields: Record<string, any>): this {
    this.statusFields = fields;
    return this;
  }
  condition(c: Condition): this {
    this.conditions.push(c);
    return this;
  }
  event(e: Event): this {
    this.events.push(e);
    return this;
  }
  requeueAfter(seconds: number): this {
    this.requeueAfterMs = Math.round(seconds * 1000);
    return this;
  }
  /** @internal The WIT record. */
  toWit(): wit.Desired {
    return {
      children: this.children.map((c) => JSON.stringify(c)),
      status: this.statusFields === undefined ? undefined : JSON.stringify(this.statusFields),
      conditions: this.conditions.map((c) => ({ kind: c.type, status: c.status, reason: c.reason, message: c.message })),
      events: this.events.map((e) => ({ ...e })),
      requeueAfterMs: this.requeueAfterMs === undefined ? undefined : BigInt(this.requeueAfterMs),
    };
  }
}

/** Throw to fail the call: transient failures are retried, permanent ones wait for a change. */
export class Failure extends Error {
  constructor(message: string, readonly permanent: boolean = false) {
    super(message);
  }
  static transient(message: string): Failure {
    return new Failure(message, false);
  }
  static permanent(message: string): Failure {
    return new Failure(message, true);
  }
}

/** The answer to `finalize`. */
export type Finalized = wit.Finalized;
export const DONE: Finalized = { tag: "done" };
/** Clean-up is under way: call again after `seconds`. */
export function wait(seconds: number): Finalized {
  return { tag: "wait", val: BigInt(Math.round(seconds * 1000)) };
}

/** The owned children that exist now. */
export class Children {
  constructor(readonly objects: KubeObject[]) {}
  get(kind: Kind, name: string): KubeObject | undefined {
    return this.objects.find(
      (o) => o.apiVersion === apiVersion(kind) && o.kind === kind.kind && o.metadata?.name === name,
    );
  }
  of(kind: Kind): KubeObject[] {
    return this.objects.filter((o) => o.apiVersion === apiVersion(kind) && o.kind === kind.kind);
  }
}

/** Writes one record into the host's log. */
export function log(message: string, level: "trace" | "debug" | "info" | "warn" | "error" = "info"): void {
  hostLog(level, message);
}

/** One object from the host's cache (its kind must be owned or watched). */
export function get(kind: Kind, name: string, namespace?: string): KubeObject | undefined {
  const text = cacheGet({ apiVersion: apiVersion(kind), kind: kind.kind, namespace, name });
  return text === undefined ? undefined : JSON.parse(text);
}

/** Objects of a kind from the host's cache. */
export function list(kind: Kind, namespace?: string, selector?: string): KubeObject[] {
  return cacheList(apiVersion(kind), kind.kind, namespace, selector).map((t) => JSON.parse(t));
}

/** What an author writes. */
export interface PluginSpec {
  name: string;
  version: string;
  description?: string;
  primary: Kind;
  owns?: Kind[];
  watches?: Kind[];
  finalizer?: boolean;
  minCompatibleVersion?: string;
  reconcile(ctx: Context, obj: KubeObject, children: Children): Desired;
  finalize?(ctx: Context, obj: KubeObject, children: Children): Finalized;
}

/** `file:LINE` of the innermost stack frame outside this SDK, from an error's stack. */
function where(error: Error): string {
  const frames = (error.stack ?? "").split("\n").filter((l) => l.includes(":") && !l.includes("sdk-ts/src"));
  const frame = frames[0];
  if (!frame) return "an unknown line";
  // StarlingMonkey frames read `function@file:line:column`.
  const at = frame.lastIndexOf("@");
  const location = (at >= 0 ? frame.slice(at + 1) : frame).trim();
  const fn = at > 0 ? ` in ${frame.slice(0, at)}` : "";
  return `${location.split("/").pop()}${fn}`;
}

/** Runs the author's function; failures and exceptions become the call's `failure`. */
function guard<T>(fn: string, call: () => T): T {
  try {
    return call();
  } catch (error) {
    if (error instanceof Failure) {
      throw { tag: error.permanent ? "permanent" : "transient", val: error.message } satisfies wit.Failure;
    }
    const e = error instanceof Error ? error : new Error(String(error));
    log(`${fn} threw ${e.name}: ${e.message}\n${e.stack ?? ""}`, "error");
    const message = e.message ? `${e.name}: ${e.message}` : e.name;
    throw { tag: "transient", val: `exception ${message} (thrown at ${where(e)})` } satisfies wit.Failure;
  }
}

function context(ctx: wit.CallContext): Context {
  return {
    pluginVersion: ctx.pluginVersion,
    attempt: ctx.attempt,
    managedByVersion: ctx.managedByVersion,
    config: JSON.parse(ctx.config || "{}"),
  };
}

/** The `reconciler` export for `spec`; export it as `reconciler` from the entry module. */
export function plugin(spec: PluginSpec) {
  const parse = (children: string[]) => new Children(children.map((c) => JSON.parse(c)));
  return {
    manifest(): wit.Manifest {
      return {
        name: spec.name,
        version: spec.version,
        description: spec.description ?? "",
        primary: spec.primary,
        owns: spec.owns ?? [],
        watches: spec.watches ?? [],
        finalizer: spec.finalizer ?? false,
        implements: { migration: false, backup: false },
        minCompatibleVersion: spec.minCompatibleVersion,
      };
    },
    reconcile(ctx: wit.CallContext, obj: string, children: string[]): wit.Desired {
      return guard("reconcile", () => spec.reconcile(context(ctx), JSON.parse(obj), parse(children)).toWit());
    },
    finalize(ctx: wit.CallContext, obj: string, children: string[]): Finalized {
      const fin = spec.finalize;
      if (!fin) return DONE;
      return guard("finalize", () => fin(context(ctx), JSON.parse(obj), parse(children)));
    },
  };
}
