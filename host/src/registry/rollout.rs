//! How a rollout candidate takes part beside the stable version
//! ([`Rollout`], [`RolloutSettings`]), and the one rule that may refuse a
//! rollout: a serving candidate must leave a rollback possible.

use crate::cache::LabelSelector;
use crate::contract::Manifest;

use super::error::RegistryError;
use super::loaded_version::LoadedVersion;

/// How a rollout candidate takes part next to the stable version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Pre-flight: the candidate computes over every existing primary once,
    /// writes nothing and serves nothing; the report is in
    /// [`CanaryObservations::dry_run`]. While in this mode the candidate also
    /// shadows the stable version's reconciles.
    DryRun,
    /// The candidate computes for every reconcile the stable version serves,
    /// never writes; its answers are compared with the stable version's.
    Shadow,
    /// The candidate serves a sticky share of the objects, picked by the
    /// hash of their UID ([`super::assign::in_split`]).
    Split {
        /// Share of the objects the candidate serves, 0 to 100 (more is 100).
        weight_percent: u8,
    },
    /// The candidate serves the objects whose labels match.
    Selector(LabelSelector),
}

impl Rollout {
    /// True when the candidate serves (and writes) some objects: a split or
    /// a selector. Shadow and dry-run candidates never write.
    pub fn serves(&self) -> bool {
        matches!(self, Rollout::Split { .. } | Rollout::Selector(_))
    }

    /// True when the candidate computes beside the stable version's
    /// reconciles (Shadow and DryRun).
    pub fn shadows(&self) -> bool {
        matches!(self, Rollout::DryRun | Rollout::Shadow)
    }

    /// `DryRun`, `Shadow`, `Split` or `Selector`, for logs and metrics.
    pub fn mode(&self) -> &'static str {
        match self {
            Rollout::DryRun => "DryRun",
            Rollout::Shadow => "Shadow",
            Rollout::Split { .. } => "Split",
            Rollout::Selector(_) => "Selector",
        }
    }
}

/// Default [`RolloutSettings::rollout_rate`]: objects per second.
pub const DEFAULT_ROLLOUT_RATE: f64 = 20.0;
/// Default [`RolloutSettings::shadow_concurrency`].
pub const DEFAULT_SHADOW_CONCURRENCY: usize = 2;

/// How a candidate is rolled out (a `WasmPlugin`'s `spec.canary`).
#[derive(Debug, Clone, PartialEq)]
pub struct RolloutSettings {
    /// How the candidate takes part.
    pub rollout: Rollout,
    /// Objects per second re-reconciled after a change of serving version
    /// (candidate set, weight or selector changed, dropped, promoted), so a
    /// change never reconciles every object at once. Values that are not
    /// positive and finite mean [`DEFAULT_ROLLOUT_RATE`].
    pub rollout_rate: f64,
    /// Candidate calls at once in Shadow and DryRun, apart from (and in
    /// addition to) the plugin's reconcile concurrency. 0 means 1.
    pub shadow_concurrency: usize,
    /// Lets a split or selector candidate serve although its
    /// `min_compatible_version` is above the stable version, so objects it
    /// wrote cannot be served by the stable version again (see
    /// [`RegistryError::CanaryIrreversible`]).
    pub accept_irreversible: bool,
}

impl RolloutSettings {
    /// `rollout` with the default rate and shadow concurrency, refusing
    /// irreversible candidates.
    pub fn new(rollout: Rollout) -> RolloutSettings {
        RolloutSettings {
            rollout,
            rollout_rate: DEFAULT_ROLLOUT_RATE,
            shadow_concurrency: DEFAULT_SHADOW_CONCURRENCY,
            accept_irreversible: false,
        }
    }

    /// The rate to pace re-reconciles at (the default when unusable).
    pub fn effective_rate(&self) -> f64 {
        if self.rollout_rate.is_finite() && self.rollout_rate > 0.0 {
            self.rollout_rate
        } else {
            DEFAULT_ROLLOUT_RATE
        }
    }
}

/// Refuses a split or selector candidate whose `min_compatible_version` is
/// above the stable version: objects it writes carry that mark, and the
/// stable version would refuse them after a rollback.
///
/// # Errors
///
/// [`RegistryError::CanaryIrreversible`], unless `settings` shadow or
/// accept it ([`RolloutSettings::accept_irreversible`]).
pub(super) fn check_reversible(
    stable: &LoadedVersion,
    candidate: &Manifest,
    settings: &RolloutSettings,
) -> Result<(), RegistryError> {
    if !settings.rollout.serves() || settings.accept_irreversible {
        return Ok(());
    }
    let Some(min) = candidate.min_compatible_version.as_deref() else {
        return Ok(());
    };
    // The same rule as the reconcile's version walk: a serving version older
    // than the object's min-compatible mark refuses it.
    let refused = match (
        semver::Version::parse(min),
        semver::Version::parse(&stable.version),
    ) {
        (Ok(min), Ok(stable)) => stable < min,
        _ => false,
    };
    if refused {
        return Err(RegistryError::CanaryIrreversible {
            name: candidate.name.clone(),
            stable_version: stable.version.clone(),
            candidate_version: candidate.version.clone(),
            min_compatible: min.to_string(),
        });
    }
    Ok(())
}
