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

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kube::api::Api;
use serde_json::{Value, json};

use super::{CliError, connect};
use crate::contract::RbacRefusal;
pub use crate::contract::rbac_objects;
use crate::wasmplugin::WasmPlugin;

/// Arguments of `wasm-operator plugin rbac`.
#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The grant: a YAML file with the fields of a WasmPlugin's spec.permissions.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "wasm_plugin",
        required_unless_present = "wasm_plugin"
    )]
    pub grant: Option<PathBuf>,
    /// Read the grant from this WasmPlugin's spec.permissions in the cluster.
    #[arg(long, value_name = "NAME")]
    pub wasm_plugin: Option<String>,
    /// Path to the kubeconfig file (with --wasm-plugin).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (with --wasm-plugin).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = RbacOutput::Yaml)]
    pub output: RbacOutput,
}

/// How `plugin rbac` prints the objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RbacOutput {
    /// YAML documents separated by `---` (for `kubectl apply -f -`).
    Yaml,
    /// One `v1 List` of the objects.
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

/// Runs `wasm-operator plugin rbac`.
pub async fn rbac(args: RbacArgs) -> Result<(), CliError> {
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
