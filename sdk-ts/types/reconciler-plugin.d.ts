// world wasm-operator:plugin/reconciler-plugin@0.1.0
export type * as WasmOperatorPluginCache010 from './interfaces/wasm-operator-plugin-cache.js'; // import wasm-operator:plugin/cache@0.1.0
export type * as WasmOperatorPluginLog010 from './interfaces/wasm-operator-plugin-log.js'; // import wasm-operator:plugin/log@0.1.0
export type * as WasmOperatorPluginTypes010 from './interfaces/wasm-operator-plugin-types.js'; // import wasm-operator:plugin/types@0.1.0
export * as reconciler from './interfaces/wasm-operator-plugin-reconciler.js'; // export wasm-operator:plugin/reconciler@0.1.0
