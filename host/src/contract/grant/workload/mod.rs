//! Workload grants: what the Pods a plugin's children create may run as,
//! and the pure check of a child against it.
//!
//! A Deployment, a Job or a bare Pod is code the cluster runs with the
//! namespace's credentials: whatever its pod template names (a
//! ServiceAccount, a Secret, the node's filesystem or network) the
//! kubelet hands to the plugin's code. So every pod-creating kind a plugin
//! returns is checked before anything is written ([`check_workload`]):
//!
//! - **ServiceAccounts**: a template runs as an account the grant names
//!   (`workloads.serviceAccounts`, or the grant's `serviceAccount` when the
//!   child is in its namespace), or as the namespace's `default` account
//!   with `automountServiceAccountToken: false` (no token). A projected
//!   `serviceAccountToken` source counts as running as the pod's account,
//!   automount or not.
//! - **Secrets**: a template references a Secret (a `secret` volume or
//!   projected source, any volume source's `secretRef`, `*SecretRef` or
//!   `secretName`, `env[].valueFrom.secretKeyRef`, `envFrom[].secretRef`,
//!   `imagePullSecrets`) only when the grant names the Secret kind, as
//!   reading Secrets needs.
//! - **Pod Security**: `workloads.podSecurity` is a level of the Pod
//!   Security Standards, with the upstream rules: `restricted` (the
//!   default), `baseline`, or `privileged` (no Pod Security rule; the
//!   ServiceAccount and Secret rules still hold: they are the grant's).
//!
//! The check reads the JSON the host sends, not a typed copy of it: a field
//! the host's types do not know is still checked where a rule names it, and
//! the restricted volume types are an allow-list, so an unknown volume
//! source is refused.

mod pod_security;

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::ServiceAccountRef;

/// A level of the Kubernetes Pod Security Standards.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PodSecurityLevel {
    /// Hardened pods: baseline, plus non-root, no privilege escalation, all
    /// capabilities dropped, a seccomp profile and restricted volume types.
    #[default]
    Restricted,
    /// No known privilege escalation: no host namespaces, host paths, host
    /// ports, privileged containers or added capabilities beyond the
    /// default set.
    Baseline,
    /// No Pod Security rule at all.
    Privileged,
}

impl fmt::Display for PodSecurityLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PodSecurityLevel::Restricted => "restricted",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Privileged => "privileged",
        })
    }
}

/// What the pods of a plugin's children may run as
/// (`WasmPlugin.spec.permissions.workloads`). Absent, it is
/// `WorkloadGrant::default()`: `restricted`, no ServiceAccount but the
/// grant's own.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadGrant {
    /// The Pod Security Standards level pod templates must meet:
    /// `restricted` (the default), `baseline` or `privileged`.
    #[serde(default)]
    pub pod_security: PodSecurityLevel,
    /// ServiceAccounts (names, in the child's namespace) a pod template may
    /// run as.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub service_accounts: Vec<String>,
}

/// A grant's workload rules, resolved for the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadPolicy<'a> {
    /// The Pod Security level templates must meet.
    pub level: PodSecurityLevel,
    /// ServiceAccount names a template may run as.
    pub service_accounts: &'a [String],
    /// The grant's own ServiceAccount: allowed in its namespace.
    pub grant_account: Option<&'a ServiceAccountRef>,
    /// The grant names the Secret kind: templates may reference Secrets.
    pub secrets_granted: bool,
}

/// A rule a pod template breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkloadRule {
    /// Runs as (or mints a token of) a ServiceAccount the grant does not name.
    ServiceAccount,
    /// References a Secret, and the grant does not name Secrets.
    Secret,
    /// Baseline: hostNetwork, hostPID or hostIPC.
    HostNamespaces,
    /// Baseline: a privileged container.
    Privileged,
    /// Baseline: a Windows HostProcess pod or container.
    HostProcess,
    /// Baseline: a capability beyond the default set.
    Capabilities,
    /// Baseline: a hostPath volume.
    HostPath,
    /// Baseline: a host port.
    HostPorts,
    /// Baseline: a sysctl outside the safe set.
    Sysctls,
    /// Baseline: a procMount other than Default.
    ProcMount,
    /// Baseline: an SELinux type, user or role beyond the container ones.
    SeLinux,
    /// Baseline: an AppArmor profile other than the runtime's or a local one.
    AppArmor,
    /// Baseline: an Unconfined seccomp profile.
    SeccompUnconfined,
    /// Restricted: a volume type outside the restricted list.
    VolumeTypes,
    /// Restricted: allowPrivilegeEscalation not false.
    PrivilegeEscalation,
    /// Restricted: runAsNonRoot not true.
    RunAsNonRoot,
    /// Restricted: runAsUser 0.
    RunAsUser,
    /// Restricted: no RuntimeDefault or Localhost seccomp profile.
    SeccompRequired,
    /// Restricted: capabilities not dropping ALL, or adding more than
    /// NET_BIND_SERVICE.
    RestrictedCapabilities,
}

impl WorkloadRule {
    /// The lowest level that forbids it (`None`: a grant rule, whatever
    /// the level).
    pub fn level(self) -> Option<PodSecurityLevel> {
        use WorkloadRule::*;
        match self {
            ServiceAccount | Secret => None,
            VolumeTypes
            | PrivilegeEscalation
            | RunAsNonRoot
            | RunAsUser
            | SeccompRequired
            | RestrictedCapabilities => Some(PodSecurityLevel::Restricted),
            _ => Some(PodSecurityLevel::Baseline),
        }
    }

    /// What the rule forbids, for people.
    pub fn describe(self) -> &'static str {
        use WorkloadRule::*;
        match self {
            ServiceAccount => {
                "pods run with the credentials of their ServiceAccount, which the grant does not name"
            }
            Secret => "pods read the Secrets they reference, and the grant does not name Secrets",
            HostNamespaces => "host namespaces (network, PID, IPC) are forbidden by baseline",
            Privileged => "privileged containers are forbidden by baseline",
            HostProcess => "Windows HostProcess pods are forbidden by baseline",
            Capabilities => "capabilities beyond the default set are forbidden by baseline",
            HostPath => "hostPath volumes are forbidden by baseline",
            HostPorts => "host ports are forbidden by baseline",
            Sysctls => "sysctls outside the safe set are forbidden by baseline",
            ProcMount => "a procMount other than Default is forbidden by baseline",
            SeLinux => {
                "SELinux types beyond the container ones, users and roles are forbidden by baseline"
            }
            AppArmor => {
                "AppArmor profiles other than RuntimeDefault or Localhost are forbidden by baseline"
            }
            SeccompUnconfined => "an Unconfined seccomp profile is forbidden by baseline",
            VolumeTypes => {
                "restricted allows only configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, projected and secret volumes"
            }
            PrivilegeEscalation => "restricted requires allowPrivilegeEscalation: false",
            RunAsNonRoot => "restricted requires runAsNonRoot: true (pod or every container)",
            RunAsUser => "restricted forbids runAsUser: 0",
            SeccompRequired => {
                "restricted requires a RuntimeDefault or Localhost seccomp profile (pod or every container)"
            }
            RestrictedCapabilities => {
                "restricted requires capabilities.drop: [ALL] and adds NET_BIND_SERVICE at most"
            }
        }
    }

    /// The grant field that would allow it.
    pub fn grant_needs(self) -> &'static str {
        match self.level() {
            None if self == WorkloadRule::Secret => {
                "the Secret kind ({group: \"\", kind: Secret}) named in own or read"
            }
            None => {
                "the account in workloads.serviceAccounts (or, to run as `default` without a token, automountServiceAccountToken: false on the pod spec)"
            }
            Some(PodSecurityLevel::Restricted) => "workloads.podSecurity: baseline",
            Some(_) => "workloads.podSecurity: privileged",
        }
    }
}

/// One rule a child's pod template breaks, where.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkloadViolation {
    /// The field path in the child (`spec.template.spec.containers[0].securityContext.privileged`).
    pub path: String,
    /// What the field holds (`true`, `"host-sa"`, `unset`).
    pub found: String,
    /// The rule it breaks.
    pub rule: WorkloadRule,
}

impl fmt::Display for WorkloadViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` is {}: {}; the grant would need {}",
            self.path,
            self.found,
            self.rule.describe(),
            self.rule.grant_needs()
        )
    }
}

/// A pod-creating child whose pod template is not a pod spec at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{path}` {problem}")]
pub struct NotAPodSpec {
    /// The field path.
    pub path: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Where the pod spec of a pod-creating kind is, by API group and kind
/// (any version); `None` for a kind that creates no Pods.
pub fn pod_spec_path(api_version: &str, kind: &str) -> Option<&'static [&'static str]> {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    match (group, kind) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        ("apps" | "extensions", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
        | ("batch", "Job")
        | ("", "ReplicationController") => Some(&["spec", "template", "spec"]),
        _ => None,
    }
}

/// Every rule `child`'s pods would break under `policy`, in field order;
/// empty for a child that creates no Pods or whose template is allowed.
/// The pods run in the child's `metadata.namespace`.
///
/// # Errors
///
/// [`NotAPodSpec`] when a pod-creating kind has no pod spec object where
/// its kind keeps it, or containers that are not a list of objects.
pub fn check_workload(
    policy: &WorkloadPolicy<'_>,
    child: &Value,
) -> Result<Vec<WorkloadViolation>, NotAPodSpec> {
    let api_version = child
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = child.get("kind").and_then(Value::as_str).unwrap_or("");
    let Some(path) = pod_spec_path(api_version, kind) else {
        return Ok(Vec::new());
    };
    let mut spec = child;
    for (depth, field) in path.iter().enumerate() {
        spec = spec.get(field).ok_or_else(|| NotAPodSpec {
            path: path[..=depth].join("."),
            problem: format!("is missing: a {kind}'s pods are defined there"),
        })?;
    }
    let base = path.join(".");
    let spec = spec.as_object().ok_or_else(|| NotAPodSpec {
        path: base.clone(),
        problem: "is not an object (a pod spec)".into(),
    })?;
    // The pod's metadata sits beside its spec (the object's own for a Pod).
    let mut meta = child;
    for field in &path[..path.len() - 1] {
        meta = meta.get(field).unwrap_or(&Value::Null);
    }
    let namespace = child
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut check = Check {
        policy,
        namespace,
        out: Vec::new(),
    };
    let containers = containers_of(spec, &base)?;
    check.service_account(spec, &base);
    check.secrets(spec, &containers, &base);
    if policy.level != PodSecurityLevel::Privileged {
        check.baseline_pod(spec, &base);
        check.app_armor_annotations(meta.get("metadata"), &path[..path.len() - 1]);
        for (at, container) in &containers {
            check.baseline_container(container, at);
        }
    }
    if policy.level == PodSecurityLevel::Restricted {
        check.restricted_pod(spec, &base);
        for (at, container) in &containers {
            check.restricted_container(spec, container, at);
        }
    }
    Ok(check.out)
}

/// A container and its field path.
type AtContainer<'a> = (String, &'a Map<String, Value>);

/// Every container of the three lists, with its path.
fn containers_of<'a>(
    spec: &'a Map<String, Value>,
    base: &str,
) -> Result<Vec<AtContainer<'a>>, NotAPodSpec> {
    let mut all = Vec::new();
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        let Some(value) = spec.get(list).filter(|v| !v.is_null()) else {
            continue;
        };
        let items = value.as_array().ok_or_else(|| NotAPodSpec {
            path: format!("{base}.{list}"),
            problem: "is not a list of containers".into(),
        })?;
        for (i, item) in items.iter().enumerate() {
            let at = format!("{base}.{list}[{i}]");
            let container = item.as_object().ok_or_else(|| NotAPodSpec {
                path: at.clone(),
                problem: "is not a container (an object)".into(),
            })?;
            all.push((at, container));
        }
    }
    Ok(all)
}

/// A value as a violation shows it.
fn shown(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => "unset".into(),
        Some(v) => v.to_string(),
    }
}

/// True when a field that must not be set to true is (any value but
/// false or null: the API server refuses what is not a boolean anyway).
fn set(value: Option<&Value>) -> bool {
    !matches!(value, None | Some(Value::Null | Value::Bool(false)))
}

/// The objects of `list` (a JSON array, absent as empty), with indices.
fn items(value: Option<&Value>) -> impl Iterator<Item = (usize, &Value)> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// The check of one child: the policy, the pods' namespace, the findings.
struct Check<'p> {
    policy: &'p WorkloadPolicy<'p>,
    namespace: &'p str,
    out: Vec<WorkloadViolation>,
}

impl Check<'_> {
    fn push(&mut self, path: String, found: String, rule: WorkloadRule) {
        self.out.push(WorkloadViolation { path, found, rule });
    }

    fn account_allowed(&self, name: &str) -> bool {
        self.policy.service_accounts.iter().any(|a| a == name)
            || self
                .policy
                .grant_account
                .is_some_and(|a| a.name == name && a.namespace == self.namespace)
    }

    /// The pod's ServiceAccount, and the tokens its projected volumes mint.
    fn service_account(&mut self, spec: &Map<String, Value>, base: &str) {
        let mut effective = "default".to_string();
        // `serviceAccount` is the deprecated alias the API server still
        // honours when `serviceAccountName` is empty: both are checked.
        for field in ["serviceAccount", "serviceAccountName"] {
            match spec.get(field) {
                None | Some(Value::Null) => {}
                Some(Value::String(name)) if name.is_empty() => {}
                Some(Value::String(name)) => {
                    effective = name.clone();
                    if !self.account_allowed(name) && name != "default" {
                        self.push(
                            format!("{base}.{field}"),
                            shown(spec.get(field)),
                            WorkloadRule::ServiceAccount,
                        );
                    }
                }
                Some(other) => self.push(
                    format!("{base}.{field}"),
                    other.to_string(),
                    WorkloadRule::ServiceAccount,
                ),
            }
        }
        let automount = spec.get("automountServiceAccountToken");
        if effective == "default"
            && !self.account_allowed("default")
            && automount != Some(&Value::Bool(false))
        {
            self.push(
                format!("{base}.automountServiceAccountToken"),
                shown(automount),
                WorkloadRule::ServiceAccount,
            );
        }
        for (i, volume) in items(spec.get("volumes")) {
            for (j, source) in items(volume.pointer("/projected/sources")) {
                if source.get("serviceAccountToken").is_some() && !self.account_allowed(&effective)
                {
                    self.push(
                        format!("{base}.volumes[{i}].projected.sources[{j}].serviceAccountToken"),
                        format!("a token of ServiceAccount {effective:?}"),
                        WorkloadRule::ServiceAccount,
                    );
                }
            }
        }
    }

    /// Every Secret reference, unless the grant names Secrets.
    fn secrets(&mut self, spec: &Map<String, Value>, containers: &[AtContainer<'_>], base: &str) {
        if self.policy.secrets_granted {
            return;
        }
        let mut refs = Vec::new();
        for (i, volume) in items(spec.get("volumes")) {
            secret_refs(volume, &format!("{base}.volumes[{i}]"), &mut refs);
        }
        for (i, pull) in items(spec.get("imagePullSecrets")) {
            refs.push((
                format!("{base}.imagePullSecrets[{i}]"),
                shown(pull.get("name")),
            ));
        }
        for (at, container) in containers {
            for (i, env) in items(container.get("env")) {
                if let Some(key_ref) = env.pointer("/valueFrom/secretKeyRef") {
                    refs.push((
                        format!("{at}.env[{i}].valueFrom.secretKeyRef"),
                        shown(key_ref.get("name")),
                    ));
                }
            }
            for (i, from) in items(container.get("envFrom")) {
                if let Some(secret_ref) = from.get("secretRef") {
                    refs.push((
                        format!("{at}.envFrom[{i}].secretRef"),
                        shown(secret_ref.get("name")),
                    ));
                }
            }
        }
        for (path, name) in refs {
            self.push(path, format!("Secret {name}"), WorkloadRule::Secret);
        }
    }
}

/// The Secret references of one volume: a `secret` source (and a
/// projected one), and any source's `secretRef`, `*SecretRef` or
/// `secretName`, wherever it nests.
fn secret_refs(value: &Value, at: &str, refs: &mut Vec<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let path = format!("{at}.{key}");
                if inner.is_null() {
                    continue;
                }
                if key == "secret" {
                    let name = inner.get("secretName").or_else(|| inner.get("name"));
                    refs.push((path, shown(name)));
                } else if key == "secretRef" || key.ends_with("SecretRef") {
                    refs.push((path, shown(inner.get("name"))));
                } else if key == "secretName" {
                    refs.push((path, shown(Some(inner))));
                } else {
                    secret_refs(inner, &path, refs);
                }
            }
        }
        Value::Array(list) => {
            for (i, inner) in list.iter().enumerate() {
                secret_refs(inner, &format!("{at}[{i}]"), refs);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests;
