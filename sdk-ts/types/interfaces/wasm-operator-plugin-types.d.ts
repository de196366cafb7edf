/** @module Interface wasm-operator:plugin/types@0.1.0 **/
/**
 * One Kubernetes object (or object fragment) serialized as a JSON document.
 */
export type Json = string;
/**
 * Names one object the host may know about.
 */
export interface ObjectRef {
  /**
   * `group/version`, or just `version` for the core group (`v1`).
   */
  apiVersion: string,
  kind: string,
  /**
   * Absent for cluster-scoped objects.
   */
  namespace?: string,
  name: string,
}
/**
 * Whether objects of a kind live in a namespace.
 * # Variants
 * 
 * ## `"namespaced"`
 * 
 * ## `"cluster"`
 */
export type Scope = 'namespaced' | 'cluster';
/**
 * A Kubernetes resource kind, fully identified.
 */
export interface ResourceKind {
  /**
   * API group; empty for the core group.
   */
  group: string,
  version: string,
  kind: string,
  /**
   * Lower-case plural used in URLs, e.g. `deployments`.
   */
  plural: string,
  scope: Scope,
}
/**
 * Optional interfaces a plugin implements beyond `reconciler`.
 */
export interface OptionalInterfaces {
  /**
   * `migration` is real: both of its functions, or those that
   * `migration-functions.implemented` names when exported.
   */
  migration?: boolean,
  /**
   * `backup.plan` and `backup.restore` are real.
   */
  backup?: boolean,
}
/**
 * What a plugin is and what it may touch. The host reads it once per loaded
 * version and enforces it on every call.
 */
export interface Manifest {
  /**
   * Stable plugin name, e.g. `webapp`. Used in field managers
   * (`wasm-operator/<name>`), labels and metrics.
   */
  name: string,
  /**
   * Semantic version of this build, e.g. `1.2.0`.
   */
  version: string,
  /**
   * One line for humans (`wasm-operator plugin inspect`).
   */
  description: string,
  /**
   * The kind this plugin reconciles.
   */
  primary: ResourceKind,
  /**
   * Kinds the plugin creates as children. The only kinds it may return in
   * `desired.children`; the host watches them and prunes strays.
   */
  owns: Array<ResourceKind>,
  /**
   * Kinds the plugin may read through `cache` without owning them.
   * Owned kinds and the primary kind are readable without being listed.
   */
  watches: Array<ResourceKind>,
  /**
   * Ask the host to add a finalizer to primaries and call `finalize`
   * before they are deleted.
   */
  finalizer: boolean,
  /**
   * Which optional interfaces carry real implementations.
   */
  'implements': OptionalInterfaces,
  /**
   * Objects this version has reconciled cannot be served by versions
   * older than this one (semver). The host refuses such a rollback
   * instead of letting an older version corrupt newer state.
   * Absent: any older version may serve them (forward compatible).
   */
  minCompatibleVersion?: string,
}
/**
 * What the host knows about a call, beyond the object itself.
 */
export interface CallContext {
  /**
   * Version of the plugin being called (from its manifest).
   */
  pluginVersion: string,
  /**
   * 1 for the first attempt; grows with every retry of a failing object.
   */
  attempt: number,
  /**
   * The plugin version that last managed this object
   * (annotation `wasm-operator.dev/managed-by-version`), if any.
   */
  managedByVersion?: string,
  /**
   * The `config` of the plugin's deployment, as JSON (`{}` when unset).
   */
  config: Json,
}
/**
 * One status condition the plugin wants on the primary. The host adds
 * `lastTransitionTime` and `observedGeneration`.
 */
export interface Condition {
  /**
   * Condition type, e.g. `Ready`, `Progressing`, or the plugin's own.
   */
  kind: string,
  /**
   * `True`, `False` or `Unknown`.
   */
  status: string,
  /**
   * CamelCase, searchable, e.g. `DeploymentAvailable`.
   */
  reason: string,
  message: string,
}
/**
 * One event the host records on the primary.
 */
export interface Event {
  /**
   * `Warning` when true, `Normal` otherwise.
   */
  warning: boolean,
  /**
   * CamelCase, e.g. `ScaledUp`.
   */
  reason: string,
  message: string,
}
/**
 * The plugin's answer to `reconcile`.
 */
export interface Desired {
  /**
   * The complete desired set of owned children, each a full object as
   * JSON with `apiVersion`, `kind` and `metadata.name` (namespace
   * defaults to the primary's). The host applies them with server-side
   * apply and deletes owned children that are not in this list.
   */
  children: Array<Json>,
  /**
   * Fields to merge into the primary's `.status` (the host sets
   * `observedGeneration`).
   */
  status?: Json,
  /**
   * Conditions to set on the primary, merged by `kind`.
   */
  conditions: Array<Condition>,
  /**
   * Events to record on the primary.
   */
  events: Array<Event>,
  /**
   * Reconcile again after this many milliseconds even if nothing changes.
   */
  requeueAfterMs?: bigint,
}
/**
 * Why a call did not produce a result.
 */
export type Failure = FailureTransient | FailurePermanent;
/**
 * Worth retrying: the host backs off exponentially (5 s base, 300 s cap).
 */
export interface FailureTransient {
  tag: 'transient',
  val: string,
}
/**
 * Retrying will not help: the host waits for the object to change.
 */
export interface FailurePermanent {
  tag: 'permanent',
  val: string,
}
/**
 * The plugin's answer to `finalize`.
 */
export type Finalized = FinalizedDone | FinalizedWait;
/**
 * Clean-up is complete; the host removes the finalizer.
 */
export interface FinalizedDone {
  tag: 'done',
}
/**
 * Clean-up is under way; call again after this many milliseconds.
 */
export interface FinalizedWait {
  tag: 'wait',
  val: bigint,
}
/**
 * A backup schedule and how to take one.
 */
export interface BackupPlan {
  /**
   * Cron expression, e.g. `0 3 * * *`.
   */
  schedule: string,
  /**
   * A `batch/v1` Job template (JSON) that takes one backup.
   */
  job: Json,
  /**
   * How many completed backups to keep.
   */
  retain: number,
  /**
   * Take a final backup before the primary is deleted.
   */
  backupOnDelete: boolean,
}
