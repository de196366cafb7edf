/** @module Interface wasm-operator:plugin/reconciler@0.1.0 **/
/**
 * The plugin's manifest. Must be a pure function: the host calls it once
 * when a version is loaded.
 */
export function manifest(): PluginManifest;
/**
 * Compute the desired state for one primary object.
 * `object` is the primary as JSON; `children` are the owned children that
 * exist now.
 */
export function reconcile(ctx: CallContext, object: Json, children: Array<Json>): Desired;
/**
 * Clean up before the primary is deleted (only called when the manifest
 * asks for a finalizer).
 */
export function finalize(ctx: CallContext, object: Json, children: Array<Json>): Finalized;
export type Json = import('./wasm-operator-plugin-types.js').Json;
export type PluginManifest = import('./wasm-operator-plugin-types.js').Manifest;
export type CallContext = import('./wasm-operator-plugin-types.js').CallContext;
export type Desired = import('./wasm-operator-plugin-types.js').Desired;
export type Failure = import('./wasm-operator-plugin-types.js').Failure;
export type Finalized = import('./wasm-operator-plugin-types.js').Finalized;
