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
        super::error_response(&ApiError::new(404, "NotFound", "the server could not find the requested resource"))
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
            r.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
            r
        }
        ["openapi", "v2"] => json_response(
            200,
            &json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.34.0-devcluster"}, "paths": {}, "definitions": {}}),
        ),
        ["openapi", "v3"] => json_response(200, &json!({"paths": {}})),
        ["openapi", "v3", ..] => not_found(),
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
        ["apis", group, version] => match shared.store.lock().registry.resource_list(group, version) {
            Some(doc) => json_response(200, &doc),
            None => not_found(),
        },
        [] => json_response(200, &json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/readyz", "/version", "/openapi/v2", "/openapi/v3"]})),
        _ => return None,
    };
    Some(resp)
}
