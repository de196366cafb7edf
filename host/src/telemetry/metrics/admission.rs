//! The admission family: reviews answered by plugin, function and result.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::{Metrics, Registrar, registered};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AdmissionLabels {
    plugin: String,
    function: String,
    result: String,
}

/// The admission family.
#[derive(Clone)]
pub(super) struct AdmissionFamilies {
    reviews: Family<AdmissionLabels, Counter>,
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
