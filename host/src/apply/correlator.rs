//! Which Event a new occurrence becomes: a new Event, or the next count of
//! an existing series. Pure, modelled on client-go's `EventCorrelator`.
//!
//! - A series counts **identical** events only: same involved object,
//!   related object, type, reason, action and note. An event with another
//!   note is a new Event with its own note (kube-runtime's `Recorder` keys
//!   its series without the note, so a second message was counted into the
//!   first message's series and never shown).
//! - Events that differ only in their note are *similar*. Once
//!   [`AGGREGATE_AFTER`] distinct notes of one similar group were seen,
//!   with less than [`AGGREGATE_WINDOW`] between consecutive ones, the
//!   group is aggregated: one Event whose note says
//!   `(combined from similar events): <latest note>`, counted as a series.
//! - A series whose last occurrence is older than [`AGGREGATE_WINDOW`] is
//!   forgotten: the next occurrence starts a new Event.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use crate::contract::limits::{AGGREGATE_AFTER, AGGREGATE_WINDOW};

/// The prefix of an aggregated event's note (client-go's wording).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// What makes events similar: everything but the note.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    /// The involved object (`apiVersion/kind/namespace/name/uid`).
    pub regarding: String,
    /// The related object, the same way, if any.
    pub related: Option<String>,
    /// `Warning` rather than `Normal`.
    pub warning: bool,
    /// The event's reason.
    pub reason: String,
    /// The event's action.
    pub action: String,
}

/// One series: identical events (`Some(note)`), or a similar group's
/// aggregate (`None`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    key: EventKey,
    note: Option<String>,
}

/// What to write for one occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Create a new Event with `note`; report its name with
    /// [`Correlator::created`].
    Create {
        /// The series the new Event starts.
        series: SeriesKey,
        /// The Event's note.
        note: String,
    },
    /// Count one more occurrence on the Event `name`: its series becomes
    /// `count`, its note `note` (unchanged, except for an aggregate, which
    /// shows the latest note). Report it with [`Correlator::bumped`].
    Bump {
        /// The series counted.
        series: SeriesKey,
        /// The existing Event's name.
        name: String,
        /// The series count after this occurrence (2 for the second).
        count: i32,
        /// The note to show.
        note: String,
    },
}

#[derive(Debug, Clone)]
struct Series {
    name: String,
    count: i32,
    last: DateTime<Utc>,
}

#[derive(Debug, Clone)]
struct Similar {
    notes: HashSet<String>,
    last: DateTime<Utc>,
}

/// The memory of one recorder: the series written and the similar groups
/// seen.
#[derive(Debug, Default)]
pub struct Correlator {
    series: HashMap<SeriesKey, Series>,
    similar: HashMap<EventKey, Similar>,
}

fn window() -> chrono::Duration {
    chrono::Duration::from_std(AGGREGATE_WINDOW).unwrap_or(chrono::Duration::MAX)
}

impl Correlator {
    /// Decides what the occurrence of `key` with `note` at `now` becomes,
    /// and remembers it among the similar events.
    pub fn observe(&mut self, key: EventKey, note: &str, now: DateTime<Utc>) -> Decision {
        let window = window();
        self.series.retain(|_, s| now - s.last < window);
        self.similar.retain(|_, s| now - s.last < window);
        let similar = self.similar.entry(key.clone()).or_insert_with(|| Similar {
            notes: HashSet::new(),
            last: now,
        });
        similar.notes.insert(note.to_string());
        similar.last = now;
        let aggregated = similar.notes.len() >= usize::try_from(AGGREGATE_AFTER).unwrap_or(10);
        let (series, note) = if aggregated {
            let note = if note.starts_with(COMBINED_PREFIX) {
                note.to_string()
            } else {
                format!("{COMBINED_PREFIX}{note}")
            };
            (SeriesKey { key, note: None }, note)
        } else {
            let series = SeriesKey {
                key,
                note: Some(note.to_string()),
            };
            (series, note.to_string())
        };
        match self.series.get(&series) {
            Some(existing) => Decision::Bump {
                name: existing.name.clone(),
                count: existing.count.saturating_add(1),
                series,
                note,
            },
            None => Decision::Create { series, note },
        }
    }

    /// The Event `name` was created for `series` at `now`.
    pub fn created(&mut self, series: SeriesKey, name: String, now: DateTime<Utc>) {
        self.series.insert(
            series,
            Series {
                name,
                count: 1,
                last: now,
            },
        );
    }

    /// The series was counted to `count` at `now`.
    pub fn bumped(&mut self, series: &SeriesKey, count: i32, now: DateTime<Utc>) {
        if let Some(s) = self.series.get_mut(series) {
            s.count = count;
            s.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(reason: &str) -> EventKey {
        EventKey {
            regarding: "example.com/v1/WasmPlugin//webapp/u1".into(),
            related: None,
            warning: false,
            reason: reason.into(),
            action: "Load".into(),
        }
    }

    /// Observes and records the occurrence as written; returns the Event
    /// name and its (count, note).
    fn occur(
        c: &mut Correlator,
        reason: &str,
        note: &str,
        now: DateTime<Utc>,
    ) -> (String, i32, String) {
        match c.observe(key(reason), note, now) {
            Decision::Create { series, note } => {
                let name = format!("ev{}", c.series.len());
                c.created(series, name.clone(), now);
                (name, 1, note)
            }
            Decision::Bump {
                series,
                name,
                count,
                note,
            } => {
                c.bumped(&series, count, now);
                (name, count, note)
            }
        }
    }

    #[test]
    fn identical_events_count_one_series() {
        let mut c = Correlator::default();
        let t = Utc::now();
        let first = occur(&mut c, "CanaryStarted", "shadowing", t);
        let second = occur(&mut c, "CanaryStarted", "shadowing", t);
        assert_eq!(first.1, 1);
        assert_eq!(second, (first.0, 2, "shadowing".to_string()));
    }

    #[test]
    fn another_message_is_another_event_with_its_own_note() {
        let mut c = Correlator::default();
        let t = Utc::now();
        let a = occur(&mut c, "CanaryAborted", "aborted by a new spec.canary", t);
        let b = occur(&mut c, "CanaryAborted", "aborted by `canary abort`", t);
        assert_ne!(a.0, b.0);
        assert_eq!((b.1, b.2.as_str()), (1, "aborted by `canary abort`"));
        // Each message keeps counting its own series.
        let a2 = occur(&mut c, "CanaryAborted", "aborted by a new spec.canary", t);
        assert_eq!((a2.0, a2.1), (a.0, 2));
        // Another reason, type or action is not the same series either.
        let other = occur(&mut c, "CanaryStarted", "aborted by a new spec.canary", t);
        assert_eq!(other.1, 1);
    }

    #[test]
    fn the_tenth_distinct_message_is_aggregated_and_says_so() {
        let mut c = Correlator::default();
        let t = Utc::now();
        let mut names = HashSet::new();
        for i in 1..AGGREGATE_AFTER {
            let (name, count, note) = occur(&mut c, "Split", &format!("step {i}"), t);
            assert_eq!((count, note), (1, format!("step {i}")));
            names.insert(name);
        }
        let (name, count, note) = occur(&mut c, "Split", "step 10", t);
        assert!(!names.contains(&name));
        assert_eq!(
            (count, note.as_str()),
            (1, "(combined from similar events): step 10")
        );
        let (again, count, note) = occur(&mut c, "Split", "step 11", t);
        assert_eq!((again, count), (name, 2));
        assert_eq!(note, "(combined from similar events): step 11");
        // An already combined note is not prefixed twice.
        let (_, _, note) = occur(
            &mut c,
            "Split",
            "(combined from similar events): step 12",
            t,
        );
        assert_eq!(note, "(combined from similar events): step 12");
    }

    #[test]
    fn a_series_older_than_the_window_starts_a_new_event() {
        let mut c = Correlator::default();
        let t = Utc::now();
        let first = occur(&mut c, "Loaded", "m", t);
        let later = t + window() + chrono::Duration::seconds(1);
        let (_, count, _) = occur(&mut c, "Loaded", "m", later);
        assert_eq!(count, 1);
        // The similar group restarted too: nine more notes do not aggregate.
        for i in 0..AGGREGATE_AFTER - 2 {
            let (_, _, note) = occur(&mut c, "Loaded", &format!("n{i}"), later);
            assert!(!note.starts_with(COMBINED_PREFIX), "{note}");
        }
        assert_eq!(first.1, 1);
    }
}
