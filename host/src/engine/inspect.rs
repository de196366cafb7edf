//! `wasm-operator plugin inspect`: what a component is, without a cluster.

use serde::Serialize;
use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};

use super::{Engine, EngineConfig, EngineError};
use crate::contract;

/// What `inspect` reports about a component.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// `sha256:<hex>` of the component bytes.
    pub digest: String,
    /// Size of the component in bytes.
    pub size: usize,
    /// What the component's `manifest` function returned (validated).
    pub manifest: contract::Manifest,
    /// Which admission functions it implements (its `admission.implemented`).
    pub admission: contract::AdmissionFunctions,
    /// The component's imports and exports as WIT-like text.
    pub world: String,
    /// The CRD the plugin carries (its `schema` export), if any; printed by
    /// `plugin crd`, not part of `plugin inspect`'s output.
    #[serde(skip)]
    pub crd: Option<serde_json::Value>,
}

/// Loads `bytes` in a throw-away engine (no disk cache), calls `manifest`
/// and describes the component's world.
pub fn inspect(bytes: &[u8]) -> Result<Inspection, EngineError> {
    let engine = Engine::new(EngineConfig::default())?;
    let plugin = engine.load(bytes)?;
    let component = plugin.component();
    let ty = component.component_type();
    let wasmtime = &engine.inner.wasmtime;
    let mut world = String::from("world plugin {\n");
    for (name, item) in ty.imports(wasmtime) {
        describe(&mut world, "import", name, &item.ty, wasmtime);
    }
    for (name, item) in ty.exports(wasmtime) {
        describe(&mut world, "export", name, &item.ty, wasmtime);
    }
    world.push_str("}\n");
    let crd = plugin.crd().map_err(|e| EngineError::InvalidManifest {
        digest: plugin.digest().to_string(),
        problem: format!("its CRD cannot be read: {e}"),
    })?;
    Ok(Inspection {
        digest: plugin.digest().to_string(),
        size: bytes.len(),
        manifest: plugin.manifest().clone(),
        admission: plugin.admission_functions(),
        world,
        crd,
    })
}

fn describe(
    out: &mut String,
    dir: &str,
    name: &str,
    item: &ComponentItem,
    engine: &wasmtime::Engine,
) {
    match item {
        ComponentItem::ComponentInstance(instance) => {
            let funcs: Vec<String> = instance
                .exports(engine)
                .filter_map(|(f, e)| match e.ty {
                    ComponentItem::ComponentFunc(func) => {
                        Some(format!("    {f}: {};\n", func_sig(&func)))
                    }
                    _ => None,
                })
                .collect();
            if funcs.is_empty() {
                out.push_str(&format!("  {dir} {name};\n"));
            } else {
                out.push_str(&format!("  {dir} {name} {{\n{}  }}\n", funcs.concat()));
            }
        }
        ComponentItem::ComponentFunc(func) => {
            out.push_str(&format!("  {dir} {name}: {};\n", func_sig(func)));
        }
        _ => out.push_str(&format!("  {dir} {name};\n")),
    }
}

fn func_sig(func: &ComponentFunc) -> String {
    let params: Vec<String> = func
        .params()
        .map(|(n, t)| format!("{n}: {}", type_name(&t)))
        .collect();
    let results: Vec<String> = func.results().map(|t| type_name(&t)).collect();
    match results.len() {
        0 => format!("func({})", params.join(", ")),
        _ => format!("func({}) -> {}", params.join(", "), results.join(", ")),
    }
}

/// WIT spelling of a type; records, variants, enums and flags by their shape
/// (the component binary does not keep type names of anonymous uses).
fn type_name(t: &Type) -> String {
    match t {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", type_name(&l.ty())),
        Type::Option(o) => format!("option<{}>", type_name(&o.ty())),
        Type::Result(r) => format!(
            "result<{}, {}>",
            r.ok().map_or_else(|| "_".to_string(), |t| type_name(&t)),
            r.err().map_or_else(|| "_".to_string(), |t| type_name(&t))
        ),
        Type::Tuple(t) => format!(
            "tuple<{}>",
            t.types()
                .map(|t| type_name(&t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Record(r) => format!(
            "record {{ {} }}",
            r.fields()
                .map(|f| format!("{}: {}", f.name, type_name(&f.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Variant(v) => format!(
            "variant {{ {} }}",
            v.cases()
                .map(|c| match &c.ty {
                    Some(t) => format!("{}({})", c.name, type_name(t)),
                    None => c.name.to_string(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        Type::Flags(f) => format!("flags {{ {} }}", f.names().collect::<Vec<_>>().join(", ")),
        Type::Own(_) => "own<resource>".into(),
        Type::Borrow(_) => "borrow<resource>".into(),
        Type::Future(_) => "future".into(),
        Type::Stream(_) => "stream".into(),
        Type::ErrorContext => "error-context".into(),
        other => format!("{other:?}"),
    }
}
