//! The admission families: reviews answered by plugin, function and
//! result; the latest audit of each plugin's stored objects.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::{Metrics, NameLabels, Registrar, registered};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    plugin: String,
    function: String,
    result: String,
}

/// The admission families.
#[derive(Clone)]
pub(super) struct AdmissionFamilies {
    reviews: Family<AdmissionLabels, Counter>,
    audit_checked: Family<NameLabels, Gauge>,
    audit_violations: Family<NameLabels, Gauge>,
    audit_errors: Family<NameLabels, Gauge>,
}

impl AdmissionFamilies {
    pub(super) fn register(registry: &mut Registrar) -> Self {
        AdmissionFamilies {
            reviews: registered(
                registry,
                "wasm_operator_admission_reviews",
                "Admission reviews answered by a plugin, by function (validate, defaults) and result (allowed, refused, warned, audited, mutated, error: the call failed and the failure policy answered)",
                Family::default(),
            ),
            audit_checked: registered(
                registry,
                "wasm_operator_admission_audit_checked",
                "Stored objects of a plugin's primary kind its serving version's validate evaluated in the latest audit",
                Family::default(),
            ),
            audit_violations: registered(
                registry,
                "wasm_operator_admission_audit_violations",
                "Stored objects a plugin's serving version's validate refuses, as of the latest audit",
                Family::default(),
            ),
            audit_errors: registered(
                registry,
                "wasm_operator_admission_audit_errors",
                "Stored objects whose validate call failed (trap, deadline, memory, invalid answer) in the latest audit",
                Family::default(),
            ),
        }
    }
}

impl Metrics {
    /// `plugin`'s `function` answered a review with `result`.
    pub fn admission(&self, plugin: &str, function: &str, result: &str) {
        self.admission
            .reviews
            .get_or_create(&AdmissionLabels {
                plugin: plugin.to_string(),
                function: function.to_string(),
                result: result.to_string(),
            })
            .inc();
    }
}

impl Metrics {
    /// The latest audit of `plugin`'s stored objects: `checked` evaluated,
    /// `violations` refused, `errors` failed.
    pub fn admission_audit(&self, plugin: &str, checked: u64, violations: u64, errors: u64) {
        let labels = NameLabels {
            plugin: plugin.to_string(),
        };
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        let families = &self.admission;
        families
            .audit_checked
            .get_or_create(&labels)
            .set(gauge(checked));
        families
            .audit_violations
            .get_or_create(&labels)
            .set(gauge(violations));
        families
            .audit_errors
            .get_or_create(&labels)
            .set(gauge(errors));
    }

    /// `plugin`'s stored objects are no longer audited here (it stopped
    /// validating, or its controller stopped): its series go.
    pub fn admission_audit_removed(&self, plugin: &str) {
        let labels = NameLabels {
            plugin: plugin.to_string(),
        };
        self.admission.audit_checked.remove(&labels);
        self.admission.audit_violations.remove(&labels);
        self.admission.audit_errors.remove(&labels);
    }
}
