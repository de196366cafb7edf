//! Version-aware upgrades of primaries: deciding whether the serving plugin
//! version must upgrade an object (or may not touch it at all), validating
//! what the plugin's `upgrade` returned, and walking the object's
//! `wasm-operator.dev/migration-state` annotation pending → in-progress →
//! completed while writing the result back. The walk's decisions are pure
//! ([`plan`]); [`upgrade_object`] performs them.
//!
//! What an `upgrade` may change: `spec`, `metadata.labels`,
//! `metadata.annotations` (except the host's own `wasm-operator.dev/*`
//! annotations, which the host sets) and `status`. A changed `apiVersion`,
//! `kind`, name, namespace or uid, or any other top-level field, rejects the
//! result; other metadata (finalizers, owner references, server-managed
//! fields) is taken from the stored object, never from the plugin.

pub mod plan;
mod validate;
mod walk;

use semver::Version;

pub use validate::merge_upgraded;
pub use walk::{MigrationError, UpgradeOutcome, upgrade_object};

/// The version to upgrade from, when `serving` must upgrade an object last
/// managed by `managed_by`: only when that is a strictly older semver.
/// Unknown or unparsable marks never trigger an upgrade (nothing to upgrade
/// from that the plugin could interpret).
pub fn upgrade_from(managed_by: Option<&str>, serving: &str) -> Option<String> {
    let from = managed_by?;
    let old = Version::parse(from).ok()?;
    let new = Version::parse(serving).ok()?;
    (old < new).then(|| from.to_string())
}

/// True when `serving` is older than the object's min-compatible mark, i.e.
/// a newer version declared it unable to handle the object. An unparsable
/// mark is ignored (the host wrote it from a validated manifest; a hand-made
/// bad value must not wedge the object).
pub fn is_incompatible(min_compatible: Option<&str>, serving: &str) -> bool {
    let (Some(min), Ok(serving)) = (min_compatible, Version::parse(serving)) else {
        return false;
    };
    Version::parse(min).is_ok_and(|min| serving < min)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrades_only_from_older_versions() {
        assert_eq!(
            upgrade_from(Some("1.0.0"), "2.0.0").as_deref(),
            Some("1.0.0")
        );
        assert_eq!(upgrade_from(Some("2.0.0"), "2.0.0"), None);
        assert_eq!(upgrade_from(Some("3.0.0"), "2.0.0"), None);
        assert_eq!(upgrade_from(None, "2.0.0"), None);
        assert_eq!(upgrade_from(Some("garbage"), "2.0.0"), None);
        // Semver, not string order.
        assert_eq!(
            upgrade_from(Some("1.9.0"), "1.10.0").as_deref(),
            Some("1.9.0")
        );
    }

    #[test]
    fn incompatible_below_the_mark() {
        assert!(is_incompatible(Some("3.0.0"), "1.0.0"));
        assert!(!is_incompatible(Some("3.0.0"), "3.0.0"));
        assert!(!is_incompatible(Some("3.0.0"), "3.1.0"));
        assert!(!is_incompatible(None, "1.0.0"));
        assert!(!is_incompatible(Some("bad"), "1.0.0"));
    }
}
