/** @module Interface wasm-operator:plugin/log@0.1.0 **/
export function log(level: Level, message: string): void;
/**
 * # Variants
 * 
 * ## `"trace"`
 * 
 * ## `"debug"`
 * 
 * ## `"info"`
 * 
 * ## `"warn"`
 * 
 * ## `"error"`
 */
export type Level = 'trace' | 'debug' | 'info' | 'warn' | 'error';
