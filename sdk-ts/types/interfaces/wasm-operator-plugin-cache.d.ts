/** @module Interface wasm-operator:plugin/cache@0.1.0 **/
/**
 * One object from the cache, or none when it does not exist.
 * A read of an undeclared kind fails the call with `CapabilityDenied`.
 */
export function get(ref: ObjectRef): Json | undefined;
/**
 * Objects of a kind, optionally in one namespace and matching a label
 * selector (`app=web,tier in (a,b)`).
 */
export function list(apiVersion: string, kind: string, namespace: string | undefined, labelSelector: string | undefined): Array<Json>;
export type Json = import('./wasm-operator-plugin-types.js').Json;
export type ObjectRef = import('./wasm-operator-plugin-types.js').ObjectRef;
