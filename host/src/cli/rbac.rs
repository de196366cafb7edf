//! `wasm-operator plugin rbac`: the RBAC a grant needs when the plugin's
//! writes impersonate its ServiceAccount (`permissions.serviceAccount`), so
//! the API server enforces the grant a second time.
//!
//! What RBAC cannot say is refused rather than approximated: the restricted
//! default's "any kind that is not sensitive" (list the kinds in `own` and
//! `read`), and namespaces that are not a fixed list (the default "all but
//! the system ones", a selector). `kind: "*"` becomes `resources: ["*"]` of
//! its group, which RBAC cannot narrow to the non-sensitive kinds: the host
//! still refuses those. Plurals follow Kubernetes' rules for built-in kinds
//! (kube's pluralisation); custom kinds are assumed namespaced, built-in
//! cluster-scoped kinds (ClusterRoleBinding, Namespace, ...) go into a
//! ClusterRole.
//!
//! With `--host` it prints instead the rules the HOST's own ClusterRole needs
//! to serve plugins ([`crate::contract::host_rules`]), as the chart's
//! `extraGrants` value: for plugin files, `oci://` references, one
//! WasmPlugin or every WasmPlugin of a cluster.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use k8s_openapi::api::rbac::v1::PolicyRule;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use super::{CliError, connect};
pub use crate::contract::rbac_objects;
use crate::contract::{Grant, Manifest, RbacRefusal, ServedPlugin, host_rules};
use crate::wasmplugin::WasmPlugin;

/// Arguments of `wasm-operator plugin rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The grant: a YAML file with the fields of a WasmPlugin's spec.permissions.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["wasm_plugin", "host"],
        required_unless_present_any = ["wasm_plugin", "host"]
    )]
    pub grant: Option<PathBuf>,
    /// Read the grant from this WasmPlugin's spec.permissions in the cluster
    /// (with --host: its component and grant).
    #[arg(long, value_name = "NAME")]
    pub wasm_plugin: Option<String>,
    /// Print the rules the host's own ClusterRole needs to serve the
    /// plugins, as the chart's `extraGrants` value, for PLUGIN files or
    /// references, --wasm-plugin or --all-wasm-plugins.
    #[arg(long)]
    pub host: bool,
    /// With --host: plugin components, each a .wasm or .wasm.gz file or
    /// oci://REGISTRY/REPOSITORY:TAG (pulled anonymously).
    #[arg(value_name = "PLUGIN", requires = "host")]
    pub plugins: Vec<String>,
    /// With --host: every WasmPlugin in the cluster.
    #[arg(long, requires = "host", conflicts_with = "wasm_plugin")]
    pub all_wasm_plugins: bool,
    /// Path to the kubeconfig file (with --wasm-plugin, --all-wasm-plugins).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (with --wasm-plugin, --all-wasm-plugins).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = RbacOutput::Yaml)]
    pub output: RbacOutput,
}

/// How `plugin rbac` prints the objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RbacOutput {
    /// YAML documents separated by `---` (for `kubectl apply -f -`); with
    /// --host an `extraGrants:` list.
    Yaml,
    /// One `v1 List` of the objects; with --host `{"extraGrants": [...]}`.
    Json,
}

/// Why no RBAC could be printed.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    /// The grant file could not be read or parsed.
    #[error(transparent)]
    Grant(#[from] super::run::RunError),
    /// The WasmPlugin could not be read from the cluster.
    #[error("cannot read WasmPlugin {name}: {source}; check the name (`kubectl get wp`)")]
    Get {
        /// The `--wasm-plugin` name.
        name: String,
        /// What the API server said.
        #[source]
        source: kube::Error,
    },
    /// What the grant says cannot be written as RBAC.
    #[error(transparent)]
    Refused(#[from] RbacRefusal),
    /// The objects could not be rendered (a host bug).
    #[error("cannot render the RBAC objects: {0}")]
    Render(String),
    /// `--host` was given nothing to read plugins from.
    #[error(
        "--host needs plugins: name PLUGIN files or oci:// references, --wasm-plugin NAME or --all-wasm-plugins"
    )]
    NoPlugins,
    /// A plugin file or reference could not be read as a plugin.
    #[error(transparent)]
    Plugin(#[from] Box<super::inspect::InspectError>),
    /// The WasmPlugins could not be listed.
    #[error(
        "cannot list the WasmPlugins: {0}; check the kubeconfig and that the WasmPlugin CRD is installed"
    )]
    List(#[source] kube::Error),
    /// A WasmPlugin's component could not be fetched from its source.
    #[error("cannot fetch the component of WasmPlugin {name}: {source}")]
    Fetch {
        /// The WasmPlugin.
        name: String,
        /// What its source answered.
        #[source]
        source: Box<crate::wasmplugin::source::SourceError>,
    },
}

/// `objects` as `format` prints them.
///
/// # Errors
///
/// [`RbacError::Render`] when serialization fails (cannot happen for JSON values).
pub fn render(objects: &[Value], format: RbacOutput) -> Result<String, RbacError> {
    match format {
        RbacOutput::Json => serde_json::to_string_pretty(
            &json!({"apiVersion": "v1", "kind": "List", "items": objects}),
        )
        .map(|s| s + "\n")
        .map_err(|e| RbacError::Render(e.to_string())),
        RbacOutput::Yaml => {
            let mut out = String::new();
            for object in objects {
                out.push_str("---\n");
                out.push_str(
                    &serde_yaml::to_string(object).map_err(|e| RbacError::Render(e.to_string()))?,
                );
            }
            Ok(out)
        }
    }
}

/// `rules` as the chart's `extraGrants` value, in `format`.
///
/// # Errors
///
/// [`RbacError::Render`] when serialization fails (cannot happen for rules).
pub fn render_extra_grants(rules: &[PolicyRule], format: RbacOutput) -> Result<String, RbacError> {
    let value = json!({ "extraGrants": rules });
    let rendered = match format {
        RbacOutput::Json => serde_json::to_string_pretty(&value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        RbacOutput::Yaml => serde_yaml::to_string(&value).map_err(|e| e.to_string()),
    };
    rendered.map_err(RbacError::Render)
}

/// The manifests and grants `--host` reads: PLUGIN arguments (no grant:
/// `run --plugin` without `--grant`), then the WasmPlugins named.
async fn served(args: &RbacArgs) -> Result<Vec<(Manifest, Option<Grant>)>, CliError> {
    let mut out = Vec::new();
    for plugin in &args.plugins {
        let manifest = super::inspect::manifest_of(plugin)
            .await
            .map_err(|e| RbacError::Plugin(Box::new(e)))?;
        out.push((manifest, None));
    }
    if args.wasm_plugin.is_none() && !args.all_wasm_plugins {
        return Ok(out);
    }
    let client = connect::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
    let api = Api::<WasmPlugin>::all(client.clone());
    let objects = match &args.wasm_plugin {
        Some(name) => vec![api.get(name).await.map_err(|source| RbacError::Get {
            name: name.clone(),
            source,
        })?],
        None => {
            api.list(&ListParams::default())
                .await
                .map_err(RbacError::List)?
                .items
        }
    };
    for object in objects {
        let name = kube::ResourceExt::name_any(&object);
        let grant = object.spec.permissions.clone().unwrap_or_default();
        // A running canary's candidate is served beside the stable version
        // (its controller watches the kinds of both).
        let sources = std::iter::once(&object.spec.source)
            .chain(object.spec.canary.as_ref().map(|c| &c.source));
        for source in sources {
            let manifest = wasm_plugin_manifest(&client, &name, source).await?;
            out.push((manifest, Some(grant.clone())));
        }
    }
    Ok(out)
}

/// The manifest of the component `source` of WasmPlugin `name` names.
async fn wasm_plugin_manifest(
    client: &kube::Client,
    name: &str,
    source: &crate::wasmplugin::Source,
) -> Result<Manifest, RbacError> {
    // Read for its manifest only, never loaded: no verification.
    let fetched = crate::wasmplugin::source::fetch(client, source, None)
        .await
        .map_err(|source| RbacError::Fetch {
            name: name.to_string(),
            source: Box::new(source),
        })?;
    let what = format!("the component of WasmPlugin {name}");
    super::inspect::manifest_of_bytes(&what, fetched.bytes)
        .await
        .map_err(|e| RbacError::Plugin(Box::new(e)))
}

/// Runs `wasm-operator plugin rbac --host`.
async fn host(args: RbacArgs) -> Result<(), CliError> {
    if args.plugins.is_empty() && args.wasm_plugin.is_none() && !args.all_wasm_plugins {
        return Err(RbacError::NoPlugins.into());
    }
    let plugins = served(&args).await?;
    let rules = host_rules(plugins.iter().map(|(manifest, grant)| ServedPlugin {
        manifest,
        grant: grant.as_ref(),
    }));
    print!("{}", render_extra_grants(&rules, args.output)?);
    Ok(())
}

/// Runs `wasm-operator plugin rbac`.
pub async fn rbac(args: RbacArgs) -> Result<(), CliError> {
    if args.host {
        return host(args).await;
    }
    let grant = match (&args.grant, &args.wasm_plugin) {
        (Some(path), _) => super::run::read_grant(path).map_err(RbacError::Grant)?,
        (None, Some(name)) => {
            let client =
                connect::connect(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
            let object = Api::<WasmPlugin>::all(client)
                .get(name)
                .await
                .map_err(|source| RbacError::Get {
                    name: name.clone(),
                    source,
                })?;
            object.spec.permissions.unwrap_or_default()
        }
        // clap requires one of them.
        (None, None) => return Err(RbacError::Refused(RbacRefusal::NoServiceAccount).into()),
    };
    let objects = rbac_objects(&grant).map_err(RbacError::Refused)?;
    print!("{}", render(&objects, args.output)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Grant, GroupKind, ServiceAccountRef};

    fn grant() -> Grant {
        Grant {
            own: Some(vec![
                GroupKind::new("example.com", "WebApp"),
                GroupKind::new("apps", "Deployment"),
            ]),
            namespaces: Some(vec!["team-a".into(), "team-b".into()]),
            service_account: Some(ServiceAccountRef {
                namespace: "ops".into(),
                name: "webapp".into(),
            }),
            ..Grant::default()
        }
    }

    #[test]
    fn renders_yaml_documents_and_a_json_list() {
        let objects = rbac_objects(&grant()).unwrap();
        let yaml = render(&objects, RbacOutput::Yaml).unwrap();
        assert_eq!(yaml.matches("---\n").count(), objects.len());
        let docs: Vec<Value> = yaml
            .split("---\n")
            .filter(|d| !d.trim().is_empty())
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        assert_eq!(docs, objects);
        let list: Value =
            serde_json::from_str(&render(&objects, RbacOutput::Json).unwrap()).unwrap();
        assert_eq!(list["kind"], "List");
        assert_eq!(list["items"].as_array().unwrap().len(), objects.len());
    }
}
