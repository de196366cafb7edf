//! The limits of one reconcile ([`ReconcileLimits`] states the rule), one
//! function each: refusals return a [`PlanError`], clamps change the answer
//! and return the [`Breach`] the plan reports.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::{
    ChildApply, ChildKey, ChildPrune, EventAction, PlanError, PlannedEvent, Requeue, condition,
    json_size,
};
use crate::contract::{Condition, Event, Manifest, Reason, ReconcileLimits};
use crate::plan::limits::{Breach, Limit, ObjectRates};
use crate::util::truncate;

/// [`PlanError::TooManyChildren`] when the answer desires more than
/// `limits.max_children` children.
pub(super) fn children_count(
    manifest: &Manifest,
    limits: &ReconcileLimits,
    count: usize,
) -> Result<(), PlanError> {
    if count <= limits.max_children {
        return Ok(());
    }
    Err(PlanError::TooManyChildren {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        count,
        limit: limits.max_children,
    })
}

/// The children to apply with at most `allowed` new ones (not shown by the
/// caches; the first in key order are kept), and the breach naming how many
/// were left out. Applies to existing children are never left out.
pub(super) fn creations(
    mut apply: BTreeMap<ChildKey, ChildApply>,
    allowed: usize,
    limits: &ReconcileLimits,
) -> (BTreeMap<ChildKey, ChildApply>, Option<Breach>) {
    let mut kept = 0usize;
    let before = apply.len();
    apply.retain(|_, child| {
        if child.exists {
            return true;
        }
        kept += 1;
        kept <= allowed
    });
    let left_out = before - apply.len();
    let breach = (left_out > 0).then(|| Breach {
        limit: Limit::Creations,
        detail: format!(
            "{left_out} new children not created: the plugin may create {} at once and one more every {} ms, at most {} in all; they are created by a later reconcile once its budget allows",
            limits.creation_burst,
            limits.creation_refill.as_millis(),
            limits.max_creations
        ),
    });
    (apply, breach)
}

/// A `ChildPruned` event per pruned child, recorded only if it really was.
pub(super) fn prune_events(
    prune: &BTreeMap<ChildKey, ChildPrune>,
    manifest: &Manifest,
) -> Vec<PlannedEvent> {
    prune
        .keys()
        .map(|key| PlannedEvent {
            only_if_pruned: Some(key.clone()),
            ..PlannedEvent::new(
                false,
                Reason::ChildPruned.as_str(),
                format!(
                    "deleted {key}: no longer desired by plugin {}",
                    manifest.name
                ),
                EventAction::Prune,
            )
        })
        .collect()
}

/// The plugin's events, the first `limits.max_events_per_reconcile` of
/// them; the breach when it asked for more.
pub(super) fn plugin_events(
    asked: &[Event],
    limits: &ReconcileLimits,
) -> (Vec<PlannedEvent>, Option<Breach>) {
    let breach = (asked.len() > limits.max_events_per_reconcile).then(|| Breach {
        limit: Limit::EventsPerReconcile,
        detail: format!(
            "the plugin asked for {} events, the first {} were recorded",
            asked.len(),
            limits.max_events_per_reconcile
        ),
    });
    let events = asked
        .iter()
        .take(limits.max_events_per_reconcile)
        .map(|event| {
            PlannedEvent::new(
                event.warning,
                &event.reason,
                event.message.clone(),
                EventAction::Reconcile,
            )
        })
        .collect();
    (events, breach)
}

/// The events the object's event rate lets through (`rates` takes their
/// tokens), the number it dropped, and the breach when it dropped any.
pub(super) fn event_rate(
    events: Vec<PlannedEvent>,
    rates: &mut ObjectRates,
    limits: &ReconcileLimits,
    now: DateTime<Utc>,
) -> (Vec<PlannedEvent>, usize, Option<Breach>) {
    let (events, dropped) = rates.correlate(events, limits, now);
    let breach = (dropped > 0).then(|| Breach {
        limit: Limit::EventRate,
        detail: format!(
            "{dropped} events dropped: the object may receive {} events at once and one more every {} s",
            limits.event_burst,
            limits.event_refill.as_secs()
        ),
    });
    (events, dropped, breach)
}

/// Truncates condition messages longer than
/// `limits.max_condition_message_bytes`; the breach when any was.
pub(super) fn condition_messages(
    conditions: &mut [Condition],
    limits: &ReconcileLimits,
) -> Option<Breach> {
    let mut truncated = 0;
    for c in conditions.iter_mut() {
        if c.message.len() > limits.max_condition_message_bytes {
            c.message = truncate(&c.message, limits.max_condition_message_bytes);
            truncated += 1;
        }
    }
    (truncated > 0).then(|| Breach {
        limit: Limit::ConditionMessage,
        detail: format!(
            "{truncated} condition messages truncated to {} bytes",
            limits.max_condition_message_bytes
        ),
    })
}

/// The requeue the plugin asked for, raised to `limits.min_requeue`; the
/// periodic resync when it asked for none.
pub(super) fn requeue_after(
    asked_ms: Option<u64>,
    limits: &ReconcileLimits,
) -> (Requeue, Option<Breach>) {
    let min_requeue_ms = u64::try_from(limits.min_requeue.as_millis()).unwrap_or(u64::MAX);
    match asked_ms {
        Some(ms) if ms < min_requeue_ms => (
            Requeue::AfterMs(min_requeue_ms),
            Some(Breach {
                limit: Limit::RequeueAfter,
                detail: format!("requeue-after {ms} ms raised to {min_requeue_ms} ms"),
            }),
        ),
        Some(ms) => (Requeue::AfterMs(ms), None),
        None => (Requeue::Resync, None),
    }
}

/// The report of a hot loop: `throttled` reconciles were delayed since the
/// last plan. A resync becomes a look again once a token is back, so a loop
/// that stopped meanwhile clears the report instead of leaving it until the
/// resync.
pub(super) fn hot_loop(
    throttled: u32,
    requeue: Requeue,
    limits: &ReconcileLimits,
) -> (Requeue, Option<Breach>) {
    if throttled == 0 {
        return (requeue, None);
    }
    let requeue = match requeue {
        Requeue::Resync => {
            Requeue::AfterMs(u64::try_from(limits.reconcile_refill.as_millis()).unwrap_or(u64::MAX))
        }
        other => other,
    };
    let breach = Breach {
        limit: Limit::ReconcileRate,
        detail: format!(
            "hot loop: the object was due for reconciling {throttled} more times than its limit ({} at once, one more every {} ms); those reconciles were delayed",
            limits.reconcile_burst,
            limits.reconcile_refill.as_millis()
        ),
    };
    (requeue, Some(breach))
}

/// The host's conditions beside the plugin's: a breach is never silent (it
/// replaces the plugin's own `Degraded` with `Degraded=True`/`LimitExceeded`
/// listing every breach), and `Ready=True` / `Degraded=False` are added
/// unless present.
pub(super) fn host_conditions(
    conditions: &mut Vec<Condition>,
    breaches: &[Breach],
    manifest: &Manifest,
) {
    let ok_message = format!(
        "plugin {} {} reconciled the object",
        manifest.name, manifest.version
    );
    if !breaches.is_empty() {
        conditions.retain(|c| c.kind != "Degraded");
        let list: Vec<String> = breaches.iter().map(ToString::to_string).collect();
        conditions.push(condition(
            "Degraded",
            "True",
            Reason::LimitExceeded.as_str(),
            &format!(
                "plugin {} {} exceeded its limits per reconcile, the host clamped the answer and wrote it: {}. Fix the plugin or raise spec.limits of its WasmPlugin",
                manifest.name,
                manifest.version,
                list.join("; ")
            ),
        ));
    }
    if !conditions.iter().any(|c| c.kind == "Ready") {
        conditions.push(condition(
            "Ready",
            "True",
            Reason::ReconcileSucceeded.as_str(),
            &ok_message,
        ));
    }
    if !conditions.iter().any(|c| c.kind == "Degraded") {
        conditions.push(condition(
            "Degraded",
            "False",
            Reason::ReconcileSucceeded.as_str(),
            &ok_message,
        ));
    }
}

/// [`PlanError::StatusTooLarge`] when the status patch is larger than
/// `limits.max_status_bytes`. Reconcile's answer and upgrade's go through
/// it alike.
///
/// # Errors
///
/// [`PlanError::StatusTooLarge`], naming the plugin, its version, the size
/// and the limit.
pub fn status_size(
    status: Option<&serde_json::Value>,
    manifest: &Manifest,
    limits: &ReconcileLimits,
) -> Result<(), PlanError> {
    let Some(body) = status else {
        return Ok(());
    };
    let size = json_size(body);
    if size <= limits.max_status_bytes {
        return Ok(());
    }
    Err(PlanError::StatusTooLarge {
        plugin: manifest.name.clone(),
        version: manifest.version.clone(),
        size,
        limit: limits.max_status_bytes,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::plan::test_support::manifest;

    fn limits() -> ReconcileLimits {
        ReconcileLimits {
            max_children: 2,
            max_events_per_reconcile: 2,
            max_condition_message_bytes: 8,
            max_status_bytes: 16,
            min_requeue: Duration::from_millis(500),
            reconcile_burst: 5,
            reconcile_refill: Duration::from_millis(200),
            ..ReconcileLimits::default()
        }
    }

    fn event(reason: &str) -> Event {
        Event {
            warning: false,
            reason: reason.into(),
            message: format!("{reason} happened"),
        }
    }

    #[test]
    fn more_children_than_the_limit_are_refused() {
        assert_eq!(children_count(&manifest(), &limits(), 2), Ok(()));
        match children_count(&manifest(), &limits(), 3) {
            Err(PlanError::TooManyChildren { count, limit, .. }) => {
                assert_eq!((count, limit), (3, 2));
            }
            other => panic!("expected TooManyChildren, got {other:?}"),
        }
    }

    #[test]
    fn a_pruned_child_is_reported_only_if_it_really_was() {
        let key = ChildKey {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("prod".into()),
            name: "old".into(),
        };
        let prune = BTreeMap::from([(
            key.clone(),
            ChildPrune {
                resource: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
                    &(),
                ),
            },
        )]);
        let events = prune_events(&prune, &manifest());
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "ChildPruned");
        assert_eq!(events[0].action, EventAction::Prune);
        assert_eq!(events[0].only_if_pruned, Some(key));
        assert_eq!(
            events[0].message,
            "deleted ConfigMap prod/old: no longer desired by plugin webapp"
        );
    }

    #[test]
    fn the_plugins_events_beyond_the_limit_are_dropped_with_a_breach() {
        let (events, breach) = plugin_events(&[event("A"), event("B")], &limits());
        assert_eq!(events.len(), 2);
        assert!(breach.is_none());
        let (events, breach) = plugin_events(&[event("A"), event("B"), event("C")], &limits());
        let reasons: Vec<_> = events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(reasons, ["A", "B"]);
        let breach = breach.expect("a breach");
        assert_eq!(breach.limit, Limit::EventsPerReconcile);
        assert_eq!(
            breach.detail,
            "the plugin asked for 3 events, the first 2 were recorded"
        );
    }

    #[test]
    fn events_beyond_the_object_rate_are_dropped_with_a_breach() {
        let limits = ReconcileLimits {
            event_burst: 1,
            ..limits()
        };
        let now = Utc::now();
        let mut rates = ObjectRates::new(&limits, now);
        let (planned, _) = plugin_events(&[event("A"), event("B")], &limits);
        let (kept, dropped, breach) = event_rate(planned, &mut rates, &limits, now);
        assert_eq!((kept.len(), dropped), (1, 1));
        assert_eq!(breach.map(|b| b.limit), Some(Limit::EventRate));
        let (kept, dropped, breach) = event_rate(Vec::new(), &mut rates, &limits, now);
        assert_eq!((kept.len(), dropped), (0, 0));
        assert!(breach.is_none());
    }

    #[test]
    fn long_condition_messages_are_truncated_with_a_breach() {
        let mut conditions = vec![
            condition("Ready", "True", "Fine", "short"),
            condition("Degraded", "False", "Fine", "far too long a message"),
        ];
        let breach = condition_messages(&mut conditions, &limits()).expect("a breach");
        assert_eq!(breach.limit, Limit::ConditionMessage);
        assert_eq!(conditions[0].message, "short");
        assert!(conditions[1].message.len() <= 8 + "…".len());
        assert!(condition_messages(&mut conditions[..1], &limits()).is_none());
    }

    #[test]
    fn a_requeue_below_the_minimum_is_raised() {
        assert_eq!(requeue_after(None, &limits()), (Requeue::Resync, None));
        assert_eq!(
            requeue_after(Some(800), &limits()),
            (Requeue::AfterMs(800), None)
        );
        let (requeue, breach) = requeue_after(Some(10), &limits());
        assert_eq!(requeue, Requeue::AfterMs(500));
        assert_eq!(
            breach.map(|b| b.detail),
            Some("requeue-after 10 ms raised to 500 ms".to_string())
        );
    }

    #[test]
    fn a_hot_loop_is_reported_and_looked_at_again_once_a_token_is_back() {
        assert_eq!(
            hot_loop(0, Requeue::Resync, &limits()),
            (Requeue::Resync, None)
        );
        let (requeue, breach) = hot_loop(3, Requeue::Resync, &limits());
        assert_eq!(requeue, Requeue::AfterMs(200));
        let breach = breach.expect("a breach");
        assert_eq!(breach.limit, Limit::ReconcileRate);
        assert!(breach.detail.contains("3 more times"), "{}", breach.detail);
        // The plugin's own requeue stands.
        assert_eq!(
            hot_loop(3, Requeue::AfterMs(50), &limits()).0,
            Requeue::AfterMs(50)
        );
    }

    #[test]
    fn the_host_adds_ready_and_degraded_unless_set_and_a_breach_replaces_degraded() {
        let mut plain = Vec::new();
        host_conditions(&mut plain, &[], &manifest());
        let kinds: Vec<_> = plain
            .iter()
            .map(|c| (c.kind.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(kinds, [("Ready", "True"), ("Degraded", "False")]);

        let mut own = vec![
            condition("Ready", "False", "Waiting", "not yet"),
            condition("Degraded", "False", "Fine", "fine"),
        ];
        let breach = Breach {
            limit: Limit::RequeueAfter,
            detail: "raised".into(),
        };
        host_conditions(&mut own, &[breach], &manifest());
        assert_eq!(own.len(), 2);
        assert_eq!(own[0].reason, "Waiting");
        assert_eq!(
            (
                own[1].kind.as_str(),
                own[1].status.as_str(),
                own[1].reason.as_str()
            ),
            ("Degraded", "True", "LimitExceeded")
        );
    }

    #[test]
    fn a_status_larger_than_the_limit_is_refused() {
        assert_eq!(status_size(None, &manifest(), &limits()), Ok(()));
        assert_eq!(
            status_size(Some(&json!({"a": 1})), &manifest(), &limits()),
            Ok(())
        );
        match status_size(
            Some(&json!({"a": "0123456789abcdef"})),
            &manifest(),
            &limits(),
        ) {
            Err(PlanError::StatusTooLarge { size, limit, .. }) => {
                assert_eq!((size, limit), (24, 16));
            }
            other => panic!("expected StatusTooLarge, got {other:?}"),
        }
    }

    #[test]
    fn new_children_beyond_the_allowance_are_left_out_and_existing_ones_applied() {
        let child = |name: &str, exists: bool| {
            (
                ChildKey {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("prod".into()),
                    name: name.into(),
                },
                ChildApply {
                    resource: kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
                        &(),
                    ),
                    document: json!({}),
                    exists,
                },
            )
        };
        let apply: BTreeMap<_, _> = [
            child("a", false),
            child("b", true),
            child("c", false),
            child("d", false),
        ]
        .into_iter()
        .collect();
        let (all, breach) = creations(apply.clone(), 3, &limits());
        assert_eq!(all.len(), 4);
        assert!(breach.is_none());
        let (kept, breach) = creations(apply, 1, &limits());
        let names: Vec<&str> = kept.keys().map(|k| k.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let breach = breach.unwrap();
        assert_eq!(breach.limit, Limit::Creations);
        assert!(
            breach
                .detail
                .starts_with("2 new children not created: the plugin may create 1000 at once and one more every 100 ms, at most 100000 in all"),
            "{}",
            breach.detail
        );
    }
}
