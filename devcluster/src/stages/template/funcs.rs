//! The functions stage templates call: kwok's (`Quote`, `Now`, `YAML`,
//! `NodeIP`, `PodIPWith`, …), Go's built-ins (`and`, `or`, `not`, `eq`,
//! `index`, `len`, `printf`, …) and the few sprig functions the devcluster's
//! built-in stages use (`dict`, `hasKey`, `add`, `sub`, `toJson`,
//! `trimSuffix`, `adler32sum`), all of which kwok also offers (it loads sprig).
//!
//! Addresses are fake and deterministic: a node's IP derives from its name, a
//! Pod's from its node and identity, so a re-rendered status does not change.

use serde_json::{Map, Value, json};

use super::{Funcs, truthy};

/// The kwok release whose stage files are vendored (what `Version` answers).
pub const KWOK_VERSION: &str = "v0.8.0";

/// The function table of one rendering.
#[derive(Debug, Clone)]
pub struct KwokFuncs {
    /// What `Now` answers (RFC 3339), fixed for one rendering.
    pub now: String,
    /// The object's name (what `NodeName` answers while rendering a Node).
    pub node_name: String,
}

impl KwokFuncs {
    /// Functions for rendering a stage on the object named `object_name`.
    pub fn new(object_name: &str) -> KwokFuncs {
        KwokFuncs {
            now: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
            node_name: object_name.to_string(),
        }
    }
}

/// FNV-1a, for stable fake addresses (std's hasher is randomly seeded).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The fake IP of node `name`: `kwok-node-N` → `10.0.0.(N+10)`, others by hash.
pub fn node_ip(name: &str) -> String {
    match name
        .strip_prefix("kwok-node-")
        .and_then(|n| n.parse::<u64>().ok())
    {
        Some(n) if n < 240 => format!("10.0.0.{}", n + 10),
        _ => format!("10.0.{}.{}", 1 + fnv(name) % 250, 2 + fnv(name) / 250 % 250),
    }
}

/// The fake IP of a Pod: its node's IP with host networking, else one in the
/// node's Pod range `10.244.X.0/24` derived from the Pod's identity.
pub fn pod_ip(node: &str, host_network: bool, uid: &str, name: &str, namespace: &str) -> String {
    if host_network {
        return node_ip(node);
    }
    let subnet = 1 + fnv(node) % 250;
    let host = 2 + fnv(&format!("{namespace}/{name}/{uid}")) % 250;
    format!("10.244.{subnet}.{host}")
}

/// kwok's node conditions (`NodeConditions`), as a kubelet reports a healthy node.
pub fn node_conditions() -> Value {
    let c = |t: &str, s: &str, r: &str, m: &str| json!({"type": t, "status": s, "reason": r, "message": m});
    json!([
        c(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "NetworkUnavailable",
            "False",
            "RouteCreated",
            "RouteController created a route"
        ),
    ])
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn arg<'a>(args: &'a [Value], i: usize, func: &str) -> Result<&'a Value, String> {
    args.get(i)
        .ok_or_else(|| format!("{func} needs at least {} arguments", i + 1))
}

fn int(v: &Value, func: &str) -> Result<i64, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .ok_or_else(|| format!("{func}: {n} is not an integer")),
        Value::String(s) => s
            .parse()
            .map_err(|_| format!("{func}: {s:?} is not an integer")),
        Value::Null => Ok(0),
        other => Err(format!("{func}: {other} is not a number")),
    }
}

/// Go's `eq` for basic values: numbers compare by value.
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

fn order(a: &Value, b: &Value, func: &str) -> Result<std::cmp::Ordering, String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .ok_or_else(|| format!("{func}: cannot compare {x} and {y}")),
        (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
        _ => Err(format!("{func}: incompatible types for comparison")),
    }
}

/// Go's `printf` for the verbs templates use: `%s`, `%v`, `%d`, `%q`, `%%`.
fn printf(args: &[Value]) -> Result<Value, String> {
    let format = text(arg(args, 0, "printf")?);
    let mut rest = args[1..].iter();
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('%') => out.push('%'),
            Some(verb @ ('s' | 'v' | 'd' | 'q')) => {
                let v = rest.next().cloned().unwrap_or(Value::Null);
                match verb {
                    'q' => out.push_str(&Value::String(text(&v)).to_string()),
                    _ => out.push_str(&text(&v)),
                }
            }
            other => {
                return Err(format!(
                    "printf: unsupported verb %{}",
                    other.unwrap_or(' ')
                ));
            }
        }
    }
    Ok(Value::String(out))
}

/// kwok's `YAML`: the value as YAML, each line indented by `2 × indent` spaces.
fn yaml(args: &[Value]) -> Result<Value, String> {
    let data = serde_yaml::to_string(arg(args, 0, "YAML")?).map_err(|e| format!("YAML: {e}"))?;
    let indent = args
        .get(1)
        .map(|v| int(v, "YAML"))
        .transpose()?
        .unwrap_or(0);
    if indent <= 0 {
        return Ok(Value::String(data));
    }
    let pad = " ".repeat(indent as usize * 2);
    Ok(Value::String(
        format!("\n{data}").replace('\n', &format!("\n{pad}")),
    ))
}

/// kwok's `Quote`: JSON for strings, a quoted JSON text for everything else.
fn quote(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::String(v.to_string()),
        other => Value::String(Value::String(other.to_string()).to_string()),
    }
}

/// Go's `index`: map keys and list positions; "no value" on a missing one.
fn index(args: &[Value]) -> Result<Value, String> {
    let mut v = arg(args, 0, "index")?.clone();
    for k in &args[1..] {
        v = match (&v, k) {
            (Value::Object(m), _) => m.get(&text(k)).cloned().unwrap_or(Value::Null),
            (Value::Array(a), Value::Number(_)) => {
                let i = int(k, "index")?;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| a.get(i).cloned())
                    .ok_or_else(|| format!("index out of range: {i}"))?
            }
            (Value::Null, _) => Value::Null,
            _ => return Err(format!("cannot index {v} with {k}")),
        };
    }
    Ok(v)
}

/// sprig's `adler32sum`: the Adler-32 checksum of the text, in decimal.
fn adler32(data: &str) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data.bytes() {
        a = (a + u32::from(byte)) % 65_521;
        b = (b + a) % 65_521;
    }
    (b << 16) | a
}

impl KwokFuncs {
    fn kwok(&self, name: &str, args: &[Value]) -> Option<Result<Value, String>> {
        let s = |i: usize| args.get(i).map(text).unwrap_or_default();
        Some(Ok(match name {
            "Quote" => quote(args.first().unwrap_or(&Value::Null)),
            "Now" | "StartTime" => Value::String(self.now.clone()),
            "YAML" => return Some(yaml(args)),
            "Version" => Value::String(KWOK_VERSION.to_string()),
            "NodeConditions" => node_conditions(),
            "NodeName" => Value::String(self.node_name.clone()),
            "NodeIP" => Value::String(node_ip(&self.node_name)),
            "NodePort" => json!(10250),
            "NodeIPWith" => Value::String(node_ip(&s(0))),
            "NodeIPsWith" => json!([node_ip(&s(0))]),
            "PodIP" => Value::String(pod_ip(&self.node_name, false, "", "", "")),
            "PodIPWith" | "PodIPsWith" => {
                let ip = pod_ip(&s(0), args.get(1).is_some_and(truthy), &s(2), &s(3), &s(4));
                if name == "PodIPsWith" {
                    json!([ip])
                } else {
                    Value::String(ip)
                }
            }
            _ => return None,
        }))
    }

    fn builtin(name: &str, args: &[Value]) -> Option<Result<Value, String>> {
        let first = || arg(args, 0, name);
        Some(match name {
            "and" => Ok(args
                .iter()
                .find(|v| !truthy(v))
                .or(args.last())
                .cloned()
                .unwrap_or(Value::Null)),
            "or" => Ok(args
                .iter()
                .find(|v| truthy(v))
                .or(args.last())
                .cloned()
                .unwrap_or(Value::Null)),
            "not" => first().map(|v| Value::Bool(!truthy(v))),
            "eq" => first().map(|a| Value::Bool(args[1..].iter().any(|b| equal(a, b)))),
            "ne" => arg(args, 1, name).map(|b| Value::Bool(!equal(&args[0], b))),
            "lt" | "le" | "gt" | "ge" => arg(args, 1, name)
                .and_then(|b| order(&args[0], b, name))
                .map(|o| {
                    Value::Bool(match name {
                        "lt" => o.is_lt(),
                        "le" => o.is_le(),
                        "gt" => o.is_gt(),
                        _ => o.is_ge(),
                    })
                }),
            "index" => index(args),
            "len" => first().map(|v| {
                json!(match v {
                    Value::Array(a) => a.len(),
                    Value::Object(m) => m.len(),
                    Value::String(s) => s.len(),
                    _ => 0,
                })
            }),
            "printf" => printf(args),
            "print" => Ok(Value::String(args.iter().map(text).collect())),
            _ => return None,
        })
    }

    fn sprig(name: &str, args: &[Value]) -> Option<Result<Value, String>> {
        Some(match name {
            "dict" => {
                let mut m = Map::new();
                for pair in args.chunks(2) {
                    m.insert(text(&pair[0]), pair.get(1).cloned().unwrap_or(Value::Null));
                }
                Ok(Value::Object(m))
            }
            "list" => Ok(Value::Array(args.to_vec())),
            "hasKey" => arg(args, 1, name).map(|k| {
                Value::Bool(
                    args[0]
                        .as_object()
                        .is_some_and(|m| m.contains_key(&text(k))),
                )
            }),
            "add" => args
                .iter()
                .try_fold(0i64, |sum, v| int(v, name).map(|n| sum + n))
                .map(Value::from),
            "sub" => arg(args, 1, name)
                .and_then(|b| Ok(int(&args[0], name)? - int(b, name)?))
                .map(Value::from),
            "toJson" => arg(args, 0, name).map(|v| Value::String(v.to_string())),
            // sprig's argument order: the suffix first, so that `… | trimSuffix "/"` works.
            "trimSuffix" => arg(args, 1, name).map(|s| {
                let (suffix, s) = (text(&args[0]), text(s));
                Value::String(s.strip_suffix(suffix.as_str()).unwrap_or(&s).to_string())
            }),
            "adler32sum" => {
                arg(args, 0, name).map(|v| Value::String(adler32(&text(v)).to_string()))
            }
            _ => return None,
        })
    }
}

impl Funcs for KwokFuncs {
    fn call(&self, name: &str, args: Vec<Value>) -> Result<Value, String> {
        self.kwok(name, &args)
            .or_else(|| Self::builtin(name, &args))
            .or_else(|| Self::sprig(name, &args))
            .unwrap_or_else(|| Err(format!("function {name:?} not defined")))
    }
}
