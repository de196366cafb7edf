//! Golden fixtures of a plugin: one directory per case holding
//! `input.yaml` (what the plugin is called with) and `expected.yaml` (what
//! it answered). [`run_case`] calls the plugin with the production engine
//! and limits, in process: cache reads are answered from the case's
//! `cache:` objects ([`FixtureCache`]), the plugin's clocks stand still at
//! `now:`, and a `reconcile` answer goes through the host's plan validation,
//! so a fixture fails where production would refuse the answer.
//! docs/writing-plugins.md ("Testing a plugin") documents the format.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::cache::{CachedObject, LabelSelector, api_resource};
use crate::contract::{self, CallContext, Finalized, Grant, ReconcileLimits};
use crate::engine::{CacheReader, CallError, CallFailure, FixedClock, LoadedPlugin};
use crate::plan::{self, ObjectRates, Observed, OwnedChild, PlanContext};

/// The clock of a case without `now:`.
pub const DEFAULT_NOW: &str = "2000-01-01T00:00:00Z";

/// Which plugin function a case calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Call {
    /// `reconcile`: the desired children, status, conditions, events.
    #[default]
    Reconcile,
    /// `finalize`: done, or call again later.
    Finalize,
    /// `convert` to the case's `to:` API version.
    Convert,
}

/// A case's `input.yaml`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Input {
    /// The primary object, complete.
    pub object: Value,
    /// Its observed owned children.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<Value>,
    /// The objects the plugin's cache reads (get, list) are answered from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<Value>,
    /// The WasmPlugin's `spec.config`.
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    pub config: Value,
    /// The plugin's wall clock, RFC 3339; default [`DEFAULT_NOW`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub now: Option<String>,
    /// The attempt number the plugin is told; default 1.
    #[serde(default = "first_attempt")]
    pub attempt: u32,
    /// The function called; default `reconcile`.
    #[serde(default)]
    pub call: Call,
    /// `convert` only: the API version to convert to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `convert` only: also convert back and require the input again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub round_trip: bool,
}

fn empty_object() -> Value {
    json!({})
}

fn is_empty_object(value: &Value) -> bool {
    value.as_object().is_some_and(Map::is_empty)
}

fn first_attempt() -> u32 {
    1
}

/// A case input that cannot be used: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct InputError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong, naming the field.
    pub problem: String,
}

/// One fixture case on disk.
#[derive(Debug, Clone)]
pub struct Case {
    /// The directory's name.
    pub name: String,
    /// The directory.
    pub dir: PathBuf,
}

impl Case {
    /// `input.yaml` of the case.
    pub fn input_path(&self) -> PathBuf {
        self.dir.join("input.yaml")
    }

    /// `expected.yaml` of the case.
    pub fn expected_path(&self) -> PathBuf {
        self.dir.join("expected.yaml")
    }
}

/// The cases under `dir`: its subdirectories holding an `input.yaml`, by name.
///
/// # Errors
///
/// `dir` cannot be read, or holds no case.
pub fn cases(dir: &Path) -> Result<Vec<Case>, InputError> {
    let unreadable = |problem: String| InputError {
        path: dir.to_path_buf(),
        problem,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| {
        unreadable(format!(
            "cannot read the fixtures directory: {e}; pass the directory holding one subdirectory per case"
        ))
    })?;
    let mut cases: Vec<Case> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("input.yaml").is_file())
        .map(|dir| Case {
            name: dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dir,
        })
        .collect();
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    if cases.is_empty() {
        return Err(unreadable(
            "no fixture cases: expected subdirectories holding an input.yaml".into(),
        ));
    }
    Ok(cases)
}

/// Reads and checks a case's `input.yaml`.
///
/// # Errors
///
/// The file is missing or not YAML, a field has the wrong type, or a field
/// the call needs is missing or invalid.
pub fn read_input(path: &Path) -> Result<Input, InputError> {
    let bad = |problem: String| InputError {
        path: path.to_path_buf(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let input: Input = serde_yaml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if !input.object.is_object() {
        return Err(bad(
            "field `object` must be the primary object (a mapping)".into()
        ));
    }
    if input.call == Call::Convert && input.to.is_none() {
        return Err(bad(
            "field `to` is missing: a `call: convert` case names the apiVersion to convert to"
                .into(),
        ));
    }
    for (field, objects) in [("children", &input.children), ("cache", &input.cache)] {
        if let Some(i) = objects.iter().position(|o| identity(o).is_none()) {
            return Err(bad(format!(
                "field `{field}[{i}]` needs apiVersion, kind and metadata.name"
            )));
        }
    }
    now(&input).map_err(bad)?;
    Ok(input)
}

/// The case's clock.
fn now(input: &Input) -> Result<DateTime<Utc>, String> {
    let text = input.now.as_deref().unwrap_or(DEFAULT_NOW);
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("field `now` is not an RFC 3339 time ({text:?}): {e}"))
}

/// `(apiVersion, kind, namespace, name)` of an object, `None` without
/// apiVersion, kind or name.
pub fn identity(object: &Value) -> Option<(String, String, String, String)> {
    let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str);
    Some((
        text("/apiVersion")?.to_string(),
        text("/kind")?.to_string(),
        text("/metadata/namespace").unwrap_or_default().to_string(),
        text("/metadata/name")?.to_string(),
    ))
}

/// Answers a case's cache reads from its `cache:` objects, filtering as the
/// host's caches do (kind, namespace, label selector), and remembers every
/// object it answered with.
#[derive(Debug, Default)]
pub struct FixtureCache {
    objects: Vec<Value>,
}

impl FixtureCache {
    /// A reader over `objects`.
    pub fn new(objects: Vec<Value>) -> FixtureCache {
        FixtureCache { objects }
    }
}

/// The labels of an object as the selector matches them.
pub fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

impl CacheReader for FixtureCache {
    fn get(&self, r: &contract::ObjectRef) -> Result<Option<String>, String> {
        let namespace = r.namespace.clone().unwrap_or_default();
        Ok(self
            .objects
            .iter()
            .find(|o| {
                identity(o).is_some_and(|(api_version, kind, ns, name)| {
                    api_version == r.api_version
                        && kind == r.kind
                        && ns == namespace
                        && name == r.name
                })
            })
            .map(Value::to_string))
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let selector = label_selector
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| e.to_string())?;
        Ok(self
            .objects
            .iter()
            .filter(|o| {
                identity(o).is_some_and(|(v, k, ns, _)| {
                    v == api_version && k == kind && namespace.is_none_or(|n| n == ns)
                })
            })
            .filter(|o| selector.as_ref().is_none_or(|s| s.matches(&labels_of(o))))
            .map(Value::to_string)
            .collect())
    }
}

/// A reader that asks another and records every object it answered with
/// (`plugin record`: the cache reads a production call made).
pub struct Recording {
    inner: Arc<dyn CacheReader>,
    seen: Mutex<Vec<Value>>,
}

impl Recording {
    /// Records the answers of `inner`.
    pub fn new(inner: Arc<dyn CacheReader>) -> Recording {
        Recording {
            inner,
            seen: Mutex::default(),
        }
    }

    /// The distinct objects answered so far, in identity order.
    pub fn objects(&self) -> Vec<Value> {
        let mut seen = crate::util::lock(&self.seen).clone();
        seen.sort_by_key(identity);
        seen.dedup_by(|a, b| identity(a) == identity(b));
        seen
    }

    fn keep(&self, texts: &[String]) {
        let mut seen = crate::util::lock(&self.seen);
        seen.extend(texts.iter().filter_map(|t| serde_json::from_str(t).ok()));
    }
}

impl CacheReader for Recording {
    fn get(&self, r: &contract::ObjectRef) -> Result<Option<String>, String> {
        let answer = self.inner.get(r)?;
        if let Some(text) = &answer {
            self.keep(std::slice::from_ref(text));
        }
        Ok(answer)
    }

    fn list(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, String> {
        let answer = self
            .inner
            .list(api_version, kind, namespace, label_selector)?;
        self.keep(&answer);
        Ok(answer)
    }
}

/// `300s`, or `1500ms` when not whole seconds.
fn duration_text(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// The `failure:` of a call that did not answer.
fn failure_of(error: &CallError) -> Value {
    match &error.failure {
        CallFailure::Failed(contract::Failure::Transient(message)) => {
            json!({"kind": "transient", "message": message})
        }
        CallFailure::Failed(contract::Failure::Permanent(message)) => {
            json!({"kind": "permanent", "message": message})
        }
        // The host's own reason (PluginTrap, PluginTimeout...).
        _ => json!({"kind": error.reason(), "message": error.to_string()}),
    }
}

/// What a case produced, in the form of `expected.yaml`; `Err` for a
/// problem with the input the call revealed (exit 2, not a mismatch).
///
/// # Errors
///
/// The object or a child cannot be read as a Kubernetes object, or a child
/// is of a kind the plugin does not own.
pub async fn run_case(plugin: &LoadedPlugin, input: &Input) -> Result<Value, String> {
    call(
        plugin,
        input,
        Arc::new(FixtureCache::new(input.cache.clone())),
    )
    .await
}

/// Calls the plugin for `input` at the case's `now`, its cache reads
/// answered by `cache`; see [`run_case`].
///
/// # Errors
///
/// As [`run_case`].
pub async fn call(
    plugin: &LoadedPlugin,
    input: &Input,
    cache: Arc<dyn CacheReader>,
) -> Result<Value, String> {
    let now = now(input)?;
    let since_epoch = Duration::from_millis(u64::try_from(now.timestamp_millis()).unwrap_or(0));
    let plugin = &plugin.with_clock(Some(FixedClock { since_epoch }));
    let ctx = CallContext {
        plugin_version: plugin.manifest().version.clone(),
        attempt: input.attempt,
        managed_by_version: None,
        config: input.config.clone(),
    };
    let object = input.object.to_string();
    let children: Vec<String> = input.children.iter().map(Value::to_string).collect();
    match input.call {
        Call::Reconcile => match plugin.reconcile(&ctx, object, children, cache).await {
            Ok(desired) => reconciled(plugin, input, now, desired),
            Err(error) => Ok(json!({"failure": failure_of(&error)})),
        },
        Call::Finalize => Ok(match plugin.finalize(&ctx, object, children, cache).await {
            Ok(Finalized::Done) => json!({"finalized": "Done"}),
            Ok(Finalized::Wait(ms)) => {
                json!({"finalized": "Wait", "requeueAfter": duration_text(ms)})
            }
            Err(error) => json!({"failure": failure_of(&error)}),
        }),
        Call::Convert => Ok(converted(plugin, input).await),
    }
}

/// The `convert` outcome: the converted object, and with `roundTrip:` the
/// verdict of converting it back.
async fn converted(plugin: &LoadedPlugin, input: &Input) -> Value {
    let to = input.to.clone().unwrap_or_default();
    let object = match plugin.convert(input.object.to_string(), &to).await {
        Ok(object) => object,
        Err(error) => return json!({"failure": failure_of(&error)}),
    };
    if !input.round_trip {
        return json!({"object": object});
    }
    let back_to = input.object["apiVersion"].as_str().unwrap_or_default();
    let verdict = match plugin.convert(object.to_string(), back_to).await {
        Ok(back) if back == input.object => json!("equal"),
        // The converted-back object, so the diff shows what the trip lost.
        Ok(back) => json!({"differs": back}),
        Err(error) => json!({"failure": failure_of(&error)}),
    };
    json!({"object": object, "roundTrip": verdict})
}

/// The `reconcile` outcome, after the host's plan validation of the answer.
fn reconciled(
    plugin: &LoadedPlugin,
    input: &Input,
    now: DateTime<Utc>,
    desired: contract::Desired,
) -> Result<Value, String> {
    let manifest = plugin.manifest();
    let primary: DynamicObject = serde_json::from_value(input.object.clone())
        .map_err(|e| format!("field `object` is not a Kubernetes object: {e}"))?;
    let mut owned = Vec::new();
    for (i, child) in input.children.iter().enumerate() {
        let (api_version, kind, _, _) = identity(child).unwrap_or_default();
        let Some(resource) = manifest
            .owns
            .iter()
            .find(|k| k.api_version() == api_version && k.kind == kind)
        else {
            return Err(format!(
                "field `children[{i}]` is a {api_version} {kind}, a kind plugin {} does not own",
                manifest.name
            ));
        };
        let object: DynamicObject = serde_json::from_value(child.clone())
            .map_err(|e| format!("field `children[{i}]` is not a Kubernetes object: {e}"))?;
        owned.push(OwnedChild {
            resource: api_resource(resource),
            object: Arc::new(CachedObject::from_dynamic(&object)),
        });
    }
    let limits = ReconcileLimits::default();
    let grant = Grant::default();
    let plan_ctx = PlanContext {
        manifest,
        grant: &grant,
        now,
        limits,
        fencing_token: None,
        forged_fencing_token: None,
        creations_allowed: usize::MAX,
    };
    let observed = Observed {
        primary: &primary,
        children: &owned,
        existing: &BTreeMap::new(),
    };
    let mut rates = ObjectRates::new(&limits, now);
    if let Err(refusal) = plan::reconcile(&observed, &desired, &plan_ctx, &mut rates) {
        return Ok(json!({"failure": {"kind": refusal.reason(), "message": refusal.to_string()}}));
    }
    let mut children = desired.children;
    children.sort_by_key(identity);
    let conditions: Vec<Value> = desired
        .conditions
        .iter()
        .map(|c| json!({"type": c.kind, "status": c.status, "reason": c.reason, "message": c.message}))
        .collect();
    let events: Vec<Value> = desired
        .events
        .iter()
        .map(|e| {
            let kind = if e.warning { "Warning" } else { "Normal" };
            json!({"type": kind, "reason": e.reason, "message": e.message})
        })
        .collect();
    Ok(json!({
        "children": children,
        "status": desired.status,
        "conditions": conditions,
        "events": events,
        "requeueAfter": desired.requeue_after_ms.map(duration_text),
    }))
}
