//! Writes as a plugin's own identity: a client that impersonates the
//! ServiceAccount of the plugin's grant (`permissions.serviceAccount`), so
//! the API server's RBAC enforces the grant too (defence in depth: the host
//! enforces it first). Reads keep using the host's identity: they come from
//! the shared caches, which the host filters by the grant.

use http::HeaderValue;
use kube::Client;
use kube::client::Body;

use crate::contract::ServiceAccountRef;

/// The header the API server reads the impersonated user from.
pub const IMPERSONATE_USER: &str = "Impersonate-User";

/// A user no RBAC binding names: impersonated when the ServiceAccount's
/// name cannot be a header value, so every write is refused (fail closed).
const NOBODY: &str = "system:serviceaccount:wasm-operator-invalid:invalid";

/// A client sending every request of `client` with `Impersonate-User:
/// system:serviceaccount:<namespace>:<name>`. The host's own identity needs
/// the `impersonate` verb on that ServiceAccount (`wasm-operator plugin
/// rbac` prints the Role).
pub fn impersonating(client: Client, account: &ServiceAccountRef) -> Client {
    let user = HeaderValue::from_str(&account.user_name()).unwrap_or_else(|_| {
        tracing::warn!(
            namespace = %account.namespace, name = %account.name,
            "the grant's serviceAccount is not a valid user name; its writes impersonate a user no RBAC binds"
        );
        HeaderValue::from_static(NOBODY)
    });
    let default_namespace = client.default_namespace().to_string();
    let service = tower::service_fn(move |mut request: http::Request<Body>| {
        let inner = client.clone();
        request.headers_mut().insert(IMPERSONATE_USER, user.clone());
        async move { inner.send(request).await }
    });
    Client::new(service, default_namespace)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test]
    async fn every_request_carries_the_impersonated_service_account() {
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let record = seen.clone();
        // The innermost service stands in for the API server's socket: it
        // records the header and answers an empty object.
        let server = tower::service_fn(move |request: http::Request<Body>| {
            let header = request
                .headers()
                .get(IMPERSONATE_USER)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            record.lock().unwrap().push(header);
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(Body::from(b"{}".to_vec()))
                        .unwrap(),
                )
            }
        });
        let host = Client::new(server, "default");
        let plugin = impersonating(
            host.clone(),
            &ServiceAccountRef {
                namespace: "ops".into(),
                name: "webapp".into(),
            },
        );
        let get = || {
            http::Request::get("/api/v1/namespaces/default/configmaps/x")
                .body(Vec::new())
                .unwrap()
        };
        plugin.request_text(get()).await.unwrap();
        host.request_text(get()).await.unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            [Some("system:serviceaccount:ops:webapp".to_string()), None]
        );
        assert_eq!(plugin.default_namespace(), "default");
    }

    #[tokio::test]
    async fn an_impossible_name_impersonates_nobody() {
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let record = seen.clone();
        let server = tower::service_fn(move |request: http::Request<Body>| {
            record.lock().unwrap().push(
                request
                    .headers()
                    .get(IMPERSONATE_USER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            );
            async move {
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .body(Body::from(b"{}".to_vec()))
                        .unwrap(),
                )
            }
        });
        let plugin = impersonating(
            Client::new(server, "default"),
            &ServiceAccountRef {
                namespace: "ops".into(),
                name: "bad\nname".into(),
            },
        );
        plugin
            .request_text(http::Request::get("/api").body(Vec::new()).unwrap())
            .await
            .unwrap();
        assert_eq!(*seen.lock().unwrap(), [Some(NOBODY.to_string())]);
    }
}
