//! Patch semantics of the Kubernetes API: JSON merge patch (RFC 7386), JSON
//! patch (RFC 6902), strategic merge patch and server-side apply.
//!
//! Pure functions over `serde_json::Value`; the server decides which one a
//! request's `Content-Type` selects and turns errors into `metav1.Status`.
//!
//! Submodules: [`ssa`] (server-side apply and field ownership); private
//! helpers `schema` (merge keys), `strategic`, `fieldset` (FieldsV1), `walk`
//! (ownership-aware merge/compare) and `managed` (managedFields entries).

use serde_json::Value;

mod fieldset;
mod managed;
mod schema;
pub mod ssa;
mod strategic;
mod walk;

/// A patch that cannot be applied (answered as 400 BadRequest or 422 Invalid).
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The patch document is malformed (400 BadRequest).
    #[error("malformed patch: {0}")]
    Malformed(String),
    /// The patch is well formed but cannot apply to this object (422 Invalid),
    /// e.g. a JSON-patch `test` that fails or a path that does not exist.
    #[error("patch does not apply: {0}")]
    NotApplicable(String),
}

/// Applies a JSON merge patch (RFC 7386): `null` deletes, objects merge, everything else replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let mut out = target.clone();
    json_patch::merge(&mut out, patch);
    out
}

/// Applies a JSON patch (RFC 6902) document, an array of operations.
pub fn json_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| PatchError::Malformed(e.to_string()))?;
    let mut out = target.clone();
    json_patch::patch(&mut out, &ops).map_err(|e| PatchError::NotApplicable(e.to_string()))?;
    Ok(out)
}

/// Applies a strategic merge patch: like a merge patch, but lists of objects
/// with a well-known merge key (containers, env, volumes, ports, …) merge by that key,
/// `finalizers` merge as a set, and the directives `$patch` (merge/replace/delete),
/// `$retainKeys`, `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>` apply.
pub fn strategic_merge_patch(target: &Value, patch: &Value) -> Result<Value, PatchError> {
    strategic::apply(target, patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_deletes_merges_and_replaces() {
        let target = json!({"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]});
        let patch = json!({"a": null, "b": {"c": 5}, "l": [3]});
        assert_eq!(
            merge_patch(&target, &patch),
            json!({"b": {"c": 5, "d": 3}, "l": [3]})
        );
        assert_eq!(merge_patch(&target, &json!("x")), json!("x"));
    }

    #[test]
    fn json_patch_supports_every_operation() {
        let target = json!({"a": {"b": 1}, "l": [1, 2]});
        let patch = json!([
            {"op": "test", "path": "/a/b", "value": 1},
            {"op": "add", "path": "/l/-", "value": 3},
            {"op": "add", "path": "/l/0", "value": 0},
            {"op": "replace", "path": "/a/b", "value": 2},
            {"op": "copy", "from": "/a", "path": "/c"},
            {"op": "move", "from": "/c/b", "path": "/d"},
            {"op": "remove", "path": "/l/1"},
            {"op": "add", "path": "/a~1x", "value": "slash"}
        ]);
        let out = json_patch(&target, &patch).unwrap();
        assert_eq!(
            out,
            json!({"a": {"b": 2}, "l": [0, 2, 3], "c": {}, "d": 2, "a/x": "slash"})
        );
    }

    #[test]
    fn json_patch_failures_are_typed() {
        let target = json!({"a": 1});
        let failed_test = json!([{"op": "test", "path": "/a", "value": 2}]);
        assert!(matches!(
            json_patch(&target, &failed_test),
            Err(PatchError::NotApplicable(_))
        ));
        let missing = json!([{"op": "remove", "path": "/nope"}]);
        assert!(matches!(
            json_patch(&target, &missing),
            Err(PatchError::NotApplicable(_))
        ));
        let bad_index = json!([{"op": "add", "path": "/l/5", "value": 1}]);
        assert!(matches!(
            json_patch(&json!({"l": []}), &bad_index),
            Err(PatchError::NotApplicable(_))
        ));
        for malformed in [
            json!({"op": "add"}),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "path": "/a"}]),
        ] {
            assert!(
                matches!(
                    json_patch(&target, &malformed),
                    Err(PatchError::Malformed(_))
                ),
                "{malformed}"
            );
        }
        // A failed operation leaves nothing half-applied: the target is untouched.
        let half = json!([{"op": "add", "path": "/b", "value": 1}, {"op": "test", "path": "/a", "value": 9}]);
        assert!(json_patch(&target, &half).is_err());
        assert_eq!(target, json!({"a": 1}));
    }

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "finalizers": ["a"], "labels": {"app": "web"}},
            "spec": {"template": {"spec": {"containers": [
                {"name": "web", "image": "nginx:1", "env": [{"name": "A", "value": "1"}],
                 "ports": [{"containerPort": 80, "name": "http"}]},
                {"name": "sidecar", "image": "envoy:1"}
            ], "tolerations": [{"key": "x"}]}}}
        })
    }

    fn containers(v: &Value) -> &Vec<Value> {
        v["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "image": "nginx:2", "env": [{"name": "B", "value": "2"}],
             "ports": [{"containerPort": 80, "protocol": "TCP"}]},
            {"name": "new", "image": "busybox"}
        ]}}}});
        let out = strategic_merge_patch(&deployment(), &patch).unwrap();
        let c = containers(&out);
        assert_eq!(c.len(), 3);
        assert_eq!(c[0]["image"], "nginx:2");
        assert_eq!(
            c[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(
            c[0]["ports"],
            json!([{"containerPort": 80, "name": "http", "protocol": "TCP"}])
        );
        assert_eq!(c[1]["name"], "sidecar");
        assert_eq!(c[2], json!({"name": "new", "image": "busybox"}));
    }

    #[test]
    fn strategic_patch_directives() {
        let delete = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}});
        let out = strategic_merge_patch(&deployment(), &delete).unwrap();
        assert_eq!(containers(&out).len(), 1);
        assert_eq!(containers(&out)[0]["name"], "web");

        let replace_list = json!({"spec": {"template": {"spec": {"containers": [
            {"$patch": "replace"}, {"name": "only", "image": "x"}
        ]}}}});
        let out = strategic_merge_patch(&deployment(), &replace_list).unwrap();
        assert_eq!(
            containers(&out),
            &vec![json!({"name": "only", "image": "x"})]
        );

        let replace_map = json!({"metadata": {"labels": {"$patch": "replace", "tier": "front"}}});
        let out = strategic_merge_patch(&deployment(), &replace_map).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"tier": "front"}));

        let delete_map = json!({"metadata": {"labels": {"$patch": "delete"}}});
        let out = strategic_merge_patch(&deployment(), &delete_map).unwrap();
        assert!(out["metadata"].get("labels").is_none());

        let retain = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "web", "$retainKeys": ["name", "image"], "image": "nginx:3"}
        ]}}}});
        let out = strategic_merge_patch(&deployment(), &retain).unwrap();
        assert_eq!(
            containers(&out)[0],
            json!({"name": "web", "image": "nginx:3"})
        );

        let order = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "web"}],
            "containers": [{"name": "web", "image": "nginx:4"}]
        }}}});
        let out = strategic_merge_patch(&deployment(), &order).unwrap();
        let names: Vec<&Value> = containers(&out).iter().map(|c| &c["name"]).collect();
        assert_eq!(names, vec!["sidecar", "web"]);
        assert_eq!(containers(&out)[1]["image"], "nginx:4");
        // Directives never leak into the stored object.
        assert!(!out.to_string().contains('$'));
    }

    #[test]
    fn strategic_finalizers_are_a_set_and_other_lists_replace() {
        let patch = json!({"metadata": {"finalizers": ["b", "a"]},
                           "spec": {"template": {"spec": {"tolerations": [{"key": "y"}]}}}});
        let out = strategic_merge_patch(&deployment(), &patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        assert_eq!(
            out["spec"]["template"]["spec"]["tolerations"],
            json!([{"key": "y"}])
        );

        let remove = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}});
        let out = strategic_merge_patch(&out, &remove).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));

        let order =
            json!({"metadata": {"$setElementOrder/finalizers": ["c", "b"], "finalizers": ["c"]}});
        let out = strategic_merge_patch(&out, &order).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "b"]));
    }

    #[test]
    fn strategic_null_deletes_and_service_ports_key_by_port() {
        let svc = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}], "type": "ClusterIP"}});
        let patch = json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}], "type": null}});
        let out = strategic_merge_patch(&svc, &patch).unwrap();
        assert_eq!(
            out,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}, {"port": 443}]}})
        );

        let conds = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        let patch = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "True"}]}});
        let out = strategic_merge_patch(&conds, &patch).unwrap();
        assert_eq!(out["status"]["conditions"].as_array().unwrap().len(), 2);
        assert_eq!(out["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn strategic_nested_directives_like_kubectl_apply_sends() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "web"}, {"name": "sidecar"}],
            "containers": [{
                "name": "web",
                "$setElementOrder/env": [{"name": "B"}, {"name": "A"}],
                "env": [{"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80, "$patch": "delete"}]
            }]
        }}}});
        let out = strategic_merge_patch(&deployment(), &patch).unwrap();
        let web = &containers(&out)[0];
        assert_eq!(
            web["env"],
            json!([{"name": "B", "value": "2"}, {"name": "A", "value": "1"}])
        );
        assert_eq!(web["ports"], json!([]));
        let strategy = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let recreate = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": null}}});
        let out = strategic_merge_patch(&strategy, &recreate).unwrap();
        assert_eq!(out, json!({"spec": {"strategy": {"type": "Recreate"}}}));
    }

    #[test]
    fn strategic_malformed_patches() {
        let target = deployment();
        let cases = [
            json!([1, 2]),
            json!({"spec": {"template": {"spec": {"containers": [{"image": "no-name"}]}}}}),
            json!({"spec": {"template": {"spec": {"containers": ["web"]}}}}),
            json!({"metadata": {"labels": {"$patch": "explode"}}}),
            json!({"metadata": {"$retainKeys": "name"}}),
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}}),
            json!({"metadata": {"finalizers": [{"a": 1}]}}),
        ];
        for patch in cases {
            assert!(
                matches!(
                    strategic_merge_patch(&target, &patch),
                    Err(PatchError::Malformed(_))
                ),
                "{patch}"
            );
        }
        // `$ref`-like keys that are not directives are ordinary fields.
        let out = strategic_merge_patch(&json!({}), &json!({"spec": {"$ref": "#/x"}})).unwrap();
        assert_eq!(out, json!({"spec": {"$ref": "#/x"}}));
    }
}
