//! Installing the plugin's own CRD when a version is about to serve
//! (`permissions.crds`): read the cluster's CRD, decide purely
//! ([`plan_crd`]), server-side apply, wait until the API server serves it.
//! Runs before the version activates, so its controller watches a kind
//! whose schema already holds the version's fields. Never deletes a CRD.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use super::status::{Problem, problem};
use crate::contract::{CrdAction, Grant, Reason, plan_crd};
use crate::engine::LoadedPlugin;

/// The field manager of the host's CRD writes.
pub(super) const FIELD_MANAGER: &str = "wasm-operator/crds";

/// How long the host waits for an applied CRD to be `Established` before
/// activating anyway (activation then retries until the kind is served).
const ESTABLISH_WAIT: Duration = Duration::from_secs(20);

/// What installing did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Installed {
    /// Nothing to do: no CRD carried, the cluster's already matches, or
    /// this replica may not write.
    Nothing,
    /// The CRD `name` was created (`created`) or updated.
    Applied {
        /// The CRD's name.
        name: String,
        /// Created rather than updated.
        created: bool,
    },
    /// The carried CRD differs from the cluster's (absent: `absent`) and
    /// `permissions.crds` is not granted: nothing was written.
    NotGranted {
        /// The CRD's name.
        name: String,
        /// The cluster has no such CRD.
        absent: bool,
    },
}

/// Why the CRD could not be installed: the problem, and whether it passes
/// by itself (an unreachable API server) so the load is retried.
pub(super) type Refused = (Problem, bool);

/// Installs the CRD `plugin` carries, as `grant` allows. `may_write`:
/// whether this replica writes (a standby decides but writes nothing).
pub(super) async fn install(
    client: &kube::Client,
    plugin: &LoadedPlugin,
    grant: &Grant,
    may_write: bool,
) -> Result<Installed, Refused> {
    let manifest = plugin.manifest();
    let carried = match plugin.crd() {
        Ok(Some(crd)) => crd,
        Ok(None) => return Ok(Installed::Nothing),
        Err(error) if grant.crds => {
            let message = format!(
                "plugin {} {} could not give its CRD (schema.crd): {error}",
                manifest.name, manifest.version
            );
            return Err((problem(Reason::CrdRejected.as_str(), message), false));
        }
        // Not granted: the CRD would not be written anyway.
        Err(_) => return Ok(Installed::Nothing),
    };
    let name = carried["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let existing = if name.is_empty() {
        None
    } else {
        match api.get_opt(&name).await {
            Ok(existing) => existing,
            // Without the grant the host only looks, to tell a difference.
            Err(_) if !grant.crds => return Ok(Installed::Nothing),
            Err(error) => {
                let message = format!(
                    "cannot read CRD {name} before applying plugin {} {}'s CRD: {error}; check the host may get customresourcedefinitions (`wasm-operator plugin rbac --host`)",
                    manifest.name, manifest.version
                );
                return Err((problem(Reason::LoadFailed.as_str(), message), true));
            }
        }
    };
    let action = plan_crd(&carried, existing.as_ref(), manifest, grant).map_err(|refusal| {
        (
            problem(refusal.reason().as_str(), refusal.to_string()),
            false,
        )
    })?;
    match action {
        CrdAction::Unchanged => Ok(Installed::Nothing),
        CrdAction::NotGranted { name, absent } => Ok(Installed::NotGranted { name, absent }),
        CrdAction::Apply { .. } if !may_write => Ok(Installed::Nothing),
        CrdAction::Apply { crd, create } => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            if let Err(error) = api.patch(&name, &params, &Patch::Apply(&crd)).await {
                let retrying = !matches!(&error, kube::Error::Api(e) if e.code < 500);
                let said = match &error {
                    kube::Error::Api(e) => e.message.clone(),
                    other => other.to_string(),
                };
                let message = format!(
                    "the API server refused plugin {} {}'s CRD {name}: {said}; fix the plugin's Crd::of (`wasm-operator plugin crd PLUGIN.wasm` prints it)",
                    manifest.name, manifest.version
                );
                let reason = if retrying {
                    Reason::LoadFailed
                } else {
                    Reason::CrdRejected
                };
                return Err((problem(reason.as_str(), message), retrying));
            }
            wait_established(&api, &name).await;
            Ok(Installed::Applied {
                name,
                created: create,
            })
        }
    }
}

/// Waits (bounded) until CRD `name` is `Established`: its kind served.
async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) {
    let deadline = tokio::time::Instant::now() + ESTABLISH_WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(Some(crd)) = api.get_opt(name).await
            && established(&crd)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tracing::warn!(crd = %name, "the CRD is not Established yet; activation retries until its kind is served");
}

/// True when the CRD's `Established` condition is True.
fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

/// The message of [`Installed`] for the WasmPlugin's event, `None` when
/// there is nothing to say.
pub(super) fn message(installed: &Installed, plugin: &str, version: &str) -> Option<String> {
    match installed {
        Installed::Nothing => None,
        Installed::Applied { name, created } => Some(format!(
            "{} CRD {name} from plugin {plugin} {version} (server-side apply as {FIELD_MANAGER}) before it serves",
            if *created { "created" } else { "updated" }
        )),
        Installed::NotGranted { name, absent } => Some(format!(
            "plugin {plugin} {version} carries CRD {name}, which {}; it was not applied because this WasmPlugin does not grant permissions.crds: set spec.permissions.crds: true to let the host apply it, or apply it yourself (`wasm-operator plugin crd PLUGIN.wasm | kubectl apply -f -`); fields the CRD lacks are pruned from objects",
            if *absent {
                "the cluster does not have"
            } else {
                "differs from the cluster's"
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_say_what_was_done_and_what_to_do() {
        assert_eq!(message(&Installed::Nothing, "webapp", "1.0.0"), None);
        let created = message(
            &Installed::Applied {
                name: "webapps.example.com".into(),
                created: true,
            },
            "webapp",
            "1.0.0",
        )
        .unwrap();
        assert!(
            created.starts_with("created CRD webapps.example.com"),
            "{created}"
        );
        let denied = message(
            &Installed::NotGranted {
                name: "webapps.example.com".into(),
                absent: false,
            },
            "webapp",
            "1.0.0",
        )
        .unwrap();
        assert!(denied.contains("permissions.crds"), "{denied}");
        assert!(denied.contains("differs from the cluster's"), "{denied}");
    }
}
