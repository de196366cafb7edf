//! Non-resource endpoints: version, health, discovery documents and OpenAPI stubs.

use axum::body::Body;
use http::Response;
use serde_json::json;

use super::{Shared, json_response};
use crate::status::ApiError;

/// Answers `path` when it is not a resource path.
pub(super) fn handle(shared: &Shared, path: &str) -> Option<Response<Body>> {
    let path = path.trim_end_matches('/');
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let not_found = || {
        super::error_response(&ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ))
    };
    let resp = match segs.as_slice() {
        ["version"] => json_response(
            200,
            &json!({"major": "1", "minor": "34", "gitVersion": "v1.34.0-devcluster", "gitCommit": "devcluster",
                    "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0",
                    "compiler": "gc", "platform": "linux/amd64", "emulationMajor": "1", "emulationMinor": "34",
                    "minCompatibilityMajor": "1", "minCompatibilityMinor": "33"}),
        ),
        ["healthz"] | ["livez"] | ["readyz"] => {
            let mut r = Response::new(Body::from("ok"));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("text/plain"),
            );
            r
        }
        ["openapi", "v2"] => json_response(
            200,
            &json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.34.0-devcluster"}, "paths": {}, "definitions": {}}),
        ),
        ["openapi", "v3"] => json_response(200, &openapi_v3_root(shared)),
        ["openapi", "v3", rest @ ..] => match openapi_v3_gv(shared, &rest.join("/")) {
            Some(doc) => json_response(200, &doc),
            None => not_found(),
        },
        ["api"] => json_response(200, &shared.store.lock().registry.api_versions()),
        ["api", "v1"] => match shared.store.lock().registry.resource_list("", "v1") {
            Some(doc) => json_response(200, &doc),
            None => not_found(),
        },
        ["apis"] => json_response(200, &shared.store.lock().registry.api_group_list()),
        ["apis", group] => match shared.store.lock().registry.api_group(group) {
            Some(doc) => json_response(200, &doc),
            None => not_found(),
        },
        ["apis", group, version] => {
            match shared.store.lock().registry.resource_list(group, version) {
                Some(doc) => json_response(200, &doc),
                None => not_found(),
            }
        }
        [] => json_response(
            200,
            &json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version", "/openapi/v2", "/openapi/v3"]}),
        ),
        _ => return None,
    };
    Some(resp)
}

/// `/openapi/v3`: one entry per served group-version.
fn openapi_v3_root(shared: &Shared) -> serde_json::Value {
    let st = shared.store.lock();
    let mut paths = serde_json::Map::new();
    for r in st.registry.all() {
        let gv = if r.group.is_empty() {
            "api/v1".to_string()
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        paths.insert(
            gv.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{gv}?hash={}", st.rv)}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/<gv>`: operations with the parameters kubectl checks for (`fieldValidation`),
/// so that it validates on the server instead of downloading protobuf schemas.
fn openapi_v3_gv(shared: &Shared, gv: &str) -> Option<serde_json::Value> {
    let st = shared.store.lock();
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    let params = json!([
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
    ]);
    for r in st.registry.all() {
        let this = if r.group.is_empty() {
            "api/v1".to_string()
        } else {
            format!("apis/{}/{}", r.group, r.version)
        };
        if this != gv {
            continue;
        }
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        schemas.insert(schema_name(r), schema_of(r, &gvk));
        let op = |action: &str| {
            json!({"operationId": format!("{action}{}", r.kind), "x-kubernetes-action": action,
                   "x-kubernetes-group-version-kind": gvk, "parameters": params,
                   "responses": {"200": {"description": "OK"}}})
        };
        let base = if r.namespaced {
            format!("/{gv}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("/{gv}/{}", r.plural)
        };
        paths.insert(base.clone(), json!({"post": op("post"), "get": op("list")}));
        paths.insert(format!("{base}/{{name}}"), json!({"get": op("get"), "put": op("put"), "patch": op("patch"), "delete": op("delete")}));
    }
    if paths.is_empty() {
        return None;
    }
    Some(
        json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.34.0-devcluster"}, "paths": paths, "components": {"schemas": schemas}}),
    )
}

/// The OpenAPI definition name kube-apiserver uses, e.g. `com.example.v1.WebApp`.
fn schema_name(r: &crate::registry::ResourceType) -> String {
    let group = if r.group.is_empty() {
        "io.k8s.api.core".to_string()
    } else {
        r.group.split('.').rev().collect::<Vec<_>>().join(".")
    };
    format!("{group}.{}.{}", r.version, r.kind)
}

/// A resource's schema for `kubectl explain`: a CRD version's openAPIV3Schema, or
/// the envelope only for built-ins.
fn schema_of(r: &crate::registry::ResourceType, gvk: &serde_json::Value) -> serde_json::Value {
    let mut schema = r
        .crd
        .as_ref()
        .and_then(|c| c.schema.clone())
        .unwrap_or_else(|| json!({"type": "object"}));
    if !schema["properties"].is_object() {
        schema["properties"] = json!({});
    }
    let envelope = [
        (
            "apiVersion",
            "APIVersion defines the versioned schema of this representation of an object.",
        ),
        (
            "kind",
            "Kind is a string value representing the REST resource this object represents.",
        ),
    ];
    for (field, description) in envelope {
        if schema["properties"][field].is_null() {
            schema["properties"][field] = json!({"type": "string", "description": description});
        }
    }
    if schema["properties"]["metadata"].is_null()
        || schema["properties"]["metadata"] == json!({"type": "object"})
    {
        schema["properties"]["metadata"] =
            json!({"type": "object", "description": "Standard object's metadata."});
    }
    schema["x-kubernetes-group-version-kind"] = json!([gvk]);
    schema
}
