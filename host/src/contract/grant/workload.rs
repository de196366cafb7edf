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

/// The capabilities baseline allows to add.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// The sysctls baseline allows.
const SAFE_SYSCTLS: [&str; 10] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

/// The SELinux types baseline allows (besides none).
const SELINUX_TYPES: [&str; 4] = [
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

/// The volume sources restricted allows.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The annotation prefix of the deprecated per-container AppArmor profiles.
const APP_ARMOR_ANNOTATION: &str = "container.apparmor.security.beta.kubernetes.io/";

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

    fn baseline_pod(&mut self, spec: &Map<String, Value>, base: &str) {
        for field in ["hostNetwork", "hostPID", "hostIPC"] {
            if set(spec.get(field)) {
                self.push(
                    format!("{base}.{field}"),
                    shown(spec.get(field)),
                    WorkloadRule::HostNamespaces,
                );
            }
        }
        for (i, volume) in items(spec.get("volumes")) {
            if volume.get("hostPath").is_some_and(|v| !v.is_null()) {
                self.push(
                    format!("{base}.volumes[{i}].hostPath"),
                    shown(volume.pointer("/hostPath/path")),
                    WorkloadRule::HostPath,
                );
            }
        }
        let context = spec.get("securityContext");
        let at = format!("{base}.securityContext");
        self.baseline_context(context, &at);
        for (i, sysctl) in items(context.and_then(|c| c.get("sysctls"))) {
            let name = sysctl.get("name").and_then(Value::as_str).unwrap_or("");
            if !SAFE_SYSCTLS.contains(&name) {
                self.push(
                    format!("{at}.sysctls[{i}].name"),
                    shown(sysctl.get("name")),
                    WorkloadRule::Sysctls,
                );
            }
        }
    }

    /// The rules a pod's and a container's securityContext share.
    fn baseline_context(&mut self, context: Option<&Value>, at: &str) {
        let field = |pointer: &str| context.and_then(|c| c.pointer(pointer));
        if set(field("/windowsOptions/hostProcess")) {
            self.push(
                format!("{at}.windowsOptions.hostProcess"),
                shown(field("/windowsOptions/hostProcess")),
                WorkloadRule::HostProcess,
            );
        }
        let se_type = field("/seLinuxOptions/type");
        if se_type.is_some_and(|t| {
            !t.is_null() && t != "" && !t.as_str().is_some_and(|t| SELINUX_TYPES.contains(&t))
        }) {
            self.push(
                format!("{at}.seLinuxOptions.type"),
                shown(se_type),
                WorkloadRule::SeLinux,
            );
        }
        for key in ["user", "role"] {
            let value = field(&format!("/seLinuxOptions/{key}"));
            if value.is_some_and(|v| !v.is_null() && v != "") {
                self.push(
                    format!("{at}.seLinuxOptions.{key}"),
                    shown(value),
                    WorkloadRule::SeLinux,
                );
            }
        }
        let armor = field("/appArmorProfile/type");
        if armor.is_some_and(|t| !t.is_null() && t != "RuntimeDefault" && t != "Localhost") {
            self.push(
                format!("{at}.appArmorProfile.type"),
                shown(armor),
                WorkloadRule::AppArmor,
            );
        }
        let seccomp = field("/seccompProfile/type");
        if seccomp.is_some_and(|t| t == "Unconfined") {
            self.push(
                format!("{at}.seccompProfile.type"),
                shown(seccomp),
                WorkloadRule::SeccompUnconfined,
            );
        }
    }

    fn app_armor_annotations(&mut self, meta: Option<&Value>, path: &[&str]) {
        let Some(annotations) = meta
            .and_then(|m| m.get("annotations"))
            .and_then(Value::as_object)
        else {
            return;
        };
        let prefix = if path.is_empty() {
            "metadata".to_string()
        } else {
            format!("{}.metadata", path.join("."))
        };
        for (key, value) in annotations {
            let allowed = value.as_str().is_some_and(|v| {
                v.is_empty() || v == "runtime/default" || v.starts_with("localhost/")
            });
            if key.starts_with(APP_ARMOR_ANNOTATION) && !allowed {
                self.push(
                    format!("{prefix}.annotations[{key}]"),
                    value.to_string(),
                    WorkloadRule::AppArmor,
                );
            }
        }
    }

    fn baseline_container(&mut self, container: &Map<String, Value>, at: &str) {
        let context = container.get("securityContext");
        let field = |pointer: &str| context.and_then(|c| c.pointer(pointer));
        let sc = format!("{at}.securityContext");
        if set(field("/privileged")) {
            self.push(
                format!("{sc}.privileged"),
                shown(field("/privileged")),
                WorkloadRule::Privileged,
            );
        }
        for (i, cap) in items(field("/capabilities/add")) {
            if !cap
                .as_str()
                .is_some_and(|c| BASELINE_CAPABILITIES.contains(&c))
            {
                self.push(
                    format!("{sc}.capabilities.add[{i}]"),
                    cap.to_string(),
                    WorkloadRule::Capabilities,
                );
            }
        }
        let proc_mount = field("/procMount");
        if proc_mount.is_some_and(|p| !p.is_null() && p != "Default") {
            self.push(
                format!("{sc}.procMount"),
                shown(proc_mount),
                WorkloadRule::ProcMount,
            );
        }
        self.baseline_context(context, &sc);
        for (i, port) in items(container.get("ports")) {
            let host_port = port.get("hostPort");
            if host_port.is_some_and(|p| !p.is_null() && p != 0) {
                self.push(
                    format!("{at}.ports[{i}].hostPort"),
                    shown(host_port),
                    WorkloadRule::HostPorts,
                );
            }
        }
    }

    fn restricted_pod(&mut self, spec: &Map<String, Value>, base: &str) {
        for (i, volume) in items(spec.get("volumes")) {
            let Some(volume) = volume.as_object() else {
                continue;
            };
            for (source, value) in volume {
                // hostPath is baseline's already.
                if source == "name" || source == "hostPath" || value.is_null() {
                    continue;
                }
                if !RESTRICTED_VOLUMES.contains(&source.as_str()) {
                    self.push(
                        format!("{base}.volumes[{i}].{source}"),
                        format!("a {source} volume"),
                        WorkloadRule::VolumeTypes,
                    );
                }
            }
        }
        let user = spec.get("securityContext").and_then(|c| c.get("runAsUser"));
        if user.is_some_and(|u| u == 0) {
            self.push(
                format!("{base}.securityContext.runAsUser"),
                shown(user),
                WorkloadRule::RunAsUser,
            );
        }
    }

    fn restricted_container(
        &mut self,
        spec: &Map<String, Value>,
        container: &Map<String, Value>,
        at: &str,
    ) {
        let context = container.get("securityContext");
        let field = |pointer: &str| context.and_then(|c| c.pointer(pointer));
        let sc = format!("{at}.securityContext");
        let escalation = field("/allowPrivilegeEscalation");
        if escalation != Some(&Value::Bool(false)) {
            self.push(
                format!("{sc}.allowPrivilegeEscalation"),
                shown(escalation),
                WorkloadRule::PrivilegeEscalation,
            );
        }
        let pod_non_root = spec
            .get("securityContext")
            .and_then(|c| c.get("runAsNonRoot"));
        let non_root = field("/runAsNonRoot");
        let ok = match non_root {
            None | Some(Value::Null) => pod_non_root == Some(&Value::Bool(true)),
            Some(v) => v == &Value::Bool(true),
        };
        if !ok {
            self.push(
                format!("{sc}.runAsNonRoot"),
                shown(non_root.or(pod_non_root)),
                WorkloadRule::RunAsNonRoot,
            );
        }
        if field("/runAsUser").is_some_and(|u| u == 0) {
            self.push(
                format!("{sc}.runAsUser"),
                shown(field("/runAsUser")),
                WorkloadRule::RunAsUser,
            );
        }
        let confined =
            |t: Option<&Value>| t.is_some_and(|t| t == "RuntimeDefault" || t == "Localhost");
        let seccomp = field("/seccompProfile/type");
        let pod_seccomp = spec
            .get("securityContext")
            .and_then(|c| c.pointer("/seccompProfile/type"));
        let seccomp_ok = match seccomp {
            None | Some(Value::Null) => confined(pod_seccomp),
            // Unconfined is baseline's.
            Some(t) => confined(Some(t)) || t == "Unconfined",
        };
        if !seccomp_ok {
            self.push(
                format!("{sc}.seccompProfile.type"),
                shown(seccomp.or(pod_seccomp)),
                WorkloadRule::SeccompRequired,
            );
        }
        let drop_all = items(field("/capabilities/drop")).any(|(_, c)| c == "ALL");
        if !drop_all {
            self.push(
                format!("{sc}.capabilities.drop"),
                shown(field("/capabilities/drop")),
                WorkloadRule::RestrictedCapabilities,
            );
        }
        for (i, cap) in items(field("/capabilities/add")) {
            // Beyond the default set is baseline's.
            let default_set = cap
                .as_str()
                .is_some_and(|c| BASELINE_CAPABILITIES.contains(&c));
            if default_set && cap != "NET_BIND_SERVICE" {
                self.push(
                    format!("{sc}.capabilities.add[{i}]"),
                    cap.to_string(),
                    WorkloadRule::RestrictedCapabilities,
                );
            }
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
mod tests {
    use serde_json::json;

    use super::*;

    /// A Pod in `team` that meets `restricted` under the default grant.
    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "team"},
            "spec": {
                "automountServiceAccountToken": false,
                "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{
                    "name": "app", "image": "nginx",
                    "securityContext": {
                        "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }],
            },
        })
    }

    /// Sets `value` at the JSON pointer `at`, creating objects on the way.
    fn set_at(doc: &mut Value, at: &str, value: Value) {
        let mut here = doc;
        let parts: Vec<&str> = at.trim_start_matches('/').split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let last = i == parts.len() - 1;
            here = match here {
                Value::Array(list) => &mut list[part.parse::<usize>().unwrap()],
                Value::Object(map) => map.entry(part.to_string()).or_insert(json!({})),
                other => panic!("{at}: {other} is no container"),
            };
            if last {
                *here = value;
                return;
            }
        }
    }

    fn policy(level: PodSecurityLevel) -> WorkloadPolicy<'static> {
        WorkloadPolicy {
            level,
            service_accounts: &[],
            grant_account: None,
            secrets_granted: false,
        }
    }

    fn found(policy: &WorkloadPolicy<'_>, doc: &Value) -> Vec<(String, WorkloadRule)> {
        check_workload(policy, doc)
            .unwrap()
            .into_iter()
            .map(|v| (v.path, v.rule))
            .collect()
    }

    use PodSecurityLevel::{Baseline, Restricted};
    const PRIVILEGED: PodSecurityLevel = PodSecurityLevel::Privileged;
    use WorkloadRule::*;

    #[test]
    fn the_compliant_pod_passes_every_level() {
        for level in [Restricted, Baseline, PRIVILEGED] {
            assert_eq!(found(&policy(level), &pod()), vec![], "{level}");
        }
    }

    /// Every Pod Security rule: the field set, the path reported, the rule,
    /// and the lowest level that refuses it (the next one up allows it).
    #[test]
    fn each_pod_security_rule_is_refused_at_its_level_with_its_path() {
        let c = "spec.containers[0]";
        let cases: Vec<(&str, Value, String, WorkloadRule)> = vec![
            (
                "/spec/hostNetwork",
                json!(true),
                "spec.hostNetwork".into(),
                HostNamespaces,
            ),
            (
                "/spec/hostPID",
                json!(true),
                "spec.hostPID".into(),
                HostNamespaces,
            ),
            (
                "/spec/hostIPC",
                json!("yes"),
                "spec.hostIPC".into(),
                HostNamespaces,
            ),
            (
                "/spec/containers/0/securityContext/privileged",
                json!(true),
                format!("{c}.securityContext.privileged"),
                Privileged,
            ),
            (
                "/spec/securityContext/windowsOptions/hostProcess",
                json!(true),
                "spec.securityContext.windowsOptions.hostProcess".into(),
                HostProcess,
            ),
            (
                "/spec/containers/0/securityContext/capabilities/add",
                json!(["NET_BIND_SERVICE", "SYS_ADMIN"]),
                format!("{c}.securityContext.capabilities.add[1]"),
                Capabilities,
            ),
            (
                "/spec/volumes",
                json!([{"name": "root", "hostPath": {"path": "/"}}]),
                "spec.volumes[0].hostPath".into(),
                HostPath,
            ),
            (
                "/spec/containers/0/ports",
                json!([{"containerPort": 80, "hostPort": 80}]),
                format!("{c}.ports[0].hostPort"),
                HostPorts,
            ),
            (
                "/spec/securityContext/sysctls",
                json!([{"name": "kernel.msgmax", "value": "1"}]),
                "spec.securityContext.sysctls[0].name".into(),
                Sysctls,
            ),
            (
                "/spec/containers/0/securityContext/procMount",
                json!("Unmasked"),
                format!("{c}.securityContext.procMount"),
                ProcMount,
            ),
            (
                "/spec/securityContext/seLinuxOptions/type",
                json!("spc_t"),
                "spec.securityContext.seLinuxOptions.type".into(),
                SeLinux,
            ),
            (
                "/spec/containers/0/securityContext/seLinuxOptions/user",
                json!("root"),
                format!("{c}.securityContext.seLinuxOptions.user"),
                SeLinux,
            ),
            (
                "/spec/containers/0/securityContext/appArmorProfile/type",
                json!("Unconfined"),
                format!("{c}.securityContext.appArmorProfile.type"),
                AppArmor,
            ),
            (
                "/metadata/annotations",
                json!({"container.apparmor.security.beta.kubernetes.io/app": "unconfined"}),
                "metadata.annotations[container.apparmor.security.beta.kubernetes.io/app]".into(),
                AppArmor,
            ),
            (
                "/spec/containers/0/securityContext/seccompProfile/type",
                json!("Unconfined"),
                format!("{c}.securityContext.seccompProfile.type"),
                SeccompUnconfined,
            ),
            (
                "/spec/volumes",
                json!([{"name": "nfs", "nfs": {"server": "x", "path": "/"}}]),
                "spec.volumes[0].nfs".into(),
                VolumeTypes,
            ),
            (
                "/spec/containers/0/securityContext/allowPrivilegeEscalation",
                json!(true),
                format!("{c}.securityContext.allowPrivilegeEscalation"),
                PrivilegeEscalation,
            ),
            (
                "/spec/securityContext/runAsNonRoot",
                json!(false),
                format!("{c}.securityContext.runAsNonRoot"),
                RunAsNonRoot,
            ),
            (
                "/spec/securityContext/runAsUser",
                json!(0),
                "spec.securityContext.runAsUser".into(),
                RunAsUser,
            ),
            (
                "/spec/containers/0/securityContext/runAsUser",
                json!(0),
                format!("{c}.securityContext.runAsUser"),
                RunAsUser,
            ),
            (
                "/spec/securityContext/seccompProfile",
                json!(null),
                format!("{c}.securityContext.seccompProfile.type"),
                SeccompRequired,
            ),
            (
                "/spec/containers/0/securityContext/capabilities/drop",
                json!([]),
                format!("{c}.securityContext.capabilities.drop"),
                RestrictedCapabilities,
            ),
            (
                "/spec/containers/0/securityContext/capabilities/add",
                json!(["CHOWN"]),
                format!("{c}.securityContext.capabilities.add[0]"),
                RestrictedCapabilities,
            ),
        ];
        for (at, value, path, rule) in cases {
            let mut doc = pod();
            set_at(&mut doc, at, value.clone());
            let refusing = rule.level().unwrap();
            assert_eq!(
                found(&policy(refusing), &doc),
                vec![(path.clone(), rule)],
                "{at} = {value} at {refusing}"
            );
            if refusing == Baseline {
                assert_eq!(
                    found(&policy(Restricted), &doc),
                    vec![(path.clone(), rule)],
                    "{at}: restricted includes baseline"
                );
                assert_eq!(
                    found(&policy(PRIVILEGED), &doc),
                    vec![],
                    "{at} under privileged"
                );
            } else {
                assert_eq!(
                    found(&policy(Baseline), &doc),
                    vec![],
                    "{at} under baseline"
                );
            }
        }
    }

    #[test]
    fn allowed_values_of_the_pod_security_fields_pass_restricted() {
        for (at, value) in [
            (
                "/spec/containers/0/securityContext/capabilities/add",
                json!(["NET_BIND_SERVICE"]),
            ),
            (
                "/spec/securityContext/sysctls",
                json!([{"name": "net.ipv4.ip_local_port_range", "value": "1 2"}]),
            ),
            (
                "/spec/securityContext/seLinuxOptions",
                json!({"type": "container_init_t", "level": "s0:c1"}),
            ),
            (
                "/spec/containers/0/securityContext/seccompProfile",
                json!({"type": "Localhost", "localhostProfile": "p.json"}),
            ),
            (
                "/spec/containers/0/securityContext/appArmorProfile/type",
                json!("RuntimeDefault"),
            ),
            (
                "/metadata/annotations",
                json!({"container.apparmor.security.beta.kubernetes.io/app": "localhost/p"}),
            ),
            (
                "/spec/containers/0/ports",
                json!([{"containerPort": 80, "hostPort": 0}]),
            ),
            (
                "/spec/containers/0/securityContext/procMount",
                json!("Default"),
            ),
            (
                "/spec/volumes",
                json!([{"name": "c", "configMap": {"name": "c"}}, {"name": "e", "emptyDir": {}}, {"name": "v", "persistentVolumeClaim": {"claimName": "v"}}]),
            ),
            ("/spec/hostNetwork", json!(false)),
        ] {
            let mut doc = pod();
            set_at(&mut doc, at, value.clone());
            assert_eq!(found(&policy(Restricted), &doc), vec![], "{at} = {value}");
        }
        // Non-root and seccomp set per container instead of on the pod.
        let mut doc = pod();
        set_at(&mut doc, "/spec/securityContext", json!({}));
        set_at(
            &mut doc,
            "/spec/containers/0/securityContext/runAsNonRoot",
            json!(true),
        );
        set_at(
            &mut doc,
            "/spec/containers/0/securityContext/seccompProfile",
            json!({"type": "RuntimeDefault"}),
        );
        assert_eq!(found(&policy(Restricted), &doc), vec![]);
    }

    #[test]
    fn init_and_ephemeral_containers_are_checked_too() {
        let mut doc = pod();
        let bad = json!({"name": "x", "image": "x", "securityContext": {"privileged": true}});
        set_at(&mut doc, "/spec/initContainers", json!([bad.clone()]));
        set_at(&mut doc, "/spec/ephemeralContainers", json!([bad]));
        let got = found(&policy(Baseline), &doc);
        assert_eq!(
            got,
            vec![
                (
                    "spec.initContainers[0].securityContext.privileged".into(),
                    Privileged
                ),
                (
                    "spec.ephemeralContainers[0].securityContext.privileged".into(),
                    Privileged
                ),
            ]
        );
    }

    #[test]
    fn service_accounts_are_the_grants_whatever_the_level() {
        let mut doc = pod();
        set_at(&mut doc, "/spec/serviceAccountName", json!("wasm-operator"));
        for level in [Restricted, PRIVILEGED] {
            assert_eq!(
                found(&policy(level), &doc),
                vec![("spec.serviceAccountName".into(), ServiceAccount)]
            );
        }
        // The deprecated alias is checked the same way.
        let mut alias = pod();
        set_at(&mut alias, "/spec/serviceAccount", json!("wasm-operator"));
        assert_eq!(
            found(&policy(PRIVILEGED), &alias),
            vec![("spec.serviceAccount".into(), ServiceAccount)]
        );
        // Named in workloads.serviceAccounts: allowed, token or not.
        let named = ["wasm-operator".to_string()];
        let listed = WorkloadPolicy {
            service_accounts: &named,
            ..policy(Restricted)
        };
        set_at(&mut doc, "/spec/automountServiceAccountToken", json!(true));
        assert_eq!(found(&listed, &doc), vec![]);
        // The grant's own account, in its namespace only.
        let own = ServiceAccountRef {
            namespace: "team".into(),
            name: "wasm-operator".into(),
        };
        let granted = WorkloadPolicy {
            grant_account: Some(&own),
            ..policy(Restricted)
        };
        assert_eq!(found(&granted, &doc), vec![]);
        let elsewhere = ServiceAccountRef {
            namespace: "other".into(),
            name: "wasm-operator".into(),
        };
        let granted = WorkloadPolicy {
            grant_account: Some(&elsewhere),
            ..policy(Restricted)
        };
        assert_eq!(
            found(&granted, &doc),
            vec![("spec.serviceAccountName".into(), ServiceAccount)]
        );
    }

    #[test]
    fn the_default_account_needs_its_token_off() {
        for (automount, expected) in [
            (json!(false), vec![]),
            (
                json!(true),
                vec![(
                    "spec.automountServiceAccountToken".to_string(),
                    ServiceAccount,
                )],
            ),
            (
                json!(null),
                vec![(
                    "spec.automountServiceAccountToken".to_string(),
                    ServiceAccount,
                )],
            ),
        ] {
            for name in [json!(null), json!("default"), json!("")] {
                let mut doc = pod();
                set_at(
                    &mut doc,
                    "/spec/automountServiceAccountToken",
                    automount.clone(),
                );
                set_at(&mut doc, "/spec/serviceAccountName", name.clone());
                assert_eq!(
                    found(&policy(PRIVILEGED), &doc),
                    expected,
                    "{automount} {name}"
                );
            }
        }
    }

    #[test]
    fn a_projected_token_counts_as_running_as_the_account() {
        let mut doc = pod();
        set_at(
            &mut doc,
            "/spec/volumes",
            json!([{"name": "t", "projected": {"sources": [
                {"configMap": {"name": "c"}},
                {"serviceAccountToken": {"path": "token", "audience": "api"}},
            ]}}]),
        );
        assert_eq!(
            found(&policy(Restricted), &doc),
            vec![(
                "spec.volumes[0].projected.sources[1].serviceAccountToken".into(),
                ServiceAccount
            )],
            "automount off does not make a minted token fine"
        );
        let named = ["default".to_string()];
        let listed = WorkloadPolicy {
            service_accounts: &named,
            ..policy(Restricted)
        };
        assert_eq!(found(&listed, &doc), vec![]);
    }

    #[test]
    fn every_secret_reference_needs_the_secret_kind() {
        let c = "spec.containers[0]";
        let cases: Vec<(&str, Value, String)> = vec![
            (
                "/spec/volumes",
                json!([{"name": "s", "secret": {"secretName": "cert"}}]),
                "spec.volumes[0].secret".into(),
            ),
            (
                "/spec/volumes",
                json!([{"name": "p", "projected": {"sources": [{"secret": {"name": "cert"}}]}}]),
                "spec.volumes[0].projected.sources[0].secret".into(),
            ),
            (
                "/spec/volumes",
                json!([{"name": "d", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "cert"}}}]),
                "spec.volumes[0].csi.nodePublishSecretRef".into(),
            ),
            (
                "/spec/volumes",
                json!([{"name": "f", "azureFile": {"secretName": "cert", "shareName": "s"}}]),
                "spec.volumes[0].azureFile.secretName".into(),
            ),
            (
                "/spec/volumes",
                json!([{"name": "r", "rbd": {"monitors": ["m"], "image": "i", "secretRef": {"name": "cert"}}}]),
                "spec.volumes[0].rbd.secretRef".into(),
            ),
            (
                "/spec/containers/0/env",
                json!([{"name": "A", "value": "a"}, {"name": "B", "valueFrom": {"secretKeyRef": {"name": "cert", "key": "k"}}}]),
                format!("{c}.env[1].valueFrom.secretKeyRef"),
            ),
            (
                "/spec/containers/0/envFrom",
                json!([{"secretRef": {"name": "cert"}}]),
                format!("{c}.envFrom[0].secretRef"),
            ),
            (
                "/spec/imagePullSecrets",
                json!([{"name": "cert"}]),
                "spec.imagePullSecrets[0]".into(),
            ),
        ];
        for (at, value, path) in cases {
            let mut doc = pod();
            set_at(&mut doc, at, value.clone());
            // Restricted volume types may add their own finding; the Secret one is always there.
            let got = found(&policy(PRIVILEGED), &doc);
            assert_eq!(got, vec![(path.clone(), Secret)], "{at} = {value}");
            let granted = WorkloadPolicy {
                secrets_granted: true,
                ..policy(PRIVILEGED)
            };
            assert_eq!(found(&granted, &doc), vec![], "{at} with Secrets granted");
        }
        let mut doc = pod();
        set_at(
            &mut doc,
            "/spec/containers/0/envFrom",
            json!([{"secretRef": {"name": "webhook-cert"}}]),
        );
        let text = check_workload(&policy(Restricted), &doc).unwrap()[0].to_string();
        assert!(text.contains("Secret \"webhook-cert\""), "{text}");
        assert!(text.contains("kind: Secret"), "{text}");
    }

    #[test]
    fn every_pod_creating_kind_is_found_where_its_template_is() {
        let spec = pod()["spec"].clone();
        let mut bad = spec.clone();
        set_at(&mut bad, "/hostPID", json!(true));
        let template = |s: &Value| json!({"metadata": {}, "spec": s});
        for (api_version, kind, wrap, prefix) in [
            (
                "apps/v1",
                "Deployment",
                json!({"spec": {"template": template(&bad)}}),
                "spec.template.spec",
            ),
            (
                "apps/v1",
                "ReplicaSet",
                json!({"spec": {"template": template(&bad)}}),
                "spec.template.spec",
            ),
            (
                "apps/v1",
                "StatefulSet",
                json!({"spec": {"template": template(&bad)}}),
                "spec.template.spec",
            ),
            (
                "apps/v1",
                "DaemonSet",
                json!({"spec": {"template": template(&bad)}}),
                "spec.template.spec",
            ),
            (
                "batch/v1",
                "Job",
                json!({"spec": {"template": template(&bad)}}),
                "spec.template.spec",
            ),
            (
                "v1",
                "ReplicationController",
                json!({"spec": {"template": template(&bad)}}),
                "spec.template.spec",
            ),
            (
                "batch/v1",
                "CronJob",
                json!({"spec": {"jobTemplate": {"spec": {"template": template(&bad)}}}}),
                "spec.jobTemplate.spec.template.spec",
            ),
            (
                "v1",
                "PodTemplate",
                json!({"template": template(&bad)}),
                "template.spec",
            ),
            ("v1", "Pod", json!({"spec": bad}), "spec"),
        ] {
            let mut doc = wrap;
            doc["apiVersion"] = json!(api_version);
            doc["kind"] = json!(kind);
            doc["metadata"] = json!({"name": "w", "namespace": "team"});
            assert_eq!(
                found(&policy(Restricted), &doc),
                vec![(format!("{prefix}.hostPID"), HostNamespaces)],
                "{kind}"
            );
        }
        // Kinds that create no Pods are not looked at.
        let service = json!({"apiVersion": "v1", "kind": "Service", "spec": {"hostNetwork": true}});
        assert_eq!(found(&policy(Restricted), &service), vec![]);
        let foreign = json!({"apiVersion": "example.com/v1", "kind": "Deployment", "spec": {}});
        assert_eq!(found(&policy(Restricted), &foreign), vec![]);
    }

    #[test]
    fn a_template_that_is_no_pod_spec_is_invalid() {
        for (doc, path) in [
            (
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": 1}}),
                "spec.template",
            ),
            (json!({"apiVersion": "v1", "kind": "Pod"}), "spec"),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "spec": "run as root"}),
                "spec",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": {"a": 1}}}),
                "spec.containers",
            ),
            (
                json!({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": ["x"]}}),
                "spec.containers[0]",
            ),
        ] {
            let error = check_workload(&policy(PRIVILEGED), &doc).unwrap_err();
            assert_eq!(error.path, path, "{doc}");
        }
    }

    #[test]
    fn a_violation_names_path_value_rule_and_what_the_grant_needs() {
        let mut doc = pod();
        set_at(
            &mut doc,
            "/spec/containers/0/securityContext/privileged",
            json!(true),
        );
        let text = check_workload(&policy(Baseline), &doc).unwrap()[0].to_string();
        assert_eq!(
            text,
            "`spec.containers[0].securityContext.privileged` is true: privileged containers are forbidden by baseline; the grant would need workloads.podSecurity: privileged"
        );
        assert_eq!(
            RunAsNonRoot.grant_needs(),
            "workloads.podSecurity: baseline"
        );
    }

    #[test]
    fn the_workloads_field_parses_and_defaults_to_restricted() {
        let grant: WorkloadGrant =
            serde_yaml::from_str("podSecurity: baseline\nserviceAccounts: [builder]\n").unwrap();
        assert_eq!(grant.pod_security, Baseline);
        assert_eq!(grant.service_accounts, ["builder"]);
        let empty: WorkloadGrant = serde_yaml::from_str("{}").unwrap();
        assert_eq!(empty, WorkloadGrant::default());
        assert_eq!(empty.pod_security, Restricted);
        assert!(serde_yaml::from_str::<WorkloadGrant>("podSecurity: root").is_err());
        assert!(
            serde_yaml::from_str::<WorkloadGrant>("privileged: true").is_err(),
            "typos are errors"
        );
    }
}
