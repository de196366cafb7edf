//! `wasm-operator plugin record`: turns a real object of a running cluster
//! into a golden fixture. Reads the object and the children it controls,
//! calls the plugin once the way the host would, records the objects its
//! cache reads were answered with, writes `DIR/<name>/input.yaml`, then
//! `expected.yaml` as `plugin test --update` would.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{SecondsFormat, Utc};
use clap::Args;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use serde_json::Value;

use super::CliError;
use super::connect::{ConnectError, connect};
use super::fixture::{self, Call, Case, FixtureCache, Input, InputError, Recording};
use super::plugin_test::{self, PluginTestError};
use crate::contract::{ResourceKind, Scope};
use crate::engine::{CacheReader, EngineConfig};

/// Arguments of `wasm-operator plugin record`.
#[derive(Debug, Args)]
pub struct PluginRecordArgs {
    /// The object: KIND/NAME, KIND being the plugin's primary kind (or its
    /// plural), e.g. webapp/shop.
    #[arg(value_name = "KIND/NAME")]
    pub object: String,
    /// The plugin component: a .wasm file, a .wasm.gz, or
    /// oci://REGISTRY/REPOSITORY:TAG.
    #[arg(value_name = "PLUGIN.wasm")]
    pub file: PathBuf,
    /// Namespace of the object.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// Path of the kubeconfig; default: $KUBECONFIG or ~/.kube/config, then
    /// the in-cluster service account.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long)]
    pub context: Option<String>,
    /// The fixtures directory; the case goes to DIR/<name>.
    #[arg(
        short = 'o',
        long = "output-dir",
        value_name = "DIR",
        default_value = "fixtures"
    )]
    pub output_dir: PathBuf,
    /// The WasmPlugin's spec.config for the call, a YAML or JSON file;
    /// default {}.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Why `plugin record` wrote no fixture.
#[derive(Debug, thiserror::Error)]
pub enum PluginRecordError {
    /// No client for the cluster.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The plugin could not be loaded, or the fixture not run or written.
    #[error(transparent)]
    Fixture(#[from] PluginTestError),
    /// `KIND/NAME` does not name an object of the plugin's primary kind.
    #[error(
        "{object:?} is not KIND/NAME of plugin {plugin}'s primary kind {kind}; pass e.g. {example}"
    )]
    Object {
        /// The argument.
        object: String,
        /// The plugin.
        plugin: String,
        /// Its primary kind.
        kind: String,
        /// A valid argument.
        example: String,
    },
    /// The API server did not answer a read.
    #[error("cannot read {what} from the cluster: {source}")]
    Read {
        /// What was read.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
}

/// Runs `wasm-operator plugin record`.
pub async fn plugin_record(args: PluginRecordArgs) -> Result<(), CliError> {
    let case = record(&args).await.map_err(CliError::PluginRecord)?;
    println!("{}", case.dir.display());
    Ok(())
}

/// Records the fixture `args` name and returns its case.
///
/// # Errors
///
/// See [`PluginRecordError`].
pub async fn record(args: &PluginRecordArgs) -> Result<Case, PluginRecordError> {
    let plugin = plugin_test::load(&args.file, EngineConfig::user_cache_dir()).await?;
    let manifest = plugin.manifest().clone();
    let primary = &manifest.primary;
    let name = object_name(&args.object, primary).ok_or_else(|| PluginRecordError::Object {
        object: args.object.clone(),
        plugin: manifest.name.clone(),
        kind: primary.kind.clone(),
        example: format!("{}/NAME", primary.kind.to_lowercase()),
    })?;
    let config = read_config(args.config.as_deref())?;
    let client = connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let namespace = (primary.scope == Scope::Namespaced).then_some(args.namespace.as_str());
    let object = clean(
        api(&client, primary, namespace)
            .get(&name)
            .await
            .map_err(|source| PluginRecordError::Read {
                what: format!("{} {name}", primary.kind),
                source,
            })?,
    );
    let uid = object
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    // What the plugin may read, in the object's namespace: what its
    // cache reads are answered from, as the host's caches would.
    let mut readable = Vec::new();
    let mut children = Vec::new();
    for (owned, kind) in manifest
        .owns
        .iter()
        .map(|k| (true, k))
        .chain(manifest.watches.iter().map(|k| (false, k)))
        .chain(std::iter::once((false, primary)))
    {
        let ns = (kind.scope == Scope::Namespaced).then_some(args.namespace.as_str());
        let list = api(&client, kind, ns)
            .list(&ListParams::default())
            .await
            .map_err(|source| PluginRecordError::Read {
                what: format!("the {} objects", kind.kind),
                source,
            })?;
        for item in list.items {
            let item = with_type(clean(item), kind);
            if owned && is_controlled_by(&item, &uid) {
                children.push(item.clone());
            }
            readable.push(item);
        }
    }
    children.sort_by_key(fixture::identity);
    let now = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let mut input = Input {
        object: with_type(object, primary),
        children,
        cache: Vec::new(),
        config,
        now: Some(now),
        attempt: 1,
        call: Call::Reconcile,
        to: None,
        round_trip: false,
    };
    input.cache = recorded_reads(&plugin, &input, readable).await;
    let dir = args.output_dir.join(&name);
    write_input(&dir, &input)?;
    let case = Case { name, dir };
    plugin_test::run_one(&plugin, &case, true).await?;
    Ok(case)
}

/// The objects the plugin's cache reads answered with when called for
/// `input`, the reads answered from `readable`.
async fn recorded_reads(
    plugin: &crate::engine::LoadedPlugin,
    input: &Input,
    readable: Vec<Value>,
) -> Vec<Value> {
    let recording = Arc::new(Recording::new(Arc::new(FixtureCache::new(readable))));
    let reader: Arc<dyn CacheReader> = recording.clone();
    // Only the reads matter here; the answer is computed again from the
    // written fixture, whose input a problem would name.
    let _answer = fixture::call(plugin, input, reader).await;
    recording.objects()
}

/// The name in `KIND/NAME` when KIND is the primary kind (any case) or its
/// plural.
fn object_name(object: &str, primary: &ResourceKind) -> Option<String> {
    let (kind, name) = object.split_once('/')?;
    let kind = kind.split('.').next().unwrap_or(kind);
    let matches = kind.eq_ignore_ascii_case(&primary.kind) || kind == primary.plural;
    (matches && !name.is_empty()).then(|| name.to_string())
}

fn api(client: &kube::Client, kind: &ResourceKind, namespace: Option<&str>) -> Api<DynamicObject> {
    let resource: ApiResource = crate::cache::api_resource(kind);
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// The object without what the server changes on every write
/// (`resourceVersion`, `managedFields`): a fixture records what the plugin
/// reads, and a plugin that reads these is itself flaky. The uid stays:
/// children's ownerReferences name it.
fn clean(object: DynamicObject) -> Value {
    let mut value = serde_json::to_value(&object).unwrap_or(Value::Null);
    if let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
        metadata.remove("resourceVersion");
    }
    value
}

/// List items may come without apiVersion and kind: set them.
fn with_type(mut object: Value, kind: &ResourceKind) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), kind.api_version().into());
        map.insert("kind".into(), kind.kind.clone().into());
    }
    object
}

fn is_controlled_by(object: &Value, uid: &str) -> bool {
    object
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| {
            refs.iter().any(|r| {
                r["uid"] == uid && r.get("controller").and_then(Value::as_bool) == Some(true)
            })
        })
}

fn read_config(path: Option<&Path>) -> Result<Value, PluginTestError> {
    let Some(path) = path else {
        return Ok(serde_json::json!({}));
    };
    let bad = |problem: String| InputError {
        path: path.to_path_buf(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(format!("cannot read: {e}")))?;
    let config: Value =
        serde_yaml::from_str(&text).map_err(|e| bad(format!("not YAML or JSON: {e}")))?;
    Ok(config)
}

fn write_input(dir: &Path, input: &Input) -> Result<(), PluginTestError> {
    let path = dir.join("input.yaml");
    let bad = |problem: String| InputError {
        path: path.clone(),
        problem,
    };
    std::fs::create_dir_all(dir).map_err(|e| bad(format!("cannot create the directory: {e}")))?;
    let text = serde_yaml::to_string(input).map_err(|e| bad(format!("cannot render: {e}")))?;
    std::fs::write(&path, text).map_err(|e| bad(format!("cannot write: {e}")))?;
    Ok(())
}
