//! The deterministic names of Backups.
//!
//! A scheduled Backup is named for its primary and its slot
//! (`<primary>-<yyyymmddhhmm>`, the slot in UTC), so a retry, a restart or a
//! new leader that decides the same slot creates the same name: the API
//! server's `AlreadyExists` is the proof that the slot was taken, and the
//! existing Backup (and its Job) is adopted instead of duplicated.
//!
//! Names stay within [`NAME_BUDGET`] characters so the Backup's Job can be
//! named after it with a suffix (`-backup`, `-restore`) and its Pods still
//! get their own random suffix within Kubernetes' 63-character limit on
//! label values (`job-name`) and Pod host names.

use chrono::{DateTime, Timelike, Utc};
use sha2::{Digest, Sha256};

/// The longest name this module returns: 63 (a label value, a Pod host
/// name) minus room for a Job suffix such as `-backup` and a few more.
pub const NAME_BUDGET: usize = 52;

/// Hex digits of the full primary name's SHA-256 kept when the name is
/// shortened.
const HASH_HEX_DIGITS: usize = 8;

/// The name of the Backup for `primary`'s `slot`:
/// `<primary>-<slot as UTC yyyymmddhhmm>`, e.g. `kv-202611280300`.
///
/// # Guarantees
///
/// - The same primary and slot always give the same name; different
///   slots give different names (a slot's seconds are added when they are
///   not 0, which only six-field schedules have).
/// - The result is a valid DNS-1123 subdomain of at most [`NAME_BUDGET`]
///   characters, whatever `primary` is.
/// - A primary name that is too long (over 39 characters) or not itself a
///   valid name is shortened and followed by 8 hex digits of the SHA-256 of
///   the full name, so two long names sharing a prefix still differ.
#[must_use]
pub fn scheduled_backup_name(primary: &str, slot: DateTime<Utc>) -> String {
    // Six-field schedules have slots within a minute: their seconds count.
    let stamp = if slot.second() == 0 {
        slot.format("%Y%m%d%H%M").to_string()
    } else {
        slot.format("%Y%m%d%H%M%S").to_string()
    };
    with_suffix(primary, &stamp)
}

/// The name of the `attempt`-th final Backup of the primary `primary`
/// whose uid is `uid` (taken before its deletion):
/// `<primary>-final-<8 hex of the uid's hash>`, then `…-2`, ... The uid
/// keeps the final Backup of an object deleted earlier under the same
/// name from standing in the way of this one's.
///
/// # Guarantees
///
/// As [`scheduled_backup_name`].
#[must_use]
pub fn final_backup_name(primary: &str, uid: &str, attempt: u32) -> String {
    let of = short_hash(uid);
    if attempt <= 1 {
        with_suffix(primary, &format!("final-{of}"))
    } else {
        with_suffix(primary, &format!("final-{of}-{attempt}"))
    }
}

/// The name of the Job of a Backup or Restore named `owner`:
/// `<owner>-<suffix>` (`suffix` is `backup` or `restore`), shortened and
/// hashed like a Backup name when it would pass 63 characters (the limit of
/// the `job-name` label its Pods carry).
#[must_use]
pub fn job_name(owner: &str, suffix: &str) -> String {
    with_suffix_within(owner, suffix, JOB_NAME_BUDGET)
}

/// The longest Job name [`job_name`] returns.
pub const JOB_NAME_BUDGET: usize = 57;

/// The name of an on-demand Backup of `primary` requested at
/// `requested_at`: `<primary>-manual-<yyyymmddhhmmss>` (UTC), e.g.
/// `kv-manual-20261128031500`.
///
/// Two requests in the same second get the same name: the second is refused
/// by the API server (`AlreadyExists`), and the CLI should say so rather
/// than invent another name.
///
/// # Guarantees
///
/// As [`scheduled_backup_name`] (a primary name over 30 characters is
/// shortened).
#[must_use]
pub fn manual_backup_name(primary: &str, requested_at: DateTime<Utc>) -> String {
    let stamp = requested_at.format("manual-%Y%m%d%H%M%S").to_string();
    with_suffix(primary, &stamp)
}

/// `<primary>-<suffix>`, the primary part shortened (and hashed) so the
/// whole fits [`NAME_BUDGET`]. `suffix` is lowercase alphanumerics and `-`,
/// starting and ending with an alphanumeric.
fn with_suffix(primary: &str, suffix: &str) -> String {
    with_suffix_within(primary, suffix, NAME_BUDGET)
}

/// [`with_suffix`] within `budget` characters.
fn with_suffix_within(primary: &str, suffix: &str, budget: usize) -> String {
    let room = budget.saturating_sub(suffix.len() + 1);
    if primary.len() <= room && is_dns1123_subdomain(primary) {
        return format!("{primary}-{suffix}");
    }
    let hash = short_hash(primary);
    let keep = room.saturating_sub(HASH_HEX_DIGITS + 1);
    let prefix = sanitized_prefix(primary, keep);
    if prefix.is_empty() {
        format!("{hash}-{suffix}")
    } else {
        format!("{prefix}-{hash}-{suffix}")
    }
}

/// At most `limit` characters of `name` made valid: lowercase, characters
/// outside `[a-z0-9.-]` replaced by `-`, no empty dot-separated label, and
/// no leading or trailing `-` or `.`.
fn sanitized_prefix(name: &str, limit: usize) -> String {
    let mapped: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(limit)
        .collect();
    // Each dot-separated label must start and end with an alphanumeric.
    let labels: Vec<&str> = mapped
        .split('.')
        .map(|label| label.trim_matches('-'))
        .filter(|label| !label.is_empty())
        .collect();
    labels.join(".")
}

/// The first [`HASH_HEX_DIGITS`] hex digits of the SHA-256 of `name`.
fn short_hash(name: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    Sha256::digest(name.as_bytes())
        .iter()
        .flat_map(|byte| [HEX[usize::from(byte >> 4)], HEX[usize::from(byte & 0x0f)]])
        .take(HASH_HEX_DIGITS)
        .map(char::from)
        .collect()
}

/// Whether `name` is a DNS-1123 subdomain: at most 253 characters,
/// dot-separated labels of lowercase alphanumerics and `-`, each starting
/// and ending with an alphanumeric.
pub fn is_dns1123_subdomain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            let bytes = label.as_bytes();
            match (bytes.first(), bytes.last()) {
                (Some(first), Some(last)) => {
                    first.is_ascii_alphanumeric()
                        && last.is_ascii_alphanumeric()
                        && bytes
                            .iter()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
                }
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, s).single().unwrap()
    }

    fn assert_usable(name: &str) {
        assert!(
            is_dns1123_subdomain(name),
            "{name} is not a DNS-1123 subdomain"
        );
        assert!(name.len() <= NAME_BUDGET, "{name} is {} long", name.len());
    }

    #[test]
    fn a_slot_name_is_the_primary_and_the_utc_minute() {
        assert_eq!(
            scheduled_backup_name("kv", utc(2026, 11, 28, 3, 0, 0)),
            "kv-202611280300"
        );
        // A six-field schedule's slot within the minute keeps its seconds.
        assert_eq!(
            scheduled_backup_name("kv", utc(2026, 11, 28, 3, 0, 59)),
            "kv-20261128030059"
        );
    }

    #[test]
    fn final_and_job_names_fit_their_budgets() {
        let first = final_backup_name("kv", "u-1", 1);
        assert!(
            first.starts_with("kv-final-") && first.len() == "kv-final-".len() + 8,
            "{first}"
        );
        assert_eq!(final_backup_name("kv", "u-1", 3), format!("{first}-3"));
        assert_ne!(first, final_backup_name("kv", "u-2", 1), "another object's");
        assert_eq!(
            job_name("kv-202611280300", "backup"),
            "kv-202611280300-backup"
        );
        let long = "a".repeat(80);
        let name = job_name(&long, "restore");
        assert!(
            name.len() <= JOB_NAME_BUDGET && name.ends_with("-restore"),
            "{name}"
        );
        assert!(is_dns1123_subdomain(&name), "{name}");
    }

    #[test]
    fn a_manual_name_has_seconds() {
        assert_eq!(
            manual_backup_name("kv", utc(2026, 11, 28, 3, 15, 7)),
            "kv-manual-20261128031507"
        );
    }

    #[test]
    fn the_same_slot_gives_the_same_name() {
        let slot = utc(2026, 11, 28, 3, 0, 0);
        let long = "a".repeat(200);
        assert_eq!(
            scheduled_backup_name(&long, slot),
            scheduled_backup_name(&long, slot)
        );
        assert_eq!(
            scheduled_backup_name("kv", slot),
            scheduled_backup_name("kv", slot)
        );
    }

    #[test]
    fn different_slots_give_different_names() {
        let long = "orders-database-primary-in-the-eu-west-region-number-one";
        let mut names: Vec<String> = (0..60)
            .flat_map(|minute| {
                let slot = utc(2026, 11, 28, 3, minute, 0);
                [
                    scheduled_backup_name("kv", slot),
                    scheduled_backup_name(long, slot),
                ]
            })
            .collect();
        let all = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), all);
    }

    #[test]
    fn a_name_that_fits_is_kept_as_is() {
        let fits = "p".repeat(39);
        let name = scheduled_backup_name(&fits, utc(2026, 11, 28, 3, 0, 0));
        assert_eq!(name, format!("{fits}-202611280300"));
        assert_eq!(name.len(), NAME_BUDGET);
    }

    #[test]
    fn a_long_name_is_shortened_with_a_hash_of_the_whole_name() {
        let slot = utc(2026, 11, 28, 3, 0, 0);
        let one = format!("{}-one", "x".repeat(60));
        let two = format!("{}-two", "x".repeat(60));
        let (name_one, name_two) = (
            scheduled_backup_name(&one, slot),
            scheduled_backup_name(&two, slot),
        );
        assert_usable(&name_one);
        assert_usable(&name_two);
        assert_ne!(name_one, name_two);
        assert!(name_one.starts_with(&"x".repeat(30)), "{name_one}");
        assert!(name_one.ends_with("-202611280300"), "{name_one}");
        let manual = manual_backup_name(&one, slot);
        assert_usable(&manual);
        assert!(manual.ends_with("-manual-20261128030000"), "{manual}");
    }

    #[test]
    fn the_longest_valid_primary_name_fits() {
        let longest = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(longest.len(), 253);
        assert_usable(&scheduled_backup_name(&longest, utc(2026, 11, 28, 3, 0, 0)));
        assert_usable(&manual_backup_name(&longest, utc(2026, 11, 28, 3, 0, 0)));
    }

    #[test]
    fn a_cut_on_a_dash_or_dot_stays_valid() {
        let slot = utc(2026, 11, 28, 3, 0, 0);
        // The 30-character cut ends in '-' or '.' here.
        for filler in ['-', '.'] {
            let name = format!("{}{}{}", "a".repeat(29), filler, "b".repeat(40));
            let backup = scheduled_backup_name(&name, slot);
            assert_usable(&backup);
            assert!(
                backup.starts_with(&format!("{}-", "a".repeat(29))),
                "{backup}"
            );
        }
    }

    #[test]
    fn an_invalid_primary_name_still_gives_a_valid_unique_name() {
        let slot = utc(2026, 11, 28, 3, 0, 0);
        let upper = scheduled_backup_name("KV_Store", slot);
        let lower = scheduled_backup_name("kv-store", slot);
        assert_usable(&upper);
        assert_ne!(upper, lower);
        assert_usable(&scheduled_backup_name("", slot));
        assert_usable(&scheduled_backup_name("--..--", slot));
    }

    #[test]
    fn dns1123_subdomains_are_recognised() {
        for valid in ["kv", "kv-1", "a.b", "0a"] {
            assert!(is_dns1123_subdomain(valid), "{valid}");
        }
        for invalid in [
            "",
            "-kv",
            "kv-",
            "a..b",
            "a.-b",
            "KV",
            "kv_1",
            &"a".repeat(254),
        ] {
            assert!(!is_dns1123_subdomain(invalid), "{invalid}");
        }
    }
}
