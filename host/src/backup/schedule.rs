//! When a primary's next backup is due: a cron schedule in a time zone, and
//! the pure decision of what to do about it at a given instant.
//!
//! The decision ([`next_action`]) is a value. The host reads the state
//! (the primary's backup status and its Backups), asks for the decision,
//! and writes what it says: a Backup to create, a skipped or missed slot to
//! record, `lastScheduleTime` and `nextScheduleTime` to set. Nothing here
//! reads a clock or the API.
//!
//! Semantics follow the Kubernetes CronJob controller where they agree with
//! issue 29: slots are counted from the last one acted on (or the primary's
//! creation), one backup runs at a time (concurrency `Forbid`), and after a
//! gap only the *last* missed slot is caught up, if it is within the
//! starting deadline. Unlike CronJob, a slot that falls due while a backup
//! runs is recorded as skipped instead of silently waiting, and missed
//! slots are always counted and reported, even past the deadline.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::errors::CronError;
use croner::parser::{CronParser, Seconds, Year};

/// Missed slots are counted up to this many, like the CronJob controller
/// (which gives up at 100). A count equal to the cap means "this many or
/// more"; the slot caught up is still the latest one, found directly.
pub const MISSED_COUNT_CAP: u32 = 100;

/// A valid schedule, shown in error messages.
const EXAMPLE: &str = "\"0 3 * * *\" (03:00 every day) or \"*/15 * * * *\" (every 15 minutes)";

/// The descriptors accepted instead of five fields, with their meaning.
const DESCRIPTORS: [(&str, &str); 7] = [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
];

/// One of the five fields of a cron schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CronField {
    /// The optional leading seconds field, `0-59` (six-field schedules).
    Second,
    /// Field 1: minute, `0-59`.
    Minute,
    /// Field 2: hour, `0-23`.
    Hour,
    /// Field 3: day of the month, `1-31` (also `L`, `W`).
    DayOfMonth,
    /// Field 4: month, `1-12` or `JAN-DEC`.
    Month,
    /// Field 5: day of the week, `0-7` (0 and 7 are Sunday) or `SUN-SAT`
    /// (also `L`, `#`).
    DayOfWeek,
}

impl CronField {
    /// The five fields in schedule order.
    pub const ALL: [CronField; 5] = [
        CronField::Minute,
        CronField::Hour,
        CronField::DayOfMonth,
        CronField::Month,
        CronField::DayOfWeek,
    ];

    /// The field's position in the schedule, from 1.
    pub const fn position(self) -> usize {
        match self {
            CronField::Second => 0,
            CronField::Minute => 1,
            CronField::Hour => 2,
            CronField::DayOfMonth => 3,
            CronField::Month => 4,
            CronField::DayOfWeek => 5,
        }
    }

    /// What a person calls the field.
    pub const fn name(self) -> &'static str {
        match self {
            CronField::Second => "second",
            CronField::Minute => "minute",
            CronField::Hour => "hour",
            CronField::DayOfMonth => "day of month",
            CronField::Month => "month",
            CronField::DayOfWeek => "day of week",
        }
    }

    /// The values the field accepts, for messages.
    pub const fn accepts(self) -> &'static str {
        match self {
            CronField::Second | CronField::Minute => "0-59",
            CronField::Hour => "0-23",
            CronField::DayOfMonth => "1-31, or L for the last day",
            CronField::Month => "1-12 or JAN-DEC",
            CronField::DayOfWeek => "0-7 (0 and 7 are Sunday) or SUN-SAT",
        }
    }
}

impl std::fmt::Display for CronField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CronField::Second => write!(f, "the leading seconds field"),
            _ => write!(f, "field {} ({})", self.position(), self.name()),
        }
    }
}

/// Why a schedule or its time zone is refused. Every message names what was
/// wrong and shows valid syntax, so it can go to a person as is (the
/// primary's condition, an event, the CLI).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// The schedule is empty.
    #[error(
        "the backup schedule is empty; write five fields (minute hour day-of-month month day-of-week), e.g. {EXAMPLE}"
    )]
    Empty,
    /// The schedule has neither five fields nor six (seconds first).
    #[error(
        "backup schedule {schedule:?} has {found} field(s), but a schedule has exactly five: minute hour day-of-month month day-of-week (no year), or six with seconds first, e.g. {EXAMPLE}"
    )]
    FieldCount {
        /// The schedule as given.
        schedule: String,
        /// How many whitespace-separated fields it has.
        found: usize,
    },
    /// The schedule starts with `@` but is not a known descriptor.
    #[error(
        "backup schedule {schedule:?} is not a known descriptor; use one of @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly, or five fields, e.g. {EXAMPLE}"
    )]
    UnknownDescriptor {
        /// The schedule as given.
        schedule: String,
    },
    /// The schedule carries its own time zone (`CRON_TZ=` or `TZ=`).
    #[error(
        "backup schedule {schedule:?} names its time zone inside the schedule; give the zone separately (e.g. timeZone: \"Europe/Berlin\") and keep the schedule to five fields, e.g. {EXAMPLE}"
    )]
    ZoneInSchedule {
        /// The schedule as given.
        schedule: String,
    },
    /// One field is invalid.
    #[error(
        "{field} of backup schedule {schedule:?} is {value:?}: {problem}; the {} field accepts {}, with `*`, lists (1,5), ranges (1-5) and steps (*/10 or 0-30/10), e.g. {EXAMPLE}",
        field.name(), field.accepts()
    )]
    InvalidField {
        /// The schedule as given.
        schedule: String,
        /// The field at fault (the first one, when several are).
        field: CronField,
        /// The field's text.
        value: String,
        /// What the cron parser said about it.
        problem: String,
    },
    /// Each field is valid alone but the schedule is not.
    #[error("backup schedule {schedule:?} is invalid: {problem}; e.g. {EXAMPLE}")]
    Invalid {
        /// The schedule as given.
        schedule: String,
        /// What the cron parser said.
        problem: String,
    },
    /// The schedule names no date that exists (e.g. February 30).
    #[error(
        "backup schedule {schedule:?} never runs: no real date matches it (e.g. February 30); check the day-of-month and month fields, e.g. {EXAMPLE}"
    )]
    NeverRuns {
        /// The schedule as given.
        schedule: String,
    },
    /// The time zone is not an IANA time zone name.
    #[error(
        "time zone {zone:?} of the backup schedule is not an IANA time zone name; use a name like \"Europe/Berlin\", \"America/New_York\" or \"UTC\" (case matters), or leave it out for UTC"
    )]
    UnknownTimeZone {
        /// The zone as given.
        zone: String,
    },
}

/// A parsed backup schedule: five cron fields read in a time zone.
///
/// Slots are whole minutes of the zone's wall clock. Across daylight saving
/// changes croner's rules apply: a wall clock time that does not exist
/// (spring forward) runs at the first instant after the gap; a time that
/// occurs twice (fall back) runs once, at the first occurrence, for a
/// fixed-time schedule, and at both for an interval (`*`, `*/n`) one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    expression: String,
    cron: Cron,
    zone: Tz,
}

impl Schedule {
    /// Parses `cron` (five fields, or a descriptor such as `@daily`) in
    /// `time_zone` (an IANA name; `None` is UTC).
    ///
    /// Accepted syntax is the standard one (`*`, lists, ranges, steps,
    /// month and weekday names) plus croner's `L`, `W` and `#` in the day
    /// fields. Steps need an explicit range (`0-59/5`, not `5/5`).
    ///
    /// # Errors
    ///
    /// A [`ScheduleError`] naming the field at fault and showing valid
    /// syntax; also when no real date matches the schedule, and when the
    /// zone is unknown.
    pub fn parse(cron: &str, time_zone: Option<&str>) -> Result<Schedule, ScheduleError> {
        let zone = match time_zone {
            None => Tz::UTC,
            Some(name) => {
                name.trim()
                    .parse::<Tz>()
                    .map_err(|_| ScheduleError::UnknownTimeZone {
                        zone: name.to_string(),
                    })?
            }
        };
        let expression = cron.trim();
        let fields = five_fields(expression)?;
        let parser = strict_parser(fields.len() == 6);
        let parsed = parser
            .parse(&fields.join(" "))
            .map_err(|whole| blame_field(&parser, expression, &fields, &whole))?;
        let schedule = Schedule {
            expression: expression.to_string(),
            cron: parsed,
            zone,
        };
        // Any real date recurs within 400 years of the Gregorian calendar
        // (February 29 included), so one search from a fixed instant finds
        // a slot of every schedule that can run at all.
        if schedule.next_after(DateTime::UNIX_EPOCH).is_none() {
            return Err(ScheduleError::NeverRuns {
                schedule: schedule.expression,
            });
        }
        Ok(schedule)
    }

    /// The schedule as given (trimmed).
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The time zone the fields are read in.
    pub fn time_zone(&self) -> Tz {
        self.zone
    }

    /// The first slot strictly after `instant`.
    ///
    /// `None` only past croner's search limit (year 5000) or when no real
    /// date matches, which [`Schedule::parse`] refuses.
    pub fn next_after(&self, instant: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_next_occurrence(&instant.with_timezone(&self.zone), false)
            .ok()
            .map(|slot| slot.with_timezone(&Utc))
    }

    /// The last slot at or before `instant`.
    pub fn latest_at_or_before(&self, instant: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron
            .find_previous_occurrence(&instant.with_timezone(&self.zone), true)
            .ok()
            .map(|slot| slot.with_timezone(&Utc))
    }
}

/// The cron parser for standard schedules: five fields, no year; with
/// `seconds`, six fields, seconds first.
fn strict_parser(seconds: bool) -> CronParser {
    CronParser::builder()
        .seconds(if seconds {
            Seconds::Required
        } else {
            Seconds::Disallowed
        })
        .year(Year::Disallowed)
        .build()
}

/// Splits `expression` into its five fields, or six with seconds first (a
/// descriptor becomes its five fields).
fn five_fields(expression: &str) -> Result<Vec<String>, ScheduleError> {
    if expression.is_empty() {
        return Err(ScheduleError::Empty);
    }
    let upper = expression.to_ascii_uppercase();
    if upper.starts_with("CRON_TZ=") || upper.starts_with("TZ=") {
        return Err(ScheduleError::ZoneInSchedule {
            schedule: expression.to_string(),
        });
    }
    if expression.starts_with('@') {
        return DESCRIPTORS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(expression))
            .map(|(_, fields)| fields.split(' ').map(str::to_string).collect())
            .ok_or_else(|| ScheduleError::UnknownDescriptor {
                schedule: expression.to_string(),
            });
    }
    let fields: Vec<String> = expression.split_whitespace().map(str::to_string).collect();
    if fields.len() != 5 && fields.len() != 6 {
        return Err(ScheduleError::FieldCount {
            schedule: expression.to_string(),
            found: fields.len(),
        });
    }
    Ok(fields)
}

/// Finds the field croner refuses: each field is tried alone, the others
/// `*`. When every field passes alone, the schedule as a whole is blamed.
fn blame_field(
    parser: &CronParser,
    expression: &str,
    fields: &[String],
    whole: &CronError,
) -> ScheduleError {
    let seconds = fields.len() == 6;
    let named = seconds
        .then_some(CronField::Second)
        .into_iter()
        .chain(CronField::ALL);
    for (index, field) in named.enumerate() {
        let Some(value) = fields.get(index) else {
            continue;
        };
        let alone: Vec<&str> = (0..fields.len())
            .map(|i| if i == index { value.as_str() } else { "*" })
            .collect();
        if let Err(error) = parser.parse(&alone.join(" ")) {
            return ScheduleError::InvalidField {
                schedule: expression.to_string(),
                field,
                value: value.clone(),
                problem: problem_text(&error),
            };
        }
    }
    ScheduleError::Invalid {
        schedule: expression.to_string(),
        problem: problem_text(whole),
    }
}

/// croner's message without its prefix or final period (it already says
/// how to write a step croner 4 no longer accepts, such as `5/10`).
fn problem_text(error: &CronError) -> String {
    let text = match error {
        CronError::InvalidPattern(message)
        | CronError::IllegalCharacters(message)
        | CronError::ComponentError(message) => message.clone(),
        other => other.to_string(),
    };
    text.trim_end_matches('.').to_string()
}

/// What the host knows about a primary's schedule when it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleState {
    /// Slots are counted strictly after this instant (and after
    /// `last_scheduled`): the primary's `creationTimestamp`, as CronJob
    /// counts from its own creation, or later: when its plan first asked
    /// for backups, or when the schedule or its zone last changed, so the
    /// slots of a schedule that did not apply yet are not reported missed.
    pub counting_from: DateTime<Utc>,
    /// The newest slot acted on: the later of the status's
    /// `lastScheduleTime` and the newest slot among the primary's existing
    /// scheduled Backups (so a Backup created just before a crash, whose
    /// status write was lost, is never taken twice).
    pub last_scheduled: Option<DateTime<Utc>>,
    /// The primary's backup that is `New` or `Running`, if any.
    pub running: Option<RunningBackup>,
}

/// A backup of the primary that has not finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningBackup {
    /// The Backup's name.
    pub name: String,
    /// The slot it was taken for; `None` for an on-demand backup.
    pub slot: Option<DateTime<Utc>>,
}

/// Why a due slot gets no backup although it is within the deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Concurrency is `Forbid`: another backup of the primary is running.
    AlreadyRunning {
        /// The running Backup.
        running: String,
    },
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScheduleAction {
    /// No slot is due.
    Wait,
    /// `slot` is due, the only slot since the last one acted on, and
    /// nothing runs: create its Backup.
    Take {
        /// The due slot.
        slot: DateTime<Utc>,
    },
    /// Several slots passed unseen (the host was down, or leadership moved)
    /// and the last of them, `slot`, is within the starting deadline:
    /// create exactly one Backup, for `slot`, and report the missed count
    /// (`BackupScheduleMissed`).
    CatchUp {
        /// The last passed slot, the one backed up.
        slot: DateTime<Utc>,
        /// Every slot that passed since the last one acted on, `slot`
        /// included (at least 2; [`MISSED_COUNT_CAP`] means "at least").
        missed: u32,
    },
    /// `slot` is due but a backup is running: record it as skipped (event,
    /// metric), take no backup.
    Skip {
        /// The skipped slot.
        slot: DateTime<Utc>,
        /// Why.
        reason: SkipReason,
        /// Slots before `slot` that also passed unseen (usually 0); report
        /// them as missed as well.
        missed_before: u32,
    },
    /// The last passed slot is older than the starting deadline: no backup;
    /// report the missed count (`BackupScheduleMissed`).
    Missed {
        /// Every slot that passed since the last one acted on (at least 1;
        /// [`MISSED_COUNT_CAP`] means "at least").
        missed: u32,
        /// The newest of them.
        last_missed: DateTime<Utc>,
    },
}

/// The decision for one primary at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleDecision {
    /// What to do.
    pub action: ScheduleAction,
    /// What the status's `lastScheduleTime` says after the action: the
    /// slot the action is about, or the newest one acted on before.
    pub last_schedule_time: Option<DateTime<Utc>>,
    /// The next slot after now (and after `last_schedule_time`): the
    /// status's `nextScheduleTime` and when to requeue. `None` only when
    /// the schedule has no further slot (see [`Schedule::next_after`]).
    pub next_schedule_time: Option<DateTime<Utc>>,
}

/// Decides what the schedule asks for at `now`.
///
/// Slots are those strictly after the newest one acted on (the later of
/// `state.last_scheduled` and a running backup's slot), or after
/// `state.counting_from` when none was, up to and including `now`.
///
/// # Guarantees
///
/// - At most one backup is asked for, always for the latest passed slot,
///   and never while another backup of the primary runs.
/// - A passed slot is never dropped silently: it is taken, caught up,
///   skipped or counted as missed, and `last_schedule_time` moves past it
///   so the next call does not report it again.
/// - A slot older than `starting_deadline` is never backed up.
/// - The same inputs give the same decision; the work is bounded (at most
///   [`MISSED_COUNT_CAP`] slots are walked).
#[must_use]
pub fn next_action(
    schedule: &Schedule,
    state: &ScheduleState,
    now: DateTime<Utc>,
    starting_deadline: Duration,
) -> ScheduleDecision {
    let acted = latest(
        state.last_scheduled,
        state.running.as_ref().and_then(|running| running.slot),
    );
    let count_after = acted.map_or(state.counting_from, |slot| slot.max(state.counting_from));
    let next_schedule_time = schedule.next_after(now.max(count_after));

    let (passed, last_passed) = passed_slots(schedule, count_after, now);
    let Some(slot) = last_passed else {
        return ScheduleDecision {
            action: ScheduleAction::Wait,
            last_schedule_time: acted,
            next_schedule_time,
        };
    };

    let deadline = TimeDelta::from_std(starting_deadline).unwrap_or(TimeDelta::MAX);
    let action = if now.signed_duration_since(slot) > deadline {
        ScheduleAction::Missed {
            missed: passed,
            last_missed: slot,
        }
    } else if let Some(running) = &state.running {
        ScheduleAction::Skip {
            slot,
            reason: SkipReason::AlreadyRunning {
                running: running.name.clone(),
            },
            missed_before: passed.saturating_sub(1),
        }
    } else if passed == 1 {
        ScheduleAction::Take { slot }
    } else {
        ScheduleAction::CatchUp {
            slot,
            missed: passed,
        }
    };
    ScheduleDecision {
        action,
        last_schedule_time: Some(slot),
        next_schedule_time,
    }
}

/// The slots in `(after, now]`: how many (capped at [`MISSED_COUNT_CAP`])
/// and the latest.
fn passed_slots(
    schedule: &Schedule,
    after: DateTime<Utc>,
    now: DateTime<Utc>,
) -> (u32, Option<DateTime<Utc>>) {
    let mut count = 0;
    let mut last = None;
    let mut cursor = after;
    while count < MISSED_COUNT_CAP {
        match schedule.next_after(cursor) {
            Some(slot) if slot <= now => {
                count += 1;
                last = Some(slot);
                cursor = slot;
            }
            _ => return (count, last),
        }
    }
    // The cap is reached: find the latest passed slot directly.
    let latest_slot = schedule
        .latest_at_or_before(now)
        .filter(|slot| *slot > cursor);
    (count, latest_slot.or(last))
}

/// The later of two optional instants.
fn latest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
