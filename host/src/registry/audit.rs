//! The latest audit of a plugin's stored objects against its stable
//! version's `validate` (docs/admission.md, "Audit of stored objects"): a
//! blackboard the plugin's controller writes after each run and the
//! WasmPlugin status shows (`status.admissionAudit`).

use std::sync::Mutex;

use serde::Serialize;

use crate::util::lock;

/// Violations named in the report (`status.admissionAudit.first`).
pub const MAX_AUDIT_FINDINGS: usize = 10;

/// One stored object the audit found wanting: a violation (the plugin
/// refused it) or an error (its call failed).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditFinding {
    /// The object's namespace (none for a cluster-scoped object).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// The refusal (the plugin's message, naming the plugin and version),
    /// or the failure.
    pub message: String,
}

/// One finished audit run of a plugin.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionAudit {
    /// The manifest version whose `validate` judged.
    pub version: String,
    /// `sha256:<hex>` of that component.
    pub digest: String,
    /// Objects evaluated.
    pub checked: u64,
    /// Objects the plugin refused.
    pub violations: u64,
    /// Objects whose call failed (trap, deadline, memory, invalid answer):
    /// neither admitted nor refused.
    pub errors: u64,
    /// The first [`MAX_AUDIT_FINDINGS`] violations, sorted by namespace
    /// and name.
    pub first: Vec<AuditFinding>,
    /// The first failed call of the run (one per run, whatever the count);
    /// `null` when none, so a merge patch of the status removes an earlier
    /// one.
    pub first_error: Option<AuditFinding>,
    /// When the run started (RFC 3339).
    pub started_at: String,
    /// When it finished (RFC 3339).
    pub finished_at: String,
}

impl AdmissionAudit {
    /// A run of `version` (`digest`) starting at `started_at`, nothing
    /// counted yet.
    pub fn starting(version: &str, digest: &str, started_at: String) -> AdmissionAudit {
        AdmissionAudit {
            version: version.to_string(),
            digest: digest.to_string(),
            started_at,
            ..AdmissionAudit::default()
        }
    }

    /// One object was allowed.
    pub fn allowed(&mut self) {
        self.checked += 1;
    }

    /// One object was refused: counted, and named while it is among the
    /// first [`MAX_AUDIT_FINDINGS`] in (namespace, name) order, whatever
    /// order the objects come in.
    pub fn violation(&mut self, finding: AuditFinding) {
        self.checked += 1;
        self.violations += 1;
        let at = self.first.partition_point(|f| f <= &finding);
        if at < MAX_AUDIT_FINDINGS {
            self.first.insert(at, finding);
            self.first.truncate(MAX_AUDIT_FINDINGS);
        }
    }

    /// One object's call failed: counted; the first is kept.
    pub fn error(&mut self, finding: AuditFinding) {
        self.checked += 1;
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(finding);
        }
    }

    /// The run finished at `finished_at`.
    pub fn finished(mut self, finished_at: String) -> AdmissionAudit {
        self.finished_at = finished_at;
        self
    }
}

/// The latest audit of one plugin, shared by its controller's audit task
/// (which records) and its WasmPlugin's worker (which shows it).
#[derive(Debug, Default)]
pub struct AuditBoard {
    latest: Mutex<Option<AdmissionAudit>>,
}

impl AuditBoard {
    /// Replaces the latest audit (`None`: the plugin no longer validates,
    /// nothing to show).
    pub fn set(&self, audit: Option<AdmissionAudit>) {
        *lock(&self.latest) = audit;
    }

    /// The latest finished audit, if any.
    pub fn latest(&self) -> Option<AdmissionAudit> {
        lock(&self.latest).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finding(namespace: &str, name: &str) -> AuditFinding {
        AuditFinding {
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
            message: format!("{name} refused"),
        }
    }

    #[test]
    fn the_report_counts_everything_and_names_the_first_violations_sorted() {
        let mut audit = AdmissionAudit::starting("1.3.0", "sha256:ab", "t0".into());
        // Out of order, more than the report names.
        for i in (0..15).rev() {
            audit.violation(finding("default", &format!("app-{i:02}")));
        }
        audit.violation(finding("a-team", "zz"));
        audit.allowed();
        audit.error(finding("default", "trap-1"));
        audit.error(finding("default", "trap-2"));
        let audit = audit.finished("t1".into());
        assert_eq!((audit.checked, audit.violations, audit.errors), (19, 16, 2));
        let names: Vec<String> = audit
            .first
            .iter()
            .map(|f| format!("{}/{}", f.namespace.as_deref().unwrap(), f.name))
            .collect();
        let mut expected = vec!["a-team/zz".to_string()];
        expected.extend((0..9).map(|i| format!("default/app-{i:02}")));
        assert_eq!(names, expected);
        assert_eq!(audit.first_error.unwrap().name, "trap-1");
        assert_eq!(
            (audit.started_at.as_str(), audit.finished_at.as_str()),
            ("t0", "t1")
        );
    }

    #[test]
    fn the_report_reads_as_the_status_shows_it() {
        let mut audit = AdmissionAudit::starting("1.3.0", "sha256:ab", "t0".into());
        audit.violation(finding("default", "big"));
        let json = serde_json::to_value(audit.finished("t1".into())).unwrap();
        assert_eq!(json["startedAt"], "t0");
        assert_eq!(json["finishedAt"], "t1");
        assert_eq!(json["first"][0]["namespace"], "default");
        assert!(json["firstError"].is_null());
        let board = AuditBoard::default();
        assert_eq!(board.latest(), None);
        board.set(Some(AdmissionAudit::default()));
        assert!(board.latest().is_some());
        board.set(None);
        assert_eq!(board.latest(), None);
    }
}
