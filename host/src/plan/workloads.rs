//! Workloads: the pod templates of pod-creating children checked against
//! the grant before anything is written. A Deployment is code the cluster
//! runs with the namespace's credentials, so what its pods may run as
//! (ServiceAccount, Secrets, Pod Security level) is the grant's to decide,
//! not the plugin's ([`crate::contract::check_workload`] holds the rules).

use std::collections::BTreeMap;

use super::{ChildApply, ChildKey, PlanError};
use crate::contract::{Grant, Manifest, check_workload};

/// Violations a refusal names, at most: the rest are counted.
const SHOWN: usize = 12;

/// Checks every completed child against `grant`'s workload rules; the
/// whole answer is refused when one breaks a rule.
///
/// # Errors
///
/// [`PlanError::WorkloadDenied`] (`CapabilityDenied`) naming each child,
/// the field path, the rule and the grant field that would allow it;
/// [`PlanError::InvalidChild`] (`PluginInvalidOutput`) for a pod-creating
/// kind whose template is not a pod spec.
pub fn check(
    manifest: &Manifest,
    grant: &Grant,
    children: &BTreeMap<ChildKey, ChildApply>,
) -> Result<(), PlanError> {
    let policy = grant.workload_policy();
    let mut found = Vec::new();
    for (key, child) in children {
        let violations =
            check_workload(&policy, &child.document).map_err(|e| PlanError::InvalidChild {
                plugin: manifest.name.clone(),
                version: manifest.version.clone(),
                child: key.to_string(),
                problem: e.to_string(),
            })?;
        found.extend(violations.into_iter().map(|v| format!("{key}: {v}")));
    }
    if found.is_empty() {
        return Ok(());
    }
    let more = found.len().saturating_sub(SHOWN);
    found.truncate(SHOWN);
    let mut violations = found.join("; ");
    if more > 0 {
        violations.push_str(&format!("; and {more} more"));
    }
    Err(PlanError::WorkloadDenied {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        violations,
    })
}
