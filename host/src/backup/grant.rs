//! Backup and restore Jobs are the plugin's children: the grant decides
//! them as it decides any child. The manifest must own `batch/v1 Job` (so
//! the grant was checked for it when the version loaded), and the Job's
//! pod template must pass the grant's workload rules (ServiceAccount,
//! Secrets, Pod Security level).

use serde_json::Value;

use crate::contract::check_workload;
use crate::registry::ActiveVersion;

/// Checks `job` (complete, as it will be created) against `version`'s
/// manifest and grant.
///
/// # Errors
///
/// A message naming the plugin, the Job and every rule it breaks, with
/// what would allow it.
pub(crate) fn check_job(version: &ActiveVersion, job: &Value) -> Result<(), String> {
    let manifest = version.plugin.manifest();
    let owns_jobs = manifest
        .owns
        .iter()
        .any(|kind| kind.group == "batch" && kind.kind == "Job");
    let name = job["metadata"]["name"].as_str().unwrap_or("?");
    if !owns_jobs {
        return Err(format!(
            "plugin {} {} plans backup Jobs but its manifest does not own batch/v1 Job: Jobs are its children and the grant must allow them; add Job to the manifest's owns (and the WasmPlugin's grant)",
            manifest.name, manifest.version
        ));
    }
    let violations = check_workload(&version.grant.workload_policy(), job).map_err(|error| {
        format!(
            "plugin {} {}: Job {name}: {error}",
            manifest.name, manifest.version
        )
    })?;
    if violations.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
    Err(format!(
        "plugin {} {}: Job {name} breaks the grant's workload rules: {}",
        manifest.name,
        manifest.version,
        list.join("; ")
    ))
}
