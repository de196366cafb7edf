//! Backup and restore Jobs are the plugin's children: the grant decides
//! them as it decides any child. The manifest must own `batch/v1 Job` (so
//! the grant was checked for it when the version loaded), and the Job's
//! pod template must pass the grant's workload rules (ServiceAccount,
//! Secrets, Pod Security level).

use serde_json::Value;

use crate::contract::{Grant, Manifest, check_workload};

/// Checks `job` (complete, as it will be created) against `manifest` and
/// `grant`.
///
/// # Errors
///
/// A message naming the plugin, the Job and every rule it breaks, with
/// what would allow it.
pub(crate) fn check_job(manifest: &Manifest, grant: &Grant, job: &Value) -> Result<(), String> {
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
    let violations = check_workload(&grant.workload_policy(), job).map_err(|error| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{OptionalInterfaces, ResourceKind, Scope};
    use serde_json::json;

    fn kind(group: &str, kind: &str, plural: &str) -> ResourceKind {
        ResourceKind {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: plural.into(),
            scope: Scope::Namespaced,
        }
    }

    fn manifest(owns_jobs: bool) -> Manifest {
        Manifest {
            name: "kv".into(),
            version: "1.0.0".into(),
            description: String::new(),
            primary: kind("kv.example.com", "DistributedKV", "distributedkvs"),
            owns: if owns_jobs {
                vec![kind("batch", "Job", "jobs")]
            } else {
                vec![]
            },
            watches: vec![],
            finalizer: false,
            implements: OptionalInterfaces {
                backup: true,
                ..OptionalInterfaces::default()
            },
            min_compatible_version: None,
        }
    }

    fn job(container: serde_json::Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kv-1-backup", "namespace": "shop"},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "automountServiceAccountToken": false, "containers": [container]}}}})
    }

    fn restricted() -> serde_json::Value {
        json!({"name": "backup", "image": "kvctl",
               "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false,
                                   "capabilities": {"drop": ["ALL"]},
                                   "seccompProfile": {"type": "RuntimeDefault"}}})
    }

    #[test]
    fn a_compliant_job_of_a_plugin_owning_jobs_passes() {
        assert_eq!(
            check_job(&manifest(true), &Grant::default(), &job(restricted())),
            Ok(())
        );
    }

    #[test]
    fn a_plugin_that_does_not_own_jobs_is_refused() {
        let error = check_job(&manifest(false), &Grant::default(), &job(restricted())).unwrap_err();
        assert!(error.contains("does not own batch/v1 Job"), "{error}");
    }

    #[test]
    fn a_job_breaking_the_workload_rules_is_refused_naming_them() {
        let mut privileged = restricted();
        privileged["securityContext"]["privileged"] = json!(true);
        privileged["env"] =
            json!([{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "db", "key": "t"}}}]);
        let error = check_job(&manifest(true), &Grant::default(), &job(privileged)).unwrap_err();
        assert!(error.contains("kv-1-backup"), "{error}");
        assert!(error.contains("privileged"), "{error}");
        assert!(error.contains("Secret"), "{error}");
    }
}
