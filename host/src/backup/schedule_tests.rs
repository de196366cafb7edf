//! Schedules and their decisions, at fixed instants.

use super::*;
use chrono::TimeZone;

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);

fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, s).single().unwrap()
}

fn schedule(cron: &str) -> Schedule {
    Schedule::parse(cron, None).unwrap()
}

/// A primary created long ago whose last slot acted on is `last`.
fn state(last: Option<DateTime<Utc>>) -> ScheduleState {
    ScheduleState {
        counting_from: utc(2026, 1, 1, 0, 0, 0),
        last_scheduled: last,
        running: None,
    }
}

fn running(name: &str, slot: Option<DateTime<Utc>>) -> Option<RunningBackup> {
    Some(RunningBackup {
        name: name.to_string(),
        slot,
    })
}

#[test]
fn an_on_time_slot_is_taken() {
    let daily = schedule("0 3 * * *");
    let decision = next_action(
        &daily,
        &state(Some(utc(2026, 11, 27, 3, 0, 0))),
        utc(2026, 11, 28, 3, 0, 5),
        HOUR,
    );
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::Take {
                slot: utc(2026, 11, 28, 3, 0, 0)
            },
            last_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
            next_schedule_time: Some(utc(2026, 11, 29, 3, 0, 0)),
        }
    );
}

#[test]
fn a_slot_at_exactly_now_is_due() {
    let daily = schedule("0 3 * * *");
    let decision = next_action(
        &daily,
        &state(Some(utc(2026, 11, 27, 3, 0, 0))),
        utc(2026, 11, 28, 3, 0, 0),
        Duration::ZERO,
    );
    assert_eq!(
        decision.action,
        ScheduleAction::Take {
            slot: utc(2026, 11, 28, 3, 0, 0)
        }
    );
}

#[test]
fn before_the_slot_it_waits_and_names_the_next_one() {
    let daily = schedule("0 3 * * *");
    let last = Some(utc(2026, 11, 27, 3, 0, 0));
    let decision = next_action(&daily, &state(last), utc(2026, 11, 28, 2, 59, 59), HOUR);
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::Wait,
            last_schedule_time: last,
            next_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
        }
    );
}

#[test]
fn a_slot_while_a_backup_runs_is_skipped_and_recorded() {
    let daily = schedule("0 3 * * *");
    let mut state = state(Some(utc(2026, 11, 27, 3, 0, 0)));
    state.running = running("kv-202611270300", Some(utc(2026, 11, 27, 3, 0, 0)));
    let decision = next_action(&daily, &state, utc(2026, 11, 28, 3, 0, 1), HOUR);
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::Skip {
                slot: utc(2026, 11, 28, 3, 0, 0),
                reason: SkipReason::AlreadyRunning {
                    running: "kv-202611270300".to_string()
                },
                missed_before: 0,
            },
            last_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
            next_schedule_time: Some(utc(2026, 11, 29, 3, 0, 0)),
        }
    );
}

#[test]
fn an_on_demand_backup_running_also_blocks_the_slot() {
    let daily = schedule("0 3 * * *");
    let mut state = state(Some(utc(2026, 11, 27, 3, 0, 0)));
    state.running = running("kv-manual-20261128025500", None);
    let decision = next_action(&daily, &state, utc(2026, 11, 28, 3, 0, 1), HOUR);
    assert!(matches!(decision.action, ScheduleAction::Skip { .. }));
}

#[test]
fn a_skipped_slot_is_reported_once() {
    // The host records the skip by moving lastScheduleTime to the slot; the
    // next call, with the backup still running, waits.
    let daily = schedule("0 3 * * *");
    let mut state = state(Some(utc(2026, 11, 28, 3, 0, 0)));
    state.running = running("kv-202611270300", Some(utc(2026, 11, 27, 3, 0, 0)));
    let decision = next_action(&daily, &state, utc(2026, 11, 28, 3, 5, 0), HOUR);
    assert_eq!(decision.action, ScheduleAction::Wait);
}

#[test]
fn host_down_across_two_slots_catches_up_the_last_one_once() {
    let hourly = schedule("0 * * * *");
    let decision = next_action(
        &hourly,
        &state(Some(utc(2026, 11, 28, 1, 0, 0))),
        utc(2026, 11, 28, 3, 10, 0),
        Duration::from_secs(30 * 60),
    );
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::CatchUp {
                slot: utc(2026, 11, 28, 3, 0, 0),
                missed: 2,
            },
            last_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
            next_schedule_time: Some(utc(2026, 11, 28, 4, 0, 0)),
        }
    );
}

#[test]
fn missed_slots_beyond_the_deadline_get_no_backup() {
    let hourly = schedule("0 * * * *");
    let decision = next_action(
        &hourly,
        &state(Some(utc(2026, 11, 28, 1, 0, 0))),
        utc(2026, 11, 28, 3, 45, 0),
        Duration::from_secs(30 * 60),
    );
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::Missed {
                missed: 2,
                last_missed: utc(2026, 11, 28, 3, 0, 0),
            },
            last_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
            next_schedule_time: Some(utc(2026, 11, 28, 4, 0, 0)),
        }
    );
}

#[test]
fn a_single_slot_past_the_deadline_is_missed_even_while_running() {
    let daily = schedule("0 3 * * *");
    let mut state = state(Some(utc(2026, 11, 27, 3, 0, 0)));
    state.running = running("kv-202611270300", Some(utc(2026, 11, 27, 3, 0, 0)));
    let decision = next_action(&daily, &state, utc(2026, 11, 28, 5, 0, 0), HOUR);
    assert_eq!(
        decision.action,
        ScheduleAction::Missed {
            missed: 1,
            last_missed: utc(2026, 11, 28, 3, 0, 0),
        }
    );
}

#[test]
fn slots_missed_while_a_backup_runs_are_counted_with_the_skip() {
    let hourly = schedule("0 * * * *");
    let mut state = state(Some(utc(2026, 11, 28, 1, 0, 0)));
    state.running = running("kv-manual-20261128005900", None);
    let decision = next_action(&hourly, &state, utc(2026, 11, 28, 3, 1, 0), HOUR);
    assert!(matches!(
        decision.action,
        ScheduleAction::Skip { slot, missed_before: 1, .. } if slot == utc(2026, 11, 28, 3, 0, 0)
    ));
}

#[test]
fn the_missed_count_stops_at_the_cap_and_still_catches_up_the_latest_slot() {
    let every_minute = schedule("* * * * *");
    let decision = next_action(
        &every_minute,
        &state(Some(utc(2026, 11, 18, 0, 0, 0))),
        utc(2026, 11, 28, 3, 7, 30),
        MINUTE,
    );
    assert_eq!(
        decision.action,
        ScheduleAction::CatchUp {
            slot: utc(2026, 11, 28, 3, 7, 0),
            missed: MISSED_COUNT_CAP,
        }
    );
    assert_eq!(
        decision.next_schedule_time,
        Some(utc(2026, 11, 28, 3, 8, 0))
    );
}

#[test]
fn exactly_the_cap_of_slots_is_not_mistaken_for_more() {
    let every_minute = schedule("* * * * *");
    // Slots 00:01 .. 01:40 = 100 slots.
    let decision = next_action(
        &every_minute,
        &state(Some(utc(2026, 11, 28, 0, 0, 0))),
        utc(2026, 11, 28, 1, 40, 30),
        MINUTE,
    );
    assert_eq!(
        decision.action,
        ScheduleAction::CatchUp {
            slot: utc(2026, 11, 28, 1, 40, 0),
            missed: 100,
        }
    );
}

#[test]
fn a_backup_created_before_a_crash_is_not_taken_again() {
    // lastScheduleTime was not written, but the Backup for 03:00 runs.
    let daily = schedule("0 3 * * *");
    let mut state = state(Some(utc(2026, 11, 27, 3, 0, 0)));
    state.running = running("kv-202611280300", Some(utc(2026, 11, 28, 3, 0, 0)));
    let decision = next_action(&daily, &state, utc(2026, 11, 28, 3, 0, 30), HOUR);
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::Wait,
            last_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
            next_schedule_time: Some(utc(2026, 11, 29, 3, 0, 0)),
        }
    );
}

#[test]
fn slots_before_the_primary_existed_do_not_count() {
    let hourly = schedule("0 * * * *");
    let fresh = ScheduleState {
        counting_from: utc(2026, 11, 28, 2, 30, 0),
        last_scheduled: None,
        running: None,
    };
    let decision = next_action(&hourly, &fresh, utc(2026, 11, 28, 2, 40, 0), HOUR);
    assert_eq!(
        decision,
        ScheduleDecision {
            action: ScheduleAction::Wait,
            last_schedule_time: None,
            next_schedule_time: Some(utc(2026, 11, 28, 3, 0, 0)),
        }
    );
    let first = next_action(&hourly, &fresh, utc(2026, 11, 28, 3, 0, 2), HOUR);
    assert_eq!(
        first.action,
        ScheduleAction::Take {
            slot: utc(2026, 11, 28, 3, 0, 0)
        }
    );
}

#[test]
fn a_last_schedule_time_ahead_of_the_clock_waits_for_the_slot_after_it() {
    let hourly = schedule("0 * * * *");
    let ahead = Some(utc(2026, 11, 28, 5, 0, 0));
    let decision = next_action(&hourly, &state(ahead), utc(2026, 11, 28, 3, 10, 0), HOUR);
    assert_eq!(decision.action, ScheduleAction::Wait);
    assert_eq!(decision.last_schedule_time, ahead);
    assert_eq!(
        decision.next_schedule_time,
        Some(utc(2026, 11, 28, 6, 0, 0))
    );
}

#[test]
fn the_same_inputs_give_the_same_decision() {
    let hourly = schedule("0 * * * *");
    let state = state(Some(utc(2026, 11, 28, 1, 0, 0)));
    let now = utc(2026, 11, 28, 3, 10, 0);
    assert_eq!(
        next_action(&hourly, &state, now, HOUR),
        next_action(&hourly, &state, now, HOUR)
    );
}

#[test]
fn a_daily_0230_in_berlin_runs_right_after_the_spring_forward_gap() {
    // 2026-03-29: Berlin jumps from 02:00 CET to 03:00 CEST; 02:30 does not
    // exist, so the slot is 03:00 CEST = 01:00 UTC.
    let berlin = Schedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
    let day_before = utc(2026, 3, 28, 1, 30, 0); // 02:30 CET
    let before = next_action(
        &berlin,
        &state(Some(day_before)),
        utc(2026, 3, 29, 0, 59, 0),
        HOUR,
    );
    assert_eq!(before.action, ScheduleAction::Wait);
    assert_eq!(before.next_schedule_time, Some(utc(2026, 3, 29, 1, 0, 0)));

    let at = next_action(
        &berlin,
        &state(Some(day_before)),
        utc(2026, 3, 29, 1, 0, 20),
        HOUR,
    );
    assert_eq!(
        at.action,
        ScheduleAction::Take {
            slot: utc(2026, 3, 29, 1, 0, 0)
        }
    );
    // The day after is 02:30 CEST = 00:30 UTC.
    assert_eq!(at.next_schedule_time, Some(utc(2026, 3, 30, 0, 30, 0)));
}

#[test]
fn a_daily_0230_in_berlin_runs_once_when_the_clock_falls_back() {
    // 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    let berlin = Schedule::parse("30 2 * * *", Some("Europe/Berlin")).unwrap();
    let first = utc(2026, 10, 25, 0, 30, 0); // 02:30 CEST
    assert_eq!(berlin.next_after(utc(2026, 10, 24, 12, 0, 0)), Some(first));
    // Not again at 02:30 CET (01:30 UTC): the next slot is the day after.
    assert_eq!(berlin.next_after(first), Some(utc(2026, 10, 26, 1, 30, 0)));
}

#[test]
fn the_zone_decides_the_utc_slot() {
    let new_york = Schedule::parse("0 3 * * *", Some("America/New_York")).unwrap();
    assert_eq!(
        new_york.next_after(utc(2026, 11, 28, 0, 0, 0)),
        Some(utc(2026, 11, 28, 8, 0, 0))
    );
    assert_eq!(new_york.time_zone(), chrono_tz::America::New_York);
    assert_eq!(schedule("0 3 * * *").time_zone(), Tz::UTC);
}

#[test]
fn descriptors_and_names_parse() {
    assert_eq!(
        schedule("@daily").next_after(utc(2026, 11, 28, 3, 0, 0)),
        Some(utc(2026, 11, 29, 0, 0, 0))
    );
    assert_eq!(
        schedule("@HOURLY").next_after(utc(2026, 11, 28, 3, 0, 0)),
        Some(utc(2026, 11, 28, 4, 0, 0))
    );
    // 2026-11-28 is a Saturday.
    assert_eq!(
        schedule("0 4 * JAN-DEC MON").next_after(utc(2026, 11, 28, 3, 0, 0)),
        Some(utc(2026, 11, 30, 4, 0, 0))
    );
    assert_eq!(schedule("  0 3 * * *  ").expression(), "0 3 * * *");
}

#[test]
fn a_bad_field_is_named_with_valid_syntax() {
    let error = Schedule::parse("0 25 * * *", None).unwrap_err();
    assert!(
        matches!(
            &error,
            ScheduleError::InvalidField { field: CronField::Hour, value, .. } if value == "25"
        ),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("field 2 (hour)"), "{message}");
    assert!(message.contains("0-23"), "{message}");
    assert!(message.contains("\"0 3 * * *\""), "{message}");

    let error = Schedule::parse("0 3 * * FUNDAY", None).unwrap_err();
    assert!(
        matches!(
            error,
            ScheduleError::InvalidField {
                field: CronField::DayOfWeek,
                ..
            }
        ),
        "{error:?}"
    );
}

#[test]
fn a_bare_step_is_refused_with_the_way_to_write_it() {
    let error = Schedule::parse("5/10 * * * *", None).unwrap_err();
    assert!(
        matches!(
            error,
            ScheduleError::InvalidField {
                field: CronField::Minute,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("X-Y/10"), "{error}");
}

#[test]
fn a_wrong_number_of_fields_is_refused() {
    let seven = Schedule::parse("0 0 3 * * * 2027", None).unwrap_err();
    assert_eq!(
        seven,
        ScheduleError::FieldCount {
            schedule: "0 0 3 * * * 2027".to_string(),
            found: 7
        }
    );
    assert!(seven.to_string().contains("exactly five"), "{seven}");
    assert!(matches!(
        Schedule::parse("0 3 *", None),
        Err(ScheduleError::FieldCount { found: 3, .. })
    ));
    assert_eq!(Schedule::parse("   ", None), Err(ScheduleError::Empty));
}

#[test]
fn unknown_descriptors_and_zones_in_the_schedule_are_refused() {
    assert!(matches!(
        Schedule::parse("@reboot", None),
        Err(ScheduleError::UnknownDescriptor { .. })
    ));
    assert!(matches!(
        Schedule::parse("CRON_TZ=Europe/Berlin 0 3 * * *", None),
        Err(ScheduleError::ZoneInSchedule { .. })
    ));
    assert!(matches!(
        Schedule::parse("TZ=UTC 0 3 * * *", None),
        Err(ScheduleError::ZoneInSchedule { .. })
    ));
}

#[test]
fn a_schedule_that_never_runs_is_refused() {
    let started = std::time::Instant::now();
    assert_eq!(
        Schedule::parse("0 0 30 2 *", None),
        Err(ScheduleError::NeverRuns {
            schedule: "0 0 30 2 *".to_string()
        })
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    // February 29 exists, rarely.
    assert_eq!(
        schedule("0 0 29 2 *").next_after(utc(2026, 11, 28, 0, 0, 0)),
        Some(utc(2028, 2, 29, 0, 0, 0))
    );
}

#[test]
fn an_unknown_zone_is_refused_with_an_example() {
    let error = Schedule::parse("0 3 * * *", Some("Europe/Berln")).unwrap_err();
    assert_eq!(
        error,
        ScheduleError::UnknownTimeZone {
            zone: "Europe/Berln".to_string()
        }
    );
    assert!(error.to_string().contains("\"Europe/Berlin\""), "{error}");
    assert!(matches!(
        Schedule::parse("0 3 * * *", Some("")),
        Err(ScheduleError::UnknownTimeZone { .. })
    ));
}

#[test]
fn six_fields_put_seconds_first() {
    let every_ten_seconds = Schedule::parse("*/10 * * * * *", None).unwrap();
    let start = utc(2026, 11, 28, 3, 0, 1);
    assert_eq!(
        every_ten_seconds.next_after(start),
        Some(utc(2026, 11, 28, 3, 0, 10))
    );
    let error = Schedule::parse("75 * * * * *", None).unwrap_err();
    assert!(
        matches!(
            error,
            ScheduleError::InvalidField {
                field: CronField::Second,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("seconds field"), "{error}");
    // The minute of a six-field schedule is its second field.
    let error = Schedule::parse("0 75 * * * *", None).unwrap_err();
    assert!(
        matches!(
            error,
            ScheduleError::InvalidField {
                field: CronField::Minute,
                ..
            }
        ),
        "{error:?}"
    );
}
