//! The Pod Security Standards' rules, as the upstream `baseline` and
//! `restricted` levels check them (k8s.io/pod-security-admission), on the
//! JSON of a pod spec: the level part of a workload check. The grant's
//! own rules (ServiceAccounts, Secrets) stay in the parent module.

use serde_json::{Map, Value};

use super::{Check, WorkloadRule, items, set, shown};

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

impl Check<'_> {
    pub(super) fn baseline_pod(&mut self, spec: &Map<String, Value>, base: &str) {
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
    pub(super) fn baseline_context(&mut self, context: Option<&Value>, at: &str) {
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

    pub(super) fn app_armor_annotations(&mut self, meta: Option<&Value>, path: &[&str]) {
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

    pub(super) fn baseline_container(&mut self, container: &Map<String, Value>, at: &str) {
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

    pub(super) fn restricted_pod(&mut self, spec: &Map<String, Value>, base: &str) {
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

    pub(super) fn restricted_container(
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
