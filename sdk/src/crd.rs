//! The plugin's CustomResourceDefinition, derived from the author's spec and
//! status types with [`schemars`] (as kube-rs's `CustomResource` derive does)
//! and carried by the plugin: the host prints it with
//! `wasm-operator plugin crd PLUGIN.wasm`.
//!
//! The status schema always holds what the host writes next to the plugin's
//! own status fields (`conditions` in the shape of `metav1.Condition`, and
//! `observedGeneration`; `backup`, a [`BackupStatus`](crate::BackupStatus),
//! when the manifest declares backups): a schema without them would make the
//! API server prune every condition silently.
//!
//! ```
//! use schemars::JsonSchema;
//! use wasm_operator_sdk::{Crd, Kind, Manifest};
//!
//! /// What the user asks for.
//! #[derive(JsonSchema)]
//! struct GreeterSpec {
//!     /// The greeting to write.
//!     #[schemars(length(min = 1))]
//!     greeting: String,
//! }
//!
//! #[derive(JsonSchema)]
//! struct GreeterStatus {
//!     written: Option<bool>,
//! }
//!
//! let manifest = Manifest::new("greeter", "0.1.0")
//!     .primary(Kind::namespaced("example.com", "v1", "Greeter", "greeters"));
//! let crd = Crd::of::<GreeterSpec, GreeterStatus>(&manifest)
//!     .printer_column("Greeting", "string", ".spec.greeting")
//!     .to_json();
//! assert_eq!(crd["metadata"]["name"], "greeters.example.com");
//! let status = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
//! assert!(status["properties"]["conditions"].is_object());
//! ```

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use crate::{Manifest, Scope};

/// A CRD for the manifest's primary kind, built from its spec and status
/// types. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Crd {
    group: String,
    version: String,
    kind: String,
    plural: String,
    scope: Scope,
    short_names: Vec<String>,
    spec: Value,
    status: Value,
    columns: Vec<Value>,
}

impl Crd {
    /// The CRD of `manifest`'s primary kind with `Spec` as `.spec` (required)
    /// and `Status` as `.status`, plus the fields the host writes into
    /// status. Doc comments become descriptions; schemars attributes
    /// (`range`, `length`, `regex`, `extend("x-kubernetes-validations" = …)`)
    /// become validation.
    pub fn of<Spec: JsonSchema, Status: JsonSchema>(manifest: &Manifest) -> Crd {
        let primary = &manifest.primary;
        let mut status = schema_of::<Status>();
        merge_host_status(&mut status, manifest.implements_backup);
        Crd {
            group: primary.group.clone(),
            version: primary.version.clone(),
            kind: primary.kind.clone(),
            plural: primary.plural.clone(),
            scope: primary.scope,
            short_names: Vec::new(),
            spec: schema_of::<Spec>(),
            status,
            columns: Vec::new(),
        }
    }

    /// Adds a column to `kubectl get` (before the `Ready` and `Age` columns
    /// every CRD gets): `type` is `string`, `integer`, `number`, `boolean`
    /// or `date`.
    pub fn printer_column(mut self, name: &str, r#type: &str, json_path: &str) -> Crd {
        self.columns
            .push(json!({"name": name, "type": r#type, "jsonPath": json_path}));
        self
    }

    /// Adds a short name for `kubectl get` (e.g. `wa` for `webapps`).
    pub fn short_name(mut self, name: &str) -> Crd {
        self.short_names.push(name.to_owned());
        self
    }

    /// The CRD as an `apiextensions.k8s.io/v1` object.
    pub fn to_json(&self) -> Value {
        let mut columns = self.columns.clone();
        let named = |columns: &[Value], name: &str| columns.iter().any(|c| c["name"] == name);
        if !named(&columns, "Ready") {
            columns.push(json!({
                "name": "Ready", "type": "string",
                "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status",
            }));
        }
        if !named(&columns, "Age") {
            columns.push(
                json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}),
            );
        }
        let mut names = json!({
            "plural": self.plural,
            "singular": self.kind.to_lowercase(),
            "kind": self.kind,
            "listKind": format!("{}List", self.kind),
        });
        if !self.short_names.is_empty() {
            names["shortNames"] = json!(self.short_names);
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{}.{}", self.plural, self.group)},
            "spec": {
                "group": self.group,
                "scope": match self.scope {
                    Scope::Namespaced => "Namespaced",
                    Scope::Cluster => "Cluster",
                },
                "names": names,
                "versions": [{
                    "name": self.version,
                    "served": true,
                    "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {"openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {"spec": self.spec, "status": self.status},
                    }},
                }],
            },
        })
    }
}

/// The OpenAPI v3 schema of `T`, made structural: subschemas inlined, and
/// the JSON-Schema-only keywords the API server rejects removed.
fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    structural(&mut schema);
    schema
}

/// Removes what a structural CRD schema may not hold, recursively.
fn structural(schema: &mut Value) {
    match schema {
        Value::Object(map) => {
            for key in ["$schema", "$defs", "definitions", "title", "examples"] {
                map.remove(key);
            }
            // `deny_unknown_fields`: the API server prunes unknown fields
            // anyway, and refuses `additionalProperties: false`.
            if map.get("additionalProperties") == Some(&Value::Bool(false)) {
                map.remove("additionalProperties");
            }
            for (key, value) in map.iter_mut() {
                // Literal values, not schemas.
                if !matches!(
                    key.as_str(),
                    "default" | "enum" | "x-kubernetes-validations"
                ) {
                    structural(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(structural),
        _ => {}
    }
}

/// Adds `conditions` and `observedGeneration`, which the host writes, to a
/// status schema (a `()` status type becomes an object of just those), and
/// `backup` when the plugin declares backups.
fn merge_host_status(status: &mut Value, backup: bool) {
    if !status.is_object() || status.get("type").and_then(Value::as_str) != Some("object") {
        *status = json!({"type": "object"});
    }
    let Some(map) = status.as_object_mut() else {
        return;
    };
    map.remove("nullable");
    let properties = map
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(properties) = properties.as_object_mut() {
        properties.insert(
            "observedGeneration".into(),
            json!({
                "type": "integer", "format": "int64",
                "description": "The generation the host last reconciled (written by the host).",
            }),
        );
        properties.insert("conditions".into(), conditions_schema());
        if backup {
            properties.insert("backup".into(), schema_of::<crate::BackupStatus>());
        }
    }
}

/// `metav1.Condition` as a list keyed by `type`, the host's conditions.
fn conditions_schema() -> Value {
    json!({
        "type": "array",
        "description": "Conditions the plugin sets and the host writes (Ready, Degraded, …).",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status"],
            "properties": {
                "type": {"type": "string"},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "reason": {"type": "string"},
                "message": {"type": "string"},
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "observedGeneration": {"type": "integer", "format": "int64"},
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct Spec {
        /// Pods to run.
        #[schemars(range(min = 1, max = 10))]
        replicas: i32,
        nested: Option<Nested>,
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self.a <= 3"}]))]
    struct Nested {
        a: u8,
    }

    #[test]
    fn the_schema_is_structural_and_status_holds_what_the_host_writes() {
        let manifest =
            Manifest::new("p", "1.0.0").primary(Kind::namespaced("ex.com", "v1", "App", "apps"));
        let crd = Crd::of::<Spec, ()>(&manifest).to_json();
        let text = crd.to_string();
        for forbidden in ["$ref", "$schema", "$defs", "definitions", "title"] {
            assert!(!text.contains(forbidden), "{forbidden} in {text}");
        }
        let version = &crd["spec"]["versions"][0];
        let schema = &version["schema"]["openAPIV3Schema"];
        let spec = &schema["properties"]["spec"];
        assert_eq!(spec["properties"]["replicas"]["maximum"], 10);
        assert_eq!(
            spec["properties"]["replicas"]["description"],
            "Pods to run."
        );
        let nested = &spec["properties"]["nested"];
        assert_eq!(nested["nullable"], true);
        assert_eq!(nested["x-kubernetes-validations"][0]["rule"], "self.a <= 3");
        let status = &schema["properties"]["status"];
        assert_eq!(status["type"], "object");
        assert_eq!(
            status["properties"]["conditions"]["x-kubernetes-list-map-keys"][0],
            "type"
        );
        assert_eq!(
            status["properties"]["observedGeneration"]["type"],
            "integer"
        );
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(columns, ["Ready", "Age"]);
        assert!(status["properties"].get("backup").is_none());
    }

    #[allow(dead_code)]
    #[derive(JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct StatusWithBackup {
        ready: Option<bool>,
        backup: Option<crate::BackupStatus>,
    }

    #[test]
    fn backup_status_is_kept_whatever_the_host_writes_there() {
        let plain =
            Manifest::new("p", "1.0.0").primary(Kind::namespaced("ex.com", "v1", "App", "apps"));
        let crd = Crd::of::<Spec, StatusWithBackup>(&plain).to_json();
        let status =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        let backup = &status["properties"]["backup"];
        assert_eq!(backup["type"], "object", "{backup}");
        assert_eq!(backup["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(
            backup["properties"]["lastBackupTime"]["format"],
            "date-time"
        );
        assert_eq!(
            backup["properties"]["conditions"]["items"]["type"],
            "object"
        );
        // Declaring backups adds it even to a status type without it.
        let declared = plain.implements_backup();
        let crd = Crd::of::<Spec, ()>(&declared).to_json();
        let status =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"];
        assert_eq!(
            status["properties"]["backup"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(!crd.to_string().contains("$schema"));
    }
}
