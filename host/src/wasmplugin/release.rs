//! Letting go of a deleted WasmPlugin's primaries.
//!
//! A plugin with `finalizer: true` holds every primary of its kind with the
//! host's finalizer until its `finalize` ran. Once its WasmPlugin is
//! deleted nothing can run `finalize` any more: leaving the finalizer would
//! leave every deleted primary Terminating forever (and every later delete
//! too), which is worse than skipping `finalize`. So the host removes its
//! finalizer from every primary of the plugin's kind (one primary kind is
//! served by one plugin) and records a Warning event `FinalizeSkipped` on
//! each, saying finalize did not run and why.

use kube::ResourceExt;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

use crate::apply::EventSink;
use crate::apply::finalizer::{self, FinalizerWrite};
use crate::cache::api_resource;
use crate::contract::{Reason, ResourceKind};
use crate::plan::FINALIZER;

/// How many times one primary's finalizer removal is tried (a concurrent
/// change of its finalizers fails the write's test).
const ATTEMPTS: usize = 3;

/// What releasing the primaries did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Released {
    /// Primaries whose host finalizer was removed.
    pub released: usize,
    /// Primaries whose finalizer could not be removed, as `ns/name: why`.
    pub failed: Vec<String>,
}

/// The `FinalizeSkipped` message for a primary of `plugin` released because
/// WasmPlugin `wasmplugin` was deleted; `deleting` when the object is
/// already being deleted (it now goes away without `finalize`).
pub(super) fn skipped_message(
    wasmplugin: &str,
    plugin: &str,
    version: &str,
    deleting: bool,
) -> String {
    let effect = if deleting {
        "this object was being deleted and now goes away without finalize"
    } else {
        "deleting this object later will not run finalize"
    };
    format!(
        "WasmPlugin {wasmplugin} was deleted, so plugin {plugin} {version} can no longer finalize this object: the host removed its finalizer {FINALIZER} rather than leave the object Terminating forever; {effect}. Clean up by hand what the plugin's finalize would have done, or deploy the plugin again before deleting objects."
    )
}

/// True when the host's finalizer holds `object`.
pub(super) fn held(object: &DynamicObject) -> bool {
    object.finalizers().iter().any(|f| f == FINALIZER)
}

fn api_for(client: &kube::Client, ar: &ApiResource, object: &DynamicObject) -> Api<DynamicObject> {
    match object.namespace() {
        Some(ns) => Api::namespaced_with(client.clone(), &ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Removes the host's finalizer from every object of `primary` and records
/// `FinalizeSkipped` on each. Call only once the plugin's controller has
/// stopped (it would add the finalizer again).
pub(super) async fn release_primaries(
    client: &kube::Client,
    wasmplugin: &str,
    plugin: &str,
    version: &str,
    primary: &ResourceKind,
) -> Released {
    let ar = api_resource(primary);
    let mut outcome = Released::default();
    let all: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let objects = match all.list(&ListParams::default()).await {
        Ok(list) => list.items,
        Err(error) => {
            outcome.failed.push(format!(
                "cannot list {} {}: {error}",
                ar.api_version, ar.plural
            ));
            return outcome;
        }
    };
    let events = EventSink::new(client.clone(), plugin);
    for object in objects.into_iter().filter(held) {
        let name = match object.namespace() {
            Some(ns) => format!("{ns}/{}", object.name_any()),
            None => object.name_any(),
        };
        let api = api_for(client, &ar, &object);
        let deleting = object.metadata.deletion_timestamp.is_some();
        let mut current = object;
        let mut result = Err(String::new());
        for _ in 0..ATTEMPTS {
            match finalizer::remove(&api, &current, FINALIZER).await {
                Ok(write) => {
                    result = Ok(write);
                    break;
                }
                Err(error) => {
                    result = Err(error.to_string());
                    // The finalizers changed meanwhile: read again and retry.
                    match api.get_opt(&current.name_any()).await {
                        Ok(Some(fresh)) => current = fresh,
                        Ok(None) => {
                            result = Ok(FinalizerWrite::Gone);
                            break;
                        }
                        Err(_) => {}
                    }
                }
            }
        }
        match result {
            Ok(FinalizerWrite::Written) => {
                outcome.released += 1;
                events
                    .publish(
                        &ar,
                        &current,
                        true,
                        Reason::FinalizeSkipped.as_str(),
                        &skipped_message(wasmplugin, plugin, version, deleting),
                        "Finalize",
                    )
                    .await;
            }
            Ok(FinalizerWrite::Unchanged | FinalizerWrite::Gone) => {}
            Err(why) => outcome.failed.push(format!("{name}: {why}")),
        }
    }
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_says_finalize_did_not_run_and_why() {
        let deleting = skipped_message("webapp-wp", "webapp", "1.2.0", true);
        assert!(
            deleting.contains("WasmPlugin webapp-wp was deleted"),
            "{deleting}"
        );
        assert!(deleting.contains("webapp 1.2.0"), "{deleting}");
        assert!(
            deleting.contains("goes away without finalize"),
            "{deleting}"
        );
        assert!(deleting.contains(FINALIZER), "{deleting}");
        let live = skipped_message("webapp-wp", "webapp", "1.2.0", false);
        assert!(
            live.contains("deleting this object later will not run finalize"),
            "{live}"
        );
    }

    #[test]
    fn only_objects_the_host_holds_are_released() {
        let mut object = DynamicObject::new(
            "a",
            &ApiResource {
                group: "example.com".into(),
                version: "v1".into(),
                api_version: "example.com/v1".into(),
                kind: "WebApp".into(),
                plural: "webapps".into(),
            },
        );
        assert!(!held(&object));
        object.metadata.finalizers = Some(vec!["someone.else/keep".into()]);
        assert!(!held(&object));
        object.metadata.finalizers = Some(vec!["someone.else/keep".into(), FINALIZER.into()]);
        assert!(held(&object));
    }
}
